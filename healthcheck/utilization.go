package healthcheck

import (
	"math"
	"time"
)

// UtilizationWindow keeps each GPU's utilization readings over a window, one per poll,
// for the mean published in the GPUNode. NVML's own utilization is a sample over the
// last fraction of a second; a window of polls is what says "this GPU is idle".
type UtilizationWindow struct {
	span    time.Duration
	samples map[int][]utilizationSample
	seen    map[int]time.Time // the last poll taken per GPU, so a poll is counted once
}

type utilizationSample struct {
	at       time.Time
	gpu, mem uint32
}

func NewUtilizationWindow(span time.Duration) *UtilizationWindow {
	return &UtilizationWindow{span: span, samples: map[int][]utilizationSample{}, seen: map[int]time.Time{}}
}

// Observe takes the GPUs' latest polls that it has not seen yet. Polls whose utilization
// reading failed (or a lost GPU) are left out rather than counted as idle.
func (w *UtilizationWindow) Observe(gpus []GPUStatus, now time.Time) {
	for _, g := range gpus {
		if g.LastPoll.IsZero() || !g.LastPoll.After(w.seen[g.Index]) {
			continue
		}
		w.seen[g.Index] = g.LastPoll
		if !ReadingOK(&g.Sample, FieldUtilization) {
			continue
		}
		w.samples[g.Index] = append(w.samples[g.Index], utilizationSample{at: g.LastPoll, gpu: g.Sample.GPUUtilPercent, mem: g.Sample.MemoryUtilPercent})
	}
	w.trim(now)
}

// trim drops readings older than the window.
func (w *UtilizationWindow) trim(now time.Time) {
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

// Mean returns GPU i's mean GPU and memory utilization over the window, in percent;
// ok is false when there is no reading in it.
func (w *UtilizationWindow) Mean(i int) (gpu, mem int32, ok bool) {
	if w == nil {
		return 0, 0, false
	}
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

// ReadingOK reports whether a sample holds a usable value for f.
func ReadingOK(s *GPUSample, f Field) bool {
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
