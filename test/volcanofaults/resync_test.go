package volcanofaults

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"chamber.dev/chamber/controllers/volcanoresync"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// TestStalledJobIsResumed: a Volcano Job left Pending without its PodGroup, as
// vc-controller-manager leaves one when a restart's PodGroup deletion overtakes its
// sync (it handles no PodGroup deletion, and vc-scheduler places only PodGroups), is
// resumed by Chamber: Volcano makes its PodGroup again, without spending a retry, and
// the Job runs once its queue lets it. A Job waiting with its PodGroup is left alone.
func TestStalledJobIsResumed(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	labels := map[string]string{"chamber.dev/test-pool": "stalled"}
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "stalled-1", GPUs: 8, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, "stalled")
	// A queue open to 4 GPUs, jobs of 8: both wait Pending, their PodGroups not
	// enqueued and no pod made.
	queue(t, "stalled", 4)
	stalled := onPool(gangJob("stalled", ns, "stalled", 1, 8, 5*time.Second), labels)
	waiting := onPool(gangJob("waiting", ns, "stalled", 1, 8, 5*time.Second), labels)
	create(t, stalled)
	create(t, waiting)
	var lost scheduling.PodGroup
	g.Eventually(func(g gomega.Gomega) {
		for _, job := range []*batch.Job{stalled, waiting} {
			g.Expect(vcjob(g, job).Status.State.Phase).To(gomega.Equal(batch.Pending))
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podGroupName(g, job)}, &lost)).To(gomega.Succeed())
			g.Expect(lost.Status.Phase).To(gomega.Equal(scheduling.PodGroupPending))
		}
	}).Should(gomega.Succeed())

	// The stalled one loses its PodGroup.
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podGroupName(g, stalled)}, &lost); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, &lost); err != nil {
		t.Fatal(err)
	}
	lostAt := time.Now()
	var again scheduling.PodGroup
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podGroupName(g, stalled)}, &again)).To(gomega.Succeed())
		g.Expect(again.UID).NotTo(gomega.Equal(lost.UID))
	}).Should(gomega.Succeed())
	t.Logf("PodGroup made again %s after its deletion", time.Since(lostAt).Round(100*time.Millisecond))
	g.Expect(time.Since(lostAt)).To(gomega.BeNumerically(">=", resyncAfter), "resumed before Volcano had its time")
	g.Expect(resynced(g, stalled)).To(gomega.ContainElement(gomega.ContainSubstring("Pending")))
	g.Expect(vcjob(g, stalled).Status.RetryCount).To(gomega.BeZero(), "the resume spent a retry")
	g.Expect(resynced(g, waiting)).To(gomega.BeEmpty(), "a job waiting with its PodGroup was resumed")

	// Open the queue: the resumed job is placed like any other and completes.
	var q scheduling.Queue
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "stalled"}, &q)).To(gomega.Succeed())
	q.Spec.Capability[kube.ResourceGPU] = resource.MustParse("8")
	g.Expect(k8s.Update(ctx, &q)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(vcjob(g, stalled).Status.State.Phase).To(gomega.Equal(batch.Completed))
	}).Should(gomega.Succeed())
	g.Expect(vcjob(g, stalled).Status.RetryCount).To(gomega.BeZero())
}

// resynced are the notes of the Events Chamber wrote on the job for resuming it.
func resynced(g gomega.Gomega, job *batch.Job) []string {
	var notes []string
	for _, e := range jobEvents(g, job, volcanoresync.ReasonResynced) {
		notes = append(notes, e.Note)
	}
	return notes
}
