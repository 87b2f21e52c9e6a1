package isolation

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

var start = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

func TestBreakerLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		percent int32
		nodes   int
		want    int
	}{
		"half of ten":          {percent: 50, nodes: 10, want: 5},
		"half of three":        {percent: 50, nodes: 3, want: 1},
		"a one-node pool":      {percent: 50, nodes: 1, want: 1},
		"ten percent of 1000":  {percent: 10, nodes: 1000, want: 100},
		"everything":           {percent: 100, nodes: 7, want: 7},
		"one percent of fifty": {percent: 1, nodes: 50, want: 1},
	} {
		t.Run(name, func(t *testing.T) {
			if got := breakerLimit(chamber.IsolationPolicy{MaxIsolatedPercent: ptr.To(tc.percent)}, tc.nodes); got != tc.want {
				t.Errorf("breakerLimit(%d%%, %d nodes) = %d, want %d", tc.percent, tc.nodes, got, tc.want)
			}
		})
	}
}

// gpuNode is a GPUNode of 8 healthy GPUs reporting at heartbeat every 30 s; faulty
// sets GPU i's health and faults.
func gpuNode(name string, heartbeat time.Time, faulty map[int32][]chamber.GPUFault) *chamber.GPUNode {
	gn := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: chamber.GPUNodeStatus{
		Health: chamber.GPUHealthy, LastHeartbeatTime: &metav1.Time{Time: heartbeat}, HeartbeatSeconds: 30,
	}}
	for i := range int32(8) {
		g := chamber.GPUStatus{Index: i, Health: chamber.GPUHealthy}
		if faults, ok := faulty[i]; ok {
			g.Faults, g.Health = faults, chamber.GPUDegraded
			for _, f := range faults {
				if f.Severity == chamber.GPUUnhealthy {
					g.Health, gn.Status.Health = chamber.GPUUnhealthy, chamber.GPUUnhealthy
				}
			}
		}
		gn.Status.GPUs = append(gn.Status.GPUs, g)
	}
	return gn
}

// Faults as the agent reports them, with their actions in NVIDIA's XID catalog.
var (
	xid79 = chamber.GPUFault{Reason: "XID79", Severity: chamber.GPUUnhealthy, Action: "RebootNode", Persistent: true, Message: "XID 79: GPU has fallen off the bus"}
	xid48 = chamber.GPUFault{Reason: "XID48", Severity: chamber.GPUUnhealthy, Action: "ResetGPU", Persistent: true, Message: "XID 48: Double-bit ECC error"}
	xid92 = chamber.GPUFault{Reason: "XID92", Severity: chamber.GPUDegraded, Action: "ResetGPU", Message: "XID 92: High single-bit ECC error rate"}
	gsp   = chamber.GPUFault{Reason: "XID119", Severity: chamber.GPUUnhealthy, Action: "ResetGPU", Message: "XID 119: GSP RPC timeout"}
	// remapFailed needs the GPU replaced: the node is drained.
	remapFailed = chamber.GPUFault{Reason: "RowRemapFailure", Severity: chamber.GPUUnhealthy, Action: "DrainAndReplace", Persistent: true}
)

