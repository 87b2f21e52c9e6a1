package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// givenCollector: what idle reclaim gave to other work (fleet.Handed): the
// GPU-seconds other teams' workloads held on the GPUs reclaimed workloads left while
// those stayed away, their cost, and the workloads that took them.
type givenCollector struct {
	seconds, cost, workloads *prometheus.Desc
}

func newGivenCollector() *givenCollector {
	labels := []string{"team", "from_team", "model"}
	return &givenCollector{
		seconds: prometheus.NewDesc("chamber_idle_reclaim_given_gpu_seconds_total",
			"GPU-seconds the team's workloads held on GPUs that idle reclaim took from a workload of from_team, while that workload stayed away (paused or requeued): GPU time idle reclaim gave to waiting work.", labels, nil),
		cost: prometheus.NewDesc("chamber_idle_reclaim_given_cost_total",
			"What those GPU-seconds cost at the node's price, in the pool's currency.", labels, nil),
		workloads: prometheus.NewDesc("chamber_idle_reclaim_given_workloads_total",
			"Workloads of the team that took GPUs idle reclaim freed from a workload of from_team, each counted once per reclaim.", labels, nil),
	}
}

func (c *givenCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.seconds
	ch <- c.cost
	ch <- c.workloads
}

func (c *givenCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	for _, h := range s.Handed {
		ch <- counter(c.seconds, h.GPUSeconds, h.Team, h.FromTeam, h.Model)
		ch <- counter(c.cost, h.Cost, h.Team, h.FromTeam, h.Model)
		ch <- counter(c.workloads, float64(h.Workloads), h.Team, h.FromTeam, h.Model)
	}
}
