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
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// Issue 15's fourth test: Chamber's fleet metrics say what Volcano's objects say. A
// Volcano pool of one 8-GPU node; its team's 6-GPU job runs and a 4-GPU one waits.
// chamber_gpus by state adds up to the node's GPUs, its busy ones are the running
// pods' and the team's Queue's status.allocated; the team series count the running
// job's GPUs as the team's (chamber_team_gpus_allocated), none idle, its quota as its
// Queue's deserved, and the waiting PodGroup (its minResources, its tier) as its
// queue. The job runs within the team's quota (borrowed 0); borrowing beyond it is
// TestBorrowedGPUsAreReclaimed's.
func TestMetricsAgreeWithVolcano(t *testing.T) {
	ctx := context.Background()
	g := newG(t)
	const model = "NVIDIA-H100-80GB-HBM3"
	labels := map[string]string{"chamber.dev/test-pool": "metrics"}
	if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "metrics-1", GPUs: 8, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, "metrics")
	create(t, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "metrics"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels, Backend: chamber.BackendVolcano}})
	team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "metrics"}, Spec: chamber.TeamSpec{Pool: "metrics", Namespaces: []string{ns},
		Quotas: []chamber.TeamQuota{{Model: model, GPUs: 8, BorrowingLimit: ptr.To[int32](0)}}}}
	create(t, team)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), team) })
	g.Eventually(func(g gomega.Gomega) { g.Expect(teamReady(g, "metrics").Status).To(gomega.Equal(metav1.ConditionTrue)) }).Should(gomega.Succeed())

	// Before any job: the pool's 8 GPUs are free.
	gpus := func(g gomega.Gomega, state string) int {
		return int(controllertest.MetricValue(g, "chamber_gpus", "pool", "metrics", "model", model, "state", state))
	}
	g.Eventually(func(g gomega.Gomega) { g.Expect(gpus(g, "free")).To(gomega.Equal(8)) }).Should(gomega.Succeed())

	running := onPool(gangJob("running", ns, "metrics", 1, 6, 3*time.Minute), labels)
	create(t, running)
	g.Eventually(func(g gomega.Gomega) { g.Expect(vcjob(g, running).Status.State.Phase).To(gomega.Equal(batch.Running)) }).Should(gomega.Succeed())
	waiting := onPool(gangJob("waiting", ns, "metrics", 1, 4, time.Minute), labels)
	waiting.Spec.PriorityClassName = "standard"
	create(t, waiting)

	team1 := func(g gomega.Gomega, name string, labels ...string) int {
		return int(controllertest.MetricValue(g, name, append([]string{"team", "metrics"}, labels...)...))
	}
	gpuCount := func(l corev1.ResourceList) int { q := l[kube.ResourceGPU]; return int(q.Value()) }
	g.Eventually(func(g gomega.Gomega) {
		// What Volcano says.
		var q scheduling.Queue
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "metrics"}, &q)).To(gomega.Succeed())
		allocated := gpuCount(q.Status.Allocated)
		held := 0
		for _, p := range podsOf(g, running) {
			g.Expect(p.Spec.NodeName).To(gomega.Equal("metrics-1"))
			g.Expect(p.Status.Phase).To(gomega.Equal(corev1.PodRunning))
			held += gpuCount(p.Spec.Containers[0].Resources.Requests)
		}
		g.Expect(podsOf(g, waiting)).To(gomega.BeEmpty(), "the waiting job's pods are made once its PodGroup is placed")
		var pg scheduling.PodGroup
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: podGroupName(g, waiting)}, &pg)).To(gomega.Succeed())
		g.Expect(pg.Status.Phase).To(gomega.BeElementOf(scheduling.PodGroupPending, scheduling.PodGroupInqueue))
		g.Expect(pg.Spec.MinResources).NotTo(gomega.BeNil())
		waitingGPUs := gpuCount(*pg.Spec.MinResources)
		g.Expect([]int{allocated, held, waitingGPUs}).To(gomega.Equal([]int{6, 6, 4}))

		// What Chamber's metrics say.
		g.Expect(map[string]int{"free": gpus(g, "free"), "busy": gpus(g, "busy"), "idle": gpus(g, "idle"),
			"unhealthy": gpus(g, "unhealthy"), "isolated": gpus(g, "isolated")}).To(gomega.Equal(map[string]int{
			"free": 8 - held, "busy": held, "idle": 0, "unhealthy": 0, "isolated": 0}))
		g.Expect(team1(g, "chamber_team_gpus_allocated", "model", model)).To(gomega.Equal(allocated))
		g.Expect(team1(g, "chamber_team_gpus_idle", "model", model)).To(gomega.Equal(0))
		g.Expect(team1(g, "chamber_team_gpu_quota", "model", model)).To(gomega.Equal(gpuCount(q.Spec.Deserved)))
		g.Expect(team1(g, "chamber_team_gpus_borrowed", "model", model)).To(gomega.Equal(max(0, allocated-gpuCount(q.Spec.Deserved))))
		g.Expect(team1(g, "chamber_team_pending_workloads", "priority_tier", "standard")).To(gomega.Equal(1))
		g.Expect(team1(g, "chamber_team_pending_gpus", "priority_tier", "standard")).To(gomega.Equal(waitingGPUs))
	}).Should(gomega.Succeed())

	// The running job's GPU-seconds are the team's.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(controllertest.MetricValue(g, "chamber_team_gpu_seconds_total", "team", "metrics", "model", model)).To(gomega.BeNumerically(">", 0))
	}).Should(gomega.Succeed())
	g.Expect(k8s.Delete(ctx, running)).To(gomega.Succeed())
	g.Expect(k8s.Delete(ctx, waiting)).To(gomega.Succeed())
}
