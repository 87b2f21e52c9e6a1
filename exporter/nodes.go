package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// nodeCollector: isolated nodes.
type nodeCollector struct{ isolated *prometheus.Desc }

func newNodeCollector() *nodeCollector {
	return &nodeCollector{isolated: prometheus.NewDesc("chamber_isolated_nodes",
		"GPU nodes taken out of service, by pool and reason: tainted (chamber.dev/gpu-unhealthy) or cordoned.",
		[]string{"pool", "reason"}, nil)}
}

func (c *nodeCollector) describe(ch chan<- *prometheus.Desc) { ch <- c.isolated }

func (c *nodeCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	type poolReason struct{ pool, reason string }
	counts := map[poolReason]int{}
	var pools []string
	for _, n := range s.Nodes {
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
