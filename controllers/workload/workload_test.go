package workload_test

import (
	"context"
	"fmt"
	"os"
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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

var k8s client.Client

// placementTimeout is short so that a workload held for failing GPUs gives its quota
// back within the test.
const placementTimeout = 8 * time.Second

// afterNotice is the SIGTERM grace a pod that checkpoints on the notice gets once its
// notice ran out: well short of the test pods' 300 s, long enough for a busy test to
// see such a pod terminating.
const afterNotice = 10 * time.Second

func TestMain(m *testing.M) {
	cfg := controllers.DefaultConfig()
	// kwok's pods ignore SIGTERM and linger for a random part of their grace period:
	// these tests keep Kubernetes' default grace (the team package tests the raise).
	cfg.PodGracePeriods = false
	cfg.Admission.PlacementTimeout = placementTimeout
	cfg.Admission.AfterNotice = afterNotice
	// The check is off by default; these tests are its tests.
	cfg.AdmissionCheck = true
	os.Exit(controllertest.Main(m, cfg, &k8s))
}

func newG(t *testing.T) *gomega.WithT {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	g.SetDefaultConsistentlyDuration(5 * time.Second)
	return g
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// teamFixture makes a pool of nodes with gpus GPUs each, and one team owning all of
// them in a namespace of the same name.
func teamFixture(t *testing.T, name string, gpus int, nodes []string, pool func(*chamber.GPUPool), team func(*chamber.Team)) {
	t.Helper()
	labels := map[string]string{"chamber.dev/test-pool": name}
	p := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}}
	if pool != nil {
		pool(p)
	}
	create(t, p)
	gpuNodes(t, gpus, labels, nodes...)
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	tm := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{
		Pool: name, Namespaces: []string{name},
		Quotas: []chamber.TeamQuota{{Model: h100, GPUs: int32(gpus * len(nodes))}},
	}}
	if team != nil {
		team(tm)
	}
	create(t, tm)
	g := newG(t)
	g.Eventually(func(g gomega.Gomega) {
		var cq kueue.ClusterQueue
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &cq)).To(gomega.Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueue.ClusterQueueActive)).To(gomega.BeTrue())
	}).Should(gomega.Succeed())
}

func gpuNodes(t *testing.T, gpus int, labels map[string]string, names ...string) {
	t.Helper()
	var nodes []controlplane.GPUNode
	for _, n := range names {
		nodes = append(nodes, controlplane.GPUNode{Name: n, GPUs: gpus, Product: h100, Labels: labels})
	}
	if err := controlplane.CreateGPUNodes(context.Background(), k8s, nodes...); err != nil {
		t.Fatal(err)
	}
}

// job is a Job of one pod holding gpus GPUs for ten minutes.
func job(ns, name string, gpus int, tier string) *testingjob.JobWrapper {
	j := testingjob.MakeJob(name, ns).Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, fmt.Sprint(gpus)).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "10m")
	if tier != "" {
		j = j.WorkloadPriorityClass(tier)
	}
	return j
}

// agentOn runs a node agent on node over go-nvml's fake of a DGX H100, and returns the
// fake to raise faults on.
func agentOn(t *testing.T, node string) *nvmlsource.FakeGPUs {
	t.Helper()
	fake, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	controllertest.RunAgent(t, node, fake, nil, nil)
	return fake
}

// filler is a pod outside Kueue bound to node, holding gpus of its GPUs.
func filler(t *testing.T, ns, node string, gpus int) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler-" + node, Namespace: ns,
			Annotations: map[string]string{"pod-complete.stage.kwok.x-k8s.io/delay": "1h"}},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(int64(gpus), resource.DecimalSI)},
				Limits:   corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(int64(gpus), resource.DecimalSI)},
			}}},
		},
	}
	create(t, p)
	return p
}

func workloadOf(g gomega.Gomega, ns, job string) *kueue.Workload {
	return controllertest.WorkloadOf(g, k8s, ns, job)
}

func isTrue(wl *kueue.Workload, cond string) bool {
	return apimeta.IsStatusConditionTrue(wl.Status.Conditions, cond)
}

func check(g gomega.Gomega, wl *kueue.Workload) kueue.AdmissionCheckState {
	for _, c := range wl.Status.AdmissionChecks {
		if c.Name == chamber.AdmissionCheckName {
			return c
		}
	}
	g.Expect(fmt.Sprintf("check %s on workload %s", chamber.AdmissionCheckName, wl.Name)).To(gomega.BeEmpty())
	return kueue.AdmissionCheckState{}
}

