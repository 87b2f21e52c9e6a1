package perf

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const benchOutput = `goos: linux
BenchmarkCheckSideBySide
    shape_test.go:230: round 1, check over plain: admission mean 1.41, p99 1.30, wall 1.20
BenchmarkCheckSideBySide-2   	       1	94816465385 ns/op	         1.415 check-side-admit-mean-ratio	         1.30 check-side-admit-p99-ratio
--- BENCH: BenchmarkFaultIsolation-2
BenchmarkFaultIsolation-2   	       1	97705530561 ns/op	         0.02372 echo-p50-s	         0.9605 taint-p99-ratio
PASS
`

func TestParseBench(t *testing.T) {
	got, err := ParseBench(strings.NewReader(benchOutput))
	if err != nil {
		t.Fatal(err)
	}
	want := Results{
		"CheckSideBySide": {"ns/op": 94816465385, "check-side-admit-mean-ratio": 1.415, "check-side-admit-p99-ratio": 1.30},
		"FaultIsolation":  {"ns/op": 97705530561, "echo-p50-s": 0.02372, "taint-p99-ratio": 0.9605},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseBench (-want +got):\n%s", diff)
	}
}

func TestParseBenchMalformedValue(t *testing.T) {
	if _, err := ParseBench(strings.NewReader("BenchmarkX-2 1 12 ns/op fast taint-p99-ratio\n")); err == nil {
		t.Error("ParseBench took a value that is not a number")
	}
}

// baseline gates two figures at 20%: 1.5 (limit 1.8) and 1.0 (limit 1.2).
var baseline = Baseline{Margin: 0.2, Benchmarks: []Benchmark{
	{Package: "./test/schedulershape", Name: "CheckSideBySide", Figures: []Figure{{Metric: "check-side-admit-mean-ratio", Baseline: 1.5}}},
	{Package: "./controllers/isolation", Name: "FaultIsolation", Figures: []Figure{{Metric: "taint-p99-ratio", Baseline: 1.0}}},
}}

func TestCompare(t *testing.T) {
	cases := map[string]struct {
		measured   Results
		wantFailed []string
	}{
		"as the baseline": {
			measured: Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.5}, "FaultIsolation": {"taint-p99-ratio": 1.0}},
		},
		"better than the baseline": {
			measured: Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.1}, "FaultIsolation": {"taint-p99-ratio": 0.7}},
		},
		"just within the margin": {
			measured: Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.79}, "FaultIsolation": {"taint-p99-ratio": 1.19}},
		},
		"admission 25% worse": {
			measured:   Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.875}, "FaultIsolation": {"taint-p99-ratio": 1.0}},
			wantFailed: []string{"check-side-admit-mean-ratio"},
		},
		"fault to taint p99 21% worse": {
			measured:   Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.5}, "FaultIsolation": {"taint-p99-ratio": 1.21}},
			wantFailed: []string{"taint-p99-ratio"},
		},
		"a figure not reported": {
			measured:   Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.5}},
			wantFailed: []string{"taint-p99-ratio"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rows := Compare(baseline, tc.measured)
			var failed []string
			for _, r := range rows {
				if !r.OK() {
					failed = append(failed, r.Metric)
				}
			}
			if diff := cmp.Diff(tc.wantFailed, failed); diff != "" {
				t.Errorf("failed figures (-want +got):\n%s", diff)
			}
			if got, want := Passed(rows), len(tc.wantFailed) == 0; got != want {
				t.Errorf("Passed = %t, want %t", got, want)
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	rows := Compare(baseline, Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 2}})
	var buf bytes.Buffer
	if err := WriteTable(&buf, rows); err != nil {
		t.Fatal(err)
	}
	want := `figure                                       baseline  measured  limit        
CheckSideBySide check-side-admit-mean-ratio  1.500     2.000     1.800  FAIL  
FaultIsolation taint-p99-ratio               1.000     missing   1.200  FAIL  
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestBaselineRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baseline.json")
	// A value of its own: the Benchmarks of the package's baseline are shared.
	want := Baseline{Margin: 0.2, Measured: "highest of 3 runs", Benchmarks: []Benchmark{{
		Package: "./test/schedulershape", Name: "CheckSideBySide", Env: map[string]string{"CHAMBER_PERF_SCALE": "0.005"},
		Figures: []Figure{{Metric: "check-side-admit-mean-ratio", About: "check over plain", Baseline: 1.6, Runs: []float64{1.4, 1.5, 1.6}}},
	}}}
	if err := want.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
}

// The stored baseline reads, and gates the admission ratios and fault to taint p99.
func TestStoredBaseline(t *testing.T) {
	b, err := Read("baseline.json")
	if err != nil {
		t.Fatal(err)
	}
	var metrics []string
	for _, bench := range b.Benchmarks {
		for _, f := range bench.Figures {
			if f.Baseline <= 0 {
				t.Errorf("%s %s: baseline %v", bench.Name, f.Metric, f.Baseline)
			}
			metrics = append(metrics, f.Metric)
		}
	}
	if diff := cmp.Diff([]string{"check-side-admit-mean-ratio", "check-side-writes-ratio", "taint-p99-ratio"}, metrics); diff != "" {
		t.Errorf("gated figures (-want +got):\n%s", diff)
	}
	if b.Margin != 0.2 {
		t.Errorf("margin %v, want 0.2", b.Margin)
	}
}

func TestMedian(t *testing.T) {
	cases := map[string]struct {
		values []float64
		want   float64
	}{
		"none": {nil, 0},
		"odd":  {[]float64{3, 1, 2}, 2},
		"even": {[]float64{4, 1, 3, 2}, 2.5},
	}
	for name, tc := range cases {
		if got := Median(tc.values); got != tc.want {
			t.Errorf("%s: Median(%v) = %v, want %v", name, tc.values, got, tc.want)
		}
	}
}

// TestRunAgain: a benchmark past its limit in one run and within it in the next
// passes, judged by its lower run; one past it in both fails; Failed names only the
// benchmarks to run again.
func TestRunAgain(t *testing.T) {
	slow := Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.9}, "FaultIsolation": {"taint-p99-ratio": 1.0}}
	rows := Compare(baseline, slow)
	if diff := cmp.Diff([]string{"CheckSideBySide"}, Failed(rows)); diff != "" {
		t.Fatalf("Failed (-want +got):\n%s", diff)
	}
	again := Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.6}}
	if rows := Compare(baseline, Lowest(slow, again)); !Passed(rows) || Failed(rows) != nil {
		t.Errorf("a slow round then one within the limit: Passed %t, Failed %v; want it passed", Passed(rows), Failed(rows))
	}
	regressed := Results{"CheckSideBySide": {"check-side-admit-mean-ratio": 1.85}}
	if Passed(Compare(baseline, Lowest(slow, regressed))) {
		t.Error("past the limit in both runs: passed, want it failed")
	}
	if got := Lowest(slow, again)["FaultIsolation"]["taint-p99-ratio"]; got != 1.0 {
		t.Errorf("a figure of a benchmark not run again: %v, want 1.0 as first measured", got)
	}
}
