package exporter_test

import (
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	clocktesting "k8s.io/utils/clock/testing"

	"chamber.dev/chamber/exporter"
	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
)

// BenchmarkScrape is one scrape of the fleet (10,000 GPUs on 1,250 nodes,
// 20,000 pods): snapshot, every collector, and the text exposition, as /metrics
// serves it. The goal is 50 ms or less.
func BenchmarkScrape(b *testing.B) {
	for name, opts := range map[string]exporter.Options{"default": {}, "per-GPU": {PerGPU: true}} {
		b.Run(name, func(b *testing.B) {
			clock := clocktesting.NewFakeClock(start)
			m := fleet.New(fleet.Options{Clock: clock})
			ft.Synthetic(1250, 20000, start).Feed(m)
			m.SetSynced(true)
			reg := prometheus.NewRegistry()
			reg.MustRegister(exporter.New(m, opts))
			series := 0
			for b.Loop() {
				clock.Step(15 * time.Second)
				families, err := reg.Gather()
				if err != nil {
					b.Fatal(err)
				}
				enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
				series = 0
				for _, mf := range families {
					series += len(mf.GetMetric())
					if err := enc.Encode(mf); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(series), "series")
		})
	}
}
