// Package reliability runs two chamber-controller replicas with leader election on a
// local control plane (Kueue, kube-scheduler, kwok) and kills the leader with SIGKILL
// in the middle of Chamber's work: the replica that takes over must finish it exactly
// once, from what the first one wrote down in the API, not from its memory.
package reliability

import (
	"context"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/idlereclaim"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

const (
	h100 = "NVIDIA-H100-80GB-HBM3"
	// grace is the notice of the evictions the tests interrupt: long enough that the
	// leader dies inside it and the next one takes over (controller-runtime's lease
	// lasts 15 s) before it ends.
	grace = 45 * time.Second
	// leaseName is chamber-controller's leader election ID.
	leaseName = "chamber-controller.chamber.dev"
)

var (
	cp  *controlplane.ControlPlane
	k8s client.Client
)

// TestMain runs one control plane with the chart's RBAC; each test runs its own two
// replicas, as the chart's ServiceAccount, and kills what is left of them at its end.
func TestMain(m *testing.M) {
	os.Exit(controllertest.MainForBinaries(m, &cp, &k8s))
}

// newG is the test's gomega. If the test fails, the cluster's Workloads and Events
// are shown.
func newG(t *testing.T) *gomega.WithT {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var wls kueue.WorkloadList
		if err := k8s.List(context.Background(), &wls); err != nil {
			t.Log(err)
		}
		for _, wl := range wls.Items {
			t.Logf("workload %s/%s active=%t annotations=%v conditions=%v", wl.Namespace, wl.Name, ptr.Deref(wl.Spec.Active, true), wl.Annotations, wl.Status.Conditions)
		}
		var events eventsv1.EventList
		if err := k8s.List(context.Background(), &events); err != nil {
			t.Log(err)
		}
		for _, e := range events.Items {
			t.Logf("event %s %s/%s %s %s: %s", e.CreationTimestamp.Format(time.TimeOnly), e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Action, e.Note)
		}
	})
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(3 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	return g
}

// replicas starts two chamber-controller replicas electing a leader, with args, and
// returns them and the leader.
func replicas(t *testing.T, g *gomega.WithT, args ...string) (all []*controlplane.Chamber, leader *controlplane.Chamber) {
	t.Helper()
	args = append([]string{"--leader-elect", "--leader-election-namespace=" + controlplane.ChartNamespace}, args...)
	for _, name := range []string{"a", "b"} {
		all = append(all, start(t, t.Name()+"-"+name, args...))
	}
	g.Eventually(func(g gomega.Gomega) { leader = leading(g, all) }).Should(gomega.Succeed())
	return all, leader
}

// start runs chamber-controller as name with args. It is killed when the test ends,
// its log shown if the test failed.
func start(t *testing.T, name string, args ...string) *controlplane.Chamber {
	t.Helper()
	c, err := cp.StartChamber(context.Background(), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s ---\n%s", c.Name, c.LogTail(60))
		}
		c.Kill()
	})
	return c
}

// failover kills the leader and returns the replica that leads next.
func failover(t *testing.T, g *gomega.WithT, all []*controlplane.Chamber, leader *controlplane.Chamber, requested time.Time) *controlplane.Chamber {
	t.Helper()
	leader.Kill()
	killed := time.Now()
	t.Logf("%s killed %s after the eviction request", leader.Name, killed.Sub(requested).Round(time.Millisecond))
	g.Expect(killed.Sub(requested)).To(gomega.BeNumerically("<", grace-20*time.Second), "the leader was killed too late to test a takeover inside the grace period")
	var next *controlplane.Chamber
	g.Eventually(func(g gomega.Gomega) { next = leading(g, all) }).Should(gomega.Succeed())
	g.Expect(next).NotTo(gomega.BeIdenticalTo(leader))
	t.Logf("%s leads %s after the kill", next.Name, time.Since(killed).Round(time.Millisecond))
	return next
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// evictedOnce: the workload of ns was evicted for reason exactly once (one Event
// from Chamber's admission controller, one in Kueue's scheduling statistics), when
// the grace period the first leader gave it ended: not before, and not after a new
// grace from the next leader's start.
func evictedOnce(t *testing.T, g gomega.Gomega, ns, reason string, requested time.Time) {
	t.Helper()
	var list eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(ns))).To(gomega.Succeed())
	evicted := slices.DeleteFunc(list.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Kind != "Workload" || e.Reason != reason || e.Action != "Evict"
	})
	g.Expect(evicted).To(gomega.HaveLen(1), "evictions for %s", reason)
	g.Expect(evicted[0].Series).To(gomega.BeNil(), "the eviction's Event repeated")
	at := evicted[0].EventTime.Time
	t.Logf("evicted %s after the request (grace %s)", at.Sub(requested).Round(time.Millisecond), grace)
	g.Expect(at).To(gomega.BeTemporally(">=", requested.Add(grace-time.Second)), "evicted before its grace period ended")
	g.Expect(at).To(gomega.BeTemporally("<", requested.Add(grace+15*time.Second)), "the grace period started again under the new leader")
	wl := workload(g, ns)
	g.Expect(controllertest.Evictions(&wl, reason)).To(gomega.Equal(int32(1)))
}

