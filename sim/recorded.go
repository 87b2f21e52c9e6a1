package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"chamber.dev/chamber/controllers/history"
)

// RecordedTraceFile is the trace chamber-controller's job history recorded under
// PolicyChamber (recorded-trace.csv), as `kubectl chamber export-trace --time-scale
// <speed-up>` writes it: replayed with --trace, it checks the recorder against the
// run's own figures.
const RecordedTraceFile = "recorded-trace.csv"

// writeRecordedTrace waits (up to 30 s of clock) until the history holds every
// finished Workload, then writes it into the report folder as a trace, its clock
// times scaled back to trace time by the speed-up.
func writeRecordedTrace(ctx context.Context, c client.Client, sc *Scenario) error {
	var jobs []history.Job
	deadline := time.Now().Add(30 * time.Second)
	for {
		var wls kueue.WorkloadList
		if err := c.List(ctx, &wls); err != nil {
			return fmt.Errorf("list Workloads: %w", err)
		}
		finished := 0
		for _, wl := range wls.Items {
			if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
				finished++
			}
		}
		var err error
		if jobs, err = history.Read(ctx, c, history.DefaultNamespace); err != nil {
			return err
		}
		if len(jobs) >= finished || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := os.MkdirAll(sc.OutDir, 0o755); err != nil {
		return fmt.Errorf("create the report folder: %w", err)
	}
	f, err := os.Create(filepath.Join(sc.OutDir, RecordedTraceFile))
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := history.WriteTrace(f, jobs, history.TraceOptions{TimeScale: sc.Speedup}); err != nil {
		return fmt.Errorf("write the recorded trace: %w", err)
	}
	return f.Close()
}
