package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck"
)

// gpuHealth is one GPU's published health and fault reasons.
type gpuHealth struct {
	Health  chamberv1alpha1.GPUHealth
	Reasons []string
}

func publishedHealth(gn *chamberv1alpha1.GPUNode, gpu int) gpuHealth {
	for _, g := range gn.Status.GPUs {
		if int(g.Index) == gpu {
			h := gpuHealth{Health: g.Health}
			for _, f := range g.Faults {
				h.Reasons = append(h.Reasons, f.Reason)
			}
			return h
		}
	}
	return gpuHealth{}
}

// xidCounterText is the exposition of chamber_gpu_xid_errors_total for one GPU and XID.
func (ta *testAgent) xidCounterText(gpu int, xid uint64, n int) string {
	st, _ := ta.Tracker().GPU(gpu)
	return fmt.Sprintf(`# HELP chamber_gpu_xid_errors_total %s
# TYPE chamber_gpu_xid_errors_total counter
chamber_gpu_xid_errors_total{Hostname=%q,UUID=%q,gpu="%d",modelName=%q,xid="%d"} %d
`, "XID errors seen on the GPU since the agent started, by XID; every repeat counts (DCGM_FI_DEV_XID_ERRORS keeps only the last).",
		testNode, st.UUID, gpu, st.Sample.Name, xid, n)
}

func TestXIDs(t *testing.T) {
	cases := map[string]struct {
		xids             []uint64
		wantGPU3         gpuHealth
		wantNodeHealth   chamberv1alpha1.GPUHealth
		wantCondition    corev1.ConditionStatus
		wantReason       string
		wantMessage      string
		wantLastXIDGauge float64
	}{
		"XID 79 makes GPU 3 unhealthy": {
			xids:             []uint64{79},
			wantGPU3:         gpuHealth{Health: chamberv1alpha1.GPUUnhealthy, Reasons: []string{"XID79"}},
			wantNodeHealth:   chamberv1alpha1.GPUUnhealthy,
			wantCondition:    corev1.ConditionFalse,
			wantReason:       healthcheck.ReasonGPUsUnhealthy,
			wantMessage:      "GPU 3 Unhealthy: XID79 (GPU has fallen off the bus)",
			wantLastXIDGauge: 79,
		},
		"XID 13 is an application error and leaves the GPU healthy": {
			xids:             []uint64{13},
			wantGPU3:         gpuHealth{Health: chamberv1alpha1.GPUHealthy},
			wantNodeHealth:   chamberv1alpha1.GPUHealthy,
			wantCondition:    corev1.ConditionTrue,
			wantReason:       healthcheck.ReasonAllGPUsHealthy,
			wantMessage:      "8 GPUs healthy",
			wantLastXIDGauge: 13,
		},
		"XID 48 three times counts three": {
			xids:             []uint64{48, 48, 48},
			wantGPU3:         gpuHealth{Health: chamberv1alpha1.GPUUnhealthy, Reasons: []string{"XID48"}},
			wantNodeHealth:   chamberv1alpha1.GPUUnhealthy,
			wantCondition:    corev1.ConditionFalse,
			wantReason:       healthcheck.ReasonGPUsUnhealthy,
			wantMessage:      "GPU 3 Unhealthy: XID48 (Double-bit ECC error)",
			wantLastXIDGauge: 48,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ta := startTestAgent(t, fakeClient(t, interceptor.Funcs{}))
			if diff := cmp.Diff(gpuHealth{Health: chamberv1alpha1.GPUHealthy}, publishedHealth(ta.gpuNode(), 3)); diff != "" {
				t.Fatalf("GPU 3 before the XIDs (-want +got):\n%s", diff)
			}
			for _, x := range tc.xids {
				if err := ta.gpus.RaiseXID(3, x); err != nil {
					t.Fatal(err)
				}
			}
			ta.waitXIDs(3, tc.xids[0], uint64(len(tc.xids)))
			// The one-second event check publishes it, without waiting for a poll.
			ta.step(eventCheckInterval, passCheck)

			gn := ta.gpuNode()
			if diff := cmp.Diff(tc.wantGPU3, publishedHealth(gn, 3)); diff != "" {
				t.Errorf("GPU 3 in the GPUNode status (-want +got):\n%s", diff)
			}
			if gn.Status.Health != tc.wantNodeHealth {
				t.Errorf("GPUNode health = %s, want %s", gn.Status.Health, tc.wantNodeHealth)
			}
			c := ta.nodeCondition()
			if c == nil {
				t.Fatal("no GPUHealthy condition on the Node")
			}
			got := [3]string{string(c.Status), c.Reason, c.Message}
			if diff := cmp.Diff([3]string{string(tc.wantCondition), tc.wantReason, tc.wantMessage}, got); diff != "" {
				t.Errorf("Node condition GPUHealthy status, reason, message (-want +got):\n%s", diff)
			}
			if gc := meta.FindStatusCondition(gn.Status.Conditions, chamberv1alpha1.ConditionGPUHealthy); gc == nil || string(gc.Status) != string(tc.wantCondition) {
				t.Errorf("GPUNode condition GPUHealthy = %+v, want status %s", gc, tc.wantCondition)
			}
			if err := testutil.GatherAndCompare(ta.Registry(), strings.NewReader(ta.xidCounterText(3, tc.xids[0], len(tc.xids))), "chamber_gpu_xid_errors_total"); err != nil {
				t.Error(err)
			}
			if got := lastXIDGauge(t, ta, 3); got != tc.wantLastXIDGauge {
				t.Errorf("DCGM_FI_DEV_XID_ERRORS{gpu=\"3\"} = %v, want %v", got, tc.wantLastXIDGauge)
			}
		})
	}
}