// An operator isolates the node a job runs on; the leader taints and cordons it and
// asks for the job's eviction with its grace period, and is killed at once. The other
// replica takes over and evicts the job once, when the grace the first one gave it
// ends (not a new grace from its own start, not at once); Kueue requeues it onto the
// healthy node; nothing is isolated or evicted twice.
func TestLeaderKilledMidEviction(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	all, leader := replicas(t, g, "--isolation-eviction-grace-period="+grace.String())

	labels := map[string]string{"chamber.dev/test-pool": "isolate"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "isolate"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "isolate"}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "isolate"},
		Spec: chamber.TeamSpec{Pool: "isolate", Namespaces: []string{"isolate"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 16}}}})
	// The job lands on isolate-1, the only node at first.
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "isolate-1", GPUs: 8, Product: h100, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	submit(t, g, "isolate", "train", "10m")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(runningPod(g, "isolate", "train").Spec.NodeName).To(gomega.Equal("isolate-1"))
	}).Should(gomega.Succeed())
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "isolate-2", GPUs: 8, Product: h100, Labels: labels}); err != nil {
		t.Fatal(err)
	}

	isolated := node(g, "isolate-1")
	patch := client.MergeFrom(isolated.DeepCopy())
	metav1.SetMetaDataAnnotation(&isolated.ObjectMeta, chamber.AnnotationIsolate, "failover test: maintenance")
	g.Expect(k8s.Patch(ctx, isolated, patch)).To(gomega.Succeed())
	wl, requested := evictionRequested(g, "isolate")
	g.Expect(requested.Reason).To(gomega.Equal(chamber.ReasonGPUFault))
	failover(t, g, all, leader, requested.RequestedAt)

	var moved *corev1.Pod
	g.Eventually(func(g gomega.Gomega) {
		moved = runningPod(g, "isolate", "train")
		g.Expect(moved.Spec.NodeName).To(gomega.Equal("isolate-2"))
	}).Should(gomega.Succeed())
	evictedOnce(t, g, "isolate", chamber.ReasonGPUFault, requested.RequestedAt)

	// What the new leader does next changes nothing: one workload (the same), evicted
	// once, running on the healthy node, the node isolated once.
	time.Sleep(20 * time.Second)
	evictedOnce(t, g, "isolate", chamber.ReasonGPUFault, requested.RequestedAt)
	now := workload(g, "isolate")
	g.Expect(now.UID).To(gomega.Equal(wl.UID))
	g.Expect(apimeta.IsStatusConditionTrue(now.Status.Conditions, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
	g.Expect(runningPod(g, "isolate", "train").UID).To(gomega.Equal(moved.UID))
	n := node(g, "isolate-1")
	g.Expect(n.Spec.Unschedulable).To(gomega.BeTrue(), "isolate-1 no longer cordoned")
	g.Expect(isolationTaint(n)).To(gomega.BeTrue(), "isolate-1 no longer tainted")
	g.Expect(isolations(g, "isolate-1")).To(gomega.Equal(1), "isolate-1 isolated more than once")
}

// Idle reclaim pauses a borrowing team's idle job for another team's waiting job,
// with the idle team's grace period; the leader is killed once it asked. The next
// leader evicts it once, when that grace ends, pauses it (deactivated, its Job kept)
// and puts it back in its queue once the waiting job holds the quota; it runs again
// when that job is done: reclaimed once, paused once, resumed once.
func TestLeaderKilledMidIdleReclaim(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	all, leader := replicas(t, g, "--idle-reclaim-interval=1s", "--idle-reclaim-min-wait=0s")

	labels := map[string]string{"chamber.dev/test-pool": "idle"}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "idle"}, Spec: chamber.GPUPoolSpec{
		NodeLabels:  labels,
		IdleReclaim: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), Window: &metav1.Duration{Duration: 10 * time.Second}},
	}})
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "idle-1", GPUs: 8, Product: h100, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	fake, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	controllertest.RunAgent(t, "idle-1", fake, nil, nil) // its GPUs stay at 0%
	for _, ns := range []string{"idle-a", "idle-b"} {
		create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	// idle-a borrows the whole node; idle-b lends it but does not preempt borrowers:
	// only idle reclaim gets idle-b's job its GPUs.
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "idle-a"}, Spec: chamber.TeamSpec{
		Pool: "idle", Namespaces: []string{"idle-a"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 0}},
		Eviction: &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: grace}},
	}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "idle-b"}, Spec: chamber.TeamSpec{
		Pool: "idle", Namespaces: []string{"idle-b"}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: 8}},
		Preemption: &chamber.TeamPreemption{ReclaimWithinCohort: "Never"},
	}})
	submit(t, g, "idle-a", "notebook", "10m")
	g.Eventually(func(g gomega.Gomega) { runningPod(g, "idle-a", "notebook") }).Should(gomega.Succeed())
	submit(t, g, "idle-b", "waits", "20s")

	_, requested := evictionRequested(g, "idle-a")
	g.Expect(requested.Reason).To(gomega.Equal(idlereclaim.ReasonIdleReclaim))
	g.Expect(requested.Pause).To(gomega.BeTrue())
	failover(t, g, all, leader, requested.RequestedAt)

	// Paused at its eviction, and put back in its queue once the waiting job holds
	// the quota: it waits there while that job runs.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(reasons(g, "idle-a")).To(gomega.ContainElements(chamber.ReasonIdleReclaimPaused, chamber.ReasonIdleReclaimResumed))
		runningPod(g, "idle-b", "waits")
	}).Should(gomega.Succeed())
	evictedOnce(t, g, "idle-a", idlereclaim.ReasonIdleReclaim, requested.RequestedAt)
	queued := workload(g, "idle-a")
	g.Expect(ptr.Deref(queued.Spec.Active, true)).To(gomega.BeTrue(), "still paused")
	g.Expect(apimeta.IsStatusConditionTrue(queued.Status.Conditions, kueue.WorkloadQuotaReserved)).To(gomega.BeFalse(), "admitted while the job it was reclaimed for runs")

	// The waiting job is done: the notebook runs again, the same Job.
	g.Eventually(func(g gomega.Gomega) {
		runningPod(g, "idle-a", "notebook")
	}).Should(gomega.Succeed())
	evictedOnce(t, g, "idle-a", idlereclaim.ReasonIdleReclaim, requested.RequestedAt)
	resumed := workload(g, "idle-a")
	g.Expect(resumed.UID).To(gomega.Equal(queued.UID))
	g.Expect(resumed.Annotations[chamber.AnnotationIdleReclaims]).To(gomega.Equal("1"))
	var held, released int
	for _, r := range reasons(g, "idle-a") {
		switch r {
		case chamber.ReasonIdleReclaimPaused:
			held++
		case chamber.ReasonIdleReclaimResumed:
			released++
		}
	}
	g.Expect([]int{held, released}).To(gomega.Equal([]int{1, 1}), "pauses and resumes")
}

