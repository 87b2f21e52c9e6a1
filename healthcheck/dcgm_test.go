package healthcheck_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck"
)

// exposition is what dcgm-exporter serves for one node of two GPUs, in its label
// layout (gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION,
// and the pod mapping's container, namespace, pod on an allocated GPU); extra is added
// to GPU 1's series.
func exposition(extra string) string {
	const l0 = `gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:1B:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-1",DCGM_FI_DRIVER_VERSION="550.54.15",container="pytorch",namespace="team-a",pod="train-0"`
	const l1 = `gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:43:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-1",DCGM_FI_DRIVER_VERSION="550.54.15"`
	return `# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{` + l0 + `} 87
DCGM_FI_DEV_GPU_UTIL{` + l1 + `} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{` + l0 + `} 40960
DCGM_FI_DEV_FB_USED{` + l1 + `} 0
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{` + l0 + `} 40960
DCGM_FI_DEV_FB_FREE{` + l1 + `} 81920
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{` + l0 + `} 0
` + strings.ReplaceAll(extra, "L1", l1)
}

func parse(t *testing.T, text string) model.Vector {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var v model.Vector
	for _, f := range families {
		s, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, f)
		if err != nil {
			t.Fatal(err)
		}
		v = append(v, s...)
	}
	return v
}

func TestParseDCGM(t *testing.T) {
	r, skipped := healthcheck.ParseDCGM(parse(t, exposition(`DCGM_FI_DEV_COUNT{Hostname="gpu-1"} 2
DCGM_FI_DEV_ROW_REMAP_FAILURE{L1} 1
`)), "Hostname")
	if skipped != 1 {
		t.Errorf("skipped = %d, want 1 (the series without a gpu label)", skipped)
	}
	gpus := r["gpu-1"]
	if len(r) != 1 || len(gpus) != 2 {
		t.Fatalf("readings = %v, want node gpu-1 with 2 GPUs", r)
	}
	g0, g1 := gpus[0], gpus[1]
	if got, want := g0.Pod, (healthcheck.PodRef{Namespace: "team-a", Name: "train-0", Container: "pytorch"}); got != want {
		t.Errorf("GPU 0 pod = %+v, want %+v", got, want)
	}
	if g1.Pod != (healthcheck.PodRef{}) {
		t.Errorf("GPU 1 pod = %+v, want none", g1.Pod)
	}
	if g0.Sample.UUID != "GPU-aaaa" || g0.Sample.Name != "NVIDIA H100 80GB HBM3" || g0.Sample.PCIBusID != "00000000:1B:00.0" || g0.Driver != "550.54.15" {
		t.Errorf("GPU 0 identity = %+v, driver %q", g0.Sample, g0.Driver)
	}
	if g0.Sample.GPUUtilPercent != 87 || g0.Sample.MemoryUsedBytes != 40<<30 || g0.Sample.MemoryTotalBytes != 80<<30 {
		t.Errorf("GPU 0 utilization %d%%, memory %d of %d bytes; want 87%%, 40 GiB of 80 GiB", g0.Sample.GPUUtilPercent, g0.Sample.MemoryUsedBytes, g0.Sample.MemoryTotalBytes)
	}
	if !g1.Sample.RowRemap.Failure {
		t.Error("GPU 1 row remap failure not read")
	}
	// What dcgm-exporter does not export is unsupported, never zero: no ECC series here.
	if !g0.Sample.Unsupported.Has(healthcheck.FieldECCVolatileUncorrected) || g0.Sample.Unsupported.Has(healthcheck.FieldUtilization) {
		t.Errorf("GPU 0 unsupported = %v, want ECC in it and utilization not", g0.Sample.Unsupported.Names())
	}
	if !g0.Sample.Unsupported.Has(healthcheck.FieldRemappedRows) || g1.Sample.Unsupported.Has(healthcheck.FieldRemappedRows) {
		t.Errorf("remapped rows unsupported: GPU 0 %v, GPU 1 %v; want only GPU 0", g0.Sample.Unsupported.Has(healthcheck.FieldRemappedRows), g1.Sample.Unsupported.Has(healthcheck.FieldRemappedRows))
	}
}

