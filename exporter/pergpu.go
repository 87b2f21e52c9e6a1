package exporter

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// perGPUCollector: one series per GPU, behind Options.PerGPU. Its labels are the few
// that say which GPU and whose: each one costs the registry time on every scrape
// (sorting and checking 10,000 series), and the node's pool and model are in the
// aggregate metrics.
type perGPUCollector struct{ state *prometheus.Desc }

func newPerGPUCollector() *perGPUCollector {
	return &perGPUCollector{state: prometheus.NewDesc("chamber_gpu_state",
		"1 for each GPU, labelled with its state and what holds it (per-GPU, behind --per-gpu-metrics).",
		[]string{"node", "gpu", "state", "namespace", "pod", "team"}, nil)}
}

func (c *perGPUCollector) describe(ch chan<- *prometheus.Desc) { ch <- c.state }

func (c *perGPUCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	for _, g := range s.GPUs {
		ch <- gauge(c.state, 1, g.Node, strconv.Itoa(g.Index), g.State.String(), g.PodNamespace, g.PodName, g.Team)
	}
}
