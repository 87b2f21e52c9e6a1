package controllertest

import (
	"github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// MetricValue is the value of the first series of metric name in controller-runtime's
// registry (where Chamber's controllers register theirs) whose labels match labels,
// given as name, value pairs; 0 when there is none. A histogram's value is its count
// of observations.
func MetricValue(g gomega.Gomega, name string, labels ...string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue()
			}
			if m.Histogram != nil {
				return float64(m.GetHistogram().GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