// lastXIDGauge reads dcgm-exporter's last-XID gauge of one GPU.
func lastXIDGauge(t *testing.T, ta *testAgent, gpu int) float64 {
	t.Helper()
	mfs, err := ta.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "DCGM_FI_DEV_XID_ERRORS" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "gpu" && l.GetValue() == fmt.Sprint(gpu) {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no DCGM_FI_DEV_XID_ERRORS for GPU %d", gpu)
	return 0
}

func TestNVMLUnavailable(t *testing.T) {
	ta := newTestAgent(t, fakeClient(t, interceptor.Funcs{}))
	ta.gpus.FailInit(nvml.ERROR_LIBRARY_NOT_FOUND)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ta.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); ta.gpus.Close(); <-done })
	ta.waitFor(func(p passReport) bool { return p.pass == passStart })

	type state struct {
		Health          chamberv1alpha1.GPUHealth
		GPUs            int
		NVMLUnavailable metav1.ConditionStatus
		GPUHealthy      metav1.ConditionStatus
		GPUHealthyWhy   string
		Healthz, Readyz int
		NVMLUp          float64
	}
	observe := func() state {
		gn := ta.gpuNode()
		s := state{Health: gn.Status.Health, GPUs: len(gn.Status.GPUs)}
		if c := meta.FindStatusCondition(gn.Status.Conditions, chamberv1alpha1.ConditionNVMLUnavailable); c != nil {
			s.NVMLUnavailable = c.Status
		}
		if c := meta.FindStatusCondition(gn.Status.Conditions, chamberv1alpha1.ConditionGPUHealthy); c != nil {
			s.GPUHealthy, s.GPUHealthyWhy = c.Status, c.Reason
		}
		for path, code := range map[string]*int{"/healthz": &s.Healthz, "/readyz": &s.Readyz} {
			rec := httptest.NewRecorder()
			ta.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			*code = rec.Code
		}
		s.NVMLUp = nvmlUp(t, ta)
		return s
	}
	want := state{Health: chamberv1alpha1.GPUUnknown, NVMLUnavailable: metav1.ConditionTrue,
		GPUHealthy: metav1.ConditionUnknown, GPUHealthyWhy: healthcheck.ReasonNVMLUnavailable, Healthz: 200, Readyz: 200}
	if diff := cmp.Diff(want, observe()); diff != "" {
		t.Errorf("while NVML fails to initialise (-want +got):\n%s", diff)
	}

	// The driver arrives; the retry (one poll interval later) finds it.
	ta.gpus.FailInit(nvml.SUCCESS)
	ta.step(ta.cfg.PollInterval, passNVML)
	want = state{Health: chamberv1alpha1.GPUHealthy, GPUs: 8, NVMLUnavailable: metav1.ConditionFalse,
		GPUHealthy: metav1.ConditionTrue, GPUHealthyWhy: healthcheck.ReasonAllGPUsHealthy, Healthz: 200, Readyz: 200, NVMLUp: 1}
	if diff := cmp.Diff(want, observe()); diff != "" {
		t.Errorf("after NVML came back (-want +got):\n%s", diff)
	}
}

func nvmlUp(t *testing.T, ta *testAgent) float64 {
	t.Helper()
	mfs, err := ta.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "chamber_agent_nvml_up" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no chamber_agent_nvml_up")
	return -1
}