func TestIsolationLevel(t *testing.T) {
	noAction := xid48
	noAction.Action = ""
	// A GPU the agent calls Unhealthy without an Unhealthy fault to say why.
	unexplained := gpuNode("n", start, map[int32][]chamber.GPUFault{4: {xid92}})
	unexplained.Status.GPUs[4].Health, unexplained.Status.Health = chamber.GPUUnhealthy, chamber.GPUUnhealthy
	for name, tc := range map[string]struct {
		pool      chamber.IsolationLevel
		gn        *chamber.GPUNode
		wantLevel chamber.IsolationLevel
		wantWhy   string
	}{
		"XID 48: a GPU reset clears it": {
			pool: chamber.IsolateAuto, gn: gpuNode("n", start, map[int32][]chamber.GPUFault{2: {xid48}}),
			wantLevel: chamber.IsolateGPU, wantWhy: "a reset of the failing GPUs is all the faults need",
		},
		"an unset level is Auto": {
			gn:        gpuNode("n", start, map[int32][]chamber.GPUFault{2: {xid48}, 3: {gsp}}),
			wantLevel: chamber.IsolateGPU, wantWhy: "a reset of the failing GPUs is all the faults need",
		},
		"XID 79 needs a reboot": {
			pool: chamber.IsolateAuto, gn: gpuNode("n", start, map[int32][]chamber.GPUFault{3: {xid79}}),
			wantLevel: chamber.IsolateNode, wantWhy: "XID79 on GPU 3 needs RebootNode",
		},
		"a failed row remap needs the GPU replaced": {
			gn:        gpuNode("n", start, map[int32][]chamber.GPUFault{1: {remapFailed}}),
			wantLevel: chamber.IsolateNode, wantWhy: "RowRemapFailure on GPU 1 needs DrainAndReplace",
		},
		"mixed faults on two GPUs: the node": {
			gn:        gpuNode("n", start, map[int32][]chamber.GPUFault{2: {xid48}, 6: {xid79}}),
			wantLevel: chamber.IsolateNode, wantWhy: "XID79 on GPU 6 needs RebootNode",
		},
		"mixed faults on one GPU: the node": {
			gn:        gpuNode("n", start, map[int32][]chamber.GPUFault{5: {xid48, xid79}}),
			wantLevel: chamber.IsolateNode, wantWhy: "XID79 on GPU 5 needs RebootNode",
		},
		"a fault without an action (an older agent): the node": {
			gn:        gpuNode("n", start, map[int32][]chamber.GPUFault{2: {noAction}}),
			wantLevel: chamber.IsolateNode, wantWhy: "XID48 on GPU 2 needs an action the agent did not report",
		},
		"an Unhealthy GPU without a fault: the node": {
			gn:        unexplained,
			wantLevel: chamber.IsolateNode, wantWhy: "GPUUnhealthy on GPU 4 needs an action the agent did not report",
		},
		"the pool forces Node on XID 48": {
			pool: chamber.IsolateNode, gn: gpuNode("n", start, map[int32][]chamber.GPUFault{2: {xid48}}),
			wantLevel: chamber.IsolateNode, wantWhy: "forced by the pool's isolation policy",
		},
		"the pool forces GPU on XID 79": {
			pool: chamber.IsolateGPU, gn: gpuNode("n", start, map[int32][]chamber.GPUFault{3: {xid79}}),
			wantLevel: chamber.IsolateGPU, wantWhy: "forced by the pool's isolation policy",
		},
	} {
		t.Run(name, func(t *testing.T) {
			level, why := readReport(tc.gn, chamber.NewHeartbeats(clocktesting.NewFakePassiveClock(start), 0), start).level(tc.pool)
			if diff := cmp.Diff([]string{string(tc.wantLevel), tc.wantWhy}, []string{string(level), why}); diff != "" {
				t.Errorf("level, why (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadReport(t *testing.T) {
	for name, tc := range map[string]struct {
		gn            *chamber.GPUNode
		wantHealth    chamber.GPUHealth
		wantAgent     bool
		wantDescribe  string
		wantPersist   bool
		wantFailing   []int
		wantUnknownRe string
	}{
		"no agent":           {wantHealth: chamber.GPUUnknown},
		"healthy":            {gn: gpuNode("n", start, nil), wantHealth: chamber.GPUHealthy, wantAgent: true},
		"degraded runs work": {gn: gpuNode("n", start, map[int32][]chamber.GPUFault{1: {xid92}}), wantHealth: chamber.GPUHealthy, wantAgent: true},
		"XID 79 is hardware": {
			gn:         gpuNode("n", start, map[int32][]chamber.GPUFault{3: {xid79}}),
			wantHealth: chamber.GPUUnhealthy, wantAgent: true, wantPersist: true, wantFailing: []int{3},
			wantDescribe: "XID79 on GPU 3 (XID 79: GPU has fallen off the bus)",
		},
		"two GPUs, one transient": {
			gn:         gpuNode("n", start, map[int32][]chamber.GPUFault{2: {gsp}, 6: {xid79, xid92}}),
			wantHealth: chamber.GPUUnhealthy, wantAgent: true, wantPersist: true, wantFailing: []int{2, 6},
			wantDescribe: "XID119 on GPU 2 (XID 119: GSP RPC timeout); XID79 on GPU 6 (XID 79: GPU has fallen off the bus)",
		},
		// An old report of a fault is silence too: it isolates nothing.
		"stale fault": {
			gn:         gpuNode("n", start.Add(-91*time.Second), map[int32][]chamber.GPUFault{3: {xid79}}),
			wantHealth: chamber.GPUUnknown, wantAgent: true, wantUnknownRe: chamber.ReasonAgentNotReporting,
		},
		"NVML unavailable": {
			gn: func() *chamber.GPUNode {
				gn := gpuNode("n", start, nil)
				gn.Status.Health, gn.Status.GPUs = chamber.GPUUnknown, nil
				return gn
			}(),
			wantHealth: chamber.GPUUnknown, wantAgent: true, wantUnknownRe: "GPUHealthUnknown",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := readReport(tc.gn, chamber.NewHeartbeats(clocktesting.NewFakePassiveClock(start), 0), start)
			got := []any{r.health, r.hasAgent, r.describe(), r.persistent(), r.failingGPUs(), r.unknownReason}
			want := []any{tc.wantHealth, tc.wantAgent, tc.wantDescribe, tc.wantPersist, tc.wantFailing, tc.wantUnknownRe}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
		})
	}
}

// env is a controller on a fake API server and a fake clock.
type env struct {
	t      *testing.T
	client client.WithWatch
	clock  *clocktesting.FakeClock
	ctrl   *Controller
	events *events.FakeRecorder
}

func newEnv(t *testing.T, opts Options, funcs *interceptor.Funcs, objs ...client.Object) *env {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(controlplane.Scheme).WithObjects(objs...).
		WithStatusSubresource(&corev1.Node{}, &chamber.GPUPool{}, &chamber.GPUNode{}, &kueue.Workload{}).
		WithIndex(&corev1.Pod{}, chamberkueue.IndexPodNode, chamberkueue.PodNode).
		WithIndex(&kueue.Workload{}, chamberkueue.IndexWorkloadOwner, chamberkueue.OwnerUIDs).
		WithIndex(&kueue.Workload{}, chamberkueue.IndexWorkloadNode, chamberkueue.WorkloadNodes)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	c := b.Build()
	clk := clocktesting.NewFakeClock(start)
	opts.Clock = clk
	rec := events.NewFakeRecorder(100)
	return &env{t: t, client: c, clock: clk, ctrl: New(c, c, rec, opts), events: rec}
}

func pool(name string, policy *chamber.IsolationPolicy) *chamber.GPUPool {
	return &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.GPUPoolSpec{NodeLabels: map[string]string{"pool": name}, Isolation: policy}}
}

func node(name, pool string) *corev1.Node {
	gpus := *resource.NewQuantity(8, resource.DecimalSI)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}},
		Status:     corev1.NodeStatus{Capacity: corev1.ResourceList{kube.ResourceGPU: gpus}, Allocatable: corev1.ResourceList{kube.ResourceGPU: gpus}},
	}
}