// TestDCGMNode follows one node through successive queries: each fault dcgm-exporter
// can report ends in the same health as the agent's NVML reading of it.
func TestDCGMNode(t *testing.T) {
	type step struct {
		extra string
		want  map[int][]healthcheck.Reason // every GPU's active faults after the query
	}
	cases := map[string][]step{
		"an XID 79 is a fault from its first sight and stays": {
			{extra: `DCGM_FI_DEV_XID_ERRORS{L1} 79` + "\n", want: map[int][]healthcheck.Reason{1: {healthcheck.XIDReason(79)}}},
			{extra: `DCGM_FI_DEV_XID_ERRORS{L1} 79` + "\n", want: map[int][]healthcheck.Reason{1: {healthcheck.XIDReason(79)}}},
		},
		"an application XID is no fault": {
			{extra: `DCGM_FI_DEV_XID_ERRORS{L1} 13` + "\n"},
		},
		"a new XID on top of an old one": {
			{extra: `DCGM_FI_DEV_XID_ERRORS{L1} 13` + "\n"},
			{extra: `DCGM_FI_DEV_XID_ERRORS{L1} 48` + "\n", want: map[int][]healthcheck.Reason{1: {healthcheck.XIDReason(48)}}},
		},
		"the XID count collector tells a repeat": {
			{extra: `DCGM_EXP_XID_ERRORS_COUNT{L1,xid="31"} 1` + "\n"},
			{extra: `DCGM_EXP_XID_ERRORS_COUNT{L1,xid="31"} 1` + "\n" + `DCGM_EXP_XID_ERRORS_COUNT{L1,xid="94"} 1` + "\n",
				want: map[int][]healthcheck.Reason{1: {healthcheck.XIDReason(94)}}},
		},
		"double-bit ECC": {
			{extra: `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{L1} 2` + "\n", want: map[int][]healthcheck.Reason{1: {healthcheck.ReasonECCDoubleBit}}},
		},
		"a failing DCGM health watch, then passing again": {
			{extra: `DCGM_EXP_GPU_HEALTH_STATUS{L1,health_watch="PCIE",health_error_code="DCGM_FR_PCI_REPLAY_RATE"} 20` + "\n",
				want: map[int][]healthcheck.Reason{1: {healthcheck.ReasonDCGMHealthFail}}},
			{extra: `DCGM_EXP_GPU_HEALTH_STATUS{L1,health_watch="PCIE",health_error_code="DCGM_FR_OK"} 0` + "\n",
				want: map[int][]healthcheck.Reason{1: {healthcheck.ReasonDCGMHealthFail}}},
			{extra: `DCGM_EXP_GPU_HEALTH_STATUS{L1,health_watch="PCIE",health_error_code="DCGM_FR_OK"} 0` + "\n"},
		},
		"thermal violation time growing for the throttle polls": {
			{extra: `DCGM_FI_DEV_THERMAL_VIOLATION{L1} 1000` + "\n"},
			{extra: `DCGM_FI_DEV_THERMAL_VIOLATION{L1} 5000000` + "\n"},
			{extra: `DCGM_FI_DEV_THERMAL_VIOLATION{L1} 9000000` + "\n", want: map[int][]healthcheck.Reason{1: {healthcheck.ReasonThermalThrottle}}},
		},
		"thermal violation time that stopped growing": {
			{extra: `DCGM_FI_DEV_THERMAL_VIOLATION{L1} 9000000` + "\n"},
			{extra: `DCGM_FI_DEV_THERMAL_VIOLATION{L1} 9000000` + "\n"},
			{extra: `DCGM_FI_DEV_THERMAL_VIOLATION{L1} 9000000` + "\n"},
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			var c clock.PassiveClock = clk
			cfg := healthcheck.DefaultConfig()
			cfg.RecoveryPolls, cfg.ThrottlePolls = 2, 2
			n := healthcheck.NewDCGMNode(healthcheck.NewTracker(cfg, c))
			for i, st := range steps {
				clk.Step(15 * time.Second)
				r, _ := healthcheck.ParseDCGM(parse(t, exposition(st.extra)), "Hostname")
				n.Observe(r["gpu-1"], clk.Now())
				got := map[int][]healthcheck.Reason{}
				for _, g := range n.Tracker().GPUs() {
					if len(g.Faults) > 0 {
						got[g.Index] = g.Reasons()
					}
				}
				want := st.want
				if want == nil {
					want = map[int][]healthcheck.Reason{}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("query %d: faults (-want +got):\n%s", i+1, diff)
				}
			}
		})
	}
}

