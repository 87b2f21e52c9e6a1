package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"chamber.dev/chamber/fleet"
)

// gpuCollector: GPUs by state, model and pool; the seconds they spent in each state;
// their utilization.
type gpuCollector struct {
	gpus, seconds, utilization *prometheus.Desc
}

func newGPUCollector() *gpuCollector {
	labels := []string{"pool", "model", "state"}
	return &gpuCollector{
		gpus: prometheus.NewDesc("chamber_gpus",
			"GPUs by state (free, busy, idle, unhealthy, isolated), model and pool.", labels, nil),
		seconds: prometheus.NewDesc("chamber_gpu_seconds_total",
			"GPU-seconds spent in each state, by model and pool.", labels, nil),
		utilization: prometheus.NewDesc("chamber_gpu_utilization_ratio",
			"Mean GPU utilization (0 to 1) over the node agents' window, of the GPUs that report one, by model and pool.",
			[]string{"pool", "model"}, nil),
	}
}

func (c *gpuCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.gpus
	ch <- c.seconds
	ch <- c.utilization
}

func (c *gpuCollector) update(s *fleet.Snapshot, ch chan<- prometheus.Metric) {
	for _, pm := range s.PoolModels {
		for _, st := range fleet.States {
			ch <- gauge(c.gpus, float64(pm.GPUs[st]), pm.Pool, pm.Model, st.String())
			ch <- counter(c.seconds, pm.Seconds[st], pm.Pool, pm.Model, st.String())
		}
		if u, ok := pm.Utilization(); ok {
			ch <- gauge(c.utilization, u, pm.Pool, pm.Model)
		}
	}
}
