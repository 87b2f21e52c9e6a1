package exporter_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/exporter"
)

// metricDoc is a metric as the table of docs/reference/metrics.md gives it.
type metricDoc struct {
	Type   string
	Labels []string // sorted
}

// TestREADMEMetrics: the Metrics table (docs/reference/metrics.md) lists exactly the
// metrics the exporter registers and those the controllers declare in their metrics.go,
// with their types and labels, so the reference cannot drift from the code.
func TestREADMEMetrics(t *testing.T) {
	want := map[string]metricDoc{}

	exp := exporter.New(fixtureFleet(), exporter.Options{PerGPU: true})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exp)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		want[mf.GetName()] = metricDoc{Type: strings.ToLower(mf.GetType().String()), Labels: labels}
	}
	descs := make(chan *prometheus.Desc, 100)
	exp.Describe(descs)
	close(descs)
	if len(descs) != len(families) {
		t.Fatalf("the fixture fleet shows %d of the %d metrics the exporter describes: extend it so this test sees them all", len(families), len(descs))
	}

	files, err := filepath.Glob("../controllers/*/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for name, doc := range declaredMetrics(t, f) {
			want[name] = doc
		}
	}

	if diff := cmp.Diff(want, readmeMetrics(t, "../docs/reference/metrics.md")); diff != "" {
		t.Errorf("docs/reference/metrics.md's table (+) against the code (-):\n%s", diff)
	}
}

var tableRow = regexp.MustCompile("^\\| `(chamber_[a-z_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")

// readmeMetrics reads the metrics table of docs/reference/metrics.md (path), the file
// that holds the Metrics reference.
func readmeMetrics(t *testing.T, path string) map[string]metricDoc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	section := string(data)
	if !strings.HasPrefix(section, "# Metrics\n") {
		t.Fatalf("%s does not start with its title \"# Metrics\"", path)
	}
	out := map[string]metricDoc{}
	for _, line := range strings.Split(section, "\n") {
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "none" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		out[m[1]] = metricDoc{Type: m[2], Labels: labels}
	}
	return out
}

// declaredMetrics finds prometheus.New{Gauge,Counter,Histogram}[Vec](Opts{Name: ...},
// []string{labels}) calls in a Go file.
func declaredMetrics(t *testing.T, path string) map[string]metricDoc {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{
		"NewGauge": "gauge", "NewGaugeVec": "gauge", "NewCounter": "counter", "NewCounterVec": "counter",
		"NewHistogram": "histogram", "NewHistogramVec": "histogram",
	}
	out := map[string]metricDoc{}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || types[sel.Sel.Name] == "" || len(call.Args) == 0 {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
			return true
		}
		var doc metricDoc
		doc.Type = types[sel.Sel.Name]
		name := ""
		if opts, ok := call.Args[0].(*ast.CompositeLit); ok {
			for _, e := range opts.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok && identName(kv.Key) == "Name" {
					name = stringLit(kv.Value)
				}
			}
		}
		if len(call.Args) > 1 {
			if labels, ok := call.Args[1].(*ast.CompositeLit); ok {
				for _, e := range labels.Elts {
					doc.Labels = append(doc.Labels, stringLit(e))
				}
			}
		}
		slices.Sort(doc.Labels)
		if name == "" {
			t.Errorf("%s: a prometheus.%s whose name is not a string literal", path, sel.Sel.Name)
			return true
		}
		out[name] = doc
		return true
	})
	return out
}

func identName(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func stringLit(e ast.Expr) string {
	if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
		if s, err := strconv.Unquote(lit.Value); err == nil {
			return s
		}
	}
	return ""
}
