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

// TestSummaryGoals: the summary averages the runs and checks the goals on the means.
func TestSummaryGoals(t *testing.T) {
	kueue := map[string]float64{"idle-but-allocated GPU-hours": 100, "production wait p99": 90, "makespan": 10, "cost": 1000,
		"standard wait p50": 2, "preemptible wait p50": 2}
	run := func(idle float64) SweepRun {
		return SweepRun{Label: "r", Dir: t.TempDir(), Figures: map[Policy]map[string]float64{
			PolicyKueue: kueue,
			PolicyChamber: {"idle-but-allocated GPU-hours": idle, "production wait p99": 20, "makespan": 9, "cost": 1001,
				"standard wait p50": 2.5, "preemptible wait p50": 4},
		}}
	}
	dir := t.TempDir()
	path, err := WriteSummary(dir, []Policy{PolicyKueue, PolicyChamber}, []SweepRun{run(40), run(50)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| idle-but-allocated GPU-hours | 100 ± 0 | 45 ± 7 |",
		"| idle-but-allocated GPU-hours at most 0.5x Kueue's | 0.45x | yes |",
		"| production wait p99 at most 1/3 of Kueue's | 0.22x | yes |",
		"| standard and preemptible wait p50 no worse than Kueue's + 1 min | +0.5 min / +2.0 min | **no** |",
		"| cost no higher | 1.001x | **no** |",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("summary lacks %q:\n%s", want, data)
		}
	}
}
