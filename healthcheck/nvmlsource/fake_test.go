package nvmlsource

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clocktesting "k8s.io/utils/clock/testing"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeNode is a node of fake GPUs with the reader, event watcher and tracker wired by
// hand, so a test decides when each poll and event happens.
type fakeNode struct {
	t       *testing.T
	cfg     healthcheck.Config
	gpus    *FakeGPUs
	clock   *clocktesting.FakeClock
	reader  *Reader
	watcher *EventWatcher
	tracker *healthcheck.Tracker
}

func newFakeNode(t *testing.T, model string, cfg healthcheck.Config) *fakeNode {
	t.Helper()
	gpus, err := NewFake(model)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gpus.Close)
	if err := InitNVML(gpus); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(t0)
	w, err := NewEventWatcher(gpus, clk, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeNode{t: t, cfg: cfg, gpus: gpus, clock: clk, reader: NewReader(gpus), watcher: w, tracker: healthcheck.NewTracker(cfg, clk)}
}

// inject fails the test when the injector does.
func (n *fakeNode) inject(err error) {
	n.t.Helper()
	if err != nil {
		n.t.Fatal(err)
	}
}

// events hands every queued event to the tracker, as the event loop would.
func (n *fakeNode) events() {
	for {
		ev, ok := n.watcher.Next()
		if !ok {
			return
		}
		n.tracker.RecordEvent(ev)
	}
}

// poll steps the clock one interval and polls, as the poll loop would.
func (n *fakeNode) poll(times int) {
	n.t.Helper()
	for range times {
		n.clock.Step(n.cfg.PollInterval)
		s, err := n.reader.Read()
		if err != nil {
			n.t.Fatal(err)
		}
		n.tracker.Observe(s)
	}
}

// health returns the GPUs that are not healthy, and their reasons.
func (n *fakeNode) health() (map[int]healthcheck.Health, map[int][]healthcheck.Reason) {
	health, reasons := map[int]healthcheck.Health{}, map[int][]healthcheck.Reason{}
	for _, g := range n.tracker.GPUs() {
		if g.Health != healthcheck.Healthy {
			health[g.Index] = g.Health
		}
		if len(g.Faults) > 0 {
			reasons[g.Index] = g.Reasons()
		}
	}
	return health, reasons
}

