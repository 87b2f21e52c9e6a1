package agent

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"chamber.dev/chamber/healthcheck/nvmlsource"
)

// faults are the named faults of POST /inject?gpu=N&fault=NAME, each what the driver
// would show for the real thing.
var faults = map[string]func(f *nvmlsource.FakeGPUs, gpu int) error{
	// An uncorrectable ECC error: counters, the double-bit event and XID 48.
	"dbe": func(f *nvmlsource.FakeGPUs, gpu int) error { return f.RaiseDoubleBitECC(gpu) },
	// A burst of corrected ECC errors, above the single-bit rate limit.
	"sbe": func(f *nvmlsource.FakeGPUs, gpu int) error { return f.AddCorrectableECC(gpu, 10_000) },
	// No spare rows left: XID 64 and a remap failure.
	"remap-failure": func(f *nvmlsource.FakeGPUs, gpu int) error { return f.FailRowRemap(gpu) },
	// A remap waiting for a GPU reset: XID 63.
	"remap-pending": func(f *nvmlsource.FakeGPUs, gpu int) error { return f.SetRowRemapPending(gpu, true) },
	// The GPU falls off the bus: XID 79, then every call fails.
	"lost": func(f *nvmlsource.FakeGPUs, gpu int) error { return f.LoseGPU(gpu) },
	// Hardware thermal slowdown; raised after the health rules' ThrottlePolls polls.
	"throttle": func(f *nvmlsource.FakeGPUs, gpu int) error {
		return f.SetThrottle(gpu, nvml.ClocksThrottleReasonHwThermalSlowdown)
	},
	// PCIe replays, above the replay rate limit.
	"pcie": func(f *nvmlsource.FakeGPUs, gpu int) error { return f.AddPCIeReplays(gpu, 1000) },
	// NVLink CRC errors, above the NVLink error rate limit.
	"nvlink": func(f *nvmlsource.FakeGPUs, gpu int) error { return f.AddNVLinkErrors(gpu, 10_000) },
	// A sick driver: every reading of the GPU fails.
	"read-error": func(f *nvmlsource.FakeGPUs, gpu int) error { return f.FailReads(gpu, nvml.ERROR_UNKNOWN) },
}

// FaultInjectionHandler serves POST /inject for the demo, over fake GPUs only:
//
//	/inject?gpu=3&xid=79                 deliver an XID event
//	/inject?gpu=3&fault=NAME             dbe, sbe, remap-failure, remap-pending, lost,
//	                                     throttle, pcie, nvlink, read-error
//	/inject?gpu=3&fault=reset            what nvidia-smi -r and an operator do: the fake
//	                                     GPU resets and its faults are cleared
//	/inject?gpu=3&utilization=40[&memory=20]   set GPU (and memory) utilization, percent
//
// Serve it on loopback only (CheckLoopback): it makes GPUs fail.
func (a *Agent) FaultInjectionHandler(f *nvmlsource.FakeGPUs) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /inject", func(w http.ResponseWriter, r *http.Request) {
		msg, err := a.inject(f, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.log.Info("Fault injected", "what", msg)
		fmt.Fprintln(w, msg)
	})
	return mux
}

func (a *Agent) inject(f *nvmlsource.FakeGPUs, r *http.Request) (string, error) {
	q := r.URL.Query()
	gpu, err := strconv.Atoi(q.Get("gpu"))
	if err != nil {
		return "", fmt.Errorf("gpu=%q: want a GPU index", q.Get("gpu"))
	}
	set := 0
	for _, k := range []string{"xid", "fault", "utilization"} {
		if q.Has(k) {
			set++
		}
	}
	if set != 1 {
		return "", fmt.Errorf("want exactly one of xid=, fault=, utilization=")
	}
	switch {
	case q.Has("xid"):
		code, err := strconv.ParseUint(q.Get("xid"), 10, 64)
		if err != nil {
			return "", fmt.Errorf("xid=%q: want an XID number", q.Get("xid"))
		}
		return fmt.Sprintf("GPU %d: XID %d raised", gpu, code), f.RaiseXID(gpu, code)
	case q.Has("utilization"):
		util, err := percent(q.Get("utilization"))
		if err != nil {
			return "", fmt.Errorf("utilization=%q: %w", q.Get("utilization"), err)
		}
		mem := uint32(0)
		if q.Has("memory") {
			if mem, err = percent(q.Get("memory")); err != nil {
				return "", fmt.Errorf("memory=%q: %w", q.Get("memory"), err)
			}
		}
		return fmt.Sprintf("GPU %d: utilization %d%%, memory %d%%", gpu, util, mem), f.SetUtilization(gpu, util, mem)
	}
	name := q.Get("fault")
	if name == "reset" {
		if err := f.ResetGPU(gpu); err != nil {
			return "", err
		}
		// Persistent faults stay until an operator clears them; a reset is that operator.
		if st, ok := a.Tracker().GPU(gpu); ok {
			for _, fault := range st.Faults {
				a.Tracker().Clear(gpu, fault.Reason)
			}
		}
		return fmt.Sprintf("GPU %d: reset, faults cleared", gpu), nil
	}
	inject, ok := faults[name]
	if !ok {
		return "", fmt.Errorf("fault=%q: want dbe, sbe, remap-failure, remap-pending, lost, throttle, pcie, nvlink, read-error or reset", name)
	}
	return fmt.Sprintf("GPU %d: %s injected", gpu, name), inject(f, gpu)
}

func percent(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v > 100 {
		return 0, fmt.Errorf("want a percentage from 0 to 100")
	}
	return uint32(v), nil
}
