package sim

import (
	"math"
	"os"
	"strings"
	"testing"
)

func TestMeanSD(t *testing.T) {
	cases := map[string]struct {
		vs           []float64
		mean, spread float64
	}{
		"none":  {vs: nil, mean: math.NaN(), spread: math.NaN()},
		"one":   {vs: []float64{3}, mean: 3, spread: math.NaN()},
		"three": {vs: []float64{1, 2, 3}, mean: 2, spread: 1},
	}
	same := func(a, b float64) bool { return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) < 1e-9 }
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, sd := meanSD(tc.vs)
			if !same(m, tc.mean) || !same(sd, tc.spread) {
				t.Errorf("meanSD(%v) = %g, %g; want %g, %g", tc.vs, m, sd, tc.mean, tc.spread)
			}
		})
	}
}

// TestSummaryGoals: the summary pairs the runs of Kueue + Chamber with Kueue alone's
// and checks each goal on the whole interval of the paired ratios or differences.
func TestSummaryGoals(t *testing.T) {
	kueue := map[string]float64{"idle-but-allocated GPU-hours": 100, "production total wait p99": 90, "makespan": 10, "cost": 1000,
		"standard total wait p50": 2, "preemptible total wait p50": 2, "jobs lost": 1, "pod start latency p50": 10,
		"work lost to evictions and faults, % of useful work": 1}
	run := func(idle, makespan, lost float64) SweepRun {
		return SweepRun{Label: "r", Dir: t.TempDir(), Figures: map[Policy]map[string]float64{
			PolicyKueue: kueue,
			PolicyChamber: {"idle-but-allocated GPU-hours": idle, "production total wait p99": 20, "makespan": makespan, "cost": 1001,
				"standard total wait p50": 2.5, "preemptible total wait p50": 4, "jobs lost": lost, "pod start latency p50": 11,
				"work lost to evictions and faults, % of useful work": 1, "notebook users' resume wait p99": 12},
		}}
	}
	dir := t.TempDir()
	path, err := WriteSummary(dir, []Policy{PolicyKueue, PolicyChamber}, []SweepRun{run(40, 9, 0), run(45, 11, 0), run(40, 9, 0)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| idle-but-allocated GPU-hours | 100 | 42 | 0.416x [0.400, 0.450] | 3 / 0 / 0 | beats |",
		"| makespan | 10.00 h | 9.67 h | 0.962x [0.900, 1.100] | 2 / 1 / 0 | ties |",
		"| cost | 1000 $ | 1001 $ | 1.001x [1.001, 1.001] | 0 / 3 / 0 | loses |",
		"| idle-but-allocated GPU-hours at most 0.5x | 0.416x [0.400, 0.450] | yes |",
		"| production total wait p99 at most 0.5x | 0.222x [0.222, 0.222] | yes |",
		"| standard and preemptible total wait p50 at most the baseline's + 1 min | +0.5 min [+0.5, +0.5] / +2.0 min [+2.0, +2.0] | **no** |",
		"| makespan at most 0.95x | 0.962x [0.900, 1.100] | **no** |",
		"| jobs lost 0 | 0 over 3 runs | yes |",
		"| work lost to evictions and faults no more than the baseline's | +0.00% [+0.00, +0.00] | yes |",
		"| a paused notebook's user gets its GPUs back within 10 min at p99 | 12.0 min in the worst run | **no** |",
		"| pod start latency p50 at most 1.2x | 1.100x [1.100, 1.100] | yes |",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("summary lacks %q:\n%s", want, data)
		}
	}
}
