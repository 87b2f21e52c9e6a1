package volcanofaults

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/integrations/volcano"
	"chamber.dev/chamber/test/controlplane"
)

// A Team of a Volcano pool becomes a Volcano Queue with its quota (deserved), its
// borrowing cap (capability) and what it never lends (guarantee); a job naming the
// queue runs, one that waits is the team's queue in the metrics; a change to the Queue
// is put back; a Team whose Queue name another Queue holds, or whose pool is Kueue's on
// this cluster without Kueue, says what to fix and gets nothing written.
func TestTeamsBecomeVolcanoQueues(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	labels := map[string]string{"chamber.dev/test-pool": "queues"}
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "queues-1", GPUs: 8, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, "research")
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "queues"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels, Backend: chamber.BackendVolcano}})
	team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "research"}, Spec: chamber.TeamSpec{Pool: "queues", Namespaces: []string{ns},
		Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 4, BorrowingLimit: ptr.To[int32](4), LendingLimit: ptr.To[int32](1)}}}}
	create(t, team)

	gpus := func(l corev1.ResourceList) int64 { q := l[kube.ResourceGPU]; return q.Value() }
	var q scheduling.Queue
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "research"}, &q)).To(gomega.Succeed())
		g.Expect([]int64{gpus(q.Spec.Deserved), gpus(q.Spec.Capability), gpus(q.Spec.Guarantee.Resource)}).To(gomega.Equal([]int64{4, 8, 3}))
		g.Expect(teamReady(g, "research")).To(gomega.HaveField("Status", metav1.ConditionTrue))
	}).Should(gomega.Succeed())
	// The pool reports its nodes on a cluster without Kueue too.
	g.Eventually(func(g gomega.Gomega) {
		var p chamber.GPUPool
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "queues"}, &p)).To(gomega.Succeed())
		g.Expect(p.Status.Models).To(gomega.ConsistOf(gomega.And(gomega.HaveField("Model", "NVIDIA-H100-80GB-HBM3"),
			gomega.HaveField("Nodes", int32(1)), gomega.HaveField("Total", int64(8)))))
		g.Expect(p.Status.Teams).To(gomega.ContainElement("research"))
		g.Expect(apimeta.FindStatusCondition(p.Status.Conditions, chamber.ConditionReady)).To(gomega.HaveField("Status", metav1.ConditionTrue))
	}).Should(gomega.Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), team) })

	// Volcano takes the queue: a job naming it runs.
	job := gangJob("probe", ns, "research", 1, 2, time.Minute)
	job.Spec.Tasks[0].Template.Spec.NodeSelector = labels
	create(t, job)
	g.Eventually(func(g gomega.Gomega) {
		var j batch.Job
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
		g.Expect(j.Status.State.Phase).To(gomega.Equal(batch.Running))
	}).Should(gomega.Succeed())

	// A gang bigger than the queue's capability waits: its PodGroup is the team's queue.
	big := gangJob("big", ns, "research", 2, 8, time.Minute)
	create(t, big)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(controllertest.MetricValue(g, "chamber_team_pending_gpus", "team", "research")).To(gomega.BeEquivalentTo(16))
		g.Expect(controllertest.MetricValue(g, "chamber_team_pending_workloads", "team", "research")).To(gomega.BeEquivalentTo(1))
	}).Should(gomega.Succeed())
	g.Expect(k8s.Delete(ctx, big)).To(gomega.Succeed())

	// Someone widens the queue by hand: Chamber puts the team's quota back.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "research"}, &q)).To(gomega.Succeed())
		q.Spec.Capability = corev1.ResourceList{kube.ResourceGPU: resource.MustParse("64")}
		g.Expect(k8s.Update(ctx, &q)).To(gomega.Succeed())
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "research"}, &q)).To(gomega.Succeed())
		g.Expect(gpus(q.Spec.Capability)).To(gomega.BeEquivalentTo(8))
	}).Should(gomega.Succeed())

	// A Queue of the team's name that Chamber did not make is left alone.
	queue(t, "taken", 2)
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "taken"}, Spec: chamber.TeamSpec{Pool: "queues",
		Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 2}}}})
	g.Eventually(func(g gomega.Gomega) {
		c := teamReady(g, "taken")
		g.Expect(c.Status).To(gomega.Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(gomega.Equal(chamber.ReasonQueueTaken))
	}).Should(gomega.Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "taken"}, &q)).To(gomega.Succeed())
	g.Expect(kube.Owned(&q)).To(gomega.BeFalse())
	g.Expect(gpus(q.Spec.Capability)).To(gomega.BeEquivalentTo(2))

	// A Kueue pool's team on a cluster without Kueue: told, nothing made.
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "kueue-pool"}, Spec: chamber.GPUPoolSpec{NodeLabels: map[string]string{"chamber.dev/test-pool": "none"}}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "kueue-team"}, Spec: chamber.TeamSpec{Pool: "kueue-pool",
		Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 2}}}})
	g.Eventually(func(g gomega.Gomega) {
		c := teamReady(g, "kueue-team")
		g.Expect(c.Reason).To(gomega.Equal(chamber.ReasonBackendNotServed))
		g.Expect(c.Message).To(gomega.ContainSubstring("install Kueue"))
	}).Should(gomega.Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "kueue-team"}, &q)).NotTo(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		_, c := poolReady(g, "kueue-pool")
		g.Expect(c.Reason).To(gomega.Equal(chamber.ReasonBackendNotServed))
		g.Expect(c.Message).To(gomega.ContainSubstring("install Kueue"))
	}).Should(gomega.Succeed())

	// A Volcano pool with a parent while Chamber compiles Volcano pools flat (this
	// suite runs without --volcano-queue-hierarchy): told how to turn the hierarchy
	// on, and no Queue of its own.
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "nested"}, Spec: chamber.GPUPoolSpec{
		Backend: chamber.BackendVolcano, Parent: "queues", NodeLabels: map[string]string{"chamber.dev/test-pool": "none"}}})
	g.Eventually(func(g gomega.Gomega) {
		p, c := poolReady(g, "nested")
		g.Expect(c.Status).To(gomega.Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(gomega.Equal(chamber.ReasonQueueHierarchyOff))
		g.Expect(c.Message).To(gomega.ContainSubstring("--volcano-queue-hierarchy"))
		g.Expect(p.Status.Queue).To(gomega.BeEmpty())
	}).Should(gomega.Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: volcano.PoolQueueName("nested")}, &q)).NotTo(gomega.Succeed())
}

