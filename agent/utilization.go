package agent

import (
	"math"
	"time"

	"chamber.dev/chamber/healthcheck"
)

// utilizationWindow keeps each GPU's utilization readings over a window, one per poll,
// for the mean published in the GPUNode. NVML's own utilization is a sample over the
// last fraction of a second; a window of polls is what says "this GPU is idle".
type utilizationWindow struct {
	span    time.Duration
	samples map[int][]utilizationSample
	seen    map[int]time.Time // the last poll taken per GPU, so a poll is counted once
}

type utilizationSample struct {
	at       time.Time
	gpu, mem uint32
}

func newUtilizationWindow(span time.Duration) *utilizationWindow {
	return &utilizationWindow{span: span, samples: map[int][]utilizationSample{}, seen: map[int]time.Time{}}
}

// observe takes the GPUs' latest polls that it has not seen yet. Polls whose utilization
// reading failed (or a lost GPU) are left out rather than counted as idle.
func (w *utilizationWindow) observe(gpus []healthcheck.GPUStatus, now time.Time) {
	for _, g := range gpus {
		if g.LastPoll.IsZero() || !g.LastPoll.After(w.seen[g.Index]) {
			continue
		}
		w.seen[g.Index] = g.LastPoll
		if !readingOK(&g.Sample, healthcheck.FieldUtilization) {
			continue
		}
		w.samples[g.Index] = append(w.samples[g.Index], utilizationSample{at: g.LastPoll, gpu: g.Sample.GPUUtilPercent, mem: g.Sample.MemoryUtilPercent})
	}
	w.trim(now)
}

// trim drops readings older than the window.
func (w *utilizationWindow) trim(now time.Time) {
	cutoff := now.Add(-w.span)
	for i, s := range w.samples {
		n := 0
		for n < len(s) && !s[n].at.After(cutoff) {
			n++
		}
		if n > 0 {
			// Copy down so the backing array does not grow for ever.
			w.samples[i] = append(s[:0], s[n:]...)
		}
	}
}

// mean returns GPU i's mean GPU and memory utilization over the window, in percent;
// ok is false when there is no reading in it.
func (w *utilizationWindow) mean(i int) (gpu, mem int32, ok bool) {
	s := w.samples[i]
	if len(s) == 0 {
		return 0, 0, false
	}
	var sumGPU, sumMem uint64
	for _, x := range s {
		sumGPU += uint64(x.gpu)
		sumMem += uint64(x.mem)
	}
	n := float64(len(s))
	return int32(math.Round(float64(sumGPU) / n)), int32(math.Round(float64(sumMem) / n)), true
}

// readingOK reports whether a sample holds a usable value for f.
func readingOK(s *healthcheck.GPUSample, f healthcheck.Field) bool {
	if s.Lost || s.Unsupported.Has(f) {
		return false
	}
	for _, e := range s.Errors {
		if e.Field == f {
			return false
		}
	}
	return true
}
