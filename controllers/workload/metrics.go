package workload

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

type metrics struct {
	verdicts  *prometheus.CounterVec
	evictions *prometheus.CounterVec
	// noticesRanOut are the pods stopped with the short grace after their notice.
	noticesRanOut *prometheus.CounterVec
	// verdictSeconds is how long a verdict takes to decide from the cache, without
	// the write that records it.
	verdictSeconds prometheus.Histogram
}

// newMetrics registers the check's metrics once per process (tests and the demo may
// build several managers).
func newMetrics() (*metrics, error) {
	m := &metrics{
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chamber_admission_check_verdicts_total",
			Help: "Placement verdicts of Chamber's admission check: preapproved (Ready while waiting in the queue), ready (healthy GPUs), pending (waiting for them), retry (quota given back after the placement timeout, or GPUs failed between pre-approval and reservation).",
		}, []string{"verdict"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chamber_evictions_total",
			Help: "Workloads Chamber evicted (Kueue's Evicted condition, reason Preempted), by Chamber's reason (IdleReclaim, GPUFault, RoomForBigJob, HalfStoppedJob, ...); Kueue requeues them.",
		}, []string{"reason"}),
		noticesRanOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chamber_eviction_notices_ran_out_total",
			Help: "Pods marked chamber.dev/checkpoint-on-notice that let Chamber's eviction notice run out unanswered and were stopped with --after-notice-grace, by the eviction's reason: jobs that say they checkpoint on the notice and did not (hung, or could not save).",
		}, []string{"reason"}),
	}
	for _, c := range []**prometheus.CounterVec{&m.verdicts, &m.evictions, &m.noticesRanOut} {
		if err := ctrlmetrics.Registry.Register(*c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			*c = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	m.verdictSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "chamber_admission_check_verdict_duration_seconds",
		Help:    "Time Chamber's admission check takes to decide a verdict (at pre-approval or at reservation) from its cache of nodes, pods and GPUNodes, without the API write that records it.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	if err := ctrlmetrics.Registry.Register(m.verdictSeconds); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		m.verdictSeconds = are.ExistingCollector.(prometheus.Histogram)
	}
	return m, nil
}