// reconcile runs the reconciler on the node as stored, like Karpenter's
// ExpectObjectReconciled.
func (e *env) reconcile(name string) time.Duration {
	e.t.Helper()
	var n corev1.Node
	if err := e.client.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		e.t.Fatal(err)
	}
	res, err := e.ctrl.Reconcile(context.Background(), &n)
	if err != nil {
		e.t.Fatalf("reconcile %s: %v", name, err)
	}
	return res.RequeueAfter
}

func (e *env) node(name string) *corev1.Node {
	e.t.Helper()
	var n corev1.Node
	if err := e.client.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		e.t.Fatal(err)
	}
	return &n
}

// state sums up a node for comparison: tainted, cordoned, and its condition.
type state struct {
	Tainted, Cordoned bool
	Status            corev1.ConditionStatus
	Reason            string
}

func (e *env) state(name string) state {
	n := e.node(name)
	s := state{Cordoned: n.Spec.Unschedulable}
	for _, t := range n.Spec.Taints {
		s.Tainted = s.Tainted || t.Key == chamber.TaintGPUUnhealthy
	}
	for _, c := range n.Status.Conditions {
		if c.Type == chamber.ConditionNodeIsolated {
			s.Status, s.Reason = c.Status, c.Reason
		}
	}
	return s
}

func (e *env) annotate(obj client.Object, key, value string) {
	e.t.Helper()
	if err := e.client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		e.t.Fatal(err)
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
	if err := e.client.Update(context.Background(), obj); err != nil {
		e.t.Fatal(err)
	}
}

// report writes the node's GPUNode status with a heartbeat now.
func (e *env) report(name string, faulty map[int32][]chamber.GPUFault) {
	e.t.Helper()
	var gn chamber.GPUNode
	if err := e.client.Get(context.Background(), client.ObjectKey{Name: name}, &gn); err != nil {
		e.t.Fatal(err)
	}
	gn.Status = gpuNode(name, e.clock.Now(), faulty).Status
	if err := e.client.Status().Update(context.Background(), &gn); err != nil {
		e.t.Fatal(err)
	}
}

// eventReasons drains the recorded Events' reasons.
func (e *env) eventReasons() []string {
	var out []string
	for {
		select {
		case ev := <-e.events.Events:
			out = append(out, strings.Fields(ev)[1])
		default:
			return out
		}
	}
}

var isolatedState = func(reason string) state {
	return state{Tainted: true, Cordoned: true, Status: corev1.ConditionTrue, Reason: reason}
}

