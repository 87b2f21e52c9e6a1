package volcanofaults

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/test/controlplane"
)

// TestVolcanoPodsGetTheTeamsGrace: the pods vc-controller-manager makes for a Volcano
// Job in a team's namespace get the team's eviction grace (its tier's, by the Job's
// PriorityClass) as terminationGracePeriodSeconds, so that Volcano's reclaim and
// preempt, which delete pods with their own grace, give them the notice Chamber's
// evictions give (under Volcano alone, Kubernetes' 30 s). A pod's own longer grace is kept; outside the team, Kubernetes'
// default.
func TestVolcanoPodsGetTheTeamsGrace(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	labels := map[string]string{"chamber.dev/test-pool": "grace"}
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "grace-1", GPUs: 8, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, "grace")
	other := namespace(t, "grace-other")
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "grace"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels, Backend: chamber.BackendVolcano}})
	tm := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "grace"}, Spec: chamber.TeamSpec{Pool: "grace", Namespaces: []string{ns},
		Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 8}},
		Eviction: &chamber.EvictionPolicy{
			GracePeriod:      &metav1.Duration{Duration: 5 * time.Minute},
			TierGracePeriods: []chamber.TierGracePeriod{{Tier: "production", GracePeriod: metav1.Duration{Duration: 20 * time.Minute}}},
		}}}
	create(t, tm)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tm) })
	g.Eventually(func(g gomega.Gomega) { g.Expect(teamReady(g, "grace").Status).To(gomega.Equal(metav1.ConditionTrue)) }).Should(gomega.Succeed())
	queue(t, "grace-other", 8)
	// The API server applies a new admission policy within a second or so: wait until
	// a pod of the team's namespace (a dry run) gets it.
	g.Eventually(func(g gomega.Gomega) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}}}
		g.Expect(k8s.Create(ctx, pod, client.DryRunAll)).To(gomega.Succeed())
		g.Expect(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, -1)).To(gomega.Equal(int64(300)))
	}).Should(gomega.Succeed())

	job := func(name, namespace, queue, tier string, own *int64) *batch.Job {
		j := onPool(gangJob(name, namespace, queue, 1, 1, time.Minute), labels)
		j.Spec.PriorityClassName = tier
		j.Spec.Tasks[0].Template.Spec.TerminationGracePeriodSeconds = own
		create(t, j)
		return j
	}
	cases := []struct {
		job  *batch.Job
		want int64
		why  string
	}{
		{job("standard", ns, "grace", "standard", nil), 300, "the team's grace"},
		{job("production", ns, "grace", "production", nil), 1200, "the production tier's"},
		{job("own", ns, "grace", "standard", ptr.To[int64](3600)), 3600, "the pod's own, longer"},
		{job("outside", other, "grace-other", "standard", nil), 30, "Kubernetes' default outside the team"},
	}
	for _, c := range cases {
		g.Eventually(func(g gomega.Gomega) {
			pods := podsOf(g, c.job)
			g.Expect(pods).NotTo(gomega.BeEmpty())
			for _, p := range pods {
				g.Expect(ptr.Deref(p.Spec.TerminationGracePeriodSeconds, -1)).To(gomega.Equal(c.want), "%s: pod %s", c.why, p.Name)
			}
		}).Should(gomega.Succeed())
	}

}
