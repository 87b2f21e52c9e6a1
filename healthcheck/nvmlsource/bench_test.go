package nvmlsource

import (
	"testing"

	clocktesting "k8s.io/utils/clock/testing"

	"chamber.dev/chamber/healthcheck"
)

// BenchmarkPoll is one poll of the 8 GPUs of the dgxh100 fake: every NVML reading, the
// rules and the tracker update. The fake's moq mocks record every call, so part of the
// allocations are theirs, not the reader's.
func BenchmarkPoll(b *testing.B) {
	gpus, err := NewFake("dgxh100")
	if err != nil {
		b.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(t0)
	cfg := healthcheck.DefaultConfig()
	r, tr := NewReader(gpus), healthcheck.NewTracker(cfg, clk)
	b.ReportAllocs()
	for b.Loop() {
		clk.Step(cfg.PollInterval)
		s, err := r.Read()
		if err != nil {
			b.Fatal(err)
		}
		tr.Observe(s)
	}
}

// BenchmarkScrape is what a metrics scrape costs: a copy of the stored statuses, no NVML.
func BenchmarkScrape(b *testing.B) {
	gpus, err := NewFake("dgxh100")
	if err != nil {
		b.Fatal(err)
	}
	tr := healthcheck.NewTracker(healthcheck.DefaultConfig(), clocktesting.NewFakeClock(t0))
	s, err := NewReader(gpus).Read()
	if err != nil {
		b.Fatal(err)
	}
	tr.Observe(s)
	b.ReportAllocs()
	for b.Loop() {
		if len(tr.GPUs()) != 8 {
			b.Fatal("want 8 GPUs")
		}
	}
}
