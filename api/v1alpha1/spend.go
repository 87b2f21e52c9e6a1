package v1alpha1

// QuotaUsed is the share of its nominal quota of the flavor the team used over the
// period: (GPUSeconds - BorrowedGPUSeconds) / QuotaGPUSeconds. ok is false without
// quota time (no quota of the flavor, or none accounted yet).
func (f FlavorSpend) QuotaUsed() (share float64, ok bool) {
	if f.QuotaGPUSeconds <= 0 {
		return 0, false
	}
	return float64(f.GPUSeconds-f.BorrowedGPUSeconds) / float64(f.QuotaGPUSeconds), true
}

// QuotaUsed is the share of its nominal quota the team used over the period, every
// flavor together: the flavors' GPU-seconds within quota over their quota
// GPU-seconds. ok is false without quota time.
func (s *TeamSpend) QuotaUsed() (share float64, ok bool) {
	if s == nil {
		return 0, false
	}
	var within, quota int64
	for _, f := range s.Flavors {
		within += f.GPUSeconds - f.BorrowedGPUSeconds
		quota += f.QuotaGPUSeconds
	}
	if quota <= 0 {
		return 0, false
	}
	return float64(within) / float64(quota), true
}

// Efficiency is the share of the GPU time the team held over the period that was not
// idle: (GPUSeconds - IdleGPUSeconds) / GPUSeconds, at most 1 and at least 0. ok is
// false until some of that time has a utilization report (MeasuredGPUSeconds): a GPU
// without one is never idle, so the share would say nothing.
func (s *TeamSpend) Efficiency() (share float64, ok bool) {
	if s == nil || s.IdleGPUSeconds == nil || s.MeasuredGPUSeconds == nil || *s.MeasuredGPUSeconds <= 0 || s.GPUSeconds <= 0 {
		return 0, false
	}
	return min(max(float64(s.GPUSeconds-*s.IdleGPUSeconds)/float64(s.GPUSeconds), 0), 1), true
}

// MeanUtilization is the utilization of the team's GPUs over the period, weighted by
// time, from 0 to 1: UsedGPUSeconds / MeasuredGPUSeconds. ok is false without
// measured time.
func (s *TeamSpend) MeanUtilization() (share float64, ok bool) {
	if s == nil || s.UsedGPUSeconds == nil || s.MeasuredGPUSeconds == nil || *s.MeasuredGPUSeconds <= 0 {
		return 0, false
	}
	return float64(*s.UsedGPUSeconds) / float64(*s.MeasuredGPUSeconds), true
}