// A node an operator cordoned stays cordoned after Chamber's isolation ends; the
// taint Chamber added goes.
func TestOperatorCordonStays(t *testing.T) {
	n := node("n1", "p")
	n.Spec.Unschedulable = true
	e := newEnv(t, Options{}, nil, pool("p", nil), n, gpuNode("n1", start, map[int32][]chamber.GPUFault{0: {xid79}}))
	e.reconcile("n1")
	if diff := cmp.Diff(isolatedState("XID79"), e.state("n1")); diff != "" {
		t.Fatalf("isolated node (-want +got):\n%s", diff)
	}
	if got := e.node("n1").Annotations; got[chamber.AnnotationIsolationCordoned] != "" || got[chamber.AnnotationIsolationTainted] != "true" {
		t.Fatalf("annotations %v: want Chamber's taint recorded, the operator's cordon not", got)
	}
	e.annotate(e.node("n1"), chamber.AnnotationIsolationClear, "true")
	e.reconcile("n1")
	want := state{Cordoned: true, Status: corev1.ConditionFalse, Reason: chamber.ReasonCleared}
	if diff := cmp.Diff(want, e.state("n1")); diff != "" {
		t.Errorf("cleared node (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Isolated", chamber.ReasonCleared}, e.eventReasons()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// An operator's clear holds until the agent reports again: the report Chamber heard
// before the clear (the repair not in it yet) does not isolate the node a second time;
// a fault in a report written after the clear does.
func TestClearOutlivesTheReportBeforeIt(t *testing.T) {
	e := newEnv(t, Options{}, nil, pool("p", nil), node("n1", "p"), gpuNode("n1", start, map[int32][]chamber.GPUFault{0: {xid79}}))
	e.reconcile("n1")
	if diff := cmp.Diff(isolatedState("XID79"), e.state("n1")); diff != "" {
		t.Fatalf("isolated node (-want +got):\n%s", diff)
	}
	e.clock.Step(time.Minute)
	e.annotate(e.node("n1"), chamber.AnnotationIsolationClear, "true")
	e.reconcile("n1") // released
	if again := e.reconcile("n1"); again <= 0 {
		t.Errorf("no look again after a clear while the report before it is all there is")
	}
	cleared := state{Status: corev1.ConditionFalse, Reason: chamber.ReasonCleared}
	if diff := cmp.Diff(cleared, e.state("n1")); diff != "" {
		t.Fatalf("cleared node, the agent's last report still the faulty one (-want +got):\n%s", diff)
	}
	e.clock.Step(time.Second)
	e.report("n1", nil) // the repair, reported
	e.reconcile("n1")
	if diff := cmp.Diff(cleared, e.state("n1")); diff != "" {
		t.Errorf("after a healthy report (-want +got):\n%s", diff)
	}
	// It fails again, after the breaker window (the first isolation counts no more).
	e.clock.Step(DefaultBreakerWindow)
	e.report("n1", map[int32][]chamber.GPUFault{0: {xid79}})
	e.reconcile("n1")
	if diff := cmp.Diff(isolatedState("XID79"), e.state("n1")); diff != "" {
		t.Errorf("a fault reported after the clear (-want +got):\n%s", diff)
	}
}

// A dry run reports what it would do and changes nothing.
func TestDryRun(t *testing.T) {
	e := newEnv(t, Options{}, nil, pool("p", &chamber.IsolationPolicy{DryRun: true}), node("n1", "p"),
		gpuNode("n1", start, map[int32][]chamber.GPUFault{0: {xid79}}))
	e.reconcile("n1")
	e.reconcile("n1")
	if diff := cmp.Diff(state{Status: corev1.ConditionFalse, Reason: chamber.ReasonDryRun}, e.state("n1")); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"WouldIsolate"}, e.eventReasons()); diff != "" {
		t.Errorf("events, one per fault (-want +got):\n%s", diff)
	}
}

// The rate limit delays an isolation past its burst; the node is isolated once the
// clock has moved on.
func TestRateLimit(t *testing.T) {
	bad := map[int32][]chamber.GPUFault{0: {xid79}}
	e := newEnv(t, Options{RateLimit: 0.5, RateBurst: 1}, nil, pool("p", &chamber.IsolationPolicy{MaxIsolatedPercent: ptr.To[int32](100)}),
		node("n1", "p"), node("n2", "p"), gpuNode("n1", start, bad), gpuNode("n2", start, bad))
	e.reconcile("n1")
	if requeue := e.reconcile("n2"); requeue != 2*time.Second {
		t.Errorf("rate-limited reconcile requeues after %s, want 2s", requeue)
	}
	if diff := cmp.Diff(state{}, e.state("n2")); diff != "" {
		t.Errorf("rate-limited node (-want +got):\n%s", diff)
	}
	e.clock.Step(2 * time.Second)
	e.reconcile("n2")
	if diff := cmp.Diff(isolatedState("XID79"), e.state("n2")); diff != "" {
		t.Errorf("node after the wait (-want +got):\n%s", diff)
	}
}

