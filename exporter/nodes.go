package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// nodeCollector: isolated nodes, and each node's price of a GPU-hour.
type nodeCollector struct{ isolated, price *prometheus.Desc }

func newNodeCollector() *nodeCollector {
	return &nodeCollector{
		isolated: prometheus.NewDesc("chamber_isolated_nodes",
			"GPU nodes taken out of service, by pool and reason: tainted (chamber.dev/gpu-unhealthy) or cordoned.",
			[]string{"pool", "reason"}, nil),
		price: prometheus.NewDesc("chamber_node_gpu_price_per_hour",
			"What an hour of one of the node's GPUs costs, and where that price comes from: table:<provider>/<instance-type>[/<capacity>], override:..., or pool:<pool> (docs/concepts/prices.md). Nodes without a price have no series.",
			[]string{"node", "pool", "source"}, nil),
	}
}

func (c *nodeCollector) describe(ch chan<- *prometheus.Desc) { ch <- c.isolated; ch <- c.price }

func (c *nodeCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	type poolReason struct{ pool, reason string }
	counts := map[poolReason]int{}
	var pools []string
	for _, n := range s.Nodes {
		if n.PriceSource != "" {
			ch <- gauge(c.price, n.PricePerGPUHour, n.Name, n.Pool, n.PriceSource)
		}
		if _, seen := counts[poolReason{n.Pool, "tainted"}]; !seen {
			// Zeros too, so that an alert on the series sees it go back to 0.
			counts[poolReason{n.Pool, "tainted"}] = 0
			counts[poolReason{n.Pool, "cordoned"}] = 0
			pools = append(pools, n.Pool)
		}
		if n.IsolationReason != "" {
			counts[poolReason{n.Pool, n.IsolationReason}]++
		}
	}
	for _, p := range pools {
		for _, r := range []string{"cordoned", "tainted"} {
			ch <- gauge(c.isolated, float64(counts[poolReason{p, r}]), p, r)
		}
	}
}
