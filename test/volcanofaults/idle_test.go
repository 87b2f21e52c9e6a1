package volcanofaults

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/idlereclaim"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/test/controlplane"
)

// TestIdleJobPausedWhileAnotherTeamWaits: team A's Volcano Job holds the one node's 8
// GPUs idle (its agent's fake GPUs report 0%). Team B's Job waits for them. After A's
// idle window (5 s) and its grace period (2 s), Chamber pauses A (Volcano AbortJob:
// its pod goes, the Job stays), B runs to completion, and once nobody waits Chamber
// resumes A (ResumeJob), which runs to completion: one Job each, nothing lost. A's pod
// has 5 minutes of SIGTERM grace, but reads Chamber's notice
// (chamber.dev/checkpoint-on-notice) and let it run out: it is stopped with the short
// grace after it, and B does not wait the 5 minutes.
func TestIdleJobPausedWhileAnotherTeamWaits(t *testing.T) {
	ctx := context.Background()
	nsA, nsB, labels := twoTeams(t, "idle", 2*time.Second)
	g := newG(t)

	a := onPool(gangJob("notebook", nsA, "idle-a", 1, 8, 20*time.Second), labels)
	tmpl := &a.Spec.Tasks[0].Template
	tmpl.Spec.TerminationGracePeriodSeconds = ptr.To[int64](300)
	// kwok removes a terminating pod at its deletionTimestamp, as the kubelet kills a
	// process still running at the end of its grace.
	tmpl.Annotations["pod-delete.stage.kwok.x-k8s.io/delay"] = "1h"
	tmpl.Annotations["pod-delete.stage.kwok.x-k8s.io/jitter-delay"] = "1h"
	tmpl.Annotations[chamber.AnnotationCheckpointOnNotice] = "true"
	create(t, a)
	g.Eventually(func(g gomega.Gomega) { runningGang(g, a, 1) }).Should(gomega.Succeed())
	b := onPool(gangJob("train", nsB, "idle-b", 1, 8, 10*time.Second), labels)
	create(t, b)
	waits := time.Now()

	// A is paused: Volcano aborted it, its pod gone, the Job kept and marked.
	g.Eventually(func(g gomega.Gomega) {
		got := vcjob(g, a)
		g.Expect(got.Status.State.Phase).To(gomega.Equal(batch.Aborted))
		g.Expect(got.Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationIdleReclaimedFor, nsB+"/"+podGroupName(g, b)))
	}).Should(gomega.Succeed())
	t.Logf("team B's job waiting to team A's idle job paused: %s", time.Since(waits).Round(10*time.Millisecond))
	// B runs while A is paused, to completion: A's pod went after its notice and a
	// second, not its 5 minutes.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(vcjob(g, b).Status.State.Phase).To(gomega.Equal(batch.Completed))
	}).Should(gomega.Succeed())
	var events eventsv1.EventList
	g.Expect(k8s.List(ctx, &events, client.InNamespace(nsA))).To(gomega.Succeed())
	g.Expect(events.Items).To(gomega.ContainElement(gomega.HaveField("Reason", "EvictionNoticeRanOut")))
	// Nobody waits any more: A is resumed and runs to completion.
	g.Eventually(func(g gomega.Gomega) {
		got := vcjob(g, a)
		g.Expect(got.Status.State.Phase).To(gomega.Equal(batch.Completed))
		g.Expect(got.Status.RetryCount).To(gomega.Equal(int32(1)), "resumed once")
		g.Expect(got.Annotations).NotTo(gomega.HaveKey(chamber.AnnotationIdleReclaimHeld))
		g.Expect(got.Annotations).To(gomega.HaveKeyWithValue(chamber.AnnotationIdleReclaims, "1"))
	}).WithTimeout(2 * time.Minute).Should(gomega.Succeed())
	for _, job := range []*batch.Job{a, b} {
		var jobs batch.JobList
		g.Expect(k8s.List(ctx, &jobs, client.InNamespace(job.Namespace))).To(gomega.Succeed())
		g.Expect(jobs.Items).To(gomega.HaveLen(1))
	}
}

