package isolation

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	breakerOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chamber_isolation_breaker_open",
		Help: "1 while the pool's isolation circuit breaker is open: Chamber isolates no more of its nodes until an operator resets it.",
	}, []string{"pool"})
	isolations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_isolations_total",
		Help: "Nodes Chamber isolated for GPU faults, by isolation level and the fault's reason (XID79, ECCDoubleBit, ...).",
	}, []string{"pool", "level", "reason"})
	withheld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_isolations_withheld_total",
		Help: "Nodes with failing GPUs left in service because the pool's circuit breaker was open.",
	}, []string{"pool"})
	dryRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_isolation_dry_runs_total",
		Help: "Nodes a dry-run policy would have isolated, by the fault's reason.",
	}, []string{"pool", "reason"})
	evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_isolation_evictions_total",
		Help: "Workloads Chamber asked Kueue to evict from isolated hardware.",
	}, []string{"pool"})
	volcanoRestarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_isolation_volcano_restarts_total",
		Help: "Volcano Jobs Chamber restarted whole (Volcano's RestartJob) off isolated hardware.",
	}, []string{"pool"})
	recoveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_isolation_recoveries_total",
		Help: "Isolated nodes returned to service: Recovered (a transient fault cleared) or Cleared (by an operator).",
	}, []string{"pool", "reason"})
	preflightFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_isolation_preflight_failures_total",
		Help: "Preflight Jobs that failed on a node an operator cleared: the node stayed isolated.",
	}, []string{"pool"})
	unknownNodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chamber_isolation_unknown_nodes",
		Help: "GPU nodes whose agent stopped reporting: their health is unknown and nothing is isolated for it.",
	}, []string{"pool"})
)

func init() {
	metrics.Registry.MustRegister(breakerOpen, isolations, withheld, dryRuns, evictions, volcanoRestarts, recoveries, unknownNodes, preflightFailures)
}
