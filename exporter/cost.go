package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// costCollector: what each team's pods ran up: GPU-seconds, idle GPU-seconds,
// utilization-weighted GPU-seconds, and their cost at the pool's prices.
type costCollector struct {
	seconds, idleSeconds, usedSeconds, measuredSeconds, cost, idleCost *prometheus.Desc
}

func newCostCollector() *costCollector {
	labels := []string{"team", "model"}
	return &costCollector{
		seconds: prometheus.NewDesc("chamber_team_gpu_seconds_total",
			"GPU-seconds the team's pods held GPUs, by model.", labels, nil),
		idleSeconds: prometheus.NewDesc("chamber_team_idle_gpu_seconds_total",
			"GPU-seconds the team's pods held GPUs that were idle, by model.", labels, nil),
		usedSeconds: prometheus.NewDesc("chamber_team_used_gpu_seconds_total",
			"GPU-seconds the team's pods held, each weighted by the GPU's utilization (0.4 for a second at 40%), counted while the node agent reports utilization, by model.", labels, nil),
		measuredSeconds: prometheus.NewDesc("chamber_team_measured_gpu_seconds_total",
			"The part of chamber_team_gpu_seconds_total with a utilization report: the mean utilization is chamber_team_used_gpu_seconds_total over it, by model.", labels, nil),
		cost: prometheus.NewDesc("chamber_team_cost_total",
			"Cost of the GPUs the team's pods held, at the pool's per-GPU-hour price of the model, in the pool's currency.", labels, nil),
		idleCost: prometheus.NewDesc("chamber_team_idle_cost_total",
			"Cost of the idle part of chamber_team_cost_total, in the pool's currency.", labels, nil),
	}
}

func (c *costCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.seconds
	ch <- c.idleSeconds
	ch <- c.usedSeconds
	ch <- c.measuredSeconds
	ch <- c.cost
	ch <- c.idleCost
}

func (c *costCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	for _, u := range s.Usage {
		ch <- counter(c.seconds, u.GPUSeconds, u.Team, u.Model)
		ch <- counter(c.idleSeconds, u.IdleGPUSeconds, u.Team, u.Model)
		ch <- counter(c.usedSeconds, u.UsedGPUSeconds, u.Team, u.Model)
		ch <- counter(c.measuredSeconds, u.MeasuredGPUSeconds, u.Team, u.Model)
		ch <- counter(c.cost, u.Cost, u.Team, u.Model)
		ch <- counter(c.idleCost, u.IdleCost, u.Team, u.Model)
	}
}
