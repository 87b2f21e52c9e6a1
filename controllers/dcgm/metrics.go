package dcgm

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	up = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "chamber_dcgm_up",
		Help: "1 when the last query of dcgm-exporter's series in Prometheus answered, 0 when it failed (the nodes read through it then fall silent: nothing is isolated or reclaimed for them).",
	})
	queries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_dcgm_queries_total",
		Help: "Passes of the DCGM source by result (success, error).",
	}, []string{"result"})
	queryDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "chamber_dcgm_query_duration_seconds",
		Help:    "Time a pass of the DCGM source spent querying Prometheus.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	})
	nodesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chamber_dcgm_nodes",
		Help: "Nodes in dcgm-exporter's series by state: reporting (read through DCGM), stale (series missing or old, or Prometheus down), agent (a Chamber agent reports them).",
	}, []string{"state"})
	skippedSeries = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "chamber_dcgm_skipped_series",
		Help: "Series of the last query left out for want of the node label or the gpu label.",
	})
	unknownNodes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chamber_dcgm_unknown_nodes_total",
		Help: "Times a node named by dcgm-exporter's series had no Node object (check --dcgm-node-label).",
	})
	writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chamber_dcgm_api_writes_total",
		Help: "GPUNode and Node writes of the DCGM source by result.",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(up, queries, queryDuration, nodesGauge, skippedSeries, unknownNodes, writes)
}
