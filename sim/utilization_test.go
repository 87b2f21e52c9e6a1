package sim

import (
	"math"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUtilizationModel(t *testing.T) {
	m := DefaultUtilizationModel()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	const n = 20000
	classes := map[string]int{}
	var sum float64
	for i := range n {
		u := m.For("j"+strconv.Itoa(i), 1, -1, 1)
		classes[u.Class]++
		sum += float64(u.GPUPercent)
		c := classOf(t, m, u.Class)
		if int(u.GPUPercent) < c.MinPercent || int(u.GPUPercent) > c.MaxPercent {
			t.Fatalf("job %d: %d%% outside class %s's %d-%d%%", i, u.GPUPercent, c.Name, c.MinPercent, c.MaxPercent)
		}
	}
	for _, c := range m.Classes {
		if got := float64(classes[c.Name]) / n; math.Abs(got-c.Share) > 0.015 {
			t.Errorf("class %s: %.3f of jobs, want about %.2f", c.Name, got, c.Share)
		}
	}
	// Jobs that progress with idle GPUs are rare but there; holding GPUs idle without
	// working is the job kinds' part (TestWorkModelDraws).
	if classes["idle"] == 0 {
		t.Error("no job progresses with its GPUs idle")
	}
	// While working, about half (Jeon et al.: Philly's jobs use about half their GPUs).
	if mean := sum / n; mean < 45 || mean > 55 {
		t.Errorf("mean utilization while working %.1f%%, want about 50%%", mean)
	}
}

func TestUtilizationFor(t *testing.T) {
	m := DefaultUtilizationModel()
	tests := map[string]struct {
		gpus, trace int
		want        func(single Utilization) Utilization
	}{
		"the trace's figure wins": {gpus: 1, trace: 63, want: func(Utilization) Utilization {
			return Utilization{Class: "trace", GPUPercent: 63, MemoryPercent: 42}
		}},
		"same draw for up to 8 GPUs": {gpus: 8, trace: -1, want: func(s Utilization) Utilization { return s }},
		"multi-node jobs scaled by 0.8": {gpus: 16, trace: -1, want: func(s Utilization) Utilization {
			return withMemory(s.Class, int(math.Round(float64(s.GPUPercent)*0.8)))
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for i := range 200 {
				id := "j" + strconv.Itoa(i)
				single := m.For(id, 1, -1, 3)
				got := m.For(id, tc.gpus, tc.trace, 3)
				// Rounding twice may differ by one point from scaling the rounded value.
				if diff := cmp.Diff(tc.want(single), got, cmp.Comparer(func(a, b uint32) bool { return a-b+1 <= 2 })); diff != "" {
					t.Fatalf("job %s (-want +got):\n%s", id, diff)
				}
			}
		})
	}
}

func TestUtilizationModelValidate(t *testing.T) {
	tests := map[string]struct {
		m    UtilizationModel
		want string
	}{
		"shares": {
			m:    UtilizationModel{Classes: []UtilizationClass{{Name: "a", Share: 0.5, MaxPercent: 10}}, MultiNodeFactor: 1},
			want: "utilization class shares add up to 0.5, want 1",
		},
		"range": {
			m:    UtilizationModel{Classes: []UtilizationClass{{Name: "a", Share: 1, MinPercent: 50, MaxPercent: 10}}, MultiNodeFactor: 1},
			want: "utilization class a: share 1, range 50-10%: want a share of 0 or more and 0 <= min <= max <= 100",
		},
		"factor": {
			m:    UtilizationModel{Classes: []UtilizationClass{{Name: "a", Share: 1, MaxPercent: 10}}},
			want: "multi-node utilization factor 0: want (0, 1]",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := tc.m.Validate(); err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func classOf(t *testing.T, m UtilizationModel, name string) UtilizationClass {
	for _, c := range m.Classes {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no class %q", name)
	return UtilizationClass{}
}