func podsOf(g gomega.Gomega, ns, job string) []corev1.Pod {
	var pods corev1.PodList
	g.Expect(k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"job-name": job})).To(gomega.Succeed())
	return pods.Items
}

// runningOn asserts the job's one pod runs, and returns its node.
func runningOn(g gomega.Gomega, ns, job string) string {
	var running []corev1.Pod
	for _, p := range podsOf(g, ns, job) {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	g.Expect(running).To(gomega.HaveLen(1))
	return running[0].Spec.NodeName
}

// Test 1 of the issue: two 4-GPU nodes with 2 GPUs free on each, and a one-pod 4-GPU
// job. Kueue alone admits it by quota and its pod sits Pending, holding the quota;
// with Chamber (topology-aware placement on the pool's flavor) the workload waits in
// the queue with a reason, and is admitted once one node has 4 GPUs free.
func TestWaitsForANodeWithRoom(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()

	// Kueue alone: a flavor, a ClusterQueue of 8 GPUs and a LocalQueue, no Chamber.
	plainLabels := map[string]string{"chamber.dev/test-pool": "plain"}
	gpuNodes(t, 4, plainLabels, "plain-1", "plain-2")
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}})
	create(t, &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: kueue.ResourceFlavorSpec{NodeLabels: plainLabels}})
	create(t, &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: kueue.ClusterQueueSpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "plain"}},
		ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{kube.ResourceGPU}, Flavors: []kueue.FlavorQuotas{{
			Name: "plain", Resources: []kueue.ResourceQuota{{Name: kube.ResourceGPU, NominalQuota: resource.MustParse("8")}},
		}}}},
	}})
	create(t, &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "plain"}, Spec: kueue.LocalQueueSpec{ClusterQueue: "plain"}})

	teamFixture(t, "room", 4, []string{"room-1", "room-2"}, nil, nil)

	for _, ns := range []string{"plain", "room"} {
		filler(t, ns, ns+"-1", 2)
		filler(t, ns, ns+"-2", 2)
		create(t, job(ns, "train", 4, "").Obj())
	}

	// Kueue alone: admitted by quota, and the pod cannot be scheduled.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(isTrue(workloadOf(g, "plain", "train"), kueue.WorkloadAdmitted)).To(gomega.BeTrue())
		pods := podsOf(g, "plain", "train")
		g.Expect(pods).To(gomega.HaveLen(1))
		cond := podCondition(pods[0], corev1.PodScheduled)
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Reason).To(gomega.Equal(corev1.PodReasonUnschedulable))
		t.Logf("Kueue alone: workload admitted, pod Pending: %s", cond.Message)
	}).Should(gomega.Succeed())

	// Chamber: the workload waits in the queue, no pod, and says why.
	var reason string
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(g, "room", "train")
		cond := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Status).To(gomega.Equal(metav1.ConditionFalse))
		g.Expect(cond.Message).To(gomega.ContainSubstring("topology"))
		reason = cond.Message
	}).Should(gomega.Succeed())
	t.Logf("Chamber: workload waits: %s", reason)
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(isTrue(workloadOf(g, "room", "train"), kueue.WorkloadQuotaReserved)).To(gomega.BeFalse())
		g.Expect(podsOf(g, "room", "train")).To(gomega.BeEmpty())
	}).Should(gomega.Succeed())

	// A node frees up: admitted there, with the check Ready.
	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "filler-room-2", Namespace: "room"}}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(g, "room", "train")
		g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
		g.Expect(check(g, wl).State).To(gomega.Equal(kueue.CheckStateReady))
		g.Expect(runningOn(g, "room", "train")).To(gomega.Equal("room-2"))
	}).Should(gomega.Succeed())
}

