package controllers

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// The series controller-runtime keeps for every controller (its internal metrics
// package), which StuckWorkers reads.
const (
	metricActiveWorkers  = "controller_runtime_active_workers"
	metricReconcileTotal = "controller_runtime_reconcile_total"
)

// DefaultStuckAfter is how long a controller may have busy workers and no finished
// reconcile before StuckWorkers reports it: Chamber's reconciles take milliseconds to
// seconds, even at fleet scale (make bench-scale reports their latency), so 5 minutes
// leaves a slow API server room before a needless restart, and still restarts a stuck
// controller within minutes.
const DefaultStuckAfter = 5 * time.Minute

// StuckWorkers is chamber-controller's liveness (its healthz check): it fails when a
// controller's workers are stuck, some of them busy (controller_runtime_active_workers
// above 0) while none has finished a reconcile (controller_runtime_reconcile_total
// unchanged) for After. A deadlock or a call that never returns then restarts the
// process, as the kubelet does on a failed liveness probe, instead of leaving a
// leader that holds its Lease and does nothing. It reads the series
// controller-runtime keeps in gatherer (its metrics.Registry), so it needs no hook in
// the controllers.
type StuckWorkers struct {
	gatherer prometheus.Gatherer
	after    time.Duration
	clock    clock.PassiveClock

	mu   sync.Mutex
	seen map[string]progress
}

// progress is a controller's finished reconciles when last read, and since when
// that count has not changed while its workers were busy.
type progress struct {
	total float64
	since time.Time
}

// NewStuckWorkers reads gatherer; a controller is stuck after after.
func NewStuckWorkers(gatherer prometheus.Gatherer, after time.Duration, clk clock.PassiveClock) *StuckWorkers {
	return &StuckWorkers{gatherer: gatherer, after: after, clock: clk, seen: map[string]progress{}}
}

// Check is the healthz check.
func (s *StuckWorkers) Check(*http.Request) error {
	families, err := s.gatherer.Gather()
	if err != nil {
		// A metric that fails to gather says nothing about the workers.
		return nil
	}
	active, total := map[string]float64{}, map[string]float64{}
	for _, f := range families {
		var into map[string]float64
		switch f.GetName() {
		case metricActiveWorkers:
			into = active
		case metricReconcileTotal:
			into = total
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			name := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" {
					name = l.GetValue()
				}
			}
			into[name] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var stuck []string
	for name, busy := range active {
		last, ok := s.seen[name]
		if !ok || busy == 0 || total[name] != last.total {
			s.seen[name] = progress{total: total[name], since: now}
			continue
		}
		if idle := now.Sub(last.since); idle >= s.after {
			stuck = append(stuck, fmt.Sprintf("%s (%g workers busy, no reconcile finished for %s)", name, busy, idle.Round(time.Second)))
		}
	}
	if len(stuck) > 0 {
		slices.Sort(stuck)
		return fmt.Errorf("controllers stuck: %s", strings.Join(stuck, "; "))
	}
	return nil
}
