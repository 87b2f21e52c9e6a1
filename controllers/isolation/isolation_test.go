package isolation_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	"chamber.dev/chamber/agent"
	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/isolation"
	"chamber.dev/chamber/controllers/workload"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

var k8s client.Client

// TestMain runs one control plane (Kueue, kube-scheduler, kwok) and Chamber's
// controllers in-process, isolation among them, on the real clock: node agents run
// on the real clock, and their heartbeats decide what is stale. Each test has a pool,
// nodes, a team and a namespace of its own.
const drainTimeout = 15 * time.Second

func TestMain(m *testing.M) {
	cfg := controllers.DefaultConfig()
	// kwok's pods ignore SIGTERM and linger for a random part of their grace period:
	// these tests keep Kubernetes' default grace (the team package tests the raise).
	cfg.PodGracePeriods = false
	// A node isolated at node level drains for this long (TestXID79...Drains).
	cfg.Isolation.DrainTimeout = drainTimeout
	// A health checker's node condition reports failed GPUs (TestNodeConditionIsolates).
	cfg.Isolation.NodeConditions = []corev1.NodeConditionType{gpuProblem}
	os.Exit(controllertest.Main(m, cfg, &k8s))
}

func newG(t *testing.T) *gomega.WithT {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	return g
}

func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func poolLabels(pool string) map[string]string {
	return map[string]string{"chamber.dev/test-pool": pool}
}

// fixture creates a pool with the isolation policy and a team of the same name with
// a namespace and gpus H100s of quota.
func fixture(t *testing.T, pool string, policy *chamber.IsolationPolicy, gpus int) {
	t.Helper()
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: chamber.GPUPoolSpec{NodeLabels: poolLabels(pool), Isolation: policy}})
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pool}})
	create(t, &chamber.Team{
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec:       chamber.TeamSpec{Pool: pool, Namespaces: []string{pool}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: int32(gpus)}}},
	})
}

// nodes creates kwok nodes of 8 H100s in the pool.
func nodes(t testing.TB, pool string, names ...string) {
	t.Helper()
	var gpuNodes []controlplane.GPUNode
	for _, n := range names {
		gpuNodes = append(gpuNodes, controlplane.GPUNode{Name: n, GPUs: 8, Product: h100, Labels: poolLabels(pool)})
	}
	if err := controlplane.CreateGPUNodes(context.Background(), k8s, gpuNodes...); err != nil {
		t.Fatal(err)
	}
}

// startAgent runs the real node agent for node on go-nvml's DGX H100 fake, polling
// every second and writing at least every heartbeat. stop ends it, as a crash would.
func startAgent(t *testing.T, node string, heartbeat time.Duration) (gpus *nvmlsource.FakeGPUs, stop func()) {
	t.Helper()
	fake := dgxH100(t)
	return fake, runAgent(t, node, fake, heartbeat)
}

// startMappedAgent is startAgent with the pods of each GPU in the agent's reports, as
// the kubelet's pod-resources API gives them on a real node.
func startMappedAgent(t *testing.T, node string, heartbeat time.Duration) (gpus *nvmlsource.FakeGPUs) {
	t.Helper()
	fake := dgxH100(t)
	controllertest.RunAgentWithPods(t, node, fake, &devicePlugin{node: node, held: map[types.UID][]int{}}, nil, heartbeatEvery(heartbeat))
	return fake
}

func dgxH100(t *testing.T) *nvmlsource.FakeGPUs {
	t.Helper()
	fake, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	return fake
}

func heartbeatEvery(d time.Duration) func(*agent.Config) {
	return func(cfg *agent.Config) { cfg.HeartbeatInterval = d }
}

// runAgent runs an agent on the fake GPUs, as after a restart of the agent.
func runAgent(t *testing.T, node string, fake *nvmlsource.FakeGPUs, heartbeat time.Duration) (stop func()) {
	t.Helper()
	return controllertest.RunAgent(t, node, fake, nil, heartbeatEvery(heartbeat))
}

// submit creates a Job of one pod holding 8 GPUs for ten minutes.
func submit(t testing.TB, ns, name string) {
	t.Helper()
	submitGPUs(t, ns, name, 8)
}

// submitGPUs creates a Job of one pod holding gpus GPUs for ten minutes.
func submitGPUs(t testing.TB, ns, name string, gpus int) {
	t.Helper()
	create(t, testingjob.MakeJob(name, ns).Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, strconv.Itoa(gpus)).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "10m").Obj())
}

// runningPod is the job's one live pod, once Running.
func runningPod(g gomega.Gomega, ns, job string) *corev1.Pod {
	return controllertest.RunningPod(g, k8s, ns, job)
}

// workloads are the Kueue workloads of a job.
func workloads(g gomega.Gomega, ns, job string) []kueue.Workload {
	var list kueue.WorkloadList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(ns))).To(gomega.Succeed())
	return slices.DeleteFunc(list.Items, func(wl kueue.Workload) bool {
		return !slices.ContainsFunc(wl.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Name == job })
	})
}