func TestFaultsOnFakeGPUs(t *testing.T) {
	tests := map[string]struct {
		model         string
		inject        func(f *FakeGPUs) error
		polls         int
		wantHealth    map[int]healthcheck.Health // GPUs not listed are Healthy
		wantReasons   map[int][]healthcheck.Reason
		wantXIDCounts map[uint64]uint64 // on GPU 3
	}{
		"XID 79 on GPU 3": {
			inject:        func(f *FakeGPUs) error { return f.RaiseXID(3, 79) },
			polls:         1,
			wantHealth:    map[int]healthcheck.Health{3: healthcheck.Unhealthy},
			wantReasons:   map[int][]healthcheck.Reason{3: {"XID79"}},
			wantXIDCounts: map[uint64]uint64{79: 1},
		},
		"XID 13 is an application error": {
			inject:        func(f *FakeGPUs) error { return f.RaiseXID(3, 13) },
			polls:         1,
			wantXIDCounts: map[uint64]uint64{13: 1},
		},
		"XID 48 three times counts three": {
			inject: func(f *FakeGPUs) error {
				return errors.Join(f.RaiseXID(3, 48), f.RaiseXID(3, 48), f.RaiseXID(3, 48))
			},
			polls:         1,
			wantHealth:    map[int]healthcheck.Health{3: healthcheck.Unhealthy},
			wantReasons:   map[int][]healthcheck.Reason{3: {"XID48"}},
			wantXIDCounts: map[uint64]uint64{48: 3},
		},
		"double-bit ECC error": {
			inject:        func(f *FakeGPUs) error { return f.RaiseDoubleBitECC(3) },
			polls:         1,
			wantHealth:    map[int]healthcheck.Health{3: healthcheck.Unhealthy},
			wantReasons:   map[int][]healthcheck.Reason{3: {healthcheck.ReasonECCDoubleBit, "XID48"}},
			wantXIDCounts: map[uint64]uint64{48: 1},
		},
		"row remap failure": {
			inject:        func(f *FakeGPUs) error { return f.FailRowRemap(3) },
			polls:         1,
			wantHealth:    map[int]healthcheck.Health{3: healthcheck.Unhealthy},
			wantReasons:   map[int][]healthcheck.Reason{3: {healthcheck.ReasonRowRemapFailure, "XID64"}},
			wantXIDCounts: map[uint64]uint64{64: 1},
		},
		"row remap pending": {
			inject:        func(f *FakeGPUs) error { return f.SetRowRemapPending(3, true) },
			polls:         1,
			wantHealth:    map[int]healthcheck.Health{3: healthcheck.Degraded},
			wantReasons:   map[int][]healthcheck.Reason{3: {healthcheck.ReasonRowRemapPending, "XID63"}},
			wantXIDCounts: map[uint64]uint64{63: 1},
		},
		"GPU falls off the bus": {
			inject:        func(f *FakeGPUs) error { return f.LoseGPU(3) },
			polls:         1,
			wantHealth:    map[int]healthcheck.Health{3: healthcheck.Unhealthy},
			wantReasons:   map[int][]healthcheck.Reason{3: {healthcheck.ReasonGPULost, "XID79"}},
			wantXIDCounts: map[uint64]uint64{79: 1},
		},
		"thermal slowdown for ThrottlePolls polls": {
			inject:      func(f *FakeGPUs) error { return f.SetThrottle(3, nvml.ClocksThrottleReasonHwThermalSlowdown) },
			polls:       6,
			wantHealth:  map[int]healthcheck.Health{3: healthcheck.Degraded},
			wantReasons: map[int][]healthcheck.Reason{3: {healthcheck.ReasonThermalThrottle}},
		},
		"thermal slowdown one poll short": {
			inject: func(f *FakeGPUs) error { return f.SetThrottle(3, nvml.ClocksThrottleReasonHwThermalSlowdown) },
			polls:  5,
		},
		"power brake on an A100": {
			model:       "fake:dgxa100",
			inject:      func(f *FakeGPUs) error { return f.SetThrottle(3, nvml.ClocksThrottleReasonHwPowerBrakeSlowdown) },
			polls:       6,
			wantHealth:  map[int]healthcheck.Health{3: healthcheck.Degraded},
			wantReasons: map[int][]healthcheck.Reason{3: {healthcheck.ReasonPowerThrottle}},
		},
		"NVML errors on one GPU": {
			inject:      func(f *FakeGPUs) error { return f.FailReads(3, nvml.ERROR_UNKNOWN) },
			polls:       3,
			wantHealth:  map[int]healthcheck.Health{3: healthcheck.Degraded},
			wantReasons: map[int][]healthcheck.Reason{3: {healthcheck.ReasonNVMLReadError}},
		},
		"one corrected ECC error does not degrade": {
			inject: func(f *FakeGPUs) error { return f.AddCorrectableECC(3, 1) },
			polls:  1,
		},
		"busy GPU is healthy": {
			inject: func(f *FakeGPUs) error {
				return errors.Join(f.SetUtilization(3, 97, 60), f.SetMemoryUsed(3, 70<<30), f.SetTemperature(3, 78, 650_000))
			},
			polls: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			model := tc.model
			if model == "" {
				model = "dgxh100"
			}
			n := newFakeNode(t, model, healthcheck.DefaultConfig())
			n.poll(1) // a baseline, as the agent polls once at start
			n.inject(tc.inject(n.gpus))
			n.events()
			n.poll(tc.polls)

			gotHealth, gotReasons := n.health()
			if diff := cmp.Diff(tc.wantHealth, gotHealth, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("unhealthy GPUs (-want +got):\n%s", diff)
			}
			sortReasons := cmpopts.SortSlices(func(a, b healthcheck.Reason) bool { return a < b })
			if diff := cmp.Diff(tc.wantReasons, gotReasons, cmpopts.EquateEmpty(), sortReasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			g3, _ := n.tracker.GPU(3)
			if diff := cmp.Diff(tc.wantXIDCounts, g3.XIDCounts, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("GPU 3 XID counts (-want +got):\n%s", diff)
			}
			if got := len(n.tracker.GPUs()); got != 8 {
				t.Errorf("tracker has %d GPUs, want 8", got)
			}
		})
	}
}

