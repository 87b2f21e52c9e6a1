// Command perfcheck is make perf-check: it runs the benchmarks the baseline names, at
// the sizes it stores, prints their output and a table of the gated figures, and
// exits 1 when a figure regressed past its baseline by more than the margin. A
// benchmark with a figure past its limit runs again (-retries), and each figure is
// judged by its lowest run: one slow round on a shared machine is not a regression. With
// -update (make perf-baseline) it runs them -runs times and writes each figure's
// highest value as its new baseline instead: on a shared machine a figure's
// run-to-run spread is of the order of the margin, and a baseline at the median would
// fail every other slow run.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"chamber.dev/chamber/test/perf"
)

func main() {
	path := flag.String("baseline", "test/perf/baseline.json", "the baseline file")
	update := flag.Bool("update", false, "write the highest of -runs runs of each figure as its new baseline instead of comparing")
	runs := flag.Int("runs", 3, "with -update: how many runs each figure's baseline is the highest of")
	from := flag.String("from", "", "compare the go test -bench output in this file instead of running the benchmarks")
	retries := flag.Int("retries", 1, "run a benchmark with a figure past its limit again, up to this many times; a figure fails only where every run was past it")
	flag.Parse()
	base, err := perf.Read(*path)
	if err != nil {
		fail(err)
	}
	if !*update {
		began := time.Now()
		measured, err := measure(base, *from)
		if err != nil {
			fail(err)
		}
		rows := perf.Compare(base, measured)
		for try := 0; try < *retries && *from == "" && !perf.Passed(rows); try++ {
			failed := perf.Failed(rows)
			fmt.Printf("perf-check: past the limit in %s; running it again (%d of %d)\n", strings.Join(failed, ", "), try+1, *retries)
			again, err := runAll(only(base, failed))
			if err != nil {
				fail(err)
			}
			measured = perf.Lowest(measured, again)
			rows = perf.Compare(base, measured)
		}
		fmt.Printf("\nperf-check: %d figures against %s (margin %.0f%%, baseline %s), in %s\n", len(rows), *path, base.Margin*100, base.Measured, time.Since(began).Round(time.Second))
		if err := perf.WriteTable(os.Stdout, rows); err != nil {
			fail(err)
		}
		if !perf.Passed(rows) {
			fmt.Println("perf-check: FAIL: a figure regressed past its limit (a real regression, or rewrite the baseline with make perf-baseline where the change is meant)")
			os.Exit(1)
		}
		fmt.Println("perf-check: ok")
		return
	}
	all := map[string]map[string][]float64{}
	for i := range *runs {
		fmt.Printf("perf-baseline: run %d of %d\n", i+1, *runs)
		measured, err := runAll(base)
		if err != nil {
			fail(err)
		}
		for bench, metrics := range measured {
			if all[bench] == nil {
				all[bench] = map[string][]float64{}
			}
			for m, v := range metrics {
				all[bench][m] = append(all[bench][m], v)
			}
		}
	}
	for i, bench := range base.Benchmarks {
		for j, f := range bench.Figures {
			values := all[bench.Name][f.Metric]
			if len(values) != *runs {
				fail(fmt.Errorf("%s %s: reported in %d of %d runs", bench.Name, f.Metric, len(values), *runs))
			}
			base.Benchmarks[i].Figures[j].Runs = values
			base.Benchmarks[i].Figures[j].Baseline = slices.Max(values)
			fmt.Printf("perf-baseline: %s %s: highest %.3f (median %.3f) of %.3f\n", bench.Name, f.Metric, slices.Max(values), perf.Median(values), values)
		}
	}
	base.Measured = fmt.Sprintf("highest of %d runs, %s, %d CPUs (%s), %s", *runs, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), cpuModel(), runtime.Version())
	if err := base.Write(*path); err != nil {
		fail(err)
	}
	fmt.Println("perf-baseline: wrote", *path)
}

// measure reads the figures from the output in file, or else runs the benchmarks.
func measure(base perf.Baseline, file string) (perf.Results, error) {
	if file == "" {
		return runAll(base)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return perf.ParseBench(f)
}

// only is the baseline with only the named benchmarks.
func only(base perf.Baseline, names []string) perf.Baseline {
	base.Benchmarks = slices.DeleteFunc(slices.Clone(base.Benchmarks), func(b perf.Benchmark) bool { return !slices.Contains(names, b.Name) })
	return base
}

// runAll runs each benchmark of the baseline once, its output to stdout as it comes.
func runAll(base perf.Baseline) (perf.Results, error) {
	out := perf.Results{}
	for _, b := range base.Benchmarks {
		args := []string{"test", "-count=1", "-timeout=20m", "-run=^$", "-bench=^Benchmark" + b.Name + "$", "-benchtime=1x", "-v", b.Package}
		cmd := exec.Command("go", args...)
		var env []string
		for _, k := range slices.Sorted(maps.Keys(b.Env)) {
			env = append(env, k+"="+b.Env[k])
		}
		cmd.Env = append(os.Environ(), env...)
		var buf bytes.Buffer
		cmd.Stdout = io.MultiWriter(os.Stdout, &buf)
		cmd.Stderr = os.Stderr
		fmt.Printf("perf-check: %s go %s\n", strings.Join(env, " "), strings.Join(args, " "))
		began := time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("benchmark %s in %s: %w", b.Name, b.Package, err)
		}
		fmt.Printf("perf-check: %s took %s\n", b.Name, time.Since(began).Round(time.Second))
		res, err := perf.ParseBench(&buf)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, res)
	}
	return out, nil
}

// cpuModel is /proc/cpuinfo's model name, where there is one.
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "perf-check:", err)
	os.Exit(2)
}
