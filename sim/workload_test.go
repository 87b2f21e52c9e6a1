package sim

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPrepare(t *testing.T) {
	trace := []TraceJob{
		{ID: "early", Submit: 10 * time.Minute, Duration: time.Hour, GPUs: 1, User: "vc1", UtilPercent: -1},
		{ID: "Job_A", Submit: 2 * time.Hour, Duration: 30 * time.Hour, GPUs: 32, User: "VC.2", UtilPercent: 50},
		{ID: "job-a", Submit: 3 * time.Hour, Duration: time.Minute, GPUs: 1, User: "vc.2", UtilPercent: -1},
		{ID: "late", Submit: 9 * time.Hour, Duration: time.Minute, GPUs: 1, User: "vc1", UtilPercent: -1},
	}
	tests := map[string]struct {
		slice   TraceSlice
		want    []Job
		wantErr string
	}{
		"window, cuts, names, shifted to start at 0": {
			slice: TraceSlice{Start: time.Hour, Length: 4 * time.Hour, Keep: 1, MaxDuration: 12 * time.Hour, MaxGPUs: 16},
			want: []Job{
				{Name: "job-a", Team: "vc-2", TraceID: "Job_A", Tier: TierProduction, GPUs: 16, Duration: 12 * time.Hour, Cut: true,
					Util: Utilization{Class: "trace", GPUPercent: 50, MemoryPercent: 33}},
				{Name: "job-a-2", Team: "vc-2", TraceID: "job-a", GPUs: 1, Submit: time.Hour, Duration: time.Minute},
			},
		},
		"at most one job": {
			slice: TraceSlice{Keep: 1, MaxJobs: 1},
			want:  []Job{{Name: "early", Team: "vc1", TraceID: "early", GPUs: 1, Duration: time.Hour}},
		},
		"empty window": {
			slice:   TraceSlice{Start: 100 * time.Hour, Keep: 1},
			wantErr: "no trace job in the slice (start 100h0m0s, length 0s, keep 1): widen it",
		},
		"bad fraction": {
			slice:   TraceSlice{Keep: 0},
			wantErr: "the kept fraction of jobs must be in (0, 1], got 0",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Prepare(trace, tc.slice, DefaultUtilizationModel(), DefaultWorkModel())
			if !checkError(t, err, tc.wantErr) {
				return
			}
			// Tiers, utilization and work of model-drawn jobs are checked in their own tests.
			opts := []cmp.Option{cmpopts.IgnoreFields(Job{}, "Tier", "Util", "Work")}
			if diff := cmp.Diff(tc.want, got, opts...); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			for i := range got {
				if tc.want[i].Util.Class == "trace" && got[i].Util != tc.want[i].Util {
					t.Errorf("job %s utilization %+v, want the trace's %+v", got[i].Name, got[i].Util, tc.want[i].Util)
				}
				if tc.want[i].Tier != "" && got[i].Tier != tc.want[i].Tier {
					t.Errorf("job %s tier %s, want %s", got[i].Name, got[i].Tier, tc.want[i].Tier)
				}
			}
		})
	}
}

func TestPrepareThinning(t *testing.T) {
	var trace []TraceJob
	for i := range 10000 {
		trace = append(trace, TraceJob{ID: "j" + strconv.Itoa(i), Submit: time.Duration(i) * time.Second, Duration: time.Minute, GPUs: 1, User: "u", UtilPercent: -1})
	}
	jobs, err := Prepare(trace, TraceSlice{Keep: 0.25, Seed: 7}, DefaultUtilizationModel(), DefaultWorkModel())
	if err != nil {
		t.Fatal(err)
	}
	if share := float64(len(jobs)) / 10000; math.Abs(share-0.25) > 0.02 {
		t.Errorf("kept %.3f of the jobs, want about 0.25", share)
	}
	again, _ := Prepare(trace, TraceSlice{Keep: 0.25, Seed: 7}, DefaultUtilizationModel(), DefaultWorkModel())
	if diff := cmp.Diff(jobs, again); diff != "" {
		t.Errorf("the same seed kept other jobs (-first +second):\n%s", diff)
	}
}

func TestTierOf(t *testing.T) {
	counts := map[string]int{}
	for i := range 10000 {
		counts[TierOf("j"+strconv.Itoa(i), 1, 1)]++
	}
	want := map[string]float64{TierProduction: 0.1, TierPreemptible: 0.3, TierStandard: 0.6}
	for tier, share := range want {
		if got := float64(counts[tier]) / 10000; math.Abs(got-share) > 0.02 {
			t.Errorf("tier %s: %.3f of single-GPU jobs, want about %.2f", tier, got, share)
		}
	}
	for _, gpus := range []int{8, 16} {
		if got := TierOf("any", gpus, 1); got != TierProduction {
			t.Errorf("a %d-GPU job is %s, want production", gpus, got)
		}
	}
}

func TestQuotas(t *testing.T) {
	job := func(team string, gpus int, d time.Duration) Job { return Job{Team: team, GPUs: gpus, Duration: d} }
	tests := map[string]struct {
		jobs []Job
		gpus int
		want map[string]int
	}{
		"in proportion to GPU-hours": {
			jobs: []Job{job("a", 1, 3*time.Hour), job("b", 1, time.Hour)},
			gpus: 10,
			want: map[string]int{"a": 7, "b": 3}, // one each, then 8 split 6:2
		},
		"largest remainder, ties by name": {
			jobs: []Job{job("a", 1, time.Hour), job("b", 1, time.Hour), job("c", 1, time.Hour)},
			gpus: 8,
			want: map[string]int{"a": 3, "b": 3, "c": 2},
		},
		"a team with next to no demand still gets a GPU": {
			jobs: []Job{job("big", 8, 100*time.Hour), job("tiny", 1, time.Second)},
			gpus: 16,
			want: map[string]int{"big": 15, "tiny": 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Quotas(tc.jobs, tc.gpus)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("quotas (-want +got):\n%s", diff)
			}
		})
	}
}
