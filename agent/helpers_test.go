package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck/nvmlsource"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const testNode = "gpu-1"

// testConfig is the default configuration on fake H100s.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.NodeName = testNode
	cfg.NVML = "fake:dgxh100"
	return cfg
}

func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// nodeObj is a Node for the condition patch to land on.
func nodeObj(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// fakeClient is an in-memory API server holding the test Node, with funcs intercepting.
func fakeClient(t testing.TB, funcs interceptor.Funcs) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithObjects(nodeObj(testNode)).
		WithStatusSubresource(&chamberv1alpha1.GPUNode{}, &corev1.Node{}).
		WithInterceptorFuncs(funcs).Build()
}

// testAgent is an Agent running on fake GPUs and a fake clock; the test steps the clock
// and waits for the loop's passes, so nothing depends on wall-clock timing except NVML
// event delivery, which is a real goroutine.
type testAgent struct {
	*Agent
	t      testing.TB
	gpus   *nvmlsource.FakeGPUs
	clock  *clocktesting.FakeClock
	client client.Client
	passes chan passReport
}

// newTestAgent builds an agent without running it; change may adjust the options.
func newTestAgent(t testing.TB, c client.Client, change ...func(*Options)) *testAgent {
	t.Helper()
	gpus, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gpus.Close)
	clk := clocktesting.NewFakeClock(t0)
	opts := Options{Config: testConfig(), NVML: gpus, Client: c, Clock: clk, Log: testr.NewWithInterface(t, testr.Options{})}
	for _, f := range change {
		f(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ta := &testAgent{Agent: a, t: t, gpus: gpus, clock: clk, client: c, passes: make(chan passReport, 10_000)}
	a.afterReconcile = func(r passReport) { ta.passes <- r }
	return ta
}

// startTestAgent runs a new agent until the test ends and waits for its first pass.
func startTestAgent(t testing.TB, c client.Client, change ...func(*Options)) *testAgent {
	t.Helper()
	ta := newTestAgent(t, c, change...)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ta.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		ta.gpus.Close() // event waits return at once
		wg.Wait()
	})
	ta.waitFor(func(p passReport) bool { return p.pass == passStart })
	return ta
}

// waitFor consumes passes until one satisfies ok, and returns the writes of all of them.
func (ta *testAgent) waitFor(ok func(passReport) bool) int {
	ta.t.Helper()
	return ta.waitSince(time.Time{}, ok)
}

// waitSince is waitFor counting only the writes of passes begun at or after from.
func (ta *testAgent) waitSince(from time.Time, ok func(passReport) bool) int {
	ta.t.Helper()
	wrote := 0
	timeout := time.After(30 * time.Second)
	for {
		select {
		case p := <-ta.passes:
			if !p.at.Before(from) {
				wrote += p.wrote
			}
			if ok(p) {
				return wrote
			}
		case <-timeout:
			ta.t.Fatal("the agent's loop did not make the expected pass within 30s")
			return wrote
		}
	}
}

// step advances the fake clock by d and waits for the pass of kind p that it causes; it
// returns the writes made at the new time up to that pass.
func (ta *testAgent) step(d time.Duration, p pass) int {
	ta.t.Helper()
	ta.clock.Step(d)
	now := ta.clock.Now()
	return ta.waitSince(now, func(r passReport) bool { return r.pass == p && !r.at.Before(now) })
}

// poll steps the clock to the Monitor's next poll, waits for that poll to land in the
// Tracker, and steps one more second so that the agent's check pass reads it. The
// Monitor's loop and the agent's are goroutines of their own that one clock step wakes
// together; this keeps a test from depending on which runs first. It returns the writes
// made from the poll on.
func (ta *testAgent) poll() int {
	ta.t.Helper()
	start := ta.clock.Now()
	from := start.Add(time.Nanosecond)
	polls := ta.Tracker().Node().Polls
	ta.clock.Step(start.Truncate(ta.cfg.PollInterval).Add(ta.cfg.PollInterval).Sub(start))
	at := ta.clock.Now()
	wrote := ta.waitSince(from, func(r passReport) bool { return r.pass == passPoll && !r.at.Before(at) })
	// The Monitor polls in its own goroutine.
	eventually(ta.t, "the Monitor's poll", func() bool { return ta.Tracker().Node().Polls > polls })
	ta.clock.Step(eventCheckInterval)
	at = ta.clock.Now()
	return wrote + ta.waitSince(from, func(r passReport) bool { return r.pass == passCheck && !r.at.Before(at) })
}

// eventually polls cond on the wall clock: for NVML events, which a real goroutine
// delivers to the Tracker.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitXIDs waits until the Tracker counted n XIDs code on GPU gpu.
func (ta *testAgent) waitXIDs(gpu int, code, n uint64) {
	ta.t.Helper()
	eventually(ta.t, "the XID event to reach the Tracker", func() bool {
		st, ok := ta.Tracker().GPU(gpu)
		return ok && st.XIDCounts[code] >= n
	})
}

// gpuNode reads the agent's GPUNode.
func (ta *testAgent) gpuNode() *chamberv1alpha1.GPUNode {
	ta.t.Helper()
	var gn chamberv1alpha1.GPUNode
	if err := ta.client.Get(context.Background(), client.ObjectKey{Name: testNode}, &gn); err != nil {
		ta.t.Fatal(err)
	}
	return &gn
}

// nodeCondition reads the Node's GPUHealthy condition.
func (ta *testAgent) nodeCondition() *corev1.NodeCondition {
	ta.t.Helper()
	var n corev1.Node
	if err := ta.client.Get(context.Background(), client.ObjectKey{Name: testNode}, &n); err != nil {
		ta.t.Fatal(err)
	}
	for i, c := range n.Status.Conditions {
		if string(c.Type) == chamberv1alpha1.ConditionGPUHealthy {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
