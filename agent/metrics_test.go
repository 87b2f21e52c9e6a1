package agent

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenMetrics are the metric families the exposition golden file holds: a sample of
// dcgm-exporter's names and all of Chamber's GPU metrics.
var goldenMetrics = []string{
	"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS",
	"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
	"chamber_gpu_health", "chamber_gpu_xid_errors_total", "chamber_gpu_fault", "chamber_agent_nvml_up",
}

// TestMetricsExposition checks the exposition against testdata/metrics.golden (go test
// -update rewrites it). UUIDs are random in go-nvml's fakes, so the file holds
// {{UUID-n}} in their place.
func TestMetricsExposition(t *testing.T) {
	ta := newTestAgent(t, fakeClient(t, interceptor.Funcs{}))
	for _, err := range []error{
		ta.gpus.SetUtilization(0, 40, 20),
		ta.gpus.SetMemoryUsed(0, 10<<30),
		ta.gpus.SetTemperature(1, 61, 450_000),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// GPU 1 held by UUID; GPU 2 by index, as with the device plugin's index strategy.
	ta.pods = PodMapperFunc(func(context.Context) (map[string]PodRef, error) {
		st, _ := ta.Tracker().GPU(1)
		return map[string]PodRef{
			st.UUID: {Namespace: "team-a", Name: "train-0", Container: "pytorch"},
			"2":     {Namespace: "team-b", Name: "eval-0", Container: "main"},
		}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); ta.gpus.Close(); _ = ta.monitor.Wait() })
	ta.startNVML(ctx)
	if err := ta.gpus.RaiseXID(2, 13); err != nil {
		t.Fatal(err)
	}
	if err := ta.gpus.RaiseDoubleBitECC(5); err != nil {
		t.Fatal(err)
	}
	ta.waitXIDs(2, 13, 1)
	ta.waitXIDs(5, 48, 1)
	ta.reconcile(ctx, passStart)
	if err := ta.monitor.Poll(); err != nil { // the ECC counters
		t.Fatal(err)
	}

	var uuids []string
	for _, g := range ta.Tracker().GPUs() {
		uuids = append(uuids, g.UUID, fmt.Sprintf("{{UUID-%d}}", g.Index))
	}
	if *update {
		var buf bytes.Buffer
		mfs, err := ta.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if !slices.Contains(goldenMetrics, mf.GetName()) {
				continue
			}
			var fam bytes.Buffer
			if _, err := expfmt.MetricFamilyToText(&fam, mf); err != nil {
				t.Fatal(err)
			}
			// Samples in GPU order, not in the order of this run's random UUIDs.
			lines := strings.Split(strings.TrimSuffix(strings.NewReplacer(uuids...).Replace(fam.String()), "\n"), "\n")
			slices.Sort(lines[2:])
			buf.WriteString(strings.Join(lines, "\n") + "\n")
		}
		if err := os.WriteFile("testdata/metrics.golden", buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile("testdata/metrics.golden")
	if err != nil {
		t.Fatal(err)
	}
	placeholders := make([]string, len(uuids))
	for i := 0; i < len(uuids); i += 2 {
		placeholders[i], placeholders[i+1] = uuids[i+1], uuids[i]
	}
	want := strings.NewReplacer(placeholders...).Replace(string(golden))
	if err := testutil.GatherAndCompare(ta.Registry(), strings.NewReader(want), goldenMetrics...); err != nil {
		t.Error(err)
	}
}

// countingNVML counts the NVML calls every poll starts with.
type countingNVML struct {
	nvml.Interface
	calls atomic.Int64
}

func (c *countingNVML) DeviceGetCount() (int, nvml.Return) {
	c.calls.Add(1)
	return c.Interface.DeviceGetCount()
}

func (c *countingNVML) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	c.calls.Add(1)
	return c.Interface.DeviceGetHandleByIndex(i)
}

// BenchmarkScrape is one /metrics scrape of an 8-GPU node; it fails if the scrape
// calls NVML.
func BenchmarkScrape(b *testing.B) {
	var lib *countingNVML
	ta := newTestAgent(b, fakeClient(b, interceptor.Funcs{}), func(o *Options) {
		lib = &countingNVML{Interface: o.NVML}
		o.NVML = lib
	})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); ta.gpus.Close(); _ = ta.monitor.Wait() })
	ta.startNVML(ctx)
	ta.reconcile(ctx, passStart)
	h := ta.Handler()
	before := lib.calls.Load()
	var size int
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("/metrics answered %d", rec.Code)
		}
		size = rec.Body.Len()
	}
	if n := lib.calls.Load() - before; n != 0 {
		b.Fatalf("scrapes made %d NVML calls, want 0", n)
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}