func getNode(g gomega.Gomega, name string) *corev1.Node {
	var n corev1.Node
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &n)).To(gomega.Succeed())
	return &n
}

func tainted(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == chamber.TaintGPUUnhealthy && t.Effect == corev1.TaintEffectNoSchedule
	})
}

func condition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == chamber.ConditionNodeIsolated {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// isolated: Chamber's taint, cordon and condition are all there.
func isolated(g gomega.Gomega, name, reason string) {
	n := getNode(g, name)
	g.Expect(tainted(n)).To(gomega.BeTrue(), "node %s untainted", name)
	g.Expect(n.Spec.Unschedulable).To(gomega.BeTrue(), "node %s not cordoned", name)
	cond := condition(n)
	g.Expect(cond).NotTo(gomega.BeNil())
	g.Expect(cond.Status).To(gomega.Equal(corev1.ConditionTrue))
	g.Expect(cond.Reason).To(gomega.Equal(reason))
}

// inService: no taint, no cordon.
func inService(g gomega.Gomega, name string) {
	n := getNode(g, name)
	g.Expect(tainted(n)).To(gomega.BeFalse(), "node %s tainted", name)
	g.Expect(n.Spec.Unschedulable).To(gomega.BeFalse(), "node %s cordoned", name)
}

// nodeEvents are the reasons of the Events about a node.
func nodeEvents(g gomega.Gomega, name string) []string {
	var list eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &list)).To(gomega.Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == name && e.ReportingController == "chamber-isolation" {
			out = append(out, e.Reason)
		}
	}
	return out
}

// reconcileNode runs the isolation reconciler once on the node, synchronously, so
// that a test asserting that nothing happens knows the controller has seen the
// latest report. It is a second instance beside the manager's, with the same effects.
func reconcileNode(t *testing.T, name string) {
	t.Helper()
	var n corev1.Node
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	c := isolation.New(k8s, k8s, events.NewFakeRecorder(100), isolation.DefaultOptions())
	if _, err := c.Reconcile(context.Background(), &n); err != nil {
		t.Fatal(err)
	}
}

// value reads one series from the controller's metrics registry; labels are name,
// value pairs. Absent series read 0.
func value(g gomega.Gomega, name string, labels ...string) float64 {
	return controllertest.MetricValue(g, name, labels...)
}

// evictedByCheck: Chamber evicted the job's workload for a GPU fault at least once.
func evictedByCheck(g gomega.Gomega, ns, job string) {
	wl := controllertest.WorkloadOf(g, k8s, ns, job)
	g.Expect(controllertest.EvictedByChamber(wl, chamber.ReasonGPUFault)).To(gomega.BeTrue(), "scheduling stats %+v", wl.Status.SchedulingStats)
}

// undisturbed: the job's one workload has no eviction request and its pod runs.
func undisturbed(g gomega.Gomega, ns, job string) {
	wls := workloads(g, ns, job)
	g.Expect(wls).To(gomega.HaveLen(1))
	_, asked := chamberkueue.RequestedEviction(&wls[0])
	g.Expect(asked).To(gomega.BeFalse(), "eviction requested")
	runningPod(g, ns, job)
}

// Test 1. An XID 79 on one GPU of the node running a job: the GPU fell off the bus,
// which NVIDIA's catalog says a node reboot recovers, so under the default level
// (Auto) the node is isolated: it is tainted and cordoned, the workload evicted
// through Chamber's admission check and requeued by Kueue, and the job's new pod runs
// on a healthy node; one workload, one pod, no failure counted against the job; the
// pool's healthy capacity shrinks.
func TestXID79MovesWorkloadToHealthyNode(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	fixture(t, "move", nil, 16)
	// The job lands on move-3 because it is the only node at first.
	nodes(t, "move", "move-3")
	gpus, _ := startAgent(t, "move-3", 2*time.Second)
	submit(t, "move", "train")
	var first *corev1.Pod
	g.Eventually(func(g gomega.Gomega) { first = runningPod(g, "move", "train") }).Should(gomega.Succeed())
	g.Expect(first.Spec.NodeName).To(gomega.Equal("move-3"))
	wls := workloads(g, "move", "train")
	g.Expect(wls).To(gomega.HaveLen(1))
	uid := wls[0].UID

	nodes(t, "move", "move-1", "move-2")
	g.Eventually(func(g gomega.Gomega) {
		var pool chamber.GPUPool
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "move"}, &pool)).To(gomega.Succeed())
		g.Expect(pool.Status.Models).To(gomega.HaveLen(1))
		g.Expect(pool.Status.Models[0].Healthy).To(gomega.Equal(int64(24)))
	}).Should(gomega.Succeed())

	if err := gpus.RaiseXID(3, 79); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		isolated(g, "move-3", "XID79")
		n := getNode(g, "move-3")
		g.Expect(n.Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationIsolationPersistent, "true"))
		g.Expect(n.Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationIsolationLevel, string(chamber.IsolateNode)))
		g.Expect(condition(n).Message).To(gomega.ContainSubstring("XID79 on GPU 3"))
	}).Should(gomega.Succeed())

	// The job's pod is replaced by one on a healthy node, under the same workload.
	var moved *corev1.Pod
	g.Eventually(func(g gomega.Gomega) {
		moved = runningPod(g, "move", "train")
		g.Expect(moved.Spec.NodeName).To(gomega.BeElementOf("move-1", "move-2"))
	}).Should(gomega.Succeed())
	g.Expect(moved.UID).NotTo(gomega.Equal(first.UID))
	wls = workloads(g, "move", "train")
	g.Expect(wls).To(gomega.HaveLen(1))
	wl := wls[0]
	g.Expect(wl.UID).To(gomega.Equal(uid))
	g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
	evictedByCheck(g, "move", "train")

	var job batchv1.Job
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "move", Name: "train"}, &job)).To(gomega.Succeed())
	g.Expect(job.Status.Failed).To(gomega.BeZero(), "the eviction is not the job's failure")

	g.Eventually(func(g gomega.Gomega) {
		var pool chamber.GPUPool
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "move"}, &pool)).To(gomega.Succeed())
		g.Expect(pool.Status.Models[0].Healthy).To(gomega.Equal(int64(16)), "move-3's GPUs no longer count")
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(nodeEvents(g, "move-3")).To(gomega.ContainElements("Isolated", "EvictionRequested"))
	}).Should(gomega.Succeed())
	g.Expect(value(g, "chamber_isolations_total", "pool", "move", "level", "Node", "reason", "XID79")).To(gomega.Equal(1.0))
	g.Expect(value(g, "chamber_isolation_evictions_total", "pool", "move")).To(gomega.Equal(1.0))
}