func podCondition(p corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// Test 2 of the issue: a node advertises 8 GPUs while its agent (the real agent, on
// go-nvml's DGX H100 fake) reports 2 of them failing. An 8-GPU job is not placed
// there: the check holds it with the reason, then gives its quota back to the queue.
// A 6-GPU job is placed there.
func TestFailingGPUsAreNotUsed(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	// Isolation would take the whole node out; this test is about the check alone.
	teamFixture(t, "failing", 8, []string{"failing-1"}, func(p *chamber.GPUPool) {
		p.Spec.Isolation = &chamber.IsolationPolicy{DryRun: true}
	}, nil)

	fake := agentOn(t, "failing-1")
	for _, gpu := range []int{2, 5} {
		if err := fake.RaiseDoubleBitECC(gpu); err != nil {
			t.Fatal(err)
		}
	}
	g.Eventually(func(g gomega.Gomega) {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "failing-1"}, &gn)).To(gomega.Succeed())
		unhealthy := 0
		for _, gpu := range gn.Status.GPUs {
			if gpu.Health == chamber.GPUUnhealthy {
				unhealthy++
			}
		}
		g.Expect(unhealthy).To(gomega.Equal(2))
	}).Should(gomega.Succeed())

	create(t, job("failing", "eight", 8, "").Obj())
	var held string
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(g, "failing", "eight")
		g.Expect(isTrue(wl, kueue.WorkloadQuotaReserved)).To(gomega.BeTrue())
		g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeFalse())
		c := check(g, wl)
		g.Expect(c.State).To(gomega.Equal(kueue.CheckStatePending))
		g.Expect(c.Message).To(gomega.ContainSubstring("2 advertised but failing"))
		held = c.Message
	}).Should(gomega.Succeed())
	t.Logf("8-GPU job held: %s", held)
	// After the placement timeout the check gives the quota back (Retry): Kueue
	// evicts the workload and requeues it; it never runs there.
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(g, "failing", "eight")
		g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeFalse())
		g.Expect(ptr.Deref(check(g, wl).RetryCount, 0)).To(gomega.BeNumerically(">=", 1))
	}).Should(gomega.Succeed())
	g.Expect(podsOf(g, "failing", "eight")).To(gomega.BeEmpty())

	if err := k8s.Delete(ctx, job("failing", "eight", 8, "").Obj(), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	create(t, job("failing", "six", 6, "").Obj())
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(g, "failing", "six")
		g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
		g.Expect(runningOn(g, "failing", "six")).To(gomega.Equal("failing-1"))
	}).Should(gomega.Succeed())
}

// Test 4 of the issue: a workload Chamber evicts gets notice on its pods and the
// grace period of its team and tier before it is stopped; a job that reports its
// checkpoint is evicted at once. Both are requeued and run again.
func TestCooperativeEviction(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	const grace = 6 * time.Second
	teamFixture(t, "coop", 8, []string{"coop-1"}, nil, func(tm *chamber.Team) {
		tm.Spec.Eviction = &chamber.EvictionPolicy{
			GracePeriod:      &metav1.Duration{Duration: time.Hour},
			TierGracePeriods: []chamber.TierGracePeriod{{Tier: "preemptible", GracePeriod: metav1.Duration{Duration: grace}}},
		}
	})
	create(t, job("coop", "answers", 4, "standard").Obj())
	create(t, job("coop", "waits", 4, "preemptible").Obj())
	for _, j := range []string{"answers", "waits"} {
		g.Eventually(func(g gomega.Gomega) { runningOn(g, "coop", j) }).Should(gomega.Succeed())
	}

	requested := time.Now()
	for _, j := range []string{"answers", "waits"} {
		wl := workloadOf(g, "coop", j)
		if err := chamberkueue.RequestEviction(ctx, k8s, wl, chamberkueue.Eviction{Reason: "TestEviction", Message: "the test asks", RequestedAt: requested}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := func(g gomega.Gomega, j string) time.Time {
		pods := podsOf(g, "coop", j)
		g.Expect(pods).To(gomega.HaveLen(1))
		notice := pods[0].Annotations[chamber.AnnotationEvictionDeadline]
		g.Expect(notice).NotTo(gomega.BeEmpty())
		at, err := time.Parse(time.RFC3339, notice)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		return at
	}
	// Both get notice: an hour for the standard tier (the team's), 6 s for preemptible.
	var waitsDeadline time.Time
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(deadline(g, "answers").Sub(requested.Truncate(time.Second))).To(gomega.Equal(time.Hour))
		waitsDeadline = deadline(g, "waits")
		g.Expect(waitsDeadline.Sub(requested.Truncate(time.Second))).To(gomega.Equal(grace))
	}).Should(gomega.Succeed())

	// "waits" is evicted once its deadline passed, not before.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(evictedAt(g, "coop", "waits")).NotTo(gomega.BeZero())
	}).Should(gomega.Succeed())
	g.Expect(evictedAt(g, "coop", "waits")).To(gomega.BeTemporally(">=", waitsDeadline))
	// "answers" still runs, with an hour to go; it saves its checkpoint and says so.
	g.Expect(evictedAt(g, "coop", "answers")).To(gomega.BeZero())
	pod := podsOf(g, "coop", "answers")[0]
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Annotations[chamber.AnnotationCheckpointReady] = "true"
	if err := k8s.Patch(ctx, &pod, patch); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(evictedAt(g, "coop", "answers")).NotTo(gomega.BeZero())
	}).Should(gomega.Succeed())

	// Both are requeued and run again, the request cleared.
	for _, j := range []string{"answers", "waits"} {
		g.Eventually(func(g gomega.Gomega) {
			wl := workloadOf(g, "coop", j)
			g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
			g.Expect(wl.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationEvictionReason))
			runningOn(g, "coop", j)
			g.Expect(podsOf(g, "coop", j)[0].Annotations).NotTo(gomega.HaveKey(chamber.AnnotationEvictionDeadline))
		}).Should(gomega.Succeed())
	}
}