func TestDCGMSelector(t *testing.T) {
	sel := healthcheck.DCGMSelector(`job="dcgm-exporter"`)
	if !strings.HasPrefix(sel, `{__name__=~"DCGM_FI_DEV_GPU_UTIL|`) || !strings.HasSuffix(sel, `",job="dcgm-exporter"}`) {
		t.Errorf("selector = %s", sel)
	}
	if got, want := healthcheck.DCGMFreshnessQuery(`job="x"`, "Hostname"), `max by (Hostname) (timestamp(DCGM_FI_DEV_XID_ERRORS{job="x"}) or timestamp(DCGM_FI_DEV_GPU_UTIL{job="x"}) or timestamp(DCGM_FI_PROF_GR_ENGINE_ACTIVE{job="x"}))`; got != want {
		t.Errorf("freshness query = %s", got)
	}
}

// TestDCGMUtilizationSignal: SM activity is read as its own reading (the utilization
// window believes it over GPU utilization: a kernel spinning on a few SMs reads 100%
// busy by the second); the graphics engine's activity stands in for GPU utilization
// only where that is not exported, and the sample says which it took.
func TestDCGMUtilizationSignal(t *testing.T) {
	const l = `gpu="0",UUID="GPU-aaaa",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-1"`
	cases := map[string]struct {
		series     string
		wantPct    uint32
		wantSignal chamberv1alpha1.UtilizationSignal
		wantSM     float64 // -1: no SM activity
	}{
		"SM activity beside GPU utilization": {
			series:  "DCGM_FI_DEV_GPU_UTIL{" + l + "} 100\nDCGM_FI_PROF_SM_ACTIVE{" + l + "} 0.12\nDCGM_FI_PROF_GR_ENGINE_ACTIVE{" + l + "} 0.99\n",
			wantPct: 100, wantSignal: chamberv1alpha1.SignalGPUUtilization, wantSM: 12,
		},
		"GPU utilization over the graphics engine": {
			series:  "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" + l + "} 0.99\nDCGM_FI_DEV_GPU_UTIL{" + l + "} 40\n",
			wantPct: 40, wantSignal: chamberv1alpha1.SignalGPUUtilization, wantSM: -1,
		},
		"the graphics engine alone": {
			series:  "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" + l + "} 0.5\n",
			wantPct: 50, wantSignal: chamberv1alpha1.SignalGraphicsEngineActivity, wantSM: -1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, _ := healthcheck.ParseDCGM(parse(t, tc.series), "Hostname")
			s := r["gpu-1"][0].Sample
			if s.GPUUtilPercent != tc.wantPct || s.UtilizationSignal != tc.wantSignal || s.Unsupported.Has(healthcheck.FieldUtilization) {
				t.Errorf("utilization %d%% by %s (unsupported %v), want %d%% by %s", s.GPUUtilPercent, s.UtilizationSignal,
					s.Unsupported.Has(healthcheck.FieldUtilization), tc.wantPct, tc.wantSignal)
			}
			if has := s.SMActivityRead && !s.Unsupported.Has(healthcheck.FieldSMActivity); has != (tc.wantSM >= 0) || has && math.Abs(s.SMActivityPercent-tc.wantSM) > 1e-9 {
				t.Errorf("SM activity %v%% (read %v), want %v", s.SMActivityPercent, has, tc.wantSM)
			}
		})
	}
	r, _ := healthcheck.ParseDCGM(parse(t, "DCGM_FI_DEV_XID_ERRORS{"+l+"} 0\n"), "Hostname")
	if !r["gpu-1"][0].Sample.Unsupported.Has(healthcheck.FieldUtilization) {
		t.Error("no utilization series, and the utilization is not unsupported: it would read as idle")
	}
}
