// Package perf is the performance gate (make perf-check): it reads the figures the
// benchmarks report, compares each with its stored baseline and says which regressed
// past the margin. Every gated figure is a ratio of two times measured in the same
// run on the same machine, so that the gate holds on a slower or busier machine than
// the one that took the baseline.
package perf

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Baseline is the stored file (test/perf/baseline.json): how the figures are
// measured and what they were.
type Baseline struct {
	// Margin is how far above its baseline a figure may go, as a fraction (0.2: 20%).
	Margin float64 `json:"margin"`
	// Measured says on what machine and when the baseline was taken.
	Measured string `json:"measured"`
	// Benchmarks are the runs whose figures are gated, in the order they run.
	Benchmarks []Benchmark `json:"benchmarks"`
}

// Benchmark is one go test -bench run and the figures of it that are gated.
type Benchmark struct {
	// Package is the package's directory, Name the benchmark's name without its
	// Benchmark prefix.
	Package string `json:"package"`
	Name    string `json:"name"`
	// Env sizes the run (CHAMBER_PERF_SCALE and the like).
	Env     map[string]string `json:"env,omitempty"`
	Figures []Figure          `json:"figures"`
}

// Figure is one gated metric of a benchmark, where higher is worse.
type Figure struct {
	// Metric is the unit the benchmark reports it under (b.ReportMetric).
	Metric string `json:"metric"`
	// About says what the figure is, for the table and the reader of the file.
	About string `json:"about"`
	// Baseline is the highest of Runs.
	Baseline float64 `json:"baseline"`
	// Runs are the values the baseline was taken from.
	Runs []float64 `json:"runs,omitempty"`
}

// Read reads a baseline file.
func Read(path string) (Baseline, error) {
	var b Baseline
	data, err := os.ReadFile(path)
	if err != nil {
		return b, fmt.Errorf("read the performance baseline: %w", err)
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("performance baseline %s: %w", path, err)
	}
	if b.Margin <= 0 {
		return b, fmt.Errorf("performance baseline %s: margin %v, want a fraction above 0", path, b.Margin)
	}
	return b, nil
}

// Write writes the baseline file, indented, as make perf-baseline does.
func (b Baseline) Write(path string) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// Results are the metrics of each benchmark of a go test -bench output, by the
// benchmark's name (without Benchmark and the -GOMAXPROCS suffix), then by unit.
type Results map[string]map[string]float64

var benchLine = regexp.MustCompile(`^Benchmark(\w+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// ParseBench reads go test -bench output: each result line's value and unit pairs.
func ParseBench(r io.Reader) (Results, error) {
	out := Results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		fields := strings.Fields(m[2])
		metrics := map[string]float64{}
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark %s: value %q of %s: %w", m[1], fields[i], fields[i+1], err)
			}
			metrics[fields[i+1]] = v
		}
		out[m[1]] = metrics
	}
	return out, sc.Err()
}

// Lowest is each metric of a and b at its lower value, one that only one reports as
// it is: the figures of a benchmark run again. A figure fails the gate only where
// every run was past its limit, so one slow round on a shared machine fails nothing
// while a regression, slow in each run, still does.
func Lowest(a, b Results) Results {
	out := Results{}
	for _, r := range []Results{a, b} {
		for bench, metrics := range r {
			if out[bench] == nil {
				out[bench] = map[string]float64{}
			}
			for m, v := range metrics {
				if old, ok := out[bench][m]; !ok || v < old {
					out[bench][m] = v
				}
			}
		}
	}
	return out
}

// Failed are the benchmarks with a row that is not OK, in the rows' order.
func Failed(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if !r.OK() && !slices.Contains(out, r.Benchmark) {
			out = append(out, r.Benchmark)
		}
	}
	return out
}

// Row is one line of the gate's table.
type Row struct {
	Benchmark, Metric, About string
	Baseline, Limit          float64
	// Measured is the figure of this run; Missing says the run did not report it.
	Measured float64
	Missing  bool
}

// OK: the figure was measured and is within its limit.
func (r Row) OK() bool { return !r.Missing && r.Measured <= r.Limit }

// Compare puts each figure of the baseline beside what the run measured; a figure
// fails once it exceeds its baseline by more than the margin.
func Compare(b Baseline, measured Results) []Row {
	var rows []Row
	for _, bench := range b.Benchmarks {
		for _, f := range bench.Figures {
			v, ok := measured[bench.Name][f.Metric]
			rows = append(rows, Row{Benchmark: bench.Name, Metric: f.Metric, About: f.About,
				Baseline: f.Baseline, Limit: f.Baseline * (1 + b.Margin), Measured: v, Missing: !ok})
		}
	}
	return rows
}

// Passed: every row is OK.
func Passed(rows []Row) bool {
	for _, r := range rows {
		if !r.OK() {
			return false
		}
	}
	return true
}

// WriteTable prints the rows as the gate's table: figure, baseline, measured, limit,
// ok or FAIL.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tbaseline\tmeasured\tlimit\t\t")
	for _, r := range rows {
		measured, verdict := fmt.Sprintf("%.3f", r.Measured), "ok"
		if r.Missing {
			measured = "missing"
		}
		if !r.OK() {
			verdict = "FAIL"
		}
		fmt.Fprintf(tw, "%s %s\t%.3f\t%s\t%.3f\t%s\t%s\n", r.Benchmark, r.Metric, r.Baseline, measured, r.Limit, verdict, r.About)
	}
	return tw.Flush()
}

// Median of the values.
func Median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