func TestTransientFaultsClearPersistentStay(t *testing.T) {
	cfg := healthcheck.DefaultConfig()
	n := newFakeNode(t, "dgxh100", cfg)
	n.poll(1)
	n.inject(n.gpus.RaiseXID(1, 94))             // contained ECC error: transient
	n.inject(n.gpus.RaiseDoubleBitECC(2))        // persistent
	n.inject(n.gpus.SetRowRemapPending(4, true)) // transient, but only once the GPU is reset
	n.events()
	n.poll(1)

	wantAll := map[int]healthcheck.Health{1: healthcheck.Degraded, 2: healthcheck.Unhealthy, 4: healthcheck.Degraded}
	if got, _ := n.health(); !cmp.Equal(wantAll, got) {
		t.Fatalf("after the faults: health %v, want %v", got, wantAll)
	}

	// One poll short of RecoveryPolls clean polls: nothing clears yet.
	n.poll(cfg.RecoveryPolls - 1)
	if got, _ := n.health(); !cmp.Equal(wantAll, got) {
		t.Fatalf("after %d clean polls: health %v, want %v", cfg.RecoveryPolls-1, got, wantAll)
	}

	// The RecoveryPolls-th clean poll clears XIDs 94 and 63 (both one-off events); the
	// remap is still pending and the double-bit error is persistent.
	n.poll(1)
	wantHealth := map[int]healthcheck.Health{2: healthcheck.Unhealthy, 4: healthcheck.Degraded}
	wantReasons := map[int][]healthcheck.Reason{2: {healthcheck.ReasonECCDoubleBit, "XID48"}, 4: {healthcheck.ReasonRowRemapPending}}
	gotHealth, gotReasons := n.health()
	if diff := cmp.Diff(wantHealth, gotHealth); diff != "" {
		t.Errorf("after %d clean polls: health (-want +got):\n%s", cfg.RecoveryPolls, diff)
	}
	if diff := cmp.Diff(wantReasons, gotReasons); diff != "" {
		t.Errorf("after %d clean polls: reasons (-want +got):\n%s", cfg.RecoveryPolls, diff)
	}

	// Reset both GPUs. The remap takes effect and GPU 4 recovers by itself after
	// RecoveryPolls; GPU 2's double-bit error waits for an operator.
	n.inject(n.gpus.ResetGPU(2))
	n.inject(n.gpus.ResetGPU(4))
	n.poll(cfg.RecoveryPolls * 10)
	wantHealth = map[int]healthcheck.Health{2: healthcheck.Unhealthy}
	wantReasons = map[int][]healthcheck.Reason{2: {healthcheck.ReasonECCDoubleBit, "XID48"}}
	gotHealth, gotReasons = n.health()
	if diff := cmp.Diff(wantHealth, gotHealth); diff != "" {
		t.Errorf("after the resets: health (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantReasons, gotReasons); diff != "" {
		t.Errorf("after the resets: reasons (-want +got):\n%s", diff)
	}

	for _, r := range []healthcheck.Reason{healthcheck.ReasonECCDoubleBit, "XID48"} {
		if !n.tracker.Clear(2, r) {
			t.Errorf("Clear(2, %s) = false, want true", r)
		}
	}
	n.poll(1)
	if got, _ := n.health(); len(got) != 0 {
		t.Errorf("after the operator cleared GPU 2: health %v, want all healthy", got)
	}
	if g, _ := n.tracker.GPU(2); g.XIDCounts[48] != 1 {
		t.Errorf("XID 48 count after clearing = %d, want 1: counters keep history", g.XIDCounts[48])
	}
}

func TestClearedFaultComesBackWhileTheConditionHolds(t *testing.T) {
	n := newFakeNode(t, "dgxh100", healthcheck.DefaultConfig())
	n.inject(n.gpus.FailRowRemap(5))
	n.poll(1)
	n.tracker.Clear(5, healthcheck.ReasonRowRemapFailure) // cleared without replacing the GPU
	n.poll(1)
	if _, reasons := n.health(); !cmp.Equal(reasons[5], []healthcheck.Reason{healthcheck.ReasonRowRemapFailure}) {
		t.Errorf("GPU 5 reasons = %v, want the remap failure back", reasons[5])
	}
}

func TestThrottleDoesNotFlap(t *testing.T) {
	cfg := healthcheck.DefaultConfig()
	n := newFakeNode(t, "dgxh100", cfg)
	n.inject(n.gpus.SetThrottle(0, nvml.ClocksThrottleReasonHwThermalSlowdown))
	n.poll(cfg.ThrottlePolls)
	// Slowdown on every other poll: never RecoveryPolls clean polls in a row.
	for i := range cfg.RecoveryPolls * 3 {
		reasons := uint64(0)
		if i%2 == 1 {
			reasons = nvml.ClocksThrottleReasonHwThermalSlowdown
		}
		n.inject(n.gpus.SetThrottle(0, reasons))
		n.poll(1)
		if g, _ := n.tracker.GPU(0); g.Health != healthcheck.Degraded {
			t.Fatalf("poll %d: GPU 0 is %s, want Degraded throughout", i, g.Health)
		}
	}
	n.inject(n.gpus.SetThrottle(0, 0))
	n.poll(cfg.RecoveryPolls)
	if g, _ := n.tracker.GPU(0); g.Health != healthcheck.Healthy {
		t.Errorf("after %d clean polls GPU 0 is %s, want Healthy", cfg.RecoveryPolls, g.Health)
	}
}

func TestIgnoredReasons(t *testing.T) {
	cfg := healthcheck.DefaultConfig()
	cfg.IgnoredReasons = []healthcheck.Reason{"XID74", healthcheck.ReasonThermalThrottle}
	n := newFakeNode(t, "dgxh100", cfg)
	n.inject(n.gpus.RaiseXID(0, 74))
	n.inject(n.gpus.SetThrottle(0, nvml.ClocksThrottleReasonHwThermalSlowdown))
	n.events()
	n.poll(cfg.ThrottlePolls)
	if got, _ := n.health(); len(got) != 0 {
		t.Errorf("health %v, want all healthy", got)
	}
	if g, _ := n.tracker.GPU(0); g.XIDCounts[74] != 1 {
		t.Errorf("XID 74 count = %d, want 1: ignored XIDs are still counted", g.XIDCounts[74])
	}
}

func TestNVMLErrorsOnOneGPUDoNotHideOthers(t *testing.T) {
	gpus, err := NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(gpus.FailReads(2, nvml.ERROR_UNKNOWN), gpus.LoseGPU(6), gpus.SetUtilization(0, 55, 20)); err != nil {
		t.Fatal(err)
	}
	s, err := NewReader(gpus).Read()
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		UUIDKnown   bool
		Name        string
		MemoryTotal uint64
		GPUUtil     uint32
		Lost        bool
		Errors      []healthcheck.ReadError
		Unsupported []string
	}
	var got []summary
	for _, g := range s.GPUs {
		got = append(got, summary{g.UUID != "", g.Name, g.MemoryTotalBytes, g.GPUUtilPercent, g.Lost, g.Errors, g.Unsupported.Names()})
	}
	// H100s retire no pages (they remap rows): NVML answers not supported, no fault.
	// SM activity needs a second GPM sample: none in a first poll.
	unsupported := []string{"retiredPagesSingleBit", "retiredPagesDoubleBit", "retiredPagesPending", "smActivity"}
	healthy := summary{UUIDKnown: true, Name: "NVIDIA H100 80GB HBM3", MemoryTotal: 80 << 30, Unsupported: unsupported}
	want := []summary{healthy, healthy, healthy, healthy, healthy, healthy, healthy, healthy}
	want[0].GPUUtil = 55
	// GPU 2 answers ERROR_UNKNOWN to every reading: each is an error but SM activity, for
	// which GPM trouble is never one (the older utilization stands in).
	var failed []healthcheck.ReadError
	for _, f := range []healthcheck.Field{healthcheck.FieldUUID, healthcheck.FieldName, healthcheck.FieldPCI,
		healthcheck.FieldMemory, healthcheck.FieldUtilization, healthcheck.FieldTemperature,
		healthcheck.FieldPower, healthcheck.FieldThrottle, healthcheck.FieldECCVolatileCorrected,
		healthcheck.FieldECCVolatileUncorrected, healthcheck.FieldECCAggregateCorrected,
		healthcheck.FieldECCAggregateUncorrected, healthcheck.FieldRetiredPagesSingleBit,
		healthcheck.FieldRetiredPagesDoubleBit, healthcheck.FieldRetiredPagesPending,
		healthcheck.FieldRemappedRows, healthcheck.FieldPCIeReplay, healthcheck.FieldNVLink} {
		failed = append(failed, healthcheck.ReadError{Field: f, Err: nvml.ERROR_UNKNOWN})
	}
	want[2] = summary{Errors: failed, Unsupported: []string{"smActivity"}}
	want[6] = summary{Lost: true, Errors: []healthcheck.ReadError{{Field: healthcheck.FieldUUID, Err: nvml.ERROR_GPU_IS_LOST}}}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("samples (-want +got):\n%s", diff)
	}
	if got, want := s.GPUs[4].NVLink.ActiveLinks, 18; got != want {
		t.Errorf("GPU 4 active NVLinks = %d, want %d", got, want)
	}
	if s.DriverVersion != "550.54.15" {
		t.Errorf("driver version %q", s.DriverVersion)
	}
}

