package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/controlplane/controlplanetest"
)

// TestRealGPU runs the agent on the machine's own GPUs through NVML (go-nvml's
// nvml.New, no fake) against a real kube-apiserver, and logs what it published: the
// GPUNode, the node condition, the metrics, and what one poll costs. It runs only
// with CHAMBER_REAL_NVML=1, on a machine with an NVIDIA driver; CI has no GPU.
func TestRealGPU(t *testing.T) {
	if os.Getenv("CHAMBER_REAL_NVML") == "" {
		t.Skip("set CHAMBER_REAL_NVML=1 on a machine with an NVIDIA GPU and driver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := controlplanetest.StartForTest(t, ctx, controlplane.Options{ChamberCRDs: true})
	c, err := client.New(cp.Config, client.Options{Scheme: testScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	const node = "gpu-host"
	if err := c.Create(ctx, controlplane.GPUNode{Name: node, GPUs: 1}.Object()); err != nil {
		t.Fatal(err)
	}

	lib, _, err := NewNVML(NVMLReal)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.NVML, cfg.NodeName, cfg.MetricsBindAddress = NVMLReal, node, "0"
	cfg.PollInterval, cfg.HeartbeatInterval, cfg.UtilizationWindow = time.Second, 2*time.Second, 5*time.Second
	a, err := New(Options{Config: cfg, NVML: lib, Client: c, Clock: clock.RealClock{}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	var gn chamberv1alpha1.GPUNode
	for {
		err := c.Get(ctx, client.ObjectKey{Name: node}, &gn)
		if err == nil && len(gn.Status.GPUs) > 0 && gn.Status.GPUs[0].Utilization != nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no GPUNode status with utilization from the agent: %v (last: %+v)", err, gn.Status)
		case <-time.After(500 * time.Millisecond):
		}
	}
	status, _ := json.MarshalIndent(gn.Status, "", "  ")
	t.Logf("GPUNode %s status:\n%s", node, status)
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		t.Fatal(err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == "GPUHealthy" {
			t.Logf("Node condition GPUHealthy=%s reason=%s: %s", cond.Status, cond.Reason, cond.Message)
		}
	}

	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var lines []string
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if l := sc.Text(); !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	t.Logf("/metrics (%d series):\n%s", len(lines), strings.Join(lines, "\n"))

	reader := nvmlsource.NewReader(lib)
	const polls = 50
	start := time.Now()
	for range polls {
		if _, err := reader.Read(); err != nil {
			t.Fatalf("read NVML: %v", err)
		}
	}
	t.Logf("one NVML read of %d GPU(s): %s (mean of %d)", len(gn.Status.GPUs), time.Since(start)/polls, polls)
}