// gpuProblem is the node condition type the tests' health checker sets, as a Node
// Problem Detector custom plugin would.
const gpuProblem corev1.NodeConditionType = "GPUProblem"

// setNodeCondition sets one condition of the node's status, as a health checker does.
func setNodeCondition(t *testing.T, name string, cond corev1.NodeCondition) {
	t.Helper()
	controllertest.SetNodeCondition(t, k8s, name, cond)
}

// Issue 16, test 2: a condition that a health checker (Node Problem Detector,
// NVSentinel) sets on a node, of a type Chamber is told to read, isolates the node at
// node level with the condition's reason, and its workload moves to a healthy node;
// once the checker sets it False, the agent's healthy reports return the node.
func TestNodeConditionIsolates(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "condition", &chamber.IsolationPolicy{RecoveryReports: ptr.To[int32](2)}, 16)
	nodes(t, "condition", "condition-1")
	startAgent(t, "condition-1", time.Second)
	submit(t, "condition", "train")
	var first *corev1.Pod
	g.Eventually(func(g gomega.Gomega) { first = runningPod(g, "condition", "train") }).Should(gomega.Succeed())
	nodes(t, "condition", "condition-2")
	startAgent(t, "condition-2", time.Second)

	setNodeCondition(t, "condition-1", corev1.NodeCondition{Type: gpuProblem, Status: corev1.ConditionTrue,
		Reason: "XidCriticalError", Message: "NVRM: Xid (PCI:0000:1b:00): 79, GPU has fallen off the bus"})
	g.Eventually(func(g gomega.Gomega) {
		isolated(g, "condition-1", "XidCriticalError")
		n := getNode(g, "condition-1")
		g.Expect(n.Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationIsolationLevel, string(chamber.IsolateNode)))
		g.Expect(condition(n).Message).To(gomega.ContainSubstring("XidCriticalError on the node (node condition GPUProblem: NVRM: Xid"))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		moved := runningPod(g, "condition", "train")
		g.Expect(moved.UID).NotTo(gomega.Equal(first.UID))
		g.Expect(moved.Spec.NodeName).To(gomega.Equal("condition-2"))
	}).Should(gomega.Succeed())

	setNodeCondition(t, "condition-1", corev1.NodeCondition{Type: gpuProblem, Status: corev1.ConditionFalse, Reason: "NoXidError"})
	g.Eventually(func(g gomega.Gomega) {
		inService(g, "condition-1")
		g.Expect(condition(getNode(g, "condition-1")).Reason).To(gomega.Equal(chamber.ReasonRecovered))
	}).Should(gomega.Succeed())
	g.Expect(value(g, "chamber_isolations_total", "pool", "condition", "level", "Node", "reason", "XidCriticalError")).To(gomega.Equal(1.0))
}

