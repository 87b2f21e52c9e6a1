package sim

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestShortScenario runs the instrument end to end on real components: 24 jobs of the
// Philly trace on one 8-GPU node, under every policy (Kueue's and Volcano's), with a
// GPU fault or two. It checks that every job finishes, that the simulator's watch
// agrees with the Jobs in the API server and Chamber's metrics with both, and that the
// report has every table and plot, that the baseline's pods carry the pod grace the
// report names (Chamber's team grace) and that a training job Kueue alone preempts
// keeps its progress within it. It asserts no figure: those are what the simulator is
// for. About four minutes.
func TestShortScenario(t *testing.T) {
	trace, bad, err := ReadTraceFile("testdata/philly_slice.csv", false)
	if err != nil || len(bad) > 0 {
		t.Fatalf("read the test trace: %v %v", err, bad)
	}
	jobs, err := Prepare(trace, TraceSlice{Keep: 1, MaxDuration: time.Hour, MaxGPUs: 8, Seed: 1}, DefaultUtilizationModel(), DefaultWorkModel())
	if err != nil {
		t.Fatal(err)
	}
	sc := &Scenario{
		Jobs: jobs, PodGrace: DefaultPodGrace, Nodes: []NodeGroup{{Count: 1, GPUs: 8, Product: "NVIDIA-H100-80GB-HBM3", Fake: "dgxh100"}},
		Speedup: 600, FaultsPer1000GPUHours: 60, RepairTime: 30 * time.Minute, PricePerGPUHour: 2.49,
		IdleBelowPercent: 5, BackoffLimit: 3, SampleEvery: 500 * time.Millisecond, Timeout: 2 * time.Minute,
		Policies: []Policy{PolicyKubernetes, PolicyKueue, PolicyChamber}, OutDir: t.TempDir(), MetricsAddr: "0", Seed: 1, InteractiveIdleLimit: InteractiveIdleLimit,
		Progress: io.Discard, Log: io.Discard,
	}
	if testing.Verbose() {
		sc.Progress = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	path, recs, err := Run(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		complete, failed := 0, 0
		for _, j := range rec.Jobs {
			switch {
			case j.Finished.IsZero():
				t.Errorf("%s: job %s never finished", rec.Policy, j.Job.Name)
			case j.Failed:
				failed++
			case j.Ended:
				// Its user ended the notebook while it was paused at the idle time
				// limit, its span over: the Job is deleted, not complete.
				if !j.Progress.Finished() {
					t.Errorf("%s: session %s ended by its user before its span was over", rec.Policy, j.Job.Name)
				}
			default:
				complete++
				// The simulator, not kwok's clock, ends a job: only once its work is done.
				if !j.Progress.Finished() {
					t.Errorf("%s: job %s (%s) complete with %v of %v done", rec.Policy, j.Job.Name, j.Job.Work.Kind, j.Progress.Done, j.Job.Work.Work)
				}
			}
			// The watch's times against the API's whole-second timestamps: the watch
			// cannot see a Job before the API created it, nor see it run before it was
			// submitted. (How late a watch is depends on the machine's load, so it is
			// not asserted.)
			if j.Submitted.Before(j.APICreated.Add(-time.Second)) || (!j.FirstRun.IsZero() && j.FirstRun.Before(j.Submitted)) {
				t.Errorf("%s: job %s submitted at %v and first running at %v by the watch, created at %v by the API",
					rec.Policy, j.Job.Name, j.Submitted, j.FirstRun, j.APICreated)
			}
		}
		grace := podGraceSeconds(sc)
		for _, run := range rec.Runs {
			if run.Grace < grace || (!rec.Policy.WithChamber() && run.Grace != grace) {
				t.Errorf("%s: a pod of job %s ran with terminationGracePeriodSeconds %d, want the baseline's %d", rec.Policy, run.Job.Job.Name, run.Grace, grace)
				break
			}
		}
		if rec.Policy == PolicyKueue {
			preempted := 0
			for _, j := range rec.Jobs {
				if j.EvictionsBy[EvictionByKueue] == 0 || j.Job.Work.Kind != KindTraining {
					continue
				}
				preempted++
				if lost := j.LostBy[EvictionByKueue]; lost > 0 {
					t.Errorf("Kueue alone preempted training job %s (checkpoint write %s) with %d s of grace, and it lost %.2f GPU-hours", j.Job.Name, j.Job.Work.CheckpointWrite, grace, lost)
				}
			}
			t.Logf("Kueue alone preempted %d training jobs", preempted)
		}
		if complete != rec.APIComplete || failed != rec.APIFailed || rec.APIOther != 0 {
			t.Errorf("%s: the watch saw %d complete and %d failed Jobs; the API has %d complete, %d failed, %d other",
				rec.Policy, complete, failed, rec.APIComplete, rec.APIFailed, rec.APIOther)
		}
		if !rec.Policy.WithChamber() {
			continue
		}
		if len(rec.MetricsCheck) < 4 {
			t.Errorf("Chamber's metrics: %d checks, want the GPU, pending and per-team checks", len(rec.MetricsCheck))
		}
		for _, c := range rec.MetricsCheck {
			if !c.Agrees {
				t.Errorf("Chamber's %s = %g, the API objects say %g", c.Metric, c.Chamber, c.Measured)
			}
		}
	}
	report, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range ReportTables {
		if !strings.Contains(string(report), table+"\n") {
			t.Errorf("the report has no %q", table)
		}
	}
	checkOutputs(t, sc.OutDir)
	if t.Failed() {
		t.Logf("report:\n%s", report)
	}
}

// checkOutputs checks that the plots and data files are in dir and not empty.
func checkOutputs(t *testing.T, dir string) {
	t.Helper()
	for _, file := range []string{plotAllocation, plotQueue, plotWaitCDF, JobsFile, SamplesFile} {
		if fi, err := os.Stat(filepath.Join(dir, file)); err != nil || fi.Size() == 0 {
			t.Errorf("output %s: %v", file, err)
		}
	}
}