// TestAPIErrorsBackOff makes the API server fail the status write three times: the agent
// retries after 1s, 2s and 4s, writes nothing in between, and never stops.
func TestAPIErrorsBackOff(t *testing.T) {
	var failures atomic.Int32
	failures.Store(3)
	var attempts atomic.Int32
	c := fakeClient(t, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			attempts.Add(1)
			if failures.Add(-1) >= 0 {
				return apierrors.NewServiceUnavailable("etcd is sad")
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	ta := startTestAgent(t, c)
	if got := attempts.Load(); got != 1 {
		t.Fatalf("status writes after start = %d, want 1", got)
	}
	attempted := func(p passReport) bool { return p.attempted }
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if backoff > time.Second {
			// One second short of the back-off: the check pass must not write.
			ta.clock.Step(backoff - time.Second)
			if p := ta.waitFor(func(passReport) bool { return true }); p != 0 {
				t.Fatalf("retry %d: wrote %d before the back-off ended", i+1, p)
			}
			ta.clock.Step(time.Second)
		} else {
			ta.clock.Step(backoff)
		}
		ta.waitFor(attempted)
		if got, want := attempts.Load(), int32(i+2); got != want {
			t.Fatalf("after a %v back-off: %d status writes, want %d", backoff, got, want)
		}
	}
	if got := publishedHealth(ta.gpuNode(), 0).Health; got != chamberv1alpha1.GPUHealthy {
		t.Errorf("GPU 0 health after the API server recovered = %q, want Healthy", got)
	}
	if c := ta.nodeCondition(); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Node condition after the API server recovered = %+v, want True", c)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]struct {
		change  func(*Config)
		wantErr string // a substring; empty for a valid config
	}{
		"defaults":                {change: func(*Config) {}},
		"no node name":            {change: func(c *Config) { c.NodeName = "" }, wantErr: "--node-name is required"},
		"bad node name":           {change: func(c *Config) { c.NodeName = "Node_1" }, wantErr: "--node-name"},
		"negative poll interval":  {change: func(c *Config) { c.PollInterval = -time.Second }, wantErr: "--poll-interval must be positive"},
		"heartbeat under poll":    {change: func(c *Config) { c.HeartbeatInterval = 5 * time.Second }, wantErr: "--heartbeat-interval (5s) must be at least --poll-interval (10s)"},
		"window under poll":       {change: func(c *Config) { c.UtilizationWindow = time.Second }, wantErr: "--utilization-window"},
		"bad nvml":                {change: func(c *Config) { c.NVML = "fake:dgx1" }, wantErr: `--nvml "fake:dgx1"`},
		"real nvml":               {change: func(c *Config) { c.NVML = NVMLReal }},
		"fault injection on real": {change: func(c *Config) { c.NVML = NVMLReal; c.FaultInjectionAddress = "127.0.0.1:9401" }, wantErr: "--fault-injection-address needs fake GPUs"},
		"fault injection on all interfaces": {
			change: func(c *Config) { c.FaultInjectionAddress = ":9401" }, wantErr: `--fault-injection-address: ":9401" is not a loopback address`},
		"fault injection on a node IP": {
			change: func(c *Config) { c.FaultInjectionAddress = "10.0.0.5:9401" }, wantErr: "is not a loopback address"},
		"fault injection on loopback":  {change: func(c *Config) { c.FaultInjectionAddress = "127.0.0.1:9401" }},
		"fault injection on ::1":       {change: func(c *Config) { c.FaultInjectionAddress = "[::1]:9401" }},
		"fault injection on localhost": {change: func(c *Config) { c.FaultInjectionAddress = "localhost:9401" }},
		"bad metrics address":          {change: func(c *Config) { c.MetricsBindAddress = "9400" }, wantErr: "--metrics-bind-address"},
		"metrics off":                  {change: func(c *Config) { c.MetricsBindAddress = "0" }},
		"standalone without metrics": {
			change: func(c *Config) { c.Standalone, c.MetricsBindAddress = true, "0" }, wantErr: "--standalone serves only /metrics"},
		"secure metrics": {change: func(c *Config) { c.MetricsSecure = true }},
		"secure metrics standalone": {
			change: func(c *Config) { c.MetricsSecure, c.Standalone = true, true }, wantErr: "--metrics-secure needs the API server"},
		"cert dir without secure metrics": {
			change: func(c *Config) { c.MetricsCertDir = t.TempDir() }, wantErr: "--metrics-cert-dir needs --metrics-secure"},
		"cert dir without a certificate": {
			change: func(c *Config) { c.MetricsSecure, c.MetricsCertDir = true, t.TempDir() }, wantErr: "tls.crt"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestReadHealthConfig: --health-config sets the health rules the agent runs; a bad
// threshold or a misspelt field stops it at start with the file and the field named.
func TestReadHealthConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg := testConfig()
	cfg.HealthConfig = write("good.yaml", "throttlePolls: 2\nignoredReasons: [PowerThrottle]\n")
	if err := cfg.ReadHealthConfig(); err != nil {
		t.Fatal(err)
	}
	if cfg.Health.ThrottlePolls != 2 || !slices.Equal(cfg.Health.IgnoredReasons, []healthcheck.Reason{healthcheck.ReasonPowerThrottle}) ||
		cfg.Health.RecoveryPolls != healthcheck.DefaultConfig().RecoveryPolls {
		t.Errorf("health rules %+v: want throttlePolls 2, PowerThrottle ignored, the rest default", cfg.Health)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}

	for body, want := range map[string]string{
		"throttlePolls: 0":  "throttlePolls must be at least 1",
		"throttlePoll: 2":   `unknown field "throttlePoll"`,
		"ignoredXIDs: [-1]": "ignoredXIDs",
	} {
		cfg := testConfig()
		cfg.HealthConfig = write("bad.yaml", body)
		err := cfg.ReadHealthConfig()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), cfg.HealthConfig) {
			t.Errorf("file %q: error %v, want one naming the file and saying %q", body, err, want)
		}
	}
	cfg = testConfig()
	cfg.HealthConfig = filepath.Join(dir, "missing.yaml")
	if err := cfg.ReadHealthConfig(); err == nil || !strings.Contains(err.Error(), "--health-config") {
		t.Errorf("a missing file: error %v, want one naming --health-config", err)
	}
}
