package agent

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck"
)

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
	base := statusInput{now: t0, gpus: []healthcheck.GPUStatus{gpu(0, healthcheck.Healthy), gpu(1, healthcheck.Degraded, healthcheck.ReasonThermalThrottle)},
		util: newUtilizationWindow(5 * time.Minute), window: 5 * time.Minute, heartbeat: 30 * time.Second}
	last := buildStatus(base)
	cases := map[string]struct {
		change      func(in *statusInput)
		wantChanged bool
	}{
		"only time passes": {change: func(in *statusInput) { in.now = t0.Add(10 * time.Second) }},
		"utilization moves": {change: func(in *statusInput) {
			in.gpus[0].Sample.GPUUtilPercent, in.gpus[0].LastPoll = 95, t0.Add(10*time.Second)
			in.util.observe(in.gpus, t0.Add(10*time.Second))
		}},
		"a held fault counts up with a new message": {change: func(in *statusInput) {
			in.gpus[1].Faults[0].Count, in.gpus[1].Faults[0].Message = 7, "thermal slowdown at 91°C"
		}},
		"a new fault": {change: func(in *statusInput) {
			in.gpus[0] = gpu(0, healthcheck.Unhealthy, healthcheck.XIDReason(79))
		}, wantChanged: true},
		"a fault clears": {change: func(in *statusInput) { in.gpus[1] = gpu(1, healthcheck.Healthy) }, wantChanged: true},
		"a pod takes a GPU": {change: func(in *statusInput) {
			in.pods = map[string]PodRef{"GPU-a": {Namespace: "team-a", Name: "train-0"}}
		}, wantChanged: true},
		"NVML stops answering": {change: func(in *statusInput) { in.nvmlErr = healthcheck.ErrNVMLUnavailable }, wantChanged: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := base
			in.gpus = []healthcheck.GPUStatus{gpu(0, healthcheck.Healthy), gpu(1, healthcheck.Degraded, healthcheck.ReasonThermalThrottle)}
			in.util = newUtilizationWindow(5 * time.Minute)
			in.conditions = last.Conditions
			tc.change(&in)
			if got := changed(&last, buildStatus(in)); got != tc.wantChanged {
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
			want: metav1.Condition{Type: "GPUHealthy", Status: "True", Reason: ReasonAllGPUsHealthy, Message: "2 GPUs healthy"},
		},
		"degraded and unhealthy GPUs named": {
			gpus: []healthcheck.GPUStatus{gpu(0, healthcheck.Degraded, healthcheck.ReasonThermalThrottle),
				gpu(1, healthcheck.Healthy), gpu(2, healthcheck.Unhealthy, healthcheck.ReasonECCDoubleBit, healthcheck.XIDReason(48))},
			want: metav1.Condition{Type: "GPUHealthy", Status: "False", Reason: ReasonGPUsUnhealthy,
				Message: "GPU 0 Degraded: ThermalThrottle; GPU 2 Unhealthy: ECCDoubleBit, XID48 (Double-bit ECC error)"},
		},
		"degraded only": {
			gpus: []healthcheck.GPUStatus{gpu(0, healthcheck.Degraded, healthcheck.ReasonPCIeReplays)},
			want: metav1.Condition{Type: "GPUHealthy", Status: "False", Reason: ReasonGPUsDegraded, Message: "GPU 0 Degraded: PCIeReplays"},
		},
		"NVML unavailable": {
			nvmlErr: errors.New("NVML unavailable: nvml.Init: ERROR_DRIVER_NOT_LOADED"),
			want: metav1.Condition{Type: "GPUHealthy", Status: "Unknown", Reason: ReasonNVMLUnavailable,
				Message: "NVML unavailable: nvml.Init: ERROR_DRIVER_NOT_LOADED"},
		},
		"no GPUs": {
			want: metav1.Condition{Type: "GPUHealthy", Status: "Unknown", Reason: ReasonNoGPUs, Message: "NVML reports no GPUs on this node"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, gpuHealthyCondition(tc.gpus, tc.nvmlErr)); diff != "" {
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
			w := newUtilizationWindow(tc.window)
			now := t0
			for _, u := range tc.polls {
				now = now.Add(10 * time.Second)
				g := gpu(0, healthcheck.Healthy)
				g.LastPoll, g.Sample.GPUUtilPercent = now, u
				w.observe([]healthcheck.GPUStatus{g}, now)
				w.observe([]healthcheck.GPUStatus{g}, now) // the one-second check sees the same poll
			}
			got, _, ok := w.mean(0)
			if ok == tc.wantNone || got != tc.wantGPU {
				t.Errorf("mean = %d (ok %v), want %d (ok %v)", got, ok, tc.wantGPU, !tc.wantNone)
			}
		})
	}
}

// TestWritesOnChange: utilization moving is published at the next heartbeat, not at
// once; a pod taking a GPU is published at the next poll.
func TestWritesOnChange(t *testing.T) {
	var mu sync.Mutex
	pods := map[string]PodRef{}
	ta := startTestAgent(t, fakeClient(t, interceptor.Funcs{}), func(o *Options) {
		o.Pods = PodMapperFunc(func(context.Context) (map[string]PodRef, error) {
			mu.Lock()
			defer mu.Unlock()
			return pods, nil
		})
	})
	if err := ta.gpus.SetUtilization(0, 90, 30); err != nil {
		t.Fatal(err)
	}
	if n := ta.poll(); n != 0 {
		t.Errorf("writes after a utilization change = %d, want 0 before the heartbeat", n)
	}
	st, _ := ta.Tracker().GPU(4)
	mu.Lock()
	pods = map[string]PodRef{st.UUID: {Namespace: "team-a", Name: "train-0", Container: "pytorch"}}
	mu.Unlock()
	if n := ta.poll(); n != 1 {
		t.Errorf("writes after a pod took GPU 4 = %d, want 1", n)
	}
	gn := ta.gpuNode()
	if got, want := gn.Status.GPUs[4].Pod, (&chamberv1alpha1.PodReference{Namespace: "team-a", Name: "train-0"}); !cmp.Equal(got, want) {
		t.Errorf("GPU 4 pod = %v, want %v", got, want)
	}
	for _, want := range []int{0, 0, 1} { // the heartbeat is 30s after the pod's write
		if n := ta.poll(); n != want {
			t.Errorf("writes in the poll at %v = %d, want %d", ta.clock.Since(t0)-time.Second, n, want)
		}
	}
	// The heartbeat at 50s carries the mean of the polls at 0s (idle) and 10s to 40s
	// (90%), and of the poll at 50s if the Monitor's goroutine ran before the agent's.
	u := ta.gpuNode().Status.GPUs[0].Utilization
	if u == nil || (u.GPUPercent != 72 && u.GPUPercent != 75) || u.WindowSeconds != 300 {
		t.Errorf("GPU 0 utilization at the heartbeat = %+v, want 72%% (or 75%%) over 300s", u)
	}
	if c := ta.nodeCondition(); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Node condition = %+v, want True", c)
	}
}