// The breaker stays open after its window has passed, until an operator resets it;
// isolations before the reset do not count against the next ones.
func TestBreakerHoldsUntilReset(t *testing.T) {
	bad := map[int32][]chamber.GPUFault{0: {xid79}}
	p := pool("p", nil)
	objs := []client.Object{p}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		objs = append(objs, node(n, "p"), gpuNode(n, start, bad))
	}
	e := newEnv(t, Options{}, nil, objs...)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.reconcile(n)
	}
	got := []state{e.state("n1"), e.state("n2"), e.state("n3")}
	withheld := state{Status: corev1.ConditionFalse, Reason: chamber.ReasonIsolationHalted}
	if diff := cmp.Diff([]state{isolatedState("XID79"), isolatedState("XID79"), withheld}, got); diff != "" {
		t.Fatalf("two of four may go (-want +got):\n%s", diff)
	}
	halted := func() *metav1.Condition {
		var have chamber.GPUPool
		if err := e.client.Get(context.Background(), client.ObjectKey{Name: "p"}, &have); err != nil {
			t.Fatal(err)
		}
		return apimeta.FindStatusCondition(have.Status.Conditions, chamber.ConditionIsolationHalted)
	}
	if c := halted(); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("IsolationHalted = %v, want True", c)
	}

	// The window passes and fresh reports come: still halted.
	e.clock.Step(DefaultBreakerWindow + time.Minute)
	for _, n := range []string{"n3", "n4"} {
		e.report(n, bad)
		e.reconcile(n)
	}
	if diff := cmp.Diff([]state{withheld, withheld}, []state{e.state("n3"), e.state("n4")}); diff != "" {
		t.Fatalf("after the window, before a reset (-want +got):\n%s", diff)
	}

	e.annotate(&chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, chamber.AnnotationIsolationBreakerReset, "true")
	e.reconcile("n3")
	e.reconcile("n4")
	if diff := cmp.Diff([]state{isolatedState("XID79"), isolatedState("XID79")}, []state{e.state("n3"), e.state("n4")}); diff != "" {
		t.Errorf("after the reset (-want +got):\n%s", diff)
	}
	if c := halted(); c == nil || c.Status != metav1.ConditionFalse || c.Reason != chamber.ReasonBreakerReset {
		t.Errorf("IsolationHalted = %v, want False %s", c, chamber.ReasonBreakerReset)
	}
}

// At GPU level the node stays schedulable and a hold pod takes the failing GPUs;
// only the workload on the failing GPU is evicted; the hold goes with the fault.
func TestGPULevel(t *testing.T) {
	bad := gpuNode("n1", start, map[int32][]chamber.GPUFault{2: {gsp}})
	bad.Status.GPUs[2].Pod = &chamber.PodReference{Namespace: "ns", Name: "a-0"}
	bad.Status.GPUs[5].Pod = &chamber.PodReference{Namespace: "ns", Name: "b-0"}
	objs := []client.Object{pool("p", &chamber.IsolationPolicy{Level: chamber.IsolateGPU, RecoveryReports: ptr.To[int32](1)}), node("n1", "p"), bad}
	for _, job := range []string{"a", "b"} {
		objs = append(objs, workloadWithPod(job, "n1")...)
	}
	e := newEnv(t, Options{}, nil, objs...)
	e.reconcile("n1")
	if diff := cmp.Diff(state{Status: corev1.ConditionTrue, Reason: "XID119"}, e.state("n1")); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
	var hold corev1.Pod
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: DefaultHoldNamespace, Name: holdPodName("n1")}, &hold); err != nil {
		t.Fatalf("hold pod: %v", err)
	}
	q := hold.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
	if hold.Spec.NodeName != "n1" || q.Value() != 1 {
		t.Errorf("hold pod on %q for %s GPUs, want n1 and 1", hold.Spec.NodeName, q.String())
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": false}, e.evicted("a", "b")); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}

	// The transient fault clears: one healthy report returns the GPU.
	e.clock.Step(30 * time.Second)
	e.report("n1", nil)
	e.reconcile("n1")
	if diff := cmp.Diff(state{Status: corev1.ConditionFalse, Reason: chamber.ReasonRecovered}, e.state("n1")); diff != "" {
		t.Errorf("recovered node (-want +got):\n%s", diff)
	}
	if err := e.client.Get(context.Background(), client.ObjectKeyFromObject(&hold), &hold); !apierrors.IsNotFound(err) {
		t.Errorf("hold pod after recovery: %v, want NotFound", err)
	}
}

// The hold takes only the failing GPUs the device plugin still offers: one it
// withdrew (allocatable below capacity) is out of service already, and holding it
// again would idle a healthy GPU.
func TestGPUHoldLeavesWhatTheDevicePluginWithdrew(t *testing.T) {
	bad := gpuNode("n1", start, map[int32][]chamber.GPUFault{2: {gsp}, 5: {gsp}})
	n := node("n1", "p")
	n.Status.Allocatable[kube.ResourceGPU] = resource.MustParse("7")
	objs := []client.Object{pool("p", &chamber.IsolationPolicy{Level: chamber.IsolateGPU}), n, bad}
	e := newEnv(t, Options{}, nil, objs...)
	e.reconcile("n1")
	key := client.ObjectKey{Namespace: DefaultHoldNamespace, Name: holdPodName("n1")}
	var hold corev1.Pod
	if err := e.client.Get(context.Background(), key, &hold); err != nil {
		t.Fatalf("hold pod: %v", err)
	}
	if q := hold.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]; q.Value() != 1 {
		t.Errorf("hold pod for %s GPUs, want 1: 2 failing, 1 withdrawn by the device plugin", q.String())
	}

	// The device plugin withdraws the second one too: nothing is left to hold.
	if err := e.client.Get(context.Background(), client.ObjectKey{Name: "n1"}, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Allocatable[kube.ResourceGPU] = resource.MustParse("6")
	if err := e.client.Status().Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(30 * time.Second)
	e.report("n1", map[int32][]chamber.GPUFault{2: {gsp}, 5: {gsp}})
	e.reconcile("n1")
	if err := e.client.Get(context.Background(), key, &hold); !apierrors.IsNotFound(err) {
		t.Errorf("hold pod once the device plugin withdrew both: %v, want NotFound", err)
	}
}

