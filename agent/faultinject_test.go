package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck"
)

func TestFaultInjection(t *testing.T) {
	cases := map[string]struct {
		method, query string
		wantCode      int
		wantBody      string
		// wantGPU3 is GPU 3's health and reasons after a poll; nil to skip.
		wantGPU3 *gpuHealth
		wantUtil uint32
	}{
		"xid": {
			query: "gpu=3&xid=79", wantCode: 200, wantBody: "GPU 3: XID 79 raised",
			wantGPU3: &gpuHealth{Health: "Unhealthy", Reasons: []string{"XID79"}},
		},
		"double-bit ECC": {
			query: "gpu=3&fault=dbe", wantCode: 200,
			wantGPU3: &gpuHealth{Health: "Unhealthy", Reasons: []string{"ECCDoubleBit", "XID48"}},
		},
		"remap failure": {
			query: "gpu=3&fault=remap-failure", wantCode: 200,
			wantGPU3: &gpuHealth{Health: "Unhealthy", Reasons: []string{"RowRemapFailure", "XID64"}},
		},
		"lost": {
			query: "gpu=3&fault=lost", wantCode: 200,
			wantGPU3: &gpuHealth{Health: "Unhealthy", Reasons: []string{"GPULost", "XID79"}},
		},
		"utilization":      {query: "gpu=3&utilization=40&memory=10", wantCode: 200, wantUtil: 40, wantGPU3: &gpuHealth{Health: "Healthy"}},
		"throttle waits":   {query: "gpu=3&fault=throttle", wantCode: 200, wantGPU3: &gpuHealth{Health: "Healthy"}},
		"unknown fault":    {query: "gpu=3&fault=melt", wantCode: 400, wantBody: `fault="melt"`},
		"no GPU":           {query: "xid=79", wantCode: 400, wantBody: "want a GPU index"},
		"GPU out of range": {query: "gpu=8&xid=79", wantCode: 400, wantBody: "GPUs 0 to 7"},
		"two things":       {query: "gpu=3&xid=79&fault=dbe", wantCode: 400, wantBody: "exactly one"},
		"utilization 101":  {query: "gpu=3&utilization=101", wantCode: 400, wantBody: "percentage"},
		"GET":              {method: http.MethodGet, query: "gpu=3&xid=79", wantCode: 405},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ta := newTestAgent(t, fakeClient(t, interceptor.Funcs{}))
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(func() { cancel(); ta.gpus.Close(); _ = ta.monitor.Wait() })
			ta.startNVML(ctx) // registers the GPUs for events
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			rec := httptest.NewRecorder()
			ta.FaultInjectionHandler(ta.gpus).ServeHTTP(rec, httptest.NewRequest(method, "/inject?"+tc.query, nil))
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Fatalf("answer %d %q, want %d containing %q", rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
			if tc.wantGPU3 == nil {
				return
			}
			if want := tc.wantGPU3.Reasons; len(want) > 0 && strings.HasPrefix(want[len(want)-1], "XID") {
				// The XID reaches the Tracker through the event goroutine.
				code, _ := strconv.ParseUint(strings.TrimPrefix(want[len(want)-1], "XID"), 10, 64)
				ta.waitXIDs(3, code, 1)
			}
			if err := ta.monitor.Poll(); err != nil {
				t.Fatal(err)
			}
			st, _ := ta.Tracker().GPU(3)
			got := gpuHealth{Health: chamberv1alpha1.GPUHealth(st.Health)}
			for _, r := range st.Reasons() {
				got.Reasons = append(got.Reasons, string(r))
			}
			if diff := cmp.Diff(*tc.wantGPU3, got); diff != "" {
				t.Errorf("GPU 3 after the injection and a poll (-want +got):\n%s", diff)
			}
			if st.Sample.GPUUtilPercent != tc.wantUtil {
				t.Errorf("GPU 3 utilization = %d, want %d", st.Sample.GPUUtilPercent, tc.wantUtil)
			}
		})
	}
}

// TestFaultInjectionReset: a reset clears a persistent fault, as an operator would.
func TestFaultInjectionReset(t *testing.T) {
	ta := newTestAgent(t, fakeClient(t, interceptor.Funcs{}))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); ta.gpus.Close(); _ = ta.monitor.Wait() })
	ta.startNVML(ctx)
	h := ta.FaultInjectionHandler(ta.gpus)
	for _, q := range []string{"gpu=2&fault=lost", "gpu=2&fault=reset"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inject?"+q, nil))
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", q, rec.Code, rec.Body)
		}
		if q == "gpu=2&fault=lost" {
			ta.waitXIDs(2, 79, 1)
		}
	}
	if err := ta.monitor.Poll(); err != nil {
		t.Fatal(err)
	}
	if st, _ := ta.Tracker().GPU(2); st.Health != healthcheck.Healthy || len(st.Faults) != 0 {
		t.Errorf("GPU 2 after reset: %s %v, want Healthy without faults", st.Health, st.Reasons())
	}
}
