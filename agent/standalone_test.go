package agent

import (
	"context"
	"testing"
)

// TestStandaloneExporter: with --standalone the agent runs with no API server at all
// and serves its GPUs' readings, as dcgm-exporter does on a GPU host; with
// --dcgm-metrics=false, beside a dcgm-exporter, it serves Chamber's own series and no
// DCGM_FI_* one, so nothing is exported twice.
func TestStandaloneExporter(t *testing.T) {
	for _, dcgm := range []bool{true, false} {
		ta := newTestAgent(t, nil, func(o *Options) { o.Config.Standalone, o.Config.DCGMMetrics = true, dcgm })
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); ta.gpus.Close(); _ = ta.monitor.Wait() })
		ta.startNVML(ctx)
		if err := ta.gpus.RaiseDoubleBitECC(5); err != nil {
			t.Fatal(err)
		}
		ta.waitXIDs(5, 48, 1)
		if err := ta.monitor.Poll(); err != nil {
			t.Fatal(err)
		}
		ta.reconcile(ctx, passStart) // with no client, a write would panic

		mfs, err := ta.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, mf := range mfs {
			names[mf.GetName()] = true
		}
		for _, own := range []string{"chamber_gpu_health", "chamber_gpu_fault", "chamber_gpu_xid_errors_total", "chamber_agent_nvml_up"} {
			if !names[own] {
				t.Errorf("dcgm-metrics=%t: %s missing", dcgm, own)
			}
		}
		for _, d := range []string{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_XID_ERRORS"} {
			if names[d] != dcgm {
				t.Errorf("dcgm-metrics=%t: %s served %t", dcgm, d, names[d])
			}
		}
	}
}
