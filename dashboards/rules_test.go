package dashboards

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
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
// metrics reference (docs/metrics.md, and docs/node-agent.md for the agent's) does not
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
