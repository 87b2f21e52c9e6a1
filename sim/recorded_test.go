package sim

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"

	"chamber.dev/chamber/controllers/history"
)

// TestExportedTraceReads: the job history written as a trace (what kubectl chamber
// export-trace writes) is a trace ReadTrace accepts, its times from the first kept
// submission and scaled, each duration the GPU-seconds held over the GPUs where known
// (else start to finish), jobs without GPUs or that never ran or held a GPU left out,
// --since and --until bounds on the submission, and hashed teams stable.
func TestExportedTraceReads(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	job := func(name, team string, submit, start, end float64, gpus int64, util, gpuSeconds float64) history.Job {
		return history.Job{UID: types.UID("uid-" + name), Namespace: "ns-" + team, Workload: "job-" + name, Job: name, Team: team,
			Submitted: at(submit), Started: at(start), Finished: at(end), GPUs: gpus, Model: "NVIDIA-H100-80GB-HBM3", UtilPercent: util,
			GPUSeconds: gpuSeconds}
	}
	jobs := []history.Job{
		job("b", "vision", 10.5, 12, 40, 8, 62.25, -1), // GPU-seconds unknown: start to finish
		job("a", "nlp", 2, 2.5, 5, 1, -1, 2.5),
		job("cpu", "nlp", 3, 3, 4, 0, -1, -1),      // no GPUs
		job("never", "nlp", 4, 9, 9, 2, -1, -1),    // finished without running
		job("held-none", "nlp", 5, 6, 9, 2, -1, 0), // reserved quota, held no GPU
		job("late", "", 100, 101, 130, 4, 0, 64),   // evicted or paused: 16 s of 29 on its GPUs
	}
	jobs[5].Namespace = "ns-none"
	tests := map[string]struct {
		opts history.TraceOptions
		want []TraceJob
	}{
		"all, at a 60x speed-up": {
			opts: history.TraceOptions{TimeScale: 60},
			want: []TraceJob{
				{ID: "a", Line: 2, Submit: 0, Duration: 150 * time.Second, GPUs: 1, GPUType: "NVIDIA-H100-80GB-HBM3", User: "nlp", UtilPercent: -1},
				{ID: "b", Line: 3, Submit: 510 * time.Second, Duration: 1680 * time.Second, GPUs: 8, GPUType: "NVIDIA-H100-80GB-HBM3", User: "vision", UtilPercent: 62},
				{ID: "late", Line: 4, Submit: 5880 * time.Second, Duration: 960 * time.Second, GPUs: 4, GPUType: "NVIDIA-H100-80GB-HBM3", User: "ns-none", UtilPercent: 0},
			},
		},
		"since and until": {
			opts: history.TraceOptions{Since: at(5), Until: at(100)},
			want: []TraceJob{
				{ID: "b", Line: 2, Submit: 0, Duration: 28 * time.Second, GPUs: 8, GPUType: "NVIDIA-H100-80GB-HBM3", User: "vision", UtilPercent: 62},
			},
		},
		"hashed teams": {
			opts: history.TraceOptions{Until: at(50), HashTeams: true},
			want: []TraceJob{
				{ID: history.HashName("ns-nlp/a"), Line: 2, Submit: 0, Duration: 2500 * time.Millisecond, GPUs: 1, GPUType: "NVIDIA-H100-80GB-HBM3", User: history.HashName("nlp"), UtilPercent: -1},
				{ID: history.HashName("ns-vision/b"), Line: 3, Submit: 8500 * time.Millisecond, Duration: 28 * time.Second, GPUs: 8, GPUType: "NVIDIA-H100-80GB-HBM3", User: history.HashName("vision"), UtilPercent: 62},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			n, err := history.WriteTrace(&b, jobs, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tc.want) {
				t.Errorf("wrote %d jobs, want %d", n, len(tc.want))
			}
			got, bad, err := ReadTrace(&b, "exported.csv", false)
			if err != nil || len(bad) > 0 {
				t.Fatalf("ReadTrace: %v, bad rows %v\n%s", err, bad, b.String())
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApproxTime(time.Millisecond)); diff != "" {
				t.Errorf("trace (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := history.WriteTrace(&bytes.Buffer{}, jobs, history.TraceOptions{Since: at(1000)}); err == nil {
		t.Error("an empty range wrote a trace, want an error that says to widen it")
	}
	first, again := history.HashName("nlp"), history.HashName("nlp")
	if first == history.HashName("vision") || first != again {
		t.Error("HashName is not a stable stand-in of each name")
	}
}

// TestWhatIfTable: each team's figures before and after in one row, changed ones as
// "before → after", the sum of all last.
func TestWhatIfTable(t *testing.T) {
	p := func(v float64) *float64 { return &v }
	before := map[string]TeamFigures{
		"nlp":    {Jobs: 10, WaitP50Hours: p(0.5), WaitP99Hours: p(2), GPUHours: 40, IdleGPUHours: 4, Cost: 99.6},
		AllTeams: {Jobs: 10, WaitP50Hours: p(0.5), WaitP99Hours: p(2), GPUHours: 40, IdleGPUHours: 4, Cost: 99.6},
	}
	after := map[string]TeamFigures{
		"nlp":    {Jobs: 10, WaitP50Hours: p(0.25), WaitP99Hours: p(2), GPUHours: 40, IdleGPUHours: 3, Cost: 99.6},
		"vision": {Jobs: 1},
		AllTeams: {Jobs: 11, WaitP50Hours: p(0.25), WaitP99Hours: p(2), GPUHours: 40, IdleGPUHours: 3, Cost: 99.6},
	}
	lines := strings.Split(strings.TrimSpace(WhatIfTable(before, after)), "\n")
	want := []string{
		fmt.Sprintf("| nlp | 10 | %.2f → %.2f | %.2f | %.1f → %.1f | %.1f | %.2f |", 0.5, 0.25, 2.0, 4.0, 3.0, 40.0, 99.6),
		"| vision | 0 → 1 | - | - | 0.0 | 0.0 | 0.00 |",
		fmt.Sprintf("| %s | 10 → 11 | %.2f → %.2f | %.2f | %.1f → %.1f | %.1f | %.2f |", AllTeams, 0.5, 0.25, 2.0, 4.0, 3.0, 40.0, 99.6),
	}
	if diff := cmp.Diff(want, lines[2:]); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}