// A workload none of whose pods runs has nothing to save: Chamber evicts it at once
// rather than after its grace. Here its pod waits behind a scheduling gate of its own;
// in the simulator, a job moved off a node for a big job's room had its replacement
// pods failed there by Kueue, for the room's taint, all through its grace, each failure
// counted against its Job's backoffLimit.
func TestEvictionOfAWorkloadWithNoPodRunning(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	teamFixture(t, "norun", 8, []string{"norun-1"}, nil, hourOfGrace)
	gated := job("norun", "gated", 4, "standard").Obj()
	gated.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "chamber.dev/test-hold"}}
	create(t, gated)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(isTrue(workloadOf(g, "norun", "gated"), kueue.WorkloadAdmitted)).To(gomega.BeTrue())
		pods := podsOf(g, "norun", "gated")
		g.Expect(pods).To(gomega.HaveLen(1))
		g.Expect(pods[0].Status.Phase).To(gomega.Equal(corev1.PodPending))
	}).Should(gomega.Succeed())

	requested := time.Now()
	if err := chamberkueue.RequestEviction(ctx, k8s, workloadOf(g, "norun", "gated"), chamberkueue.Eviction{Reason: "TestEviction", Message: "the test asks", RequestedAt: requested}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(evictedAt(g, "norun", "gated")).NotTo(gomega.BeZero())
	}).Should(gomega.Succeed())
	g.Expect(evictedAt(g, "norun", "gated").Sub(requested)).To(gomega.BeNumerically("<", time.Minute), "evicted at its grace's end, not at once")
	for _, p := range podsOf(g, "norun", "gated") {
		g.Expect(p.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationEvictionDeadline), "pod %s given notice", p.Name)
	}
}

// hourOfGrace gives the team's workloads an hour's eviction grace: longer than any test,
// so an eviction before it is Chamber's choice, not the grace's end.
func hourOfGrace(tm *chamber.Team) {
	tm.Spec.Eviction = &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: time.Hour}}
}

// A request asked for in an admission that has ended in an eviction since is done:
// Kueue may preempt a workload and admit it again before Chamber sees it evicted, and
// the request must not evict, nor give notice to, the admission that followed. Here
// the workload's owner deactivates and reactivates it (Kueue evicts it, counting the
// eviction, and admits it again), and the request written from the workload as read
// before lands only after.
func TestRequestForAnEarlierAdmissionIsDropped(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	teamFixture(t, "earlier", 8, []string{"earlier-1"}, nil, hourOfGrace)
	create(t, job("earlier", "j", 4, "standard").Obj())
	g.Eventually(func(g gomega.Gomega) { runningOn(g, "earlier", "j") }).Should(gomega.Succeed())
	before := workloadOf(g, "earlier", "j")

	setActive := func(active bool) {
		t.Helper()
		wl := workloadOf(g, "earlier", "j")
		if err := chamberkueue.PatchWorkload(ctx, k8s, wl, &active, nil); err != nil {
			t.Fatal(err)
		}
	}
	setActive(false)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(isTrue(workloadOf(g, "earlier", "j"), kueue.WorkloadQuotaReserved)).To(gomega.BeFalse())
	}).Should(gomega.Succeed())
	setActive(true)
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(g, "earlier", "j")
		g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
		g.Expect(chamberkueue.Evictions(wl)).To(gomega.BeNumerically(">", chamberkueue.Evictions(before)), "Kueue counted its eviction")
		runningOn(g, "earlier", "j")
	}).Should(gomega.Succeed())

	if err := chamberkueue.RequestEviction(ctx, k8s, before, chamberkueue.Eviction{Reason: "TestEviction", Message: "the test asks, late", RequestedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(workloadOf(g, "earlier", "j").Annotations).NotTo(gomega.HaveKey(chamber.AnnotationEvictionReason))
	}).Should(gomega.Succeed())
	wl := workloadOf(g, "earlier", "j")
	g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
	g.Expect(evictedAt(g, "earlier", "j")).To(gomega.BeZero(), "the admission after the request's was evicted for it")
	for _, p := range podsOf(g, "earlier", "j") {
		g.Expect(p.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationEvictionDeadline), "pod %s given notice", p.Name)
	}
}