// Issue 53: a health checker's reason is free text, and Chamber's taint carries it as
// a label value. One the API server would refuse as a taint value (spaces, slashes,
// over 63 characters) still isolates the node: the taint carries it sanitized, the
// condition's message and the Event the reason itself.
func TestFreeTextConditionReasonIsolates(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "freetext", nil, 8)
	nodes(t, "freetext", "freetext-1")
	reason := "NVRM/Xid 79: GPU has fallen off the bus, PCIe link down on slot 0000:1b:00.0"
	setNodeCondition(t, "freetext-1", corev1.NodeCondition{Type: gpuProblem, Status: corev1.ConditionTrue, Reason: reason, Message: "from dmesg"})
	g.Eventually(func(g gomega.Gomega) {
		isolated(g, "freetext-1", reason)
		n := getNode(g, "freetext-1")
		g.Expect(condition(n).Message).To(gomega.ContainSubstring(reason + " on the node"))
		for _, taint := range n.Spec.Taints {
			if taint.Key == chamber.TaintGPUUnhealthy {
				g.Expect(taint.Value).To(gomega.HavePrefix("NVRM_Xid_79__GPU_has_fallen_off_the_bus"))
				g.Expect(len(taint.Value)).To(gomega.BeNumerically("<=", 63))
			}
		}
	}).Should(gomega.Succeed())
}

// Test 2. XID 13 is an application error: it isolates nothing and evicts nothing.
func TestXID13IsolatesNothing(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	fixture(t, "app", nil, 8)
	nodes(t, "app", "app-1")
	gpus, _ := startAgent(t, "app-1", 2*time.Second)
	submit(t, "app", "train")
	g.Eventually(func(g gomega.Gomega) { runningPod(g, "app", "train") }).Should(gomega.Succeed())

	// XID 13 on GPU 0, then a sustained NVLink error rate on GPU 1 (Degraded): once
	// the agent reports the second, it has handled the first.
	if err := gpus.RaiseXID(0, 13); err != nil {
		t.Fatal(err)
	}
	if err := gpus.AddNVLinkErrors(1, 10_000); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "app-1"}, &gn)).To(gomega.Succeed())
		g.Expect(gn.Status.GPUs[1].Health).To(gomega.Equal(chamber.GPUDegraded))
		g.Expect(gn.Status.GPUs[0].Health).To(gomega.Equal(chamber.GPUHealthy))
	}).Should(gomega.Succeed())
	reconcileNode(t, "app-1")

	inService(g, "app-1")
	g.Expect(condition(getNode(g, "app-1"))).To(gomega.BeNil())
	undisturbed(g, "app", "train")
}

// Test 3. Faults on 6 of 10 nodes at once: the breaker (50% in 5 minutes) lets 5 be
// isolated, then halts, says so on the pool and in a metric, and holds until an
// operator resets it.
func TestCircuitBreaker(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	fixture(t, "breaker", nil, 8)
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("breaker-%d", i))
	}
	nodes(t, "breaker", names...)
	fakes := map[string]*nvmlsource.FakeGPUs{}
	for _, n := range names {
		fakes[n], _ = startAgent(t, n, 5*time.Second)
	}
	failing := names[:6]
	for _, n := range failing {
		if err := fakes[n].RaiseXID(0, 79); err != nil {
			t.Fatal(err)
		}
	}

	// Every failing node ends with the condition: isolated, or withheld by the breaker.
	var isolatedNodes, withheld []string
	g.Eventually(func(g gomega.Gomega) {
		isolatedNodes, withheld = nil, nil
		for _, name := range failing {
			cond := condition(getNode(g, name))
			g.Expect(cond).NotTo(gomega.BeNil(), "node %s has no %s condition yet", name, chamber.ConditionNodeIsolated)
			switch {
			case cond.Status == corev1.ConditionTrue:
				isolatedNodes = append(isolatedNodes, name)
			case cond.Reason == chamber.ReasonIsolationHalted:
				withheld = append(withheld, name)
			}
		}
		g.Expect(len(isolatedNodes) + len(withheld)).To(gomega.Equal(6))
	}).Should(gomega.Succeed())
	g.Expect(isolatedNodes).To(gomega.HaveLen(5))
	g.Expect(withheld).To(gomega.HaveLen(1))
	inService(g, withheld[0])
	for _, n := range names[6:] {
		inService(g, n)
	}
	var pool chamber.GPUPool
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "breaker"}, &pool)).To(gomega.Succeed())
	halted := apimeta.FindStatusCondition(pool.Status.Conditions, chamber.ConditionIsolationHalted)
	g.Expect(halted).NotTo(gomega.BeNil())
	g.Expect(halted.Status).To(gomega.Equal(metav1.ConditionTrue))
	g.Expect(apimeta.IsStatusConditionTrue(pool.Status.Conditions, chamber.ConditionReady)).To(gomega.BeTrue(), "the pool controller keeps its Ready condition")
	g.Expect(value(g, "chamber_isolation_breaker_open", "pool", "breaker")).To(gomega.Equal(1.0))
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(nodeEvents(g, withheld[0])).To(gomega.ContainElement(chamber.ReasonIsolationHalted))
	}).Should(gomega.Succeed())

	// The operator resets the breaker: the withheld node is isolated now.
	// (a patch, as kubectl annotate sends: the controllers write the pool's status
	// meanwhile)
	reset := client.MergeFrom(pool.DeepCopy())
	metav1.SetMetaDataAnnotation(&pool.ObjectMeta, chamber.AnnotationIsolationBreakerReset, "true")
	g.Expect(k8s.Patch(ctx, &pool, reset)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { isolated(g, withheld[0], "XID79") }).Should(gomega.Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "breaker"}, &pool)).To(gomega.Succeed())
	g.Expect(pool.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolationBreakerReset))
	g.Expect(apimeta.IsStatusConditionFalse(pool.Status.Conditions, chamber.ConditionIsolationHalted)).To(gomega.BeTrue())
	g.Expect(value(g, "chamber_isolation_breaker_open", "pool", "breaker")).To(gomega.Equal(0.0))
}