// evicted says of each job's workload in namespace ns whether its eviction was asked for.
func (e *env) evicted(jobs ...string) map[string]bool {
	e.t.Helper()
	out := map[string]bool{}
	for _, job := range jobs {
		var wl kueue.Workload
		if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: job}, &wl); err != nil {
			e.t.Fatal(err)
		}
		_, out[job] = chamberkueue.RequestedEviction(&wl)
	}
	return out
}

// Under Auto, an XID 48 isolates its GPU alone: the node stays in service and only
// the workload on that GPU is evicted. An XID 79 on another GPU of the node then
// isolates the node: taint, cordon, every workload evicted, the GPU hold let go.
func TestAutoLevelFollowsTheFault(t *testing.T) {
	faults := map[int32][]chamber.GPUFault{2: {xid48}}
	gn := gpuNode("n1", start, faults)
	gn.Status.GPUs[2].Pod = &chamber.PodReference{Namespace: "ns", Name: "a-0"}
	gn.Status.GPUs[5].Pod = &chamber.PodReference{Namespace: "ns", Name: "b-0"}
	objs := []client.Object{pool("p", &chamber.IsolationPolicy{Level: chamber.IsolateAuto}), node("n1", "p"), gn}
	for _, job := range []string{"a", "b"} {
		objs = append(objs, workloadWithPod(job, "n1")...)
	}
	e := newEnv(t, Options{}, nil, objs...)
	e.reconcile("n1")
	if diff := cmp.Diff(state{Status: corev1.ConditionTrue, Reason: "XID48"}, e.state("n1")); diff != "" {
		t.Errorf("node after XID 48 (-want +got):\n%s", diff)
	}
	isolatedAt := e.node("n1").Annotations[chamber.AnnotationIsolatedAt]
	if got := e.node("n1").Annotations; got[chamber.AnnotationIsolationLevel] != "GPU" || got[chamber.AnnotationIsolatedGPUs] != "2" {
		t.Errorf("annotations %v: want GPU level on GPU 2", got)
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": false}, e.evicted("a", "b")); diff != "" {
		t.Errorf("evicted after XID 48 (-want +got):\n%s", diff)
	}
	hold := client.ObjectKey{Namespace: DefaultHoldNamespace, Name: holdPodName("n1")}
	if err := e.client.Get(context.Background(), hold, &corev1.Pod{}); err != nil {
		t.Fatalf("hold pod after XID 48: %v", err)
	}

	e.clock.Step(30 * time.Second)
	faults[5] = []chamber.GPUFault{xid79}
	e.report("n1", faults)
	e.reconcile("n1")
	if diff := cmp.Diff(isolatedState("XID79"), e.state("n1")); diff != "" {
		t.Errorf("node after XID 79 (-want +got):\n%s", diff)
	}
	got := e.node("n1").Annotations
	if diff := cmp.Diff([]string{"Node", "2,5", isolatedAt}, []string{got[chamber.AnnotationIsolationLevel], got[chamber.AnnotationIsolatedGPUs], got[chamber.AnnotationIsolatedAt]}); diff != "" {
		t.Errorf("level, GPUs and start of the isolation (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": true}, e.evicted("a", "b")); diff != "" {
		t.Errorf("evicted after XID 79 (-want +got):\n%s", diff)
	}
	if err := e.client.Get(context.Background(), hold, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("hold pod after XID 79: %v, want NotFound", err)
	}
	if diff := cmp.Diff([]string{"Isolated", "EvictionRequested", "Isolated", "EvictionRequested"}, e.eventReasons()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// A node isolated at GPU level that a later fault takes drains from its taint, not
// from the GPU-level start: the workload on its healthy GPUs runs on for the drain
// timeout, counted from the escalation. A workload placed on the node's GPUs after
// the GPU-level isolation, whose pod died with the second fault, gets Kueue's time to
// replace the node, then is evicted at once: it has nothing left to checkpoint.
func TestEscalatedNodeDrainsFromItsTaint(t *testing.T) {
	faults := map[int32][]chamber.GPUFault{2: {xid48}}
	gn := gpuNode("n1", start, faults)
	gn.Status.GPUs[5].Pod = &chamber.PodReference{Namespace: "ns", Name: "lost-0"}
	gn.Status.GPUs[6].Pod = &chamber.PodReference{Namespace: "ns", Name: "healthy-0"}
	objs := []client.Object{pool("p", &chamber.IsolationPolicy{Level: chamber.IsolateAuto}), node("n1", "p"), gn}
	for _, job := range []string{"lost", "healthy"} {
		wl := workloadWithPod(job, "n1")
		placedOn(wl[0].(*kueue.Workload), "n1", start.Add(-time.Hour))
		objs = append(objs, wl...)
	}
	objs[len(objs)-4].(*kueue.Workload).Status.Conditions[0].LastTransitionTime = metav1.NewTime(start.Add(10 * time.Minute))
	e := newEnv(t, Options{}, nil, objs...)
	e.reconcile("n1") // GPU level: nothing runs on GPU 2
	if got := e.node("n1").Annotations[chamber.AnnotationIsolationLevel]; got != "GPU" {
		t.Fatalf("isolation level %q after XID 48, want GPU", got)
	}

	// An hour later, past the drain timeout counted from the GPU-level start, GPU 5
	// falls off the bus and takes the lost workload's pod with it.
	e.clock.Step(time.Hour)
	if err := e.client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lost-0"}}); err != nil {
		t.Fatal(err)
	}
	faults[5] = []chamber.GPUFault{xid79}
	report := func() {
		e.report("n1", faults)
		e.mapPod("n1", 6, "healthy-0") // the agent still sees the pod on GPU 6
	}
	report()
	after := e.reconcile("n1")
	if diff := cmp.Diff(isolatedState("XID79"), e.state("n1")); diff != "" {
		t.Errorf("node after XID 79 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"lost": false, "healthy": false}, e.evicted("lost", "healthy")); diff != "" {
		t.Errorf("evicted at the escalation (-want +got):\n%s", diff)
	}
	if after <= 0 || after > DefaultKueueReplaces {
		t.Errorf("requeued after %s, want within %s: when Kueue's time is up", after, DefaultKueueReplaces)
	}

	e.clock.Step(DefaultKueueReplaces)
	report()
	e.reconcile("n1")
	if diff := cmp.Diff(map[string]bool{"lost": true, "healthy": false}, e.evicted("lost", "healthy")); diff != "" {
		t.Errorf("evicted after Kueue's time (-want +got):\n%s", diff)
	}
	if got := e.eviction("lost").GracePeriod; got == nil || *got != 0 {
		t.Errorf("grace period of the lost workload's eviction %v, want 0: nothing of it runs", got)
	}

	e.clock.Step(DefaultDrainTimeout)
	report()
	e.reconcile("n1")
	if diff := cmp.Diff(map[string]bool{"lost": true, "healthy": true}, e.evicted("lost", "healthy")); diff != "" {
		t.Errorf("evicted after the drain timeout (-want +got):\n%s", diff)
	}
	if got := e.eviction("healthy").GracePeriod; got != nil {
		t.Errorf("grace period of the healthy GPU's workload %s, want none set: its team's", got)
	}
}

// mapPod writes the agent's map of a pod to the node's GPU.
func (e *env) mapPod(name string, gpu int, pod string) {
	e.t.Helper()
	var gn chamber.GPUNode
	if err := e.client.Get(context.Background(), client.ObjectKey{Name: name}, &gn); err != nil {
		e.t.Fatal(err)
	}
	gn.Status.GPUs[gpu].Pod = &chamber.PodReference{Namespace: "ns", Name: pod}
	if err := e.client.Status().Update(context.Background(), &gn); err != nil {
		e.t.Fatal(err)
	}
}

// eviction is the eviction Chamber requested of the job's workload.
func (e *env) eviction(job string) chamberkueue.Eviction {
	e.t.Helper()
	var wl kueue.Workload
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: job}, &wl); err != nil {
		e.t.Fatal(err)
	}
	got, _ := chamberkueue.RequestedEviction(&wl)
	return got
}

