package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// MetricCheck compares one of Chamber's metrics with what the simulator measured from
// the API objects.
type MetricCheck struct {
	Metric   string
	Chamber  float64
	Measured float64
	Agrees   bool
}

// metricsSettle bounds how long settledMetrics waits for Chamber's caches to see the
// replay's last pod end: its informers and the recorder's watch get the same events, in
// no fixed order between them.
const metricsSettle = 10 * time.Second

// settledMetrics runs checkMetrics until every check agrees or metricsSettle has
// passed, and returns the last result: a gauge read the instant the last job ends can
// still count that job's pod, and what the check asserts is that Chamber's view
// converges on the API's, not that it is first to hear.
func settledMetrics(ctx context.Context, r *recorder, sc *Scenario) []MetricCheck {
	deadline := time.Now().Add(metricsSettle)
	for {
		checks := checkMetrics(r, sc)
		disagree := slices.ContainsFunc(checks, func(c MetricCheck) bool { return !c.Agrees })
		if !disagree || time.Now().After(deadline) {
			return checks
		}
		select {
		case <-ctx.Done():
			return checks
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkMetrics reads Chamber's metrics (controller-runtime's registry, where the
// inventory registers) at the end of the replay and compares them with the recorder:
// GPUs in the inventory against the cluster's, GPUs held and jobs waiting now, and each
// team's held GPU-seconds (clock seconds: the inventory knows no speed-up). Held
// GPU-seconds may differ by the watch's lag at each pod's start and end, so they agree
// within 10% or two seconds per GPU of each pod run.
func checkMetrics(r *recorder, sc *Scenario) []MetricCheck {
	sum, err := chamberMetrics()
	if err != nil {
		return []MetricCheck{{Metric: "gather: " + err.Error()}}
	}
	state := func(states ...string) func(map[string]string) bool {
		return func(l map[string]string) bool {
			for _, s := range states {
				if l["state"] == s {
					return true
				}
			}
			return false
		}
	}
	pr := r.progress()
	exact := func(metric string, chamber, measured float64) MetricCheck {
		return MetricCheck{Metric: metric, Chamber: chamber, Measured: measured, Agrees: chamber == measured}
	}
	checks := []MetricCheck{
		exact("chamber_gpus (all states) = GPUs of the nodes", sum("chamber_gpus", nil), float64(sc.GPUs())),
		exact(`chamber_gpus{state=~"busy|idle"} = GPUs held by running pods`, sum("chamber_gpus", state("busy", "idle")), float64(pr.allocated)),
		exact("chamber_team_pending_workloads = jobs waiting", sum("chamber_team_pending_workloads", nil), float64(pr.waiting)),
	}
	now := time.Now()
	r.mu.Lock()
	held := map[string]float64{}
	runs := map[string]int{}
	for _, run := range r.runs {
		stop := run.End
		if stop.IsZero() {
			stop = now
		}
		held[run.Job.Job.Team] += float64(len(run.GPUs)) * stop.Sub(run.Start).Seconds()
		runs[run.Job.Job.Team] += len(run.GPUs)
	}
	r.mu.Unlock()
	for _, team := range sortedKeys(held) {
		c := sum("chamber_team_gpu_seconds_total", func(l map[string]string) bool { return l["team"] == team })
		tol := math.Max(0.1*held[team], 2*float64(runs[team]))
		checks = append(checks, MetricCheck{
			Metric:  fmt.Sprintf("chamber_team_gpu_seconds_total{team=%q} (clock seconds)", team),
			Chamber: c, Measured: held[team], Agrees: math.Abs(c-held[team]) <= tol,
		})
	}
	return checks
}

// chamberMetrics gathers Chamber's metrics (controller-runtime's registry) and returns
// a function summing one metric's gauges or counters over the series match keeps
// (every series when match is nil).
func chamberMetrics() (func(name string, match func(labels map[string]string) bool) float64, error) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return nil, err
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	return func(name string, match func(map[string]string) bool) float64 {
		var v float64
		for _, m := range byName[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if match != nil && !match(labels) {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				v += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				v += m.GetCounter().GetValue()
			}
		}
		return v
	}, nil
}

// resyncedTotal is chamber_volcano_jobs_resynced_total over its phases, 0 where it
// cannot be read.
func resyncedTotal() float64 {
	sum, err := chamberMetrics()
	if err != nil {
		return 0
	}
	return sum("chamber_volcano_jobs_resynced_total", nil)
}