func TestNewFake(t *testing.T) {
	tests := map[string]struct {
		model     string
		wantName  string
		wantGPUs  int
		wantError bool
	}{
		"dgxh100 with the flag's prefix": {model: "fake:dgxh100", wantName: "NVIDIA H100 80GB HBM3", wantGPUs: 8},
		"dgxa100":                        {model: "dgxa100", wantName: "Mock NVIDIA A100-SXM4-40GB", wantGPUs: 8},
		"unknown model":                  {model: "fake:dgx1", wantError: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, err := NewFake(tc.model)
			if (err != nil) != tc.wantError {
				t.Fatalf("NewFake(%q) error = %v, want error %v", tc.model, err, tc.wantError)
			}
			if err != nil {
				return
			}
			s, err := NewReader(f).Read()
			if err != nil {
				t.Fatal(err)
			}
			if len(s.GPUs) != tc.wantGPUs || s.GPUs[0].Name != tc.wantName {
				t.Errorf("got %d GPUs named %q, want %d named %q", len(s.GPUs), s.GPUs[0].Name, tc.wantGPUs, tc.wantName)
			}
			if err := f.RaiseXID(8, 79); err == nil {
				t.Errorf("RaiseXID on GPU 8 of 8: no error")
			}
		})
	}
}

func TestNVMLUnavailable(t *testing.T) {
	gpus, err := NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	gpus.FailInit(nvml.ERROR_LIBRARY_NOT_FOUND)
	m, err := NewMonitor(gpus, healthcheck.DefaultConfig(), clocktesting.NewFakeClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background())
	if !errors.Is(err, healthcheck.ErrNVMLUnavailable) {
		t.Fatalf("Start() = %v, want ErrNVMLUnavailable", err)
	}
}

