package healthcheck

import (
	"cmp"
	"math"
	"time"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
)

// UtilizationWindow keeps each GPU's utilization readings over a window, one per poll,
// for the mean published in the GPUNode: its SM activity where the poll has it, else
// its utilization. NVML's own utilization is a sample over the
// last fraction of a second; a window of polls is what says "this GPU is idle".
type UtilizationWindow struct {
	span    time.Duration
	samples map[int][]utilizationSample
	seen    map[int]time.Time // the last poll taken per GPU, so a poll is counted once
}

type utilizationSample struct {
	at       time.Time
	gpu, mem uint32
	signal   chamberv1alpha1.UtilizationSignal
}

// activity is what a poll says of how busy the GPU was, and by which signal: SM
// activity where the poll has it, else the GPU's utilization; ok is false when the
// poll has neither.
func activity(s *GPUSample) (pct uint32, signal chamberv1alpha1.UtilizationSignal, ok bool) {
	if s.SMActivityRead && ReadingOK(s, FieldSMActivity) {
		return uint32(min(max(s.SMActivityPercent, 0)+0.5, 100)), chamberv1alpha1.SignalSMActivity, true
	}
	if ReadingOK(s, FieldUtilization) {
		return s.GPUUtilPercent, cmp.Or(s.UtilizationSignal, chamberv1alpha1.SignalGPUUtilization), true
	}
	return 0, "", false
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
		pct, signal, ok := activity(&g.Sample)
		if !ok {
			continue
		}
		var mem uint32
		if ReadingOK(&g.Sample, FieldUtilization) {
			mem = g.Sample.MemoryUtilPercent
		}
		w.samples[g.Index] = append(w.samples[g.Index], utilizationSample{at: g.LastPoll, gpu: pct, mem: mem, signal: signal})
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

// Signal is what GPU i's latest reading in the window measures; empty when there is
// none.
func (w *UtilizationWindow) Signal(i int) chamberv1alpha1.UtilizationSignal {
	if w == nil || len(w.samples[i]) == 0 {
		return ""
	}
	return w.samples[i][len(w.samples[i])-1].signal
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
