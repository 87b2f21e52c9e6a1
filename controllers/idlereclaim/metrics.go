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
	idleAtReclaimGPUHours = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaim_idle_gpu_hours_at_reclaim_total",
		Help: "GPU-hours reclaimed workloads had held idle before they were reclaimed: each one's GPUs times how long they had been idle when its eviction was asked for. Waste already spent, not a saving: what reclaim gave to others is chamber_idle_reclaim_given_gpu_seconds_total.",
	}, []string{"team"})
	idleAtReclaimCost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaim_idle_cost_at_reclaim_total",
		Help: "What those idle GPU-hours cost at the team's pool's price for the GPU model (spec.prices; none without a price), in the pool's currency.",
	}, []string{"team"})
	// The former names of the two counters above: kept one release, same values.
	deprecatedReclaimedGPUHours = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaimed_gpu_hours_total",
		Help: "Deprecated: chamber_idle_reclaim_idle_gpu_hours_at_reclaim_total, under its former name; removed in the next release.",
	}, []string{"team"})
	deprecatedReclaimedCost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_idle_reclaimed_cost_total",
		Help: "Deprecated: chamber_idle_reclaim_idle_cost_at_reclaim_total, under its former name; removed in the next release.",
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

// countIdleAtReclaim adds a reclaim's idle GPU-hours, and their cost, to the team's
// counters under their names and their former ones.
func countIdleAtReclaim(team string, gpuHours, cost float64) {
	idleAtReclaimGPUHours.WithLabelValues(team).Add(gpuHours)
	deprecatedReclaimedGPUHours.WithLabelValues(team).Add(gpuHours)
	if cost > 0 {
		idleAtReclaimCost.WithLabelValues(team).Add(cost)
		deprecatedReclaimedCost.WithLabelValues(team).Add(cost)
	}
}

func init() {
	metrics.Registry.MustRegister(warnings, evictions, idleAtReclaimGPUHours, idleAtReclaimCost, deprecatedReclaimedGPUHours, deprecatedReclaimedCost, pauses, resumes)
}