// workloadWithPod is an admitted Job's Workload and its running pod on the node.
func workloadWithPod(job, nodeName string) []client.Object {
	jobUID := "uid-" + job
	wl := &kueue.Workload{
		// The fake API server sets no UIDs; the controller tells workloads apart by theirs.
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: job, UID: types.UID("wl-" + job), OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "Job", Name: job, UID: types.UID(jobUID), Controller: ptr.To(true)}}},
		Status: kueue.WorkloadStatus{Conditions: []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue,
			Reason: "QuotaReserved", LastTransitionTime: metav1.NewTime(start)}}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: job + "-0", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "Job", Name: job, UID: types.UID(jobUID), Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	return []client.Object{wl, pod}
}

// A conflict writing the node (someone else changed it) is retried on a fresh read,
// never written over.
func TestNodeConflictRetried(t *testing.T) {
	conflicts := 1
	funcs := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*corev1.Node); ok && conflicts > 0 && patch.Type() == "application/merge-patch+json" {
			conflicts--
			return apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, obj.GetName(), nil)
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
	e := newEnv(t, Options{}, funcs, pool("p", nil), node("n1", "p"), gpuNode("n1", start, map[int32][]chamber.GPUFault{0: {xid79}}))
	e.reconcile("n1")
	if diff := cmp.Diff(isolatedState("XID79"), e.state("n1")); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
	if conflicts != 0 {
		t.Error("the interceptor saw no node patch")
	}
}