// Test 4. An agent killed: after three missed heartbeats its node is Unknown; it is
// neither tainted nor cordoned, and its workload stays.
func TestSilentAgentIsUnknown(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "silent", nil, 8)
	nodes(t, "silent", "silent-1")
	_, stop := startAgent(t, "silent-1", time.Second)
	submit(t, "silent", "train")
	g.Eventually(func(g gomega.Gomega) { runningPod(g, "silent", "train") }).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "silent-1"}, &gn)).To(gomega.Succeed())
		g.Expect(gn.Status.Health).To(gomega.Equal(chamber.GPUHealthy))
	}).Should(gomega.Succeed())

	stop()
	g.Eventually(func(g gomega.Gomega) {
		cond := condition(getNode(g, "silent-1"))
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Status).To(gomega.Equal(corev1.ConditionUnknown))
		g.Expect(cond.Reason).To(gomega.Equal(chamber.ReasonAgentNotReporting))
	}).Should(gomega.Succeed())
	g.Expect(value(g, "chamber_isolation_unknown_nodes", "pool", "silent")).To(gomega.Equal(1.0))
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(nodeEvents(g, "silent-1")).To(gomega.ContainElement(chamber.ReasonAgentNotReporting))
	}).Should(gomega.Succeed())
	inService(g, "silent-1")
	undisturbed(g, "silent", "train")
}

// Test 5a. A double-bit ECC error is a hardware fault: the node (the pool forces Node
// level; under Auto a double-bit ECC error isolates its GPU) stays isolated after the
// GPU is reset and reports healthy again, until an operator clears it.
func TestHardwareFaultWaitsForOperator(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	fixture(t, "dbe", &chamber.IsolationPolicy{Level: chamber.IsolateNode}, 8)
	nodes(t, "dbe", "dbe-1")
	gpus, stop := startAgent(t, "dbe-1", time.Second)
	if err := gpus.RaiseDoubleBitECC(2); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) { isolated(g, "dbe-1", "ECCDoubleBit") }).Should(gomega.Succeed())

	// The GPU is reset and the node rebooted (the agent keeps a hardware fault until
	// it restarts); the agent reports it healthy, more times than the recovery
	// policy's 3 reports.
	stop()
	if err := gpus.ResetGPU(2); err != nil {
		t.Fatal(err)
	}
	runAgent(t, "dbe-1", gpus, time.Second)
	var healthySince time.Time
	g.Eventually(func(g gomega.Gomega) {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "dbe-1"}, &gn)).To(gomega.Succeed())
		g.Expect(gn.Status.Health).To(gomega.Equal(chamber.GPUHealthy))
		healthySince = gn.Status.LastHeartbeatTime.Time
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "dbe-1"}, &gn)).To(gomega.Succeed())
		g.Expect(gn.Status.LastHeartbeatTime.Sub(healthySince)).To(gomega.BeNumerically(">=", 4*time.Second))
	}).Should(gomega.Succeed())
	reconcileNode(t, "dbe-1")
	g.Expect(getNode(g, "dbe-1").Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolationHealthyReports))
	isolated(g, "dbe-1", "ECCDoubleBit")

	// The operator clears it.
	clearIsolation(t, g, "dbe-1")
	g.Eventually(func(g gomega.Gomega) {
		n := getNode(g, "dbe-1")
		g.Expect(tainted(n)).To(gomega.BeFalse())
		g.Expect(n.Spec.Unschedulable).To(gomega.BeFalse())
		g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolationClear))
		g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIsolatedAt))
		g.Expect(condition(n).Reason).To(gomega.Equal(chamber.ReasonCleared))
	}).Should(gomega.Succeed())
	// Events are written asynchronously by the recorder.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(nodeEvents(g, "dbe-1")).To(gomega.ContainElements("Isolated", chamber.ReasonCleared))
	}).Should(gomega.Succeed())
}

