package idlereclaim

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	warnings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaim_warnings_total",
		Help: "Workloads warned (an IdleGPUs Event) that their idle GPUs will be reclaimed because others wait for them.",
	}, []string{"team"})
	evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaim_evictions_total",
		Help: "Workloads whose eviction idle reclaim asked for, to be requeued.",
	}, []string{"team"})
	reclaimedGPUHours = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaimed_gpu_hours_total",
		Help: "GPU-hours reclaimed workloads had held idle: each one's GPUs times how long they had been idle when its eviction was asked for.",
	}, []string{"team"})
	reclaimedCost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaimed_cost_total",
		Help: "What those idle GPU-hours cost at the team's pool's price for the GPU model (spec.prices; none without a price), in the pool's currency.",
	}, []string{"team"})
	pauses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaim_pauses_total",
		Help: "Reclaimed workloads paused (deactivated, their Jobs kept) while others wait for GPUs they could use, by namespace.",
	}, []string{"namespace"})
	resumes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaim_resumes_total",
		Help: "Paused workloads resumed (activated and requeued) because nobody waited any more or their pause limit passed, by namespace.",
	}, []string{"namespace"})
)

func init() {
	metrics.Registry.MustRegister(warnings, evictions, reclaimedGPUHours, reclaimedCost, pauses, resumes)
}
