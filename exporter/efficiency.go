package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// efficiencyCollector: the cluster efficiency score,
//
//	chamber_fleet_efficiency_ratio = busy GPUs / (free + busy + idle GPUs)
//
// that is, useful GPUs over healthy GPUs. Unhealthy and isolated GPUs can do no work
// and do not count against it; a held GPU counts as useful only while its utilization
// over the idle window is at or above the threshold. Over a period, the same score in
// GPU-seconds is
//
//	sum(rate(chamber_gpu_seconds_total{state="busy"}[1d]))
//	  / sum(rate(chamber_gpu_seconds_total{state=~"free|busy|idle"}[1d]))
type efficiencyCollector struct{ score *prometheus.Desc }

func newEfficiencyCollector() *efficiencyCollector {
	return &efficiencyCollector{score: prometheus.NewDesc("chamber_fleet_efficiency_ratio",
		"Cluster efficiency score: busy GPUs over healthy (free, busy and idle) GPUs, 0 to 1.", nil, nil)}
}

func (c *efficiencyCollector) describe(ch chan<- *prometheus.Desc) { ch <- c.score }

func (c *efficiencyCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	if score, ok := s.Efficiency(); ok {
		ch <- gauge(c.score, score)
	}
}
