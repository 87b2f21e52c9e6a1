package volcanofaults

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/team"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// Chamber's priority tiers are PriorityClasses of their names where Volcano is served,
// and vc-scheduler's priority plugin reads them: on a full 8-GPU node, a standard job
// submitted after a preemptible one runs first when the GPUs free up.
func TestTiersBecomePriorityClasses(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	for _, tier := range kube.DefaultPriorityTiers {
		var pc schedulingv1.PriorityClass
		g.Eventually(func() error { return k8s.Get(ctx, client.ObjectKey{Name: tier.Name}, &pc) }).Should(gomega.Succeed())
		g.Expect(pc.Value).To(gomega.Equal(tier.Value), "PriorityClass %s", tier.Name)
		g.Expect(kube.Owned(&pc)).To(gomega.BeTrue(), "PriorityClass %s", tier.Name)
	}

	labels := map[string]string{"chamber.dev/test-pool": "tiers"}
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "tiers-1", GPUs: 8, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, "tiers")
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "tiers"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels, Backend: chamber.BackendVolcano}})
	tm := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "tiers"}, Spec: chamber.TeamSpec{Pool: "tiers", Namespaces: []string{ns},
		Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 8}},
		// Volcano may place preemptible before it preempts it for standard: its pod
		// then has the team's grace to go, a second here.
		Eviction: &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: time.Second}}}}
	create(t, tm)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tm) })
	g.Eventually(func(g gomega.Gomega) { g.Expect(teamReady(g, "tiers").Status).To(gomega.Equal(metav1.ConditionTrue)) }).Should(gomega.Succeed())

	job := func(name, tier string, run time.Duration) *batch.Job {
		j := onPool(gangJob(name, ns, "tiers", 1, 8, run), labels)
		j.Spec.PriorityClassName = tier
		create(t, j)
		return j
	}
	phase := func(g gomega.Gomega, j *batch.Job) batch.JobPhase { return vcjob(g, j).Status.State.Phase }
	// production holds the node; preemptible, then standard, wait for it.
	holder := job("holder", "production", 20*time.Second)
	g.Eventually(func(g gomega.Gomega) { g.Expect(phase(g, holder)).To(gomega.Equal(batch.Running)) }).Should(gomega.Succeed())
	low := job("low", "preemptible", 10*time.Second)
	g.Eventually(func(g gomega.Gomega) { g.Expect(podGroupPhase(g, low)).NotTo(gomega.BeEmpty()) }).Should(gomega.Succeed())
	// Creation times count in whole seconds, and Volcano places jobs of one priority
	// first come, first served (then by UID): standard comes a second later, so that
	// without the tiers preemptible would go first.
	time.Sleep(1100 * time.Millisecond)
	high := job("high", "standard", 10*time.Second)

	// The jobs' PodGroups and pods carry their tier's priority.
	g.Eventually(func(g gomega.Gomega) {
		for _, j := range []*batch.Job{low, high} {
			var pg scheduling.PodGroup
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podGroupName(g, j)}, &pg)).To(gomega.Succeed())
			g.Expect(pg.Spec.PriorityClassName).To(gomega.Equal(j.Spec.PriorityClassName))
		}
	}).Should(gomega.Succeed())

	// When holder finishes, standard runs first, though it came second.
	g.Eventually(func(g gomega.Gomega) { g.Expect(phase(g, high)).To(gomega.Equal(batch.Running)) }).Should(gomega.Succeed())
	g.Expect(phase(g, holder)).To(gomega.Equal(batch.Completed))
	g.Expect(phase(g, low)).NotTo(gomega.BeElementOf(batch.Running, batch.Completed))
	for _, p := range podsOf(g, high) {
		g.Expect(p.Spec.PriorityClassName).To(gomega.Equal("standard"))
		g.Expect(p.Spec.Priority).To(gomega.HaveValue(gomega.BeEquivalentTo(500)))
	}
	g.Eventually(func(g gomega.Gomega) {
		g.Expect([]batch.JobPhase{phase(g, high), phase(g, low)}).To(gomega.HaveEach(batch.Completed))
	}).Should(gomega.Succeed())
}

// podGroupPhase is the phase of the job's PodGroup, empty before Volcano makes it.
func podGroupPhase(g gomega.Gomega, job *batch.Job) scheduling.PodGroupPhase {
	var pg scheduling.PodGroup
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: job.Namespace, Name: podGroupName(g, job)}, &pg); err != nil {
		return ""
	}
	return pg.Status.Phase
}

// A PriorityClass of a tier's name that Chamber did not make is read, never written,
// and told of with a Warning Event where its value is not the tier's; Chamber's own,
// of an older value, is made again with the tier's.
func TestPriorityClassesNotOwnedAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	taken := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "tier-taken"}, Value: 7}
	create(t, taken)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), taken) })
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "tier-mine"}})
	})

	// Each run is chamber-controller starting with the tiers given.
	start := func(tiers ...kube.PriorityTier) {
		mgr, err := ctrl.NewManager(controlplane.AsServiceAccount(cp.Config, controlplane.ChartNamespace, controlplane.ControllerAccount, ""),
			ctrl.Options{Scheme: controlplane.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(team.RegisterVolcanoPriorityTiers(mgr, tiers)).To(gomega.Succeed())
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- mgr.Start(ctx) }()
		g.Eventually(func(g gomega.Gomega) {
			for _, tier := range tiers {
				var pc schedulingv1.PriorityClass
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: tier.Name}, &pc)).To(gomega.Succeed())
				if kube.Owned(&pc) {
					g.Expect(pc.Value).To(gomega.Equal(tier.Value))
				}
			}
		}).Should(gomega.Succeed())
		// The Events are sent in the background: let them out before stopping.
		time.Sleep(2 * time.Second)
		cancel()
		g.Expect(<-done).To(gomega.Succeed())
	}
	start(kube.PriorityTier{Name: "tier-mine", Value: 10}, kube.PriorityTier{Name: "tier-taken", Value: 70})
	start(kube.PriorityTier{Name: "tier-mine", Value: 20}, kube.PriorityTier{Name: "tier-taken", Value: 70})

	var pc schedulingv1.PriorityClass
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "tier-mine"}, &pc)).To(gomega.Succeed())
	g.Expect(pc.Value).To(gomega.BeEquivalentTo(20))
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "tier-taken"}, &pc)).To(gomega.Succeed())
	g.Expect(pc.Value).To(gomega.BeEquivalentTo(7))
	g.Expect(kube.Owned(&pc)).To(gomega.BeFalse())
	g.Eventually(func(g gomega.Gomega) {
		var events eventsv1.EventList
		g.Expect(k8s.List(ctx, &events)).To(gomega.Succeed())
		var notes []string
		for _, e := range events.Items {
			if e.Regarding.Kind == "PriorityClass" && e.Regarding.Name == "tier-taken" && e.Reason == team.ReasonPriorityClassNotOwned {
				g.Expect(e.Type).To(gomega.Equal(corev1.EventTypeWarning))
				notes = append(notes, e.Note)
			}
		}
		g.Expect(notes).NotTo(gomega.BeEmpty())
		g.Expect(notes[0]).To(gomega.ContainSubstring("orders the tier's jobs by 7"))
	}).Should(gomega.Succeed())
}