func TestMonitorLoops(t *testing.T) {
	gpus, err := NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(t0)
	cfg := healthcheck.DefaultConfig()
	m, err := NewMonitor(gpus, cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	polled, delivered := make(chan struct{}, 16), make(chan healthcheck.Event, 16)
	m.afterPoll = func() { polled <- struct{}{} }
	m.afterEvent = func(ev healthcheck.Event) { delivered <- ev }
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// A guard against a hung loop, not a wait for timing: events and polls arrive as
	// soon as the loops run.
	await := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s", what)
		}
	}

	if err := gpus.RaiseXID(3, 79); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-delivered:
		want := healthcheck.Event{Kind: healthcheck.EventXID, GPU: 3, UUID: ev.UUID, XID: 79, Time: t0}
		if diff := cmp.Diff(want, ev); diff != "" || ev.UUID == "" {
			t.Errorf("event (-want +got):\n%s", diff)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event delivered")
	}
	if err := gpus.SetUtilization(5, 80, 40); err != nil {
		t.Fatal(err)
	}
	clk.Step(cfg.PollInterval)
	await("poll", polled)

	if err := m.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
	g3, _ := m.Tracker().GPU(3)
	g5, _ := m.Tracker().GPU(5)
	if g3.Health != healthcheck.Unhealthy || !cmp.Equal(g3.Reasons(), []healthcheck.Reason{"XID79"}) {
		t.Errorf("GPU 3: %s %v, want Unhealthy [XID79]", g3.Health, g3.Reasons())
	}
	if g5.Health != healthcheck.Healthy || g5.Sample.GPUUtilPercent != 80 || !g5.LastPoll.Equal(t0.Add(cfg.PollInterval)) {
		t.Errorf("GPU 5: %s, utilization %d, last poll %v", g5.Health, g5.Sample.GPUUtilPercent, g5.LastPoll)
	}
	if node := m.Tracker().Node(); node.Health != healthcheck.Unhealthy || node.Polls != 2 || node.GPUs != 8 {
		t.Errorf("node %+v", node)
	}

	cancel()
	gpus.Close() // wakes the event wait at once
	if err := m.Wait(); err != nil {
		t.Errorf("Wait() = %v", err)
	}
}

