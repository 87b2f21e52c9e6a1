package healthcheck_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"chamber.dev/chamber/healthcheck"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// gpu builds a polled GPU status for status tests.
func gpu(i int, h healthcheck.Health, reasons ...healthcheck.Reason) healthcheck.GPUStatus {
	g := healthcheck.GPUStatus{Index: i, UUID: "GPU-" + string(rune('a'+i)), Health: h, LastPoll: t0,
		Sample: healthcheck.GPUSample{Index: i, Name: "NVIDIA H100 80GB HBM3", MemoryTotalBytes: 80 << 30}}
	for _, r := range reasons {
		f, ok := healthcheck.Rule(r)
		if !ok {
			f, _ = healthcheck.ClassifyXID(xidCode(r), healthcheck.DefaultConfig())
		}
		g.Faults = append(g.Faults, healthcheck.Fault{Finding: f, FirstSeen: t0, LastSeen: t0, Count: 1})
	}
	return g
}

func xidCode(r healthcheck.Reason) uint64 {
	n, _ := strconv.ParseUint(strings.TrimPrefix(string(r), "XID"), 10, 64)
	return n
}

func TestChanged(t *testing.T) {
	base := healthcheck.StatusInput{Now: t0, Source: healthcheck.SourceNVML, GPUs: []healthcheck.GPUStatus{gpu(0, healthcheck.Healthy), gpu(1, healthcheck.Degraded, healthcheck.ReasonThermalThrottle)},
		Util: healthcheck.NewUtilizationWindow(5 * time.Minute), Window: 5 * time.Minute, Heartbeat: 30 * time.Second}
	last := healthcheck.BuildStatus(base)
	cases := map[string]struct {
		change      func(in *healthcheck.StatusInput)
		wantChanged bool
	}{
		"only time passes": {change: func(in *healthcheck.StatusInput) { in.Now = t0.Add(10 * time.Second) }},
		"utilization moves": {change: func(in *healthcheck.StatusInput) {
			in.GPUs[0].Sample.GPUUtilPercent, in.GPUs[0].LastPoll = 95, t0.Add(10*time.Second)
			in.Util.Observe(in.GPUs, t0.Add(10*time.Second))
		}},
		"a held fault counts up with a new message": {change: func(in *healthcheck.StatusInput) {
			in.GPUs[1].Faults[0].Count, in.GPUs[1].Faults[0].Message = 7, "thermal slowdown at 91°C"
		}},
		"a new fault": {change: func(in *healthcheck.StatusInput) {
			in.GPUs[0] = gpu(0, healthcheck.Unhealthy, healthcheck.XIDReason(79))
		}, wantChanged: true},
		"a fault clears": {change: func(in *healthcheck.StatusInput) { in.GPUs[1] = gpu(1, healthcheck.Healthy) }, wantChanged: true},
		"a pod takes a GPU": {change: func(in *healthcheck.StatusInput) {
			in.Pods = map[string]healthcheck.PodRef{"GPU-a": {Namespace: "team-a", Name: "train-0"}}
		}, wantChanged: true},
		"NVML stops answering": {change: func(in *healthcheck.StatusInput) { in.Err = healthcheck.ErrNVMLUnavailable }, wantChanged: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := base
			in.GPUs = []healthcheck.GPUStatus{gpu(0, healthcheck.Healthy), gpu(1, healthcheck.Degraded, healthcheck.ReasonThermalThrottle)}
			in.Util = healthcheck.NewUtilizationWindow(5 * time.Minute)
			in.Conditions = last.Conditions
			tc.change(&in)
			if got := healthcheck.StatusChanged(&last, healthcheck.BuildStatus(in)); got != tc.wantChanged {
				t.Errorf("changed = %v, want %v", got, tc.wantChanged)
			}
		})
	}
}

func TestGPUHealthyCondition(t *testing.T) {
	cases := map[string]struct {
		gpus    []healthcheck.GPUStatus
		nvmlErr error
		want    metav1.Condition
	}{
		"all healthy": {
			gpus: []healthcheck.GPUStatus{gpu(0, healthcheck.Healthy), gpu(1, healthcheck.Healthy)},
			want: metav1.Condition{Type: "GPUHealthy", Status: "True", Reason: healthcheck.ReasonAllGPUsHealthy, Message: "2 GPUs healthy"},
		},
		"degraded and unhealthy GPUs named": {
			gpus: []healthcheck.GPUStatus{gpu(0, healthcheck.Degraded, healthcheck.ReasonThermalThrottle),
				gpu(1, healthcheck.Healthy), gpu(2, healthcheck.Unhealthy, healthcheck.ReasonECCDoubleBit, healthcheck.XIDReason(48))},
			want: metav1.Condition{Type: "GPUHealthy", Status: "False", Reason: healthcheck.ReasonGPUsUnhealthy,
				Message: "GPU 0 Degraded: ThermalThrottle; GPU 2 Unhealthy: ECCDoubleBit, XID48 (Double-bit ECC error)"},
		},
		"degraded only": {
			gpus: []healthcheck.GPUStatus{gpu(0, healthcheck.Degraded, healthcheck.ReasonPCIeReplays)},
			want: metav1.Condition{Type: "GPUHealthy", Status: "False", Reason: healthcheck.ReasonGPUsDegraded, Message: "GPU 0 Degraded: PCIeReplays"},
		},
		"NVML unavailable": {
			nvmlErr: errors.New("NVML unavailable: nvml.Init: ERROR_DRIVER_NOT_LOADED"),
			want: metav1.Condition{Type: "GPUHealthy", Status: "Unknown", Reason: healthcheck.ReasonNVMLUnavailable,
				Message: "NVML unavailable: nvml.Init: ERROR_DRIVER_NOT_LOADED"},
		},
		"no GPUs": {
			want: metav1.Condition{Type: "GPUHealthy", Status: "Unknown", Reason: healthcheck.ReasonNoGPUs, Message: "no GPUs reported on this node"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, healthcheck.GPUHealthyCondition(tc.gpus, tc.nvmlErr, healthcheck.SourceNVML)); diff != "" {
				t.Errorf("GPUHealthy (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUtilizationWindow(t *testing.T) {
	cases := map[string]struct {
		polls    []uint32 // GPU utilization at each 10s poll
		window   time.Duration
		wantGPU  int32
		wantNone bool
	}{
		"mean of every poll":            {polls: []uint32{0, 50, 100}, window: time.Minute, wantGPU: 50},
		"old polls leave the window":    {polls: []uint32{100, 100, 100, 0, 0, 0}, window: 30 * time.Second, wantGPU: 0},
		"rounds to the nearest":         {polls: []uint32{1, 2}, window: time.Minute, wantGPU: 2},
		"no polls":                      {window: time.Minute, wantNone: true},
		"a poll read twice counts once": {polls: []uint32{80}, window: time.Minute, wantGPU: 80},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := healthcheck.NewUtilizationWindow(tc.window)
			now := t0
			for _, u := range tc.polls {
				now = now.Add(10 * time.Second)
				g := gpu(0, healthcheck.Healthy)
				g.LastPoll, g.Sample.GPUUtilPercent = now, u
				w.Observe([]healthcheck.GPUStatus{g}, now)
				w.Observe([]healthcheck.GPUStatus{g}, now) // the one-second check sees the same poll
			}
			got, _, ok := w.Mean(0)
			if ok == tc.wantNone || got != tc.wantGPU {
				t.Errorf("mean = %d (ok %v), want %d (ok %v)", got, ok, tc.wantGPU, !tc.wantNone)
			}
		})
	}
}