// An eviction asked for by hand, without a readable time, gets the team's grace from
// when Chamber saw it: the pods get their notice, and the workload keeps running.
func TestEvictionRequestWithoutTimeKeepsItsGrace(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	teamFixture(t, "undated", 8, []string{"undated-1"}, nil, hourOfGrace)
	create(t, job("undated", "j", 4, "standard").Obj())
	g.Eventually(func(g gomega.Gomega) { runningOn(g, "undated", "j") }).Should(gomega.Succeed())

	for _, requestedAt := range []string{"", "yesterday"} {
		wl := workloadOf(g, "undated", "j")
		patch := client.MergeFrom(wl.DeepCopy())
		if wl.Annotations == nil {
			wl.Annotations = map[string]string{}
		}
		wl.Annotations[chamber.AnnotationEvictionReason] = "TestEviction"
		wl.Annotations[chamber.AnnotationEvictionMessage] = "the test asks, by hand"
		if requestedAt == "" {
			delete(wl.Annotations, chamber.AnnotationEvictionRequestedAt)
		} else {
			wl.Annotations[chamber.AnnotationEvictionRequestedAt] = requestedAt
		}
		seen := time.Now().Truncate(time.Second)
		if err := k8s.Patch(ctx, wl, patch); err != nil {
			t.Fatal(err)
		}
		g.Eventually(func(g gomega.Gomega) {
			wl := workloadOf(g, "undated", "j")
			at, err := time.Parse(time.RFC3339, wl.Annotations[chamber.AnnotationEvictionRequestedAt])
			g.Expect(err).NotTo(gomega.HaveOccurred(), "requested-at %q is dated by Chamber", requestedAt)
			g.Expect(at).To(gomega.BeTemporally(">=", seen))
			pods := podsOf(g, "undated", "j")
			g.Expect(pods).To(gomega.HaveLen(1))
			notice, err := time.Parse(time.RFC3339, pods[0].Annotations[chamber.AnnotationEvictionDeadline])
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(notice).To(gomega.Equal(at.Add(time.Hour)))
		}).Should(gomega.Succeed())
		g.Expect(evictedAt(g, "undated", "j")).To(gomega.BeZero(), "evicted without its grace (requested-at %q)", requestedAt)
		g.Expect(isTrue(workloadOf(g, "undated", "j"), kueue.WorkloadAdmitted)).To(gomega.BeTrue())
	}
}

