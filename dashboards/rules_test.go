package dashboards

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"
)

func promtool(t *testing.T) string { return tool(t, "promtool") }

// tool is the path of a binary `make tools` builds into bin/.
func tool(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%v: run `make tools`", err)
	}
	return path
}

// TestRules runs promtool's syntax check and the rules' unit tests
// (testdata/rules_test.yaml: each alert fires, and only after its `for`).
func TestRules(t *testing.T) {
	bin := promtool(t)
	for name, cmd := range map[string]*exec.Cmd{
		"check": exec.Command(bin, "check", "rules", "prometheus-rules.yaml"),
		"test":  exec.Command(bin, "test", "rules", filepath.Join("testdata", "rules_test.yaml")),
	} {
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", name, err, out)
		}
	}
}

// TestRulesUseDocumentedMetrics fails when a rule names a chamber_ metric the
// metrics reference (docs/reference/metrics.md, the agent's included) does not
// list (renamed or never exported).
func TestRulesUseDocumentedMetrics(t *testing.T) {
	rules, err := os.ReadFile("prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := metricDocs(t)
	used := map[string]bool{}
	// Recording rules (level:metric:operations) are not exported metrics.
	for _, m := range regexp.MustCompile(`(?:^|[^:\w])(chamber_[a-z_]+)`).FindAllStringSubmatch(string(rules), -1) {
		used[m[1]] = true
	}
	var missing []string
	for name := range used {
		if !regexp.MustCompile("`" + name + "(`|\\{)").Match(docs) {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(used) == 0 || len(missing) > 0 {
		t.Errorf("rules use %d chamber_ metrics; not in %s: %v", len(used), strings.Join(metricDocFiles, " or "), missing)
	}
}

// runbookBase is where the docs are published; a runbook_url is a section of one page.
const runbookBase = "https://chamber.dev/docs/"

// TestRunbooks: every alert on Chamber itself (group chamber.self) and the isolation
// breaker's have a runbook_url, and each runbook_url names a section that its page under
// docs/ has (a heading whose anchor, as GitHub makes it, is the URL's fragment).
func TestRunbooks(t *testing.T) {
	data, err := os.ReadFile("prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^#+ +(.+)$`)
	anchors := map[string][]string{} // page: its headings' anchors
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			url := r.Annotations["runbook_url"]
			if url == "" {
				if r.Alert != "" && (g.Name == "chamber.self" || r.Alert == "ChamberIsolationHalted") {
					t.Errorf("alert %s has no runbook_url", r.Alert)
				}
				continue
			}
			page, fragment, ok := strings.Cut(strings.TrimPrefix(url, runbookBase), "#")
			if !strings.HasPrefix(url, runbookBase) || !ok {
				t.Errorf("alert %s: runbook_url %s is not %s<page>#<section>", r.Alert, url, runbookBase)
				continue
			}
			if _, read := anchors[page]; !read {
				doc, err := os.ReadFile(filepath.Join("..", "docs", page+".md"))
				if err != nil {
					t.Errorf("alert %s: runbook_url %s: %v", r.Alert, url, err)
					continue
				}
				anchors[page] = []string{}
				for _, h := range heading.FindAllStringSubmatch(string(doc), -1) {
					anchors[page] = append(anchors[page], githubAnchor(h[1]))
				}
			}
			if !slices.Contains(anchors[page], fragment) {
				t.Errorf("alert %s: runbook_url %s: docs/%s.md has no section #%s", r.Alert, url, page, fragment)
			}
		}
	}
}

// githubAnchor is the fragment GitHub gives a Markdown heading: lower case, spaces to
// hyphens, punctuation other than hyphens and underscores dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
