// Package exporter holds Chamber's Prometheus collectors over the fleet model: GPU
// states, utilization, team allocation and quota, idle time and cost, queue depth and
// wait, the cluster efficiency score and isolated nodes.
//
// As in node_exporter, each concern is a small collector, and one Exporter, the only
// thing registered, runs them all. It takes one fleet snapshot per scrape and hands
// it to each: a scrape reads memory only, never the API server, NVML or the kubelet.
// Label sets are bounded by pools, models, teams and tiers; per-GPU series are behind
// Options.PerGPU, since the node agent already exports them.
package exporter

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"chamber.dev/chamber/fleet"
)

// Source is the fleet as the exporter reads it; *fleet.Model is one.
type Source interface {
	// Synced is false until the model holds what its informers had at start; until
	// then the exporter shows nothing rather than a partial fleet.
	Synced() bool
	// Snapshot is the fleet with every GPU; Summary without the list of GPUs, all
	// the default metrics need.
	Snapshot() *fleet.Snapshot
	Summary() *fleet.Snapshot
}

// Options configure the exporter.
type Options struct {
	// PerGPU adds chamber_gpu_state, one series per GPU with its node, pod and team.
	PerGPU bool
	// Clock times each scrape (chamber_scrape_duration_seconds); the real clock when
	// nil.
	Clock clock.PassiveClock
}

// collector is one concern's metrics, made from a snapshot.
type collector interface {
	describe(ch chan<- *prometheus.Desc)
	update(s *fleet.Snapshot, ch chan<- prometheus.Metric)
}

// Exporter is the prometheus.Collector to register: it runs every collector on one
// snapshot per scrape.
type Exporter struct {
	source     Source
	collectors []collector
	// snapshot is the source's Summary, or its Snapshot where a collector reads
	// every GPU.
	snapshot func() *fleet.Snapshot
	clock    clock.PassiveClock
}

// scrapeDuration is node_exporter's node_scrape_collector_duration_seconds for the
// exporter as a whole: what one scrape cost Chamber, the wait for the fleet model's
// lock included, apart from the HTTP round trip and the other collectors of the
// registry.
var scrapeDuration = prometheus.NewDesc("chamber_scrape_duration_seconds",
	"Time this scrape took to copy the fleet model and make Chamber's fleet series.", nil, nil)

var _ prometheus.Collector = (*Exporter)(nil)

// New returns an exporter of source's fleet.
func New(source Source, opts Options) *Exporter {
	e := &Exporter{source: source, snapshot: source.Summary, clock: opts.Clock, collectors: []collector{
		newGPUCollector(),
		newEfficiencyCollector(),
		newNodeCollector(),
		newTeamCollector(),
		newCostCollector(),
		newGivenCollector(),
		newQueueCollector(),
	}}
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	if opts.PerGPU {
		e.collectors, e.snapshot = append(e.collectors, newPerGPUCollector()), source.Snapshot
	}
	return e
}

// Describe sends every metric's description.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range e.collectors {
		c.describe(ch)
	}
	ch <- scrapeDuration
}

// Collect sends the metrics of one snapshot.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	if !e.source.Synced() {
		return
	}
	began := e.clock.Now()
	s := e.snapshot()
	for _, c := range e.collectors {
		c.update(s, ch)
	}
	ch <- gauge(scrapeDuration, e.clock.Since(began).Seconds())
}

func gauge(desc *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
}

func counter(desc *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labels...)
}
