package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// teamCollector: each team's GPUs now: held, idle, quota, borrowed and lent.
type teamCollector struct {
	allocated, idle, quota, borrowed, lent *prometheus.Desc
}

func newTeamCollector() *teamCollector {
	labels := []string{"team", "model"}
	return &teamCollector{
		allocated: prometheus.NewDesc("chamber_team_gpus_allocated",
			"GPUs the team's pods hold, by model.", labels, nil),
		idle: prometheus.NewDesc("chamber_team_gpus_idle",
			"GPUs the team's pods hold that are idle, by model.", labels, nil),
		quota: prometheus.NewDesc("chamber_team_gpu_quota",
			"The team's nominal GPU quota (its ClusterQueue's, else its spec's), by model.", labels, nil),
		borrowed: prometheus.NewDesc("chamber_team_gpus_borrowed",
			"GPUs the team's admitted workloads use beyond its quota (Kueue's borrowed), by model.", labels, nil),
		lent: prometheus.NewDesc("chamber_team_gpus_lent",
			"The team's unused quota, within its lending limit, that other teams of its cohort borrow now (as the Team's status), by model.",
			labels, nil),
	}
}

func (c *teamCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.allocated
	ch <- c.idle
	ch <- c.quota
	ch <- c.borrowed
	ch <- c.lent
}

func (c *teamCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	for _, t := range s.Teams {
		for _, m := range t.Models {
			ch <- gauge(c.allocated, float64(m.Allocated), t.Team, m.Model)
			ch <- gauge(c.idle, float64(m.Idle), t.Team, m.Model)
			if t.Team == "" {
				continue // pods of no team: no quota to speak of
			}
			ch <- gauge(c.quota, m.Quota, t.Team, m.Model)
			ch <- gauge(c.borrowed, m.Borrowed, t.Team, m.Model)
			ch <- gauge(c.lent, m.Lent, t.Team, m.Model)
		}
	}
}
