package controlplane_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltestingapi "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
	testingjob "sigs.k8s.io/kueue/pkg/util/testingjobs/job"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/controlplane/controlplanetest"
)

// TestSmoke proves the harness runs the real thing: Kueue admits two 4-GPU Jobs into
// an 8-GPU ClusterQueue, kube-scheduler binds their pods to kwok GPU nodes where they
// run, and the third Job waits suspended until one of the first two completes.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp := controlplanetest.StartForTest(t, ctx, controlplane.Full())
	c, err := cp.Client()
	if err != nil {
		t.Fatal(err)
	}
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(90 * time.Second)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)

	const ns = "team-a"
	product := "NVIDIA-H100-80GB-HBM3"
	mustCreate(ctx, t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	mustCreate(ctx, t, c, utiltestingapi.MakeResourceFlavor("h100").
		NodeLabel(chamber.DefaultProductLabel, product).Obj())
	mustCreate(ctx, t, c, utiltestingapi.MakeClusterQueue("gpus").
		ResourceGroup(*utiltestingapi.MakeFlavorQuotas("h100").Resource(kube.ResourceGPU, "8").Obj()).Obj())
	mustCreate(ctx, t, c, utiltestingapi.MakeLocalQueue("gpus", ns).ClusterQueue("gpus").Obj())

	// Kueue marks the ClusterQueue active once it has seen the flavor.
	g.Eventually(func(g gomega.Gomega) {
		var cq kueue.ClusterQueue
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "gpus"}, &cq)).To(gomega.Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueue.ClusterQueueActive)).To(gomega.BeTrue())
	}).Should(gomega.Succeed())

	nodes := []controlplane.GPUNode{{Name: "gpu-node-1", GPUs: 4, Product: product}, {Name: "gpu-node-2", GPUs: 4, Product: product}}
	if err := controlplane.CreateGPUNodes(ctx, c, nodes...); err != nil {
		t.Fatal(err)
	}

	// Created unsuspended: Kueue's webhook must suspend them.
	jobs := []string{"train-1", "train-2", "train-3"}
	for _, name := range jobs {
		mustCreate(ctx, t, c, testingjob.MakeJob(name, ns).
			Queue("gpus").
			Suspend(false).
			RequestAndLimit(kube.ResourceGPU, "4").
			PodAnnotation("pod-complete.stage.kwok.x-k8s.io/delay", "15s").
			PodAnnotation("pod-complete.stage.kwok.x-k8s.io/jitter-delay", "15s").
			Obj())
	}
	for _, name := range jobs {
		var job batchv1.Job
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job)).To(gomega.Succeed())
		g.Expect(job.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()), "job %s was not suspended by Kueue's webhook", name)
	}

	// Two are admitted and run, one on each node; the third waits for quota.
	var running, waiting []string
	g.Eventually(func(g gomega.Gomega) {
		running, waiting = nil, nil
		for _, name := range jobs {
			wl := workloadOf(ctx, g, c, ns, name)
			if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
				running = append(running, name)
			} else {
				waiting = append(waiting, name)
			}
		}
		g.Expect(running).To(gomega.HaveLen(2))
		for _, name := range running {
			pod := podOf(ctx, g, c, ns, name)
			g.Expect(pod.Status.Phase).To(gomega.Equal(corev1.PodRunning), "pod of %s", name)
		}
	}).Should(gomega.Succeed())
	g.Expect(nodesOf(ctx, g, c, ns, running)).To(gomega.Equal([]string{"gpu-node-1", "gpu-node-2"}))

	third := waiting[0]
	var job batchv1.Job
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: third}, &job)).To(gomega.Succeed())
	g.Expect(job.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()), "job %s runs without quota", third)
	wl := workloadOf(ctx, g, c, ns, third)
	reserved := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	g.Expect(reserved).NotTo(gomega.BeNil(), "workload of %s has no QuotaReserved condition", third)
	g.Expect(reserved.Status).To(gomega.Equal(metav1.ConditionFalse))
	t.Logf("admitted %v; %s pending: %s", running, third, reserved.Message)

	// It stays pending while both others run.
	g.Consistently(func(g gomega.Gomega) {
		wl := workloadOf(ctx, g, c, ns, third)
		if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
			g.Expect(anyJobComplete(ctx, g, c, ns, running)).To(gomega.BeTrue(), "%s got quota while both others ran", third)
		}
	}, 5*time.Second, 250*time.Millisecond).Should(gomega.Succeed())

	// Once one finishes (kwok completes its pod), the third is admitted and runs.
	g.Eventually(func(g gomega.Gomega) {
		wl := workloadOf(ctx, g, c, ns, third)
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(gomega.BeTrue())
		g.Expect(anyJobComplete(ctx, g, c, ns, running)).To(gomega.BeTrue(), "%s admitted before any job completed", third)
		pod := podOf(ctx, g, c, ns, third)
		g.Expect(pod.Status.Phase).To(gomega.Equal(corev1.PodRunning))
	}).Should(gomega.Succeed())

	// All three complete.
	g.Eventually(func(g gomega.Gomega) {
		for _, name := range jobs {
			g.Expect(anyJobComplete(ctx, g, c, ns, []string{name})).To(gomega.BeTrue(), "job %s", name)
		}
	}).Should(gomega.Succeed())
}

func mustCreate(ctx context.Context, t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// workloadOf finds the Kueue Workload that Kueue created for a Job.
func workloadOf(ctx context.Context, g gomega.Gomega, c client.Client, ns, job string) *kueue.Workload {
	var list kueue.WorkloadList
	g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
	for i := range list.Items {
		for _, ref := range list.Items[i].OwnerReferences {
			if ref.Kind == "Job" && ref.Name == job {
				return &list.Items[i]
			}
		}
	}
	g.Expect(fmt.Errorf("no workload for job %s", job)).NotTo(gomega.HaveOccurred())
	return nil
}

// podOf returns the one pod of a single-pod Job.
func podOf(ctx context.Context, g gomega.Gomega, c client.Client, ns, job string) *corev1.Pod {
	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: job})).To(gomega.Succeed())
	g.Expect(pods.Items).To(gomega.HaveLen(1), "pods of job %s", job)
	return &pods.Items[0]
}

func nodesOf(ctx context.Context, g gomega.Gomega, c client.Client, ns string, jobs []string) []string {
	var nodes []string
	for _, job := range jobs {
		nodes = append(nodes, podOf(ctx, g, c, ns, job).Spec.NodeName)
	}
	sort.Strings(nodes)
	return nodes
}

func anyJobComplete(ctx context.Context, g gomega.Gomega, c client.Client, ns string, jobs []string) bool {
	for _, name := range jobs {
		var job batchv1.Job
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job)).To(gomega.Succeed())
		for _, cond := range job.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
	}
	return false
}
