package sim

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// handRecording is a recording worked out by hand: team a's 4-GPU job runs the first
// hour on a 4-GPU node while team b's 2-GPU job waits, then b's runs after a fault
// killed its first pod.
func handRecording() (*Scenario, *Recording) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	jobs := []Job{
		{Name: "a1", Team: "a", Tier: TierProduction, GPUs: 4, Duration: time.Hour},
		{Name: "b1", Team: "b", Tier: TierStandard, GPUs: 2, Duration: time.Hour},
	}
	sc := &Scenario{Jobs: jobs, Nodes: []NodeGroup{{Count: 1, GPUs: 4, Product: "H100", Fake: "dgxh100"}},
		Speedup: 1, PricePerGPUHour: 2, Policies: []Policy{PolicyKueue}}
	a := &JobRecord{Job: &jobs[0], Submitted: t0, FirstRun: t0, Finished: t0.Add(time.Hour), WaitSpells: 1}
	b := &JobRecord{Job: &jobs[1], Submitted: t0, FirstRun: t0.Add(time.Hour), Finished: t0.Add(2 * time.Hour), FaultKills: 1,
		Waited: time.Hour, WaitSpells: 1}
	rec := &Recording{
		Policy: PolicyKueue, Start: t0, Jobs: []*JobRecord{a, b},
		Runs: []*PodRun{
			{Job: a, GPUs: []int{0, 1, 2, 3}, Start: t0, End: t0.Add(time.Hour)},
			{Job: b, GPUs: []int{0, 1}, Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour)},
		},
		Samples: []Sample{
			{At: t0, Allocated: 4, Used: 2, Idle: 1, Waiting: 1, Queued: 1, Running: 1, IdleByKind: map[Kind]float64{KindTraining: 1},
				TeamAllocated: map[string]int{"a": 4}, TeamDemand: map[string]int{"a": 4, "b": 2}},
			{At: t0.Add(time.Hour), Allocated: 2, Used: 0, Idle: 0.5, Running: 1, IdleByKind: map[Kind]float64{KindInteractive: 0.5},
				TeamAllocated: map[string]int{"b": 2}, TeamDemand: map[string]int{"b": 2}},
		},
		Faults: []FaultRecord{{At: t0}},
	}
	return sc, rec
}

func TestAnalyze(t *testing.T) {
	sc, rec := handRecording()
	want := Result{
		Policy: PolicyKueue, Jobs: 2, Complete: 2,
		AllocWhileWaiting: 1,    // all 4 GPUs held while b was queued
		MeanAlloc:         0.75, // (4 GPUs x 1 h + 2 x 1 h) / (4 x 2 h)
		UsefulUtil:        0.25, // (2 GPUs used x 1 h) / (4 x 2 h)
		AllocatedGPUHours: 6, IdleGPUHours: 1.5,
		// 1 idle GPU-hour while b was queued, a training job's; half an hour after.
		IdleWhileQueued: 1, IdleByKind: map[Kind]float64{KindTraining: 1, KindInteractive: 0.5},
		Waits: map[string][]float64{"": {0, 1}, TierProduction: {0}, TierStandard: {1}},
		// b waited its first hour; a, none (its spell ended as it began).
		TotalWaits: map[string][]float64{"": {0, 1}, TierProduction: {0}, TierStandard: {1}}, WaitSpells: 2,
		// Quotas 2 and 2; while b was queued, the fair shares were 2 and 2, a held 4, b 0.
		Jain:      0.5,
		TeamShare: map[string]float64{"a": 2, "b": 0},
		Makespan:  2 * time.Hour, LowerBound: 90 * time.Minute, // 6 GPU-hours over 4 GPUs
		Faults: 1, FaultKills: 1, Restarted: 1,
		Cost: 12, IdleCost: 3,
		// a held 4 GPUs for an hour, b 2; the samples split no idle time by team.
		Teams: map[string]*TeamResult{"a": {Jobs: 1, Waits: []float64{0}, AllocatedGPUHours: 4, Cost: 8},
			"b": {Jobs: 1, Waits: []float64{1}, AllocatedGPUHours: 2, Cost: 4}},
	}
	if diff := cmp.Diff(want, Analyze(sc, rec), cmpopts.EquateApprox(0, 1e-9), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestWriteReport renders the hand-made recording: every table, plot and data file.
func TestWriteReport(t *testing.T) {
	sc, rec := handRecording()
	sc.OutDir = t.TempDir()
	// A replay that timed out says what its unfinished jobs were.
	rec.TimedOut, rec.Unfinished = true, []string{"a/nb: Job suspended=true active=0 ready=0 failed=0 conditions []; pods []; Workload job-nb active=false"}
	// The same run under Volcano + Chamber, which resumed two stalled Volcano Jobs.
	vc := *rec
	vc.Policy, vc.TimedOut, vc.Unfinished, vc.Resynced = PolicyVolcanoChamber, false, nil, 2
	sc.Policies = append(sc.Policies, PolicyVolcanoChamber)
	path, err := WriteReport(sc, []*Recording{rec, &vc})
	if err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append(ReportTables, "| makespan / lower bound | 2h00m / 1h30m (x1.33) |", "| a | 2 | 4 | 2.00 |",
		"left unfinished under "+rec.Policy.Title()+", as the API server had them at the timeout:\n\n- "+rec.Unfinished[0]+"\n",
		"Volcano Jobs resumed after vc-controller-manager left them stalled (resync-volcano, `chamber_volcano_jobs_resynced_total`): 2. ") {
		if !strings.Contains(string(report), want) {
			t.Errorf("the report has no %q", want)
		}
	}
	checkOutputs(t, sc.OutDir)
}

func TestFits(t *testing.T) {
	cases := map[string]struct {
		gpus, pods int
		free       []int
		want       bool
	}{
		"one GPU, one free":                 {gpus: 1, pods: 1, free: []int{0, 1}, want: true},
		"four GPUs spread over two nodes":   {gpus: 4, pods: 1, free: []int{2, 2}},
		"four GPUs on one node":             {gpus: 4, pods: 1, free: []int{2, 4}, want: true},
		"sixteen GPUs need two whole nodes": {gpus: 16, pods: 2, free: []int{8, 7, 8}, want: true},
		"sixteen GPUs, one whole node only": {gpus: 16, pods: 2, free: []int{8, 7, 7}},
		"nothing free":                      {gpus: 1, pods: 1, free: []int{0, 0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := fits(tc.gpus, tc.pods, tc.free); got != tc.want {
				t.Errorf("fits(%d GPUs in %d pods, free %v) = %v, want %v", tc.gpus, tc.pods, tc.free, got, tc.want)
			}
		})
	}
}
