package inventory

import "github.com/prometheus/client_golang/prometheus"

// newWorkerUp is chamber_worker_cluster_up, one series per worker cluster a pool
// lists; the workers collector sets it at each scrape and sends it with the workers'
// fleet series.
func newWorkerUp() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chamber_worker_cluster_up",
		Help: "1 while Chamber reads the worker cluster's fleet (its kubeconfig Secret works and its watches are synced), else 0.",
	}, []string{"cluster"})
}
