package room_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/room"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

var k8s client.Client

// TestMain runs one control plane (Kueue, kube-scheduler, kwok) and Chamber's
// controllers in-process: room is made after 2 s of waiting (again after 30 s for a
// waiter that still waits), and the moved workloads' pods get 1 s to checkpoint.
func TestMain(m *testing.M) {
	cfg := controllers.DefaultConfig()
	cfg.Room.MinWait = 2 * time.Second
	cfg.Room.Interval = time.Second
	cfg.Room.Settle = 30 * time.Second
	cfg.Admission.GracePeriod = time.Second
	os.Exit(controllertest.Main(m, cfg, &k8s))
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// team creates a namespace and a team of the pool with that name and quota.
func team(t *testing.T, g *gomega.WithT, name, pool string, gpus int32) {
	t.Helper()
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: chamber.TeamSpec{Pool: pool, Namespaces: []string{name}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: gpus}}}})
	g.Eventually(func(g gomega.Gomega) {
		var tm chamber.Team
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &tm)).To(gomega.Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tm.Status.Conditions, chamber.ConditionReady)).To(gomega.BeTrue())
	}).Should(gomega.Succeed())
}

// run submits a Job of one pod holding gpus GPUs for d in the tier and waits until
// Kueue admits it; it returns the node its pod runs on.
func run(t *testing.T, g *gomega.WithT, ns, name string, gpus int, d time.Duration, tier string) string {
	t.Helper()
	submit(t, ns, name, gpus, d, tier)
	var node string
	g.Eventually(func(g gomega.Gomega) string { node = runningOn(g, ns, name); return node }).ShouldNot(gomega.BeEmpty())
	return node
}

// submit creates a Job of one pod holding gpus GPUs for d in the tier.
func submit(t *testing.T, ns, name string, gpus int, d time.Duration, tier string) {
	t.Helper()
	create(t, testingjob.MakeJob(name, ns).Queue("default").Suspend(false).WorkloadPriorityClass(tier).
		RequestAndLimit(kube.ResourceGPU, fmt.Sprint(gpus)).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", d.String()).
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", d.String()).Obj())
}

// runningOn is the node of the Job's running pod; "" when none runs.
func runningOn(g gomega.Gomega, ns, job string) string {
	var pods corev1.PodList
	g.Expect(k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"batch.kubernetes.io/job-name": job})).To(gomega.Succeed())
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Spec.NodeName
		}
	}
	return ""
}

// twoNodes creates a pool of that name and its two 8-GPU nodes, <name>-1 and -2.
func twoNodes(t *testing.T, name string) {
	t.Helper()
	pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: chamber.GPUPoolSpec{NodeLabels: map[string]string{"chamber.dev/test-pool": name}}}
	create(t, pool)
	if err := controlplane.CreateGPUNodes(context.Background(), k8s,
		controlplane.GPUNode{Name: name + "-1", GPUs: 8, Product: h100, Labels: pool.Spec.NodeLabels},
		controlplane.GPUNode{Name: name + "-2", GPUs: 8, Product: h100, Labels: pool.Spec.NodeLabels}); err != nil {
		t.Fatal(err)
	}
}

// dumpOnFailure logs, when the test failed, the state of the Workloads in the
// namespaces with that prefix and the Events there and on their nodes.
func dumpOnFailure(t *testing.T, prefix string) {
	if !t.Failed() {
		return
	}
	ctx := context.Background()
	var wls kueue.WorkloadList
	_ = k8s.List(ctx, &wls)
	for _, wl := range wls.Items {
		if strings.HasPrefix(wl.Namespace, prefix) {
			t.Logf("workload %s/%s active=%v annotations=%v conditions=%v", wl.Namespace, wl.Name, ptr.Deref(wl.Spec.Active, true), wl.Annotations, wl.Status.Conditions)
		}
	}
	var events eventsv1.EventList
	_ = k8s.List(ctx, &events)
	for _, e := range events.Items {
		if strings.HasPrefix(e.Namespace, prefix) || strings.HasPrefix(e.Regarding.Name, prefix) {
			t.Logf("event %s %s %s: %s", e.EventTime.Format("15:04:05.000"), e.Regarding.Name, e.Reason, e.Note)
		}
	}
}

