// Package monitoring_test runs Chamber as free monitoring on a cluster without Kueue:
// the first step the product promises, before anyone changes how jobs are queued.
package monitoring_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

var k8s client.Client

func TestMain(m *testing.M) {
	cfg := controllers.DefaultConfig()
	cfg.MonitoringOnly = true
	// Every component but Kueue.
	plane := controlplane.Full()
	plane.Kueue = false
	os.Exit(controllertest.MainWith(m, plane, cfg, &k8s))
}

// gpus is the value of chamber_gpus for a pool and state.
func gpus(g gomega.Gomega, pool, state string) float64 {
	return controllertest.MetricValue(g, "chamber_gpus", "pool", pool, "state", state)
}

// TestMonitoringWithoutKueue: on a cluster without Kueue, Chamber in monitoring-only
// mode shows the fleet (a GPU node, a pod holding 4 of its GPUs, a GPU failing) and
// changes nothing: the failing GPU's node is neither tainted nor cordoned.
func TestMonitoringWithoutKueue(t *testing.T) {
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(time.Minute)
	g.SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	ctx := context.Background()

	dc, err := discovery.NewDiscoveryClientForConfig(controllertest.Config)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	served, err := chamberkueue.Served(dc)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(served).To(gomega.BeFalse(), "this cluster has no Kueue")

	labels := map[string]string{"chamber.dev/test-pool": "watch"}
	g.Expect(k8s.Create(ctx, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "watch"}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}})).To(gomega.Succeed())
	g.Expect(controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: "watch-1", GPUs: 8, Product: "NVIDIA-H100-80GB-HBM3", Labels: labels})).To(gomega.Succeed())
	fake, err := nvmlsource.NewFake("dgxh100")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	controllertest.RunAgent(t, "watch-1", fake, nil, nil)

	g.Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "research"}})).To(gomega.Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "research", Name: "train"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "train", Image: "pytorch/pytorch",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("4")}}}}},
	}
	g.Expect(k8s.Create(ctx, pod)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(gomega.Succeed())
		g.Expect(pod.Status.Phase).To(gomega.Equal(corev1.PodRunning))
		g.Expect(gpus(g, "watch", "free")).To(gomega.Equal(4.0))
		g.Expect(gpus(g, "watch", "busy") + gpus(g, "watch", "idle")).To(gomega.Equal(4.0))
	}).Should(gomega.Succeed())

	g.Expect(fake.RaiseXID(7, 79)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(gpus(g, "watch", "unhealthy")).To(gomega.Equal(1.0))
	}).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		var n corev1.Node
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "watch-1"}, &n)).To(gomega.Succeed())
		g.Expect(n.Spec.Unschedulable).To(gomega.BeFalse(), "cordoned")
		g.Expect(slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy })).To(gomega.BeFalse(), "tainted")
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(gomega.Succeed())
		g.Expect(pod.DeletionTimestamp).To(gomega.BeNil(), "the pod is left alone")
	}, 3*time.Second).Should(gomega.Succeed())
}
