package healthcheck

import (
	"fmt"
	"time"
)

// Bits of GPUSample.ThrottleReasons. They are NVML's clocks-event reason bits
// (nvmlClocksEventReason* in nvml.h), which nvmlsource's reader copies unchanged
// (nvmlsource.TestThrottleBits checks the values).
const (
	ThrottleGPUIdle           uint64 = 0x1  // nothing is running
	ThrottleSWPowerCap        uint64 = 0x4  // the power limit holds the clocks down
	ThrottleHWSlowdown        uint64 = 0x8  // hardware slowdown: temperature, power brake or power supply
	ThrottleSWThermalSlowdown uint64 = 0x20 // the driver slows the GPU for heat
	ThrottleHWThermalSlowdown uint64 = 0x40 // the hardware slows the GPU for heat
	ThrottleHWPowerBrake      uint64 = 0x80 // an external power brake (the system's power supply)
)

// Throttle bits that mean the GPU is being slowed to protect itself. SW power capping
// (ThrottleSWPowerCap) is left out: it is routine under full load.
const (
	thermalSlowdown = ThrottleSWThermalSlowdown | ThrottleHWThermalSlowdown
	powerSlowdown   = ThrottleHWSlowdown | ThrottleHWPowerBrake
)

// Classify applies the poll rules to one GPU's sample. prev is the GPU's previous sample
// (nil on the first poll), elapsed the time between them; rates need both. It returns the
// conditions present in this poll, before hysteresis (Tracker applies ThrottlePolls,
// ReadErrorPolls and RecoveryPolls).
func Classify(prev *GPUSample, cur GPUSample, elapsed time.Duration, cfg Config) []Finding {
	if cur.Lost {
		// Nothing else was read; every other rule would only echo this one.
		return []Finding{finding(ReasonGPULost, "")}
	}
	var out []Finding
	add := func(r Reason, msg string) { out = append(out, finding(r, msg)) }

	// A double-bit error since the driver loaded, or a new one in the lifetime counter
	// (the volatile counter may be unsupported on some boards).
	if cur.ECC.VolatileUncorrected > 0 {
		add(ReasonECCDoubleBit, fmt.Sprintf("%d uncorrectable ECC errors since the driver loaded", cur.ECC.VolatileUncorrected))
	} else if prev != nil && cur.ECC.AggregateUncorrected > prev.ECC.AggregateUncorrected {
		add(ReasonECCDoubleBit, fmt.Sprintf("lifetime uncorrectable ECC errors rose from %d to %d", prev.ECC.AggregateUncorrected, cur.ECC.AggregateUncorrected))
	}
	if prev != nil {
		if rate := perMinute(prev.ECC.VolatileCorrected, cur.ECC.VolatileCorrected, elapsed); rate >= cfg.CorrectableECCPerMinute {
			add(ReasonECCSingleBitRate, fmt.Sprintf("%.0f corrected ECC errors per minute", rate))
		}
		if rate := perMinute(prev.PCIeReplays, cur.PCIeReplays, elapsed); rate >= cfg.PCIeReplaysPerMinute {
			add(ReasonPCIeReplays, fmt.Sprintf("%.0f PCIe replays per minute", rate))
		}
		if rate := perMinute(prev.NVLink.Total(), cur.NVLink.Total(), elapsed); rate >= cfg.NVLinkErrorsPerMinute {
			add(ReasonNVLinkErrors, fmt.Sprintf("%.0f NVLink errors per minute", rate))
		}
	}
	if cur.RowRemap.Failure {
		add(ReasonRowRemapFailure, "")
	}
	if cur.RowRemap.Pending {
		add(ReasonRowRemapPending, "")
	}
	if cur.RetiredPages.Pending {
		add(ReasonRetiredPagesPending, "")
	}
	if n := cur.RetiredPages.SingleBit + cur.RetiredPages.DoubleBit; n >= cfg.RetiredPagesLimit {
		add(ReasonRetiredPagesLimit, fmt.Sprintf("%d retired pages, limit %d", n, cfg.RetiredPagesLimit))
	}
	if cur.ThrottleReasons&thermalSlowdown != 0 {
		add(ReasonThermalThrottle, fmt.Sprintf("thermal slowdown at %d°C", cur.TemperatureC))
	}
	if cur.ThrottleReasons&powerSlowdown != 0 {
		add(ReasonPowerThrottle, fmt.Sprintf("hardware slowdown at %d mW", cur.PowerMilliwatts))
	}
	for _, in := range cur.Incidents {
		r := ReasonDCGMHealthWarn
		if in.Fail {
			r = ReasonDCGMHealthFail
		}
		add(r, fmt.Sprintf("DCGM health watch %s: %s", in.System, in.Code))
	}
	if len(cur.Errors) > 0 {
		add(ReasonNVMLReadError, fmt.Sprintf("%d NVML readings failed, first %v", len(cur.Errors), cur.Errors[0]))
	}
	return out
}

// perMinute is a counter's rate between two polls. A counter that went down was reset
// (GPU reset, driver reload), so its whole current value is new.
func perMinute(prev, cur uint64, elapsed time.Duration) float64 {
	delta := cur
	if cur >= prev {
		delta = cur - prev
	}
	if delta == 0 {
		return 0
	}
	if elapsed <= 0 {
		// No time base (two polls at the same instant of a fake clock): count the delta
		// as a minute's worth rather than divide by zero.
		return float64(delta)
	}
	return float64(delta) * float64(time.Minute) / float64(elapsed)
}