// Test 5b. A transient fault returns the node (forced Node level) by itself after 3
// consecutive healthy reports. The agent's XID catalog marks every Unhealthy fault
// persistent, so this test writes the GPUNode as a source reporting a transient
// Unhealthy fault would.
func TestTransientFaultRecovers(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "transient", &chamber.IsolationPolicy{Level: chamber.IsolateNode, RecoveryReports: ptr.To[int32](3)}, 8)
	nodes(t, "transient", "transient-1")
	gpu := chamber.GPUStatus{Index: 5, Health: chamber.GPUUnhealthy, Faults: []chamber.GPUFault{{
		Reason: "XID119", Severity: chamber.GPUUnhealthy, Action: "ResetGPU", Message: "XID 119: GSP RPC timeout",
	}}}
	beat := time.Now()
	report(t, "transient-1", beat, gpu)
	g.Eventually(func(g gomega.Gomega) { isolated(g, "transient-1", "XID119") }).Should(gomega.Succeed())

	// Heartbeats are stored to the second: each report is a second after the last.
	for i := 1; i <= 2; i++ {
		report(t, "transient-1", beat.Add(time.Duration(i)*time.Second), chamber.GPUStatus{Index: 5, Health: chamber.GPUHealthy})
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(getNode(g, "transient-1").Annotations[chamber.AnnotationIsolationHealthyReports]).To(gomega.HavePrefix(fmt.Sprintf("%d@", i)))
		}).Should(gomega.Succeed())
		isolated(g, "transient-1", "XID119")
	}
	report(t, "transient-1", beat.Add(3*time.Second), chamber.GPUStatus{Index: 5, Health: chamber.GPUHealthy})
	g.Eventually(func(g gomega.Gomega) {
		n := getNode(g, "transient-1")
		g.Expect(tainted(n)).To(gomega.BeFalse())
		g.Expect(n.Spec.Unschedulable).To(gomega.BeFalse())
		g.Expect(condition(n).Reason).To(gomega.Equal(chamber.ReasonRecovered))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(nodeEvents(g, "transient-1")).To(gomega.ContainElements("Isolated", chamber.ReasonRecovered))
	}).Should(gomega.Succeed())
}

// report writes the node's GPUNode status as an agent heartbeating every 30 s would,
// with 8 GPUs healthy but for the one given.
func report(t testing.TB, node string, heartbeat time.Time, gpu chamber.GPUStatus) {
	t.Helper()
	reportEvery(t, node, heartbeat, 30*time.Second, gpu)
}

// reportEvery is report for an agent heartbeating every period.
func reportEvery(t testing.TB, node string, heartbeat time.Time, period time.Duration, gpu chamber.GPUStatus) {
	t.Helper()
	ctx := context.Background()
	gn := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(gn), gn); err != nil {
		if err := k8s.Create(ctx, gn); err != nil {
			t.Fatal(err)
		}
	}
	gn.Status = chamber.GPUNodeStatus{Health: gpu.Health, LastHeartbeatTime: &metav1.Time{Time: heartbeat},
		HeartbeatSeconds: int32(period / time.Second)}
	for i := range int32(8) {
		s := chamber.GPUStatus{Index: i, Model: h100, Health: chamber.GPUHealthy}
		if i == gpu.Index {
			s = gpu
		}
		gn.Status.GPUs = append(gn.Status.GPUs, s)
	}
	if err := k8s.Status().Update(ctx, gn); err != nil {
		t.Fatal(err)
	}
}

// gpuOf is the index of the GPU the node's agent says the pod holds.
func gpuOf(g *gomega.WithT, node string, pod *corev1.Pod) int {
	failing := -1
	g.Eventually(func(g gomega.Gomega) {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: node}, &gn)).To(gomega.Succeed())
		i := slices.IndexFunc(gn.Status.GPUs, func(s chamber.GPUStatus) bool { return s.Pod != nil && s.Pod.Name == pod.Name })
		g.Expect(i).NotTo(gomega.Equal(-1), "the agent maps no GPU to pod %s", pod.Name)
		failing = int(gn.Status.GPUs[i].Index)
	}).Should(gomega.Succeed())
	return failing
}

// Test 6. An XID 48 (double-bit ECC error) on the GPU of a one-GPU job: NVIDIA's
// catalog says a GPU reset clears it, so under the default level (Auto) Chamber takes
// out that GPU alone. The node is neither tainted nor cordoned, a hold pod takes the
// GPU, the job on it is evicted, and the job on the node's other 7 GPUs keeps running.
func TestXID48IsolatesTheGPUOnly(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	fixture(t, "gpu48", nil, 8)
	nodes(t, "gpu48", "gpu48-1")
	gpus := startMappedAgent(t, "gpu48-1", 2*time.Second)
	submitGPUs(t, "gpu48", "small", 1)
	var small *corev1.Pod
	g.Eventually(func(g gomega.Gomega) { small = runningPod(g, "gpu48", "small") }).Should(gomega.Succeed())
	submitGPUs(t, "gpu48", "big", 7)
	g.Eventually(func(g gomega.Gomega) { runningPod(g, "gpu48", "big") }).Should(gomega.Succeed())

	// The fault hits the GPU the agent says small's pod holds.
	failing := gpuOf(g, "gpu48-1", small)
	if err := gpus.RaiseXID(failing, 48); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		n := getNode(g, "gpu48-1")
		cond := condition(n)
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Status).To(gomega.Equal(corev1.ConditionTrue))
		g.Expect(cond.Reason).To(gomega.Equal("XID48"))
		g.Expect(n.Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationIsolationLevel, string(chamber.IsolateGPU)))
		g.Expect(n.Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationIsolatedGPUs, strconv.Itoa(failing)))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { evictedByCheck(g, "gpu48", "small") }).Should(gomega.Succeed())

	inService(g, "gpu48-1")
	undisturbed(g, "gpu48", "big")
	var hold corev1.PodList
	g.Expect(k8s.List(ctx, &hold, client.MatchingLabels{chamber.LabelGPUHold: "gpu48-1"})).To(gomega.Succeed())
	g.Expect(hold.Items).To(gomega.HaveLen(1))
	q := hold.Items[0].Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
	g.Expect(q.Value()).To(gomega.Equal(int64(1)), "the hold takes the failing GPU only")
	g.Expect(value(g, "chamber_isolations_total", "pool", "gpu48", "level", "GPU", "reason", "XID48")).To(gomega.Equal(1.0))
}

