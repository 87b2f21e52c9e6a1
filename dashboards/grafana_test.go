package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dashboard is what the tests read of a Grafana dashboard.
type dashboard struct {
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// readDashboards reads every dashboard of grafana/, by file.
func readDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("grafana", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in grafana/ (%v)", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var dash dashboard
		if err := json.Unmarshal(data, &dash); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = dash
	}
	return out
}

// dashboardQueries returns every PromQL expression of the Grafana dashboards.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for f, dash := range readDashboards(t) {
		if dash.UID == "" {
			t.Errorf("%s: no uid (Grafana provisioning needs one)", f)
		}
		for _, p := range dash.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", f, p.Title)
			}
			for _, target := range p.Targets {
				out[f] = append(out[f], target.Expr)
			}
		}
	}
	return out
}

// TestDashboardQueriesParse checks every panel's PromQL with promtool, by wrapping
// the queries in recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard-queries\n  rules:\n")
	n := 0
	for _, exprs := range dashboardQueries(t) {
		for _, e := range exprs {
			quoted, _ := json.Marshal(e)
			fmt.Fprintf(&rules, "  - record: dashboard_query_%d\n    expr: %s\n", n, quoted)
			n++
		}
	}
	path := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules (dashboard queries): %v\n%s", err, out)
	}
}

// metricDocFiles are the docs that document metrics: the metrics reference, which holds
// Chamber's controller metrics and the node agent's, dcgm-exporter's names included.
var metricDocFiles = []string{"docs/reference/metrics.md"}

// metricDocs returns the text of metricDocFiles, one after the other.
func metricDocs(t *testing.T) []byte {
	t.Helper()
	var docs []byte
	for _, f := range metricDocFiles {
		data, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(append(docs, data...), '\n')
	}
	return docs
}

// TestDashboardsUseDocumentedMetrics fails when a panel queries a metric the docs
// do not document (Chamber's own or the agent's, its dcgm-compatible ones included, in
// docs/reference/metrics.md).
func TestDashboardsUseDocumentedMetrics(t *testing.T) {
	docs := metricDocs(t)
	name := regexp.MustCompile(`(?:^|[^:\w])((?:chamber|DCGM_FI)_[A-Za-z_]+)`)
	for file, exprs := range dashboardQueries(t) {
		for _, e := range exprs {
			for _, m := range name.FindAllStringSubmatch(e, -1) {
				metric := m[1]
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					metric = strings.TrimSuffix(metric, suffix)
				}
				if !regexp.MustCompile("`" + metric + "(`|\\{)").Match(docs) {
					t.Errorf("%s queries %s, which neither %s documents", file, metric, strings.Join(metricDocFiles, " nor "))
				}
			}
		}
	}
}