// A workload Kueue is already moving off the isolated node (the node in its
// status.unhealthyNodes: none of its pods runs there) gets no eviction request: a
// Retry of Chamber's check would race Kueue's scheduler, which re-applies the
// workload's admission from its own copy when the replacement lands.
func TestNoEvictionWhileKueueReplacesTheNode(t *testing.T) {
	objs := []client.Object{pool("p", nil), node("n1", "p"), gpuNode("n1", start, map[int32][]chamber.GPUFault{0: {xid79}})}
	for _, job := range []string{"running", "replacing"} {
		objs = append(objs, workloadWithPod(job, "n1")...)
	}
	replacing := objs[len(objs)-2].(*kueue.Workload)
	replacing.Status.UnhealthyNodes = []kueue.UnhealthyNode{{Name: "n1"}}
	objs[len(objs)-1].(*corev1.Pod).Status.Phase = corev1.PodPending // the Job's new pod, held off the tainted node
	e := newEnv(t, Options{}, nil, objs...)
	e.reconcile("n1")
	if diff := cmp.Diff(isolatedState("XID79"), e.state("n1")); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"running": true, "replacing": false}, e.evicted("running", "replacing")); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}
}

// placedOn gives the workload Kueue's topology assignment of its one pod to node host,
// reserved at the given time.
func placedOn(wl *kueue.Workload, host string, reserved time.Time) {
	wl.Status.Conditions[0].LastTransitionTime = metav1.NewTime(reserved)
	wl.Status.Admission = &kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{
		Name: "main", Count: ptr.To[int32](1),
		TopologyAssignment: &kueue.TopologyAssignment{Levels: []string{corev1.LabelHostname}, Slices: []kueue.TopologyAssignmentSlice{{
			DomainCount:    1,
			ValuesPerLevel: []kueue.TopologyAssignmentSliceLevelValues{{Universal: ptr.To(host)}},
			PodCounts:      kueue.TopologyAssignmentSlicePodCounts{Universal: ptr.To[int32](1)},
		}}},
	}}}
}

// A workload whose pod died with the failing GPU is evicted at once, though the agent
// names no pod on that GPU any more: Kueue keeps it placed on the node, and its Job's
// new pod would wait there for the repair. One placed on the node after the isolation
// is left alone (its pods land on the GPUs the node still offers), as is one whose
// pod runs on a healthy GPU.
func TestPodLostWithTheGPU(t *testing.T) {
	for _, level := range []chamber.IsolationLevel{chamber.IsolateGPU, chamber.IsolateNode} {
		t.Run(string(level), func(t *testing.T) {
			gn := gpuNode("n1", start, map[int32][]chamber.GPUFault{2: {xid48}})
			gn.Status.GPUs[5].Pod = &chamber.PodReference{Namespace: "ns", Name: "healthy-0"}
			objs := []client.Object{pool("p", &chamber.IsolationPolicy{Level: level}), node("n1", "p"), gn}
			for _, job := range []string{"lost", "healthy", "later"} {
				wl := workloadWithPod(job, "n1")
				placedOn(wl[0].(*kueue.Workload), "n1", start.Add(-time.Hour))
				objs = append(objs, wl[0])
				if job == "healthy" {
					objs = append(objs, wl[1]) // the others' pods are gone, or not there yet
				}
			}
			e := newEnv(t, Options{}, nil, objs...)
			var later kueue.Workload
			if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "later"}, &later); err != nil {
				t.Fatal(err)
			}
			placedOn(&later, "n1", start.Add(time.Minute))
			if err := e.client.Status().Update(context.Background(), &later); err != nil {
				t.Fatal(err)
			}
			after := e.reconcile("n1")
			if level == chamber.IsolateNode {
				// A tainted node: Kueue gets its time to replace the node itself first.
				if diff := cmp.Diff(map[string]bool{"lost": false, "healthy": false, "later": false}, e.evicted("lost", "healthy", "later")); diff != "" {
					t.Errorf("evicted before Kueue's time to replace the node (-want +got):\n%s", diff)
				}
				if after <= 0 || after > DefaultKueueReplaces {
					t.Errorf("requeued after %s, want within %s: when Kueue's time is up", after, DefaultKueueReplaces)
				}
				e.clock.Step(DefaultKueueReplaces)
				e.reconcile("n1")
			}
			if diff := cmp.Diff(map[string]bool{"lost": true, "healthy": false, "later": false}, e.evicted("lost", "healthy", "later")); diff != "" {
				t.Errorf("evicted (-want +got):\n%s", diff)
			}
			var wl kueue.Workload
			if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "lost"}, &wl); err != nil {
				t.Fatal(err)
			}
			if got, _ := chamberkueue.RequestedEviction(&wl); got.GracePeriod == nil || *got.GracePeriod != 0 {
				t.Errorf("grace period of the lost workload's eviction %v, want 0: nothing of it runs", got.GracePeriod)
			}
		})
	}
}