// An XID 79 on the GPU of a one-GPU job takes the node (its catalog action is a
// reboot): no new pod lands there. The job on the failing GPU is evicted at once; the
// job on the node's healthy GPUs runs on while the node drains (evicting it would idle
// seven healthy GPUs until the repair), and at the drain timeout gets notice and its
// team's grace, so the node can be rebooted with nothing lost.
func TestXID79DrainsTheNodeThenGivesNotice(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "grace79", nil, 8)
	nodes(t, "grace79", "grace79-1")
	gpus := startMappedAgent(t, "grace79-1", 2*time.Second)
	submitGPUs(t, "grace79", "small", 1)
	var small *corev1.Pod
	g.Eventually(func(g gomega.Gomega) { small = runningPod(g, "grace79", "small") }).Should(gomega.Succeed())
	submitGPUs(t, "grace79", "big", 7)
	g.Eventually(func(g gomega.Gomega) { runningPod(g, "grace79", "big") }).Should(gomega.Succeed())
	failing := gpuOf(g, "grace79-1", small)
	raised := time.Now()
	if err := gpus.RaiseXID(failing, 79); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) { isolated(g, "grace79-1", "XID79") }).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { evictedByCheck(g, "grace79", "small") }).Should(gomega.Succeed())

	// big runs on, with no notice and no eviction asked, while the node stays isolated.
	g.Consistently(func(g gomega.Gomega) {
		pod := runningPod(g, "grace79", "big")
		g.Expect(pod.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationEvictionDeadline))
		wls := workloads(g, "grace79", "big")
		g.Expect(wls).To(gomega.HaveLen(1))
		_, asked := chamberkueue.RequestedEviction(&wls[0])
		g.Expect(asked).To(gomega.BeFalse())
		g.Expect(wls[0].Status.SchedulingStats).To(gomega.Or(gomega.BeNil(), gomega.HaveField("Evictions", gomega.BeEmpty())))
		isolated(g, "grace79-1", "XID79")
	}, drainTimeout/3, 250*time.Millisecond).Should(gomega.Succeed())

	// The drain times out: big has notice, with the default grace period.
	g.Eventually(func(g gomega.Gomega) {
		pod := runningPod(g, "grace79", "big")
		deadline, err := time.Parse(time.RFC3339, pod.Annotations[chamber.AnnotationEvictionDeadline])
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(deadline).To(gomega.BeTemporally(">=", raised.Add(drainTimeout+workload.DefaultGracePeriod).Truncate(time.Second)))
		g.Expect(pod.Annotations[chamber.AnnotationEvictionReason]).To(gomega.Equal(chamber.ReasonGPUFault))
	}).Should(gomega.Succeed())
}

// Test 7. A pool that forces Node level isolates the node on an XID 48, which Auto
// would isolate as one GPU.
func TestForcedNodeLevelIsolatesNodeOnXID48(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "forced", &chamber.IsolationPolicy{Level: chamber.IsolateNode}, 8)
	nodes(t, "forced", "forced-1")
	gpus, _ := startAgent(t, "forced-1", 2*time.Second)
	submitGPUs(t, "forced", "small", 1)
	g.Eventually(func(g gomega.Gomega) { runningPod(g, "forced", "small") }).Should(gomega.Succeed())
	if err := gpus.RaiseXID(6, 48); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		isolated(g, "forced-1", "XID48")
		g.Expect(getNode(g, "forced-1").Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationIsolationLevel, string(chamber.IsolateNode)))
	}).Should(gomega.Succeed())
	// Without a map of pods to GPUs (a kwok node), node level evicts every workload on
	// the node.
	g.Eventually(func(g gomega.Gomega) { evictedByCheck(g, "forced", "small") }).Should(gomega.Succeed())
	g.Expect(value(g, "chamber_isolations_total", "pool", "forced", "level", "Node", "reason", "XID48")).To(gomega.Equal(1.0))
}

