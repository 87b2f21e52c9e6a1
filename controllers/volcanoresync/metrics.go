package volcanoresync

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var resynced = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "chamber_volcano_jobs_resynced_total",
	Help: "Volcano Jobs vc-controller-manager left stalled (Pending with no PodGroup, Restarting with no pod) that Chamber resumed, by the phase they were in.",
}, []string{"phase"})

func init() { metrics.Registry.MustRegister(resynced) }