// submit creates a Job of one pod of 8 GPUs that kwok completes after d, once the
// team's LocalQueue is there.
func submit(t *testing.T, g *gomega.WithT, ns, name, d string) {
	t.Helper()
	submitTo(t, g, ns, name, "", d)
}

// submitTo is submit, the pod pinned to node unless it is "".
func submitTo(t *testing.T, g *gomega.WithT, ns, name, node, d string) {
	t.Helper()
	g.Eventually(func(g gomega.Gomega) {
		var lq kueue.LocalQueue
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "default"}, &lq)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	j := testingjob.MakeJob(name, ns).Queue("default").Suspend(false).
		RequestAndLimit(kube.ResourceGPU, "8").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", d).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", d)
	if node != "" {
		j.NodeSelector(corev1.LabelHostname, node)
	}
	create(t, j.Obj())
}

// evictionRequested waits for the eviction request on the one workload of ns.
func evictionRequested(g *gomega.WithT, ns string) (kueue.Workload, chamberkueue.Eviction) {
	var wl kueue.Workload
	var e chamberkueue.Eviction
	g.Eventually(func(g gomega.Gomega) {
		wl = workload(g, ns)
		var ok bool
		e, ok = chamberkueue.RequestedEviction(&wl)
		g.Expect(ok).To(gomega.BeTrue(), "no eviction requested yet")
	}).Should(gomega.Succeed())
	return wl, e
}

// reasons are the reasons of the Events about Workloads in ns.
func reasons(g gomega.Gomega, ns string) []string {
	var list eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(ns))).To(gomega.Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Workload" {
			out = append(out, e.Reason)
		}
	}
	return out
}

// leading is the one replica whose leader election metric says it leads.
func leading(g gomega.Gomega, replicas []*controlplane.Chamber) *controlplane.Chamber {
	var leaders []*controlplane.Chamber
	for _, c := range replicas {
		if c.Exited() {
			continue
		}
		resp, err := http.Get(c.MetricsURL)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(resp.Body)
		_ = resp.Body.Close()
		g.Expect(err).NotTo(gomega.HaveOccurred())
		for _, m := range families["leader_election_master_status"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == leaseName && m.GetGauge().GetValue() == 1 {
					leaders = append(leaders, c)
				}
			}
		}
	}
	g.Expect(leaders).To(gomega.HaveLen(1), "replicas leading")
	return leaders[0]
}

func workload(g gomega.Gomega, ns string) kueue.Workload {
	var list kueue.WorkloadList
	g.Expect(k8s.List(context.Background(), &list, client.InNamespace(ns))).To(gomega.Succeed())
	g.Expect(list.Items).To(gomega.HaveLen(1))
	return list.Items[0]
}

// runningPod is the job's one live pod, once Running.
func runningPod(g gomega.Gomega, ns, job string) *corev1.Pod {
	return controllertest.RunningPod(g, k8s, ns, job)
}