// devicePlugin plays the kubelet's device manager for one kwok node, for the agent's
// pod-resources: each live pod bound to the node gets the lowest free GPUs it asks
// for, and keeps them until it ends or is gone.
type devicePlugin struct {
	node string
	mu   sync.Mutex
	held map[types.UID][]int
}

// GPUPods maps NVML indices, which the agent accepts as device IDs, to pods.
func (d *devicePlugin) GPUPods(ctx context.Context) (map[string]agent.PodRef, error) {
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.MatchingFields{"spec.nodeName": d.node}); err != nil {
		return nil, err
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	live := map[types.UID]bool{}
	for _, p := range pods.Items {
		live[p.UID] = p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
	}
	var used [8]bool
	for uid, gpus := range d.held {
		if !live[uid] {
			delete(d.held, uid)
			continue
		}
		for _, i := range gpus {
			used[i] = true
		}
	}
	out := map[string]agent.PodRef{}
	for _, p := range pods.Items {
		if !live[p.UID] || len(p.Spec.Containers) == 0 {
			continue
		}
		if _, ok := d.held[p.UID]; !ok {
			q := p.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
			var free []int
			for i := 0; i < len(used) && int64(len(free)) < q.Value(); i++ {
				if !used[i] {
					free = append(free, i)
				}
			}
			if q.Value() == 0 || int64(len(free)) < q.Value() {
				continue
			}
			for _, i := range free {
				used[i] = true
			}
			d.held[p.UID] = free
		}
		for _, i := range d.held[p.UID] {
			out[strconv.Itoa(i)] = agent.PodRef{Namespace: p.Namespace, Name: p.Name, Container: p.Spec.Containers[0].Name}
		}
	}
	return out, nil
}

// An XID 79 kills the pod of an 8-GPU job (as the simulator's faults do: the pod
// dies, the device plugin withdraws the GPU) on a node Chamber then isolates, with no
// other node to go to. The workload is Kueue's to move: its topology-aware scheduling
// finds the node tainted with none of the workload's pods left there, looks for a
// replacement, finds none and requeues the workload (TASFailedNodeReplacementFailFast,
// on by default in Kueue v0.19). Chamber evicts nothing through its check, not even
// at the drain timeout (an eviction racing Kueue's replacement left a Job suspended
// for good in the simulator); the job runs again on a new node, under the same
// workload.
func TestKilledPodIsMovedByKueueAlone(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	fixture(t, "replace", nil, 16)
	nodes(t, "replace", "replace-1")
	gpus := startMappedAgent(t, "replace-1", 2*time.Second)
	submit(t, "replace", "train")
	var first *corev1.Pod
	g.Eventually(func(g gomega.Gomega) { first = runningPod(g, "replace", "train") }).Should(gomega.Succeed())
	failing := gpuOf(g, "replace-1", first)
	uid := workloads(g, "replace", "train")[0].UID

	// The fault: the device plugin withdraws the GPU, the pod dies without notice,
	// then the agent reads the XID.
	g.Eventually(func(g gomega.Gomega) { // again on a conflict with kwok's heartbeat
		n := getNode(g, "replace-1")
		n.Status.Allocatable[kube.ResourceGPU] = resource.MustParse("7")
		g.Expect(k8s.Status().Update(ctx, n)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	if err := k8s.Delete(ctx, first, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if err := gpus.RaiseXID(failing, 79); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) { isolated(g, "replace-1", "XID79") }).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		wl := workloads(g, "replace", "train")[0]
		g.Expect(wl.Status.SchedulingStats).NotTo(gomega.BeNil())
		g.Expect(wl.Status.SchedulingStats.Evictions).To(gomega.ContainElement(gomega.HaveField("Reason", kueue.WorkloadEvictedDueToNodeFailures)))
	}).Should(gomega.Succeed())
	time.Sleep(drainTimeout) // past the drain timeout, the node isolated all along

	nodes(t, "replace", "replace-2")
	var moved *corev1.Pod
	g.Eventually(func(g gomega.Gomega) {
		moved = runningPod(g, "replace", "train")
		g.Expect(moved.Spec.NodeName).To(gomega.Equal("replace-2"))
	}).Should(gomega.Succeed())
	wls := workloads(g, "replace", "train")
	g.Expect(wls).To(gomega.HaveLen(1))
	g.Expect(wls[0].UID).To(gomega.Equal(uid))
	g.Expect(wls[0].Status.UnhealthyNodes).To(gomega.BeEmpty())
	g.Expect(controllertest.EvictedByChamber(&wls[0], chamber.ReasonGPUFault)).To(gomega.BeFalse())
	_, asked := chamberkueue.RequestedEviction(&wls[0])
	g.Expect(asked).To(gomega.BeFalse())
	var job batchv1.Job
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "replace", Name: "train"}, &job)).To(gomega.Succeed())
	g.Expect(ptr.Deref(job.Spec.Suspend, false)).To(gomega.BeFalse())
	g.Expect(job.Annotations).NotTo(gomega.HaveKey("kueue.x-k8s.io/stopping"))
}
