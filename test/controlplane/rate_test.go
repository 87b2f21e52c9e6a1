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

// TestClientRate: a client the caller runs (the simulator's Chamber) is scaled as the
// components are, and keeps its own limit without a speed-up.
func TestClientRate(t *testing.T) {
	for _, tc := range []struct {
		scale     float64
		wantQPS   float32
		wantBurst int
	}{
		{scale: 0, wantQPS: 300, wantBurst: 500},
		{scale: 120, wantQPS: 36000, wantBurst: 60000},
	} {
		cp := &ControlPlane{opts: Options{ClientRateScale: tc.scale}}
		if qps, burst := cp.ClientRate(300, 500); qps != tc.wantQPS || burst != tc.wantBurst {
			t.Errorf("scale %g: %v/%d, want %v/%d", tc.scale, qps, burst, tc.wantQPS, tc.wantBurst)
		}
	}
}
