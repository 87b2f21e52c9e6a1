package dashboards

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// documentedSeries are the series docs/reference/metrics.md's table promises, one per
// label set of sample values (every GPU state, so that a panel's state filter finds its
// own), and the node agent's few that the dashboards read (the same page documents them
// in prose).
func documentedSeries(t *testing.T) []series {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "reference", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	sample := map[string][]string{
		"pool": {"main"}, "model": {"NVIDIA-H100-80GB-HBM3"}, "team": {"vision"}, "from_team": {"nlp"}, "source": {"table:aws/p5.48xlarge"}, "priority_tier": {"production"},
		"namespace": {"vision"}, "node": {"gpu-1"}, "gpu": {"0"}, "pod": {"train-0"}, "verdict": {"ready"},
		"reason": {"XID79"}, "result": {"success"}, "level": {"Node"}, "cluster": {"worker-1"}, "phase": {"Pending"},
		"state": {"free", "busy", "idle", "unhealthy", "isolated"},
	}
	row := regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (gauge|counter|histogram) \\| ([^|]+) \\|")
	var out []series
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		var labels []string
		for _, l := range regexp.MustCompile("`(\\w+)`").FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		sets := []map[string]string{{}}
		for _, l := range labels {
			values, ok := sample[l]
			if !ok {
				t.Fatalf("docs/reference/metrics.md: %s has label %s, which this test has no sample value for: add one", m[1], l)
			}
			var next []map[string]string
			for _, set := range sets {
				for _, v := range values {
					s := map[string]string{l: v}
					for k, v := range set {
						s[k] = v
					}
					next = append(next, s)
				}
			}
			sets = next
		}
		for _, set := range sets {
			out = append(out, series{name: m[1], kind: m[2], labels: set})
		}
	}
	if len(out) < 40 {
		t.Fatalf("read %d series from docs/reference/metrics.md's table: has its format changed?", len(out))
	}
	agent := map[string]string{"Hostname": "gpu-1", "gpu": "0", "UUID": "GPU-0"}
	return append(out,
		series{name: "DCGM_FI_DEV_GPU_UTIL", kind: "gauge", labels: agent},
		series{name: "chamber_agent_nvml_up", kind: "gauge", labels: agent},
		series{name: "chamber_gpu_xid_errors_total", kind: "counter", labels: map[string]string{"Hostname": "gpu-1", "gpu": "0", "xid": "79"}})
}

type series struct {
	name, kind string
	labels     map[string]string
}

// exposition writes the series in Prometheus' text format; counters and histograms
// grow with n, the scrape's number, so that rate() and increase() have something to
// show.
func exposition(all []series, n int) string {
	var b strings.Builder
	labelText := func(l map[string]string, extra ...string) string {
		var parts []string
		for k, v := range l {
			parts = append(parts, fmt.Sprintf("%s=%q", k, v))
		}
		parts = append(parts, extra...)
		sort.Strings(parts)
		return "{" + strings.Join(parts, ",") + "}"
	}
	typed := map[string]bool{}
	for _, s := range all {
		if !typed[s.name] {
			fmt.Fprintf(&b, "# TYPE %s %s\n", s.name, s.kind)
			typed[s.name] = true
		}
		switch s.kind {
		case "gauge":
			fmt.Fprintf(&b, "%s%s 0.5\n", s.name, labelText(s.labels))
		case "counter":
			fmt.Fprintf(&b, "%s%s %d\n", s.name, labelText(s.labels), 10*n)
		case "histogram":
			for i, le := range []string{"1", "60", "3600", "+Inf"} {
				fmt.Fprintf(&b, "%s_bucket%s %d\n", s.name, labelText(s.labels, fmt.Sprintf("le=%q", le)), (i+1)*n)
			}
			fmt.Fprintf(&b, "%s_sum%s %d\n%s_count%s %d\n", s.name, labelText(s.labels), 100*n, s.name, labelText(s.labels), 4*n)
		}
	}
	return b.String()
}

// TestDashboardQueriesReturnData runs every panel's query, and every dashboard
// variable's, on a real Prometheus (`make tools` builds it) that scrapes the series
// the metrics reference documents: each must answer without error and with data. A
// query that names a metric or a label the controller does not export, or filters on
// a value it never has, comes back empty and fails here (the inventory's and the
// exporter's tests hold the reference to what is served).
func TestDashboardQueriesReturnData(t *testing.T) {
	all := documentedSeries(t)
	var mu sync.Mutex
	scrapes := 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		scrapes++
		n := scrapes
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, exposition(all, n))
	}))
	defer target.Close()
	prom := startPrometheus(t, strings.TrimPrefix(target.URL, "http://"))
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := scrapes
		mu.Unlock()
		if n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus scraped the target %d times in a minute", n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(time.Second) // the last scrape's samples appended

	// A variable's "All": any value; the cluster's matches the manager's own series
	// too, which carry no cluster label.
	variables := regexp.MustCompile(`\$\{?(team|pool)\}?`)
	cluster := regexp.MustCompile(`\$\{?cluster\}?`)
	for file, exprs := range dashboardQueries(t) {
		for _, e := range exprs {
			q := cluster.ReplaceAllString(variables.ReplaceAllString(e, ".+"), ".*")
			if n, err := instantQuery(prom, q); err != nil || n == 0 {
				t.Errorf("%s: %s: %d series, error %v", file, e, n, err)
			}
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)
	for file, queries := range variableQueries(t) {
		for _, v := range queries {
			m := labelValues.FindStringSubmatch(v)
			if m == nil {
				t.Errorf("%s: variable query %q: want label_values(metric, label)", file, v)
				continue
			}
			if n, err := instantQuery(prom, fmt.Sprintf("count by (%s) (%s)", m[2], m[1])); err != nil || n == 0 {
				t.Errorf("%s: variable query %s finds no values (error %v)", file, v, err)
			}
		}
	}
}

// variableQueries are the dashboards' query variables, by file.
func variableQueries(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for f, dash := range readDashboards(t) {
		for _, v := range dash.Templating.List {
			if v.Type != "query" {
				continue
			}
			switch q := v.Query.(type) {
			case string:
				out[f] = append(out[f], q)
			case map[string]any:
				out[f] = append(out[f], fmt.Sprint(q["query"]))
			}
		}
	}
	return out
}

// startPrometheus runs bin/prometheus scraping target every second until the test ends,
// and returns its address.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := tool(t, "prometheus")
	dir := t.TempDir()
	// The recording rules too, evaluated every second rather than at their groups'
	// intervals: the capacity dashboard reads their series.
	b, err := os.ReadFile("prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, regexp.MustCompile(`(?m)^(\s+interval:) \S+$`).ReplaceAll(b, []byte("$1 1s")), 0o600); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf("global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\nrule_files: [%q]\nscrape_configs:\n- job_name: chamber\n  static_configs: [{targets: [%q]}]\n", rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return "http://" + addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready at %s after a minute: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// instantQuery evaluates q now and returns how many series (or scalars) it gives.
func instantQuery(prom, q string) (int, error) {
	resp, err := http.Get(prom + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("%s", body.Error)
	}
	if body.Data.ResultType == "scalar" {
		return 1, nil
	}
	var result []json.RawMessage
	if err := json.Unmarshal(body.Data.Result, &result); err != nil {
		return 0, err
	}
	return len(result), nil
}