// poolReady is the pool and its Ready condition.
func poolReady(g gomega.Gomega, name string) (*chamber.GPUPool, metav1.Condition) {
	var p chamber.GPUPool
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &p)).To(gomega.Succeed())
	c := apimeta.FindStatusCondition(p.Status.Conditions, chamber.ConditionReady)
	g.Expect(c).NotTo(gomega.BeNil())
	return &p, *c
}

// teamReady is the team's Ready condition.
func teamReady(g gomega.Gomega, name string) metav1.Condition {
	var team chamber.Team
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: name}, &team)).To(gomega.Succeed())
	c := apimeta.FindStatusCondition(team.Status.Conditions, chamber.ConditionReady)
	g.Expect(c).NotTo(gomega.BeNil())
	return *c
}

// Issue 15's first test: two teams of one Volcano pool; team lend borrows team own's
// idle GPUs; own submits, Volcano reclaims what lend borrowed, and lend's evicted job
// runs again and finishes.
func TestBorrowedGPUsAreReclaimed(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	g.SetDefaultEventuallyTimeout(3 * time.Minute)
	labels := map[string]string{"chamber.dev/test-pool": "reclaim"}
	for _, n := range []string{"reclaim-1", "reclaim-2"} {
		if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: n, GPUs: 8, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "reclaim"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels, Backend: chamber.BackendVolcano}})
	for _, name := range []string{"lend", "own"} {
		namespace(t, name)
		// The pods Volcano reclaims get the team's grace to checkpoint and go; kwok's
		// pods never exit early, so it is 2 s here, not the default 5 minutes.
		team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{Pool: "reclaim", Namespaces: []string{name},
			Quotas:   []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 8}},
			Eviction: &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: 2 * time.Second}}}}
		create(t, team)
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), team) })
		g.Eventually(func(g gomega.Gomega) { g.Expect(teamReady(g, name).Status).To(gomega.Equal(metav1.ConditionTrue)) }).Should(gomega.Succeed())
	}
	job := func(ns, name string, run time.Duration) *batch.Job {
		j := gangJob(name, ns, ns, 1, 8, run)
		j.Spec.Tasks[0].Template.Spec.NodeSelector = labels
		return j
	}
	phase := func(g gomega.Gomega, j *batch.Job) batch.JobPhase {
		var have batch.Job
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(j), &have)).To(gomega.Succeed())
		return have.Status.State.Phase
	}
	// lend runs two 8-GPU jobs of two minutes: its own quota and own's, idle.
	first, second := job("lend", "first", 2*time.Minute), job("lend", "second", 2*time.Minute)
	create(t, first)
	create(t, second)
	g.Eventually(func(g gomega.Gomega) {
		g.Expect([]batch.JobPhase{phase(g, first), phase(g, second)}).To(gomega.Equal([]batch.JobPhase{batch.Running, batch.Running}))
	}).Should(gomega.Succeed())

	// Chamber's metrics say who borrows from whom.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(controllertest.MetricValue(g, "chamber_team_gpus_borrowed", "team", "lend", "model", "NVIDIA-H100-80GB-HBM3")).To(gomega.BeEquivalentTo(8))
		g.Expect(controllertest.MetricValue(g, "chamber_team_gpus_lent", "team", "own", "model", "NVIDIA-H100-80GB-HBM3")).To(gomega.BeEquivalentTo(8))
	}).Should(gomega.Succeed())

	// own wants its quota back, and gets it while both of lend's jobs are unfinished:
	// on GPUs Volcano reclaimed from lend.
	submitted := time.Now()
	mine := job("own", "mine", 20*time.Second)
	create(t, mine)
	g.Eventually(func(g gomega.Gomega) { g.Expect(phase(g, mine)).To(gomega.Equal(batch.Running)) }).Should(gomega.Succeed())
	t.Logf("own's job running %s after it was submitted, on GPUs lend borrowed", time.Since(submitted).Round(100*time.Millisecond))
	g.Expect([]batch.JobPhase{phase(g, first), phase(g, second)}).NotTo(gomega.ContainElement(batch.Completed))
	// lend's job that gave way runs again; all three finish.
	g.Eventually(func(g gomega.Gomega) {
		phases := []batch.JobPhase{phase(g, first), phase(g, second), phase(g, mine)}
		g.Expect(phases).NotTo(gomega.ContainElement(batch.Failed))
		g.Expect(phases).To(gomega.HaveEach(batch.Completed))
	}).WithTimeout(5 * time.Minute).Should(gomega.Succeed())
}