// A ClusterQueue without Chamber's admission check (one a Kueue user had before
// Chamber, or --admission-check=false) does not keep Chamber from evicting: the
// workload's pods get their notice and grace, Chamber evicts it as Kueue's preemption
// does, and Kueue requeues it and runs it again.
func TestEvictionWithoutTheCheck(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	const ns, grace = "nocheck", 4 * time.Second
	labels := map[string]string{"chamber.dev/test-pool": ns}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	gpuNodes(t, 8, labels, "nocheck-1")
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	flavor := chamberkueue.FlavorName(ns, h100)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: flavor}, &kueue.ResourceFlavor{})).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	create(t, &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: ns}, Spec: kueue.ClusterQueueSpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{kube.ResourceGPU}, Flavors: []kueue.FlavorQuotas{{
			Name: kueue.ResourceFlavorReference(flavor), Resources: []kueue.ResourceQuota{{Name: kube.ResourceGPU, NominalQuota: resource.MustParse("8")}},
		}}}},
	}})
	create(t, &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}, Spec: kueue.LocalQueueSpec{ClusterQueue: ns}})
	create(t, job(ns, "j", 4, "").Obj())
	g.Eventually(func(g gomega.Gomega) { runningOn(g, ns, "j") }).Should(gomega.Succeed())
	wl := workloadOf(g, ns, "j")
	g.Expect(wl.Status.AdmissionChecks).To(gomega.BeEmpty())
	firstPod := podsOf(g, ns, "j")[0].UID

	requested := time.Now()
	g.Expect(chamberkueue.RequestEviction(ctx, k8s, wl, chamberkueue.Eviction{Reason: "TestEviction", Message: "the test asks",
		RequestedAt: requested, GracePeriod: ptr.To(grace)})).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		pods := podsOf(g, ns, "j")
		g.Expect(pods).To(gomega.HaveLen(1))
		g.Expect(pods[0].Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationEvictionReason, "TestEviction"))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { g.Expect(evictedAt(g, ns, "j")).NotTo(gomega.BeZero()) }).Should(gomega.Succeed())
	g.Expect(evictedAt(g, ns, "j")).To(gomega.BeTemporally(">=", requested.Truncate(time.Second).Add(grace)))

	// Kueue stopped the job and runs it again, on a new pod; the request is cleared.
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(g, ns, "j")
		g.Expect(controllertest.EvictedByChamber(wl, "TestEviction")).To(gomega.BeTrue())
		g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
		g.Expect(wl.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationEvictionReason))
		runningOn(g, ns, "j")
		for _, p := range podsOf(g, ns, "j") {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				g.Expect(p.UID).NotTo(gomega.Equal(firstPod))
			}
		}
	}).Should(gomega.Succeed())
}

// evictedAt is when Chamber evicted the job's workload (its Event), or zero.
func evictedAt(g gomega.Gomega, ns, job string) time.Time {
	wl := workloadOf(g, ns, job)
	var list eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(ns))).To(gomega.Succeed())
	for _, e := range list.Items {
		if e.Regarding.Name == wl.Name && e.Reason == "TestEviction" && e.Action == "Evict" {
			g.Expect(e.Note).To(gomega.ContainSubstring("the test asks"))
			return e.EventTime.Time
		}
	}
	return time.Time{}
}

// A Job left half-stopped under an admitted workload (suspended, with Kueue's
// kueue.x-k8s.io/stopping annotation: what Kueue's scheduler leaves when it
// re-applies an admission over an eviction) would never run again: Kueue's Job
// reconciler takes it for running. Chamber sends the workload back to the queue,
// Kueue finishes the stop, and the job runs again.
func TestHalfStoppedJobRunsAgain(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	teamFixture(t, "halfstop", 8, []string{"halfstop-1"}, nil, nil)
	create(t, job("halfstop", "j", 4, "").Obj())
	g.Eventually(func(g gomega.Gomega) { runningOn(g, "halfstop", "j") }).Should(gomega.Succeed())

	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "halfstop", Name: "j"}}
	halfStop := []byte(`{"metadata":{"annotations":{"kueue.x-k8s.io/stopping":"true"}},"spec":{"suspend":true}}`)
	if err := k8s.Patch(ctx, j, client.RawPatch(types.MergePatchType, halfStop)); err != nil {
		t.Fatal(err)
	}
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(g, "halfstop", "j")
		g.Expect(controllertest.EvictedByChamber(wl, "HalfStoppedJob")).To(gomega.BeTrue())
		g.Expect(isTrue(wl, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
		runningOn(g, "halfstop", "j")
		var job batchv1.Job
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(j), &job)).To(gomega.Succeed())
		g.Expect(*job.Spec.Suspend).To(gomega.BeFalse())
		g.Expect(job.Annotations).NotTo(gomega.HaveKey("kueue.x-k8s.io/stopping"))
	}).Should(gomega.Succeed())
	var events eventsv1.EventList
	g.Expect(k8s.List(ctx, &events, client.InNamespace("halfstop"))).To(gomega.Succeed())
	g.Expect(events.Items).To(gomega.ContainElement(gomega.HaveField("Reason", "HalfStoppedJob")))
}