// TestSMActivityThroughGPM: on Hopper the reader takes SM activity from NVML's GPM,
// from the second poll on, apart from the utilization (a kernel spinning on a few SMs);
// the utilization window then believes it. An A100 has no GPM: the utilization stands.
func TestSMActivityThroughGPM(t *testing.T) {
	h100, err := NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(h100.SetUtilization(0, 100, 10), h100.SetSMActivity(0, 12), h100.SetUtilization(1, 60, 10)); err != nil {
		t.Fatal(err)
	}
	r := NewReader(h100)
	defer r.Close()
	first, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if first.GPUs[0].SMActivityRead || !first.GPUs[0].Unsupported.Has(healthcheck.FieldSMActivity) {
		t.Errorf("first poll: SM activity %v read, want none yet", first.GPUs[0].SMActivityPercent)
	}
	second, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	g0, g1 := second.GPUs[0], second.GPUs[1]
	if !g0.SMActivityRead || g0.SMActivityPercent != 12 || g0.GPUUtilPercent != 100 {
		t.Errorf("GPU 0: SM activity %v (read %v), utilization %d; want 12 beside 100", g0.SMActivityPercent, g0.SMActivityRead, g0.GPUUtilPercent)
	}
	if !g1.SMActivityRead || g1.SMActivityPercent != 60 {
		t.Errorf("GPU 1: SM activity %v (read %v), want 60, its utilization", g1.SMActivityPercent, g1.SMActivityRead)
	}
	w := healthcheck.NewUtilizationWindow(time.Minute)
	now := time.Now()
	w.Observe([]healthcheck.GPUStatus{{Index: 0, Sample: g0, LastPoll: now}}, now)
	if pct, _, ok := w.Mean(0); !ok || pct != 12 || w.Signal(0) != chamberv1alpha1.SignalSMActivity {
		t.Errorf("window: %d%% by %s, want 12%% by SMActivity", pct, w.Signal(0))
	}

	a100, err := NewFake("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	ra := NewReader(a100)
	for range 2 {
		s, err := ra.Read()
		if err != nil {
			t.Fatal(err)
		}
		if g := s.GPUs[0]; g.SMActivityRead || !g.Unsupported.Has(healthcheck.FieldSMActivity) || len(g.Errors) != 0 {
			t.Errorf("A100: SM activity read %v, unsupported %v, errors %v; want unsupported, no error", g.SMActivityRead, g.Unsupported.Has(healthcheck.FieldSMActivity), g.Errors)
		}
	}
}
