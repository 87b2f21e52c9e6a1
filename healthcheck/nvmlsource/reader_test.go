package nvmlsource

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"chamber.dev/chamber/healthcheck"
)

// TestThrottleBits: healthcheck's Throttle* bits are NVML's clocks-event reasons, since
// the reader copies NVML's bit mask into GPUSample.ThrottleReasons unchanged.
func TestThrottleBits(t *testing.T) {
	tests := map[string]struct{ got, want uint64 }{
		"GPU idle":            {healthcheck.ThrottleGPUIdle, nvml.ClocksEventReasonGpuIdle},
		"SW power cap":        {healthcheck.ThrottleSWPowerCap, nvml.ClocksEventReasonSwPowerCap},
		"HW slowdown":         {healthcheck.ThrottleHWSlowdown, nvml.ClocksThrottleReasonHwSlowdown},
		"SW thermal slowdown": {healthcheck.ThrottleSWThermalSlowdown, nvml.ClocksEventReasonSwThermalSlowdown},
		"HW thermal slowdown": {healthcheck.ThrottleHWThermalSlowdown, nvml.ClocksThrottleReasonHwThermalSlowdown},
		"HW power brake":      {healthcheck.ThrottleHWPowerBrake, nvml.ClocksThrottleReasonHwPowerBrakeSlowdown},
	}
	for name, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: healthcheck's bit %#x, NVML's %#x", name, tc.got, tc.want)
		}
	}
}