// TestIdleNotebookPausedWithoutNotice: team A's Volcano Job is a notebook
// (chamber.dev/interactive on its pod template) holding the node's 8 GPUs idle, and its
// team's grace period is an hour. Team B's Job waits. After A's idle window Chamber
// pauses A at once, without the hour's notice: its user is away and nobody would answer
// it; B runs.
func TestIdleNotebookPausedWithoutNotice(t *testing.T) {
	ctx := context.Background()
	nsA, nsB, labels := twoTeams(t, "notebook", time.Hour)
	g := newG(t)

	a := onPool(gangJob("notebook", nsA, "notebook-a", 1, 8, time.Hour), labels)
	a.Spec.Tasks[0].Template.Labels = map[string]string{chamber.LabelInteractive: "true"}
	create(t, a)
	g.Eventually(func(g gomega.Gomega) { runningGang(g, a, 1) }).Should(gomega.Succeed())
	b := onPool(gangJob("train", nsB, "notebook-b", 1, 8, 10*time.Second), labels)
	create(t, b)

	g.Eventually(func(g gomega.Gomega) {
		g.Expect(vcjob(g, a).Status.State.Phase).To(gomega.Equal(batch.Aborted))
	}).WithTimeout(2*time.Minute).Should(gomega.Succeed(), "the notebook is paused within its team's hour of grace")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(vcjob(g, b).Status.State.Phase).To(gomega.Equal(batch.Completed))
	}).WithTimeout(2 * time.Minute).Should(gomega.Succeed())
	var events eventsv1.EventList
	g.Expect(k8s.List(ctx, &events, client.InNamespace(nsA))).To(gomega.Succeed())
	var notes []string
	for _, e := range events.Items {
		if e.Regarding.Name == a.Name && e.Reason == idlereclaim.ReasonIdleReclaim {
			notes = append(notes, e.Note)
		}
	}
	g.Expect(notes).To(gomega.ContainElement(gomega.HaveSuffix("(grace period 0s)")))
}

// twoTeams makes a pool of one 8-GPU node (its agent on go-nvml's fakes, GPUs idle)
// and its teams name-a, whose idle reclaim window is 5 s and eviction grace grace, and
// name-b, each with the whole node as quota and a Volcano queue; it returns their
// namespaces and the pool's node labels.
func twoTeams(t *testing.T, name string, grace time.Duration) (nsA, nsB string, labels map[string]string) {
	ctx := context.Background()
	nsA, nsB = namespace(t, name+"-a"), namespace(t, name+"-b")
	labels = map[string]string{"chamber.dev/test-pool": name}
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})
	quota := []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 8}}
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name + "-a"}, Spec: chamber.TeamSpec{Pool: name, Namespaces: []string{nsA}, Quotas: quota,
		IdleReclaim: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), Window: &metav1.Duration{Duration: 5 * time.Second}},
		Eviction:    &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: grace}}}})
	create(t, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name + "-b"}, Spec: chamber.TeamSpec{Pool: name, Namespaces: []string{nsB}, Quotas: quota}})
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: name + "-1", GPUs: 8, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	fake, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	controllertest.RunAgent(t, name+"-1", fake, nil, nil)
	queue(t, name+"-a", 8)
	queue(t, name+"-b", 8)
	return nsA, nsB, labels
}

// onPool keeps the job's pods on the pool's nodes, and makes them go quickly when
// Volcano deletes them.
func onPool(job *batch.Job, labels map[string]string) *batch.Job {
	for i := range job.Spec.Tasks {
		spec := &job.Spec.Tasks[i].Template.Spec
		spec.NodeSelector = labels
		spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	}
	return job
}

func vcjob(g gomega.Gomega, job *batch.Job) *batch.Job {
	var got batch.Job
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(job), &got)).To(gomega.Succeed())
	return &got
}

// podGroupName is the name of the job's one PodGroup.
func podGroupName(g gomega.Gomega, job *batch.Job) string {
	got := vcjob(g, job)
	return got.Name + "-" + string(got.UID)
}