// roomNotes are the notes of the RoomForBigJob Events on the waiting workload.
func roomNotes(g gomega.Gomega, wl *kueue.Workload) string {
	var notes []string
	for _, e := range eventsOn(g, wl) {
		if e.Reason == room.ReasonRoomForBigJob {
			notes = append(notes, e.Note)
		}
	}
	return strings.Join(notes, "\n")
}

// eventReasons are the reasons of the Events on the workload.
func eventReasons(g gomega.Gomega, wl *kueue.Workload) []string {
	var reasons []string
	for _, e := range eventsOn(g, wl) {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

func eventsOn(g gomega.Gomega, wl *kueue.Workload) []eventsv1.Event {
	var events eventsv1.EventList
	g.Expect(k8s.List(context.Background(), &events, client.InNamespace(wl.Namespace))).To(gomega.Succeed())
	var out []eventsv1.Event
	for _, e := range events.Items {
		if e.Regarding.Name == wl.Name {
			out = append(out, e)
		}
	}
	return out
}

func evicted(wl *kueue.Workload) bool {
	return apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted) != nil
}

// A production job of 8 GPUs waits while 12 GPUs are free, 6 on each of two nodes
// that each run a 2-GPU preemptible job for ten minutes: its team has the quota, no
// node has the room, and Kueue alone would keep it waiting until one of those jobs
// ends. Chamber moves one of them (with notice) onto the other node's free GPUs, the
// production job runs where it was, the moved job runs again, and the other is left
// alone.
func TestRoomForBigJob(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx := context.Background()
	twoNodes(t, "room")
	team(t, g, "room-batch", "room", 16)
	team(t, g, "room-prod", "room", 8)

	// Two 6-GPU jobs take one node each for a while; two 2-GPU jobs then get the
	// last 2 GPUs of each node, whatever order Kueue's placement prefers.
	first := run(t, g, "room-batch", "short-1", 6, 20*time.Second, "preemptible")
	second := run(t, g, "room-batch", "short-2", 6, 20*time.Second, "preemptible")
	g.Expect(second).NotTo(gomega.Equal(first))
	long1 := run(t, g, "room-batch", "long-1", 2, 10*time.Minute, "preemptible")
	long2 := run(t, g, "room-batch", "long-2", 2, 10*time.Minute, "preemptible")
	g.Expect(long2).NotTo(gomega.Equal(long1))
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(runningOn(g, "room-batch", "short-1")).To(gomega.BeEmpty())
		g.Expect(runningOn(g, "room-batch", "short-2")).To(gomega.BeEmpty())
	}).Should(gomega.Succeed())

	create(t, testingjob.MakeJob("train", "room-prod").Queue("default").Suspend(false).WorkloadPriorityClass("production").
		RequestAndLimit(kube.ResourceGPU, "8").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").Obj())
	// Kueue's own verdict first: quota yes, node no.
	g.Eventually(func(g gomega.Gomega) {
		wl := controllertest.WorkloadOf(g, k8s, "room-prod", "train")
		cond := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Message).To(gomega.ContainSubstring("doesn't allow to fit"))
	}).Should(gomega.Succeed())

	var trainNode string
	g.Eventually(func(g gomega.Gomega) string { trainNode = runningOn(g, "room-prod", "train"); return trainNode }).ShouldNot(gomega.BeEmpty())

	moved, stayed := "long-1", "long-2"
	if trainNode == long2 {
		moved, stayed = stayed, moved
	}
	train := controllertest.WorkloadOf(g, k8s, "room-prod", "train")
	movedWl := controllertest.WorkloadOf(g, k8s, "room-batch", moved)
	g.Expect(train.Annotations[chamber.AnnotationRoomMoved]).To(gomega.Equal(string(movedWl.UID)), "the moves recorded on the waiter")
	g.Expect(evicted(controllertest.WorkloadOf(g, k8s, "room-batch", stayed))).To(gomega.BeFalse(), "the job on the other node was moved too")
	// The moved job runs again, beside the one that stayed.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(runningOn(g, "room-batch", moved)).To(gomega.Equal(map[string]string{long1: long2, long2: long1}[trainNode]))
	}).Should(gomega.Succeed())
	// The room's taint is gone once the room was whole.
	g.Eventually(func(g gomega.Gomega) {
		var n corev1.Node
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: trainNode}, &n)).To(gomega.Succeed())
		g.Expect(n.Spec.Taints).NotTo(gomega.ContainElement(gomega.HaveField("Key", chamber.TaintRoom)))
		g.Expect(n.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationRoomFor))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { g.Expect(roomNotes(g, train)).To(gomega.ContainSubstring(moved)) }).Should(gomega.Succeed())
}

