package controlplane

import (
	"slices"
	"testing"
)

// TestRateFlags: a speed-up multiplies a component's own default rate limit; without
// one the component keeps its default (no flags), as on a real cluster.
func TestRateFlags(t *testing.T) {
	for _, tc := range []struct {
		scale float64
		rate  clientRate
		want  []string
	}{
		{scale: 0, rate: controllerManagerRate},
		{scale: 1, rate: schedulerRate},
		{scale: 120, rate: controllerManagerRate, want: []string{"--kube-api-qps=2400", "--kube-api-burst=3600"}},
		{scale: 2.5, rate: clientRate{qps: 50, burst: 101}, want: []string{"--kube-api-qps=125", "--kube-api-burst=253"}},
	} {
		cp := &ControlPlane{opts: Options{ClientRateScale: tc.scale}}
		if got := cp.rateFlags(tc.rate); !slices.Equal(got, tc.want) {
			t.Errorf("scale %g, rate %+v: flags %q, want %q", tc.scale, tc.rate, got, tc.want)
		}
	}
}
