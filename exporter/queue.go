package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// queueCollector: queue depth (workloads and the GPUs they ask for) and queue wait
// per team and priority tier.
type queueCollector struct {
	pending, pendingGPUs, wait *prometheus.Desc
}

func newQueueCollector() *queueCollector {
	labels := []string{"team", "priority_tier"}
	return &queueCollector{
		pending: prometheus.NewDesc("chamber_team_pending_workloads",
			"Workloads waiting in the team's queues for quota (queue depth), by priority tier.", labels, nil),
		pendingGPUs: prometheus.NewDesc("chamber_team_pending_gpus",
			"GPUs the workloads waiting in the team's queues ask for (the demand not yet met), by priority tier.", labels, nil),
		wait: prometheus.NewDesc("chamber_workload_queue_wait_seconds",
			"Time workloads waited for quota: from creation, or their last requeue, to Kueue's QuotaReserved.", labels, nil),
	}
}

func (c *queueCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.pendingGPUs
	ch <- c.wait
}

func (c *queueCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	for _, p := range s.Pending {
		ch <- gauge(c.pending, float64(p.Count), p.Team, p.Tier)
		ch <- gauge(c.pendingGPUs, float64(p.GPUs), p.Team, p.Tier)
	}
	for _, w := range s.QueueWaits {
		ch <- prometheus.MustNewConstHistogram(c.wait, w.Count, w.Sum, w.Buckets, w.Team, w.Tier)
	}
}