// A production job of 8 GPUs waits for quota: its team's 4 GPUs and the idle team's 6
// are lent to a batch team that fills both nodes with 2-GPU preemptible jobs, 10 GPUs
// beyond its nominal quota. Kueue's preemption takes nothing to let a workload borrow,
// and nothing fits elsewhere to be moved. Chamber pauses the four batch jobs of one
// node (with notice; they are within what the batch team borrows), the production job
// runs there, the paused jobs wait in their queue, and the other node's are left alone.
func TestRoomPausesBorrowedWork(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	twoNodes(t, "pause")
	team(t, g, "pause-batch", "pause", 6)
	team(t, g, "pause-prod", "pause", 4)
	team(t, g, "pause-idle", "pause", 6)

	for i := range 8 {
		submit(t, "pause-batch", fmt.Sprintf("batch-%d", i), 2, 10*time.Minute, "preemptible")
	}
	onNode := map[string][]string{}
	for i := range 8 {
		name := fmt.Sprintf("batch-%d", i)
		var node string
		g.Eventually(func(g gomega.Gomega) string { node = runningOn(g, "pause-batch", name); return node }).ShouldNot(gomega.BeEmpty())
		onNode[node] = append(onNode[node], name)
	}
	g.Expect(onNode).To(gomega.HaveLen(2))

	create(t, testingjob.MakeJob("train", "pause-prod").Queue("default").Suspend(false).WorkloadPriorityClass("production").
		RequestAndLimit(kube.ResourceGPU, "8").
		PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "10m").Obj())
	// Kueue's own verdict first: short of quota, no preemption.
	g.Eventually(func(g gomega.Gomega) {
		wl := controllertest.WorkloadOf(g, k8s, "pause-prod", "train")
		cond := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
		g.Expect(cond).NotTo(gomega.BeNil())
		g.Expect(cond.Message).To(gomega.ContainSubstring("insufficient unused quota"))
		g.Expect(cond.Message).NotTo(gomega.ContainSubstring("Pending the preemption"))
	}).Should(gomega.Succeed())

	t.Cleanup(func() { dumpOnFailure(t, "pause-") })
	var trainNode string
	g.Eventually(func(g gomega.Gomega) string { trainNode = runningOn(g, "pause-prod", "train"); return trainNode }).ShouldNot(gomega.BeEmpty())
	train := controllertest.WorkloadOf(g, k8s, "pause-prod", "train")
	for node, jobs := range onNode {
		for _, job := range jobs {
			wl := controllertest.WorkloadOf(g, k8s, "pause-batch", job)
			if node == trainNode {
				g.Expect(train.Annotations[chamber.AnnotationRoomMoved]).To(gomega.ContainSubstring(string(wl.UID)), "paused for the production job: %s", job)
				g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)).To(gomega.BeFalse(), "a paused job runs again: %s", job)
			} else {
				g.Expect(evicted(wl)).To(gomega.BeFalse(), "the job on the other node was paused too: %s", job)
			}
		}
	}
	g.Eventually(func(g gomega.Gomega) { g.Expect(roomNotes(g, train)).To(gomega.ContainSubstring("borrow")) }).Should(gomega.Succeed())
	// Once the production job is admitted, the paused jobs resume by themselves: active
	// again, back in their queue, their pause marks gone.
	g.Eventually(func(g gomega.Gomega) {
		for _, job := range onNode[trainNode] {
			wl := controllertest.WorkloadOf(g, k8s, "pause-batch", job)
			g.Expect(wl.Spec.Active == nil || *wl.Spec.Active).To(gomega.BeTrue(), "%s still paused", job)
			g.Expect(wl.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationRoomPausedFor), job)
			g.Expect(wl.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationRoomHeld), job)
			g.Expect(eventReasons(g, wl)).To(gomega.ContainElements(room.ReasonPaused, room.ReasonResumed), "%s was held out of its queue, then let go", job)
		}
	}).Should(gomega.Succeed())
}
