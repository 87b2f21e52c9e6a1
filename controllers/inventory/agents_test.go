package inventory_test

import (
	"context"
	"testing"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	ft "chamber.dev/chamber/fleet/fleettest"
	"chamber.dev/chamber/healthcheck/nvmlsource"
)

// TestAgentsFeedInventory runs the real node agent on go-nvml's DGX H100 fakes for two
// kwok nodes: what the agents read and publish (utilization, an XID 79) reaches the
// inventory's metrics through their GPUNodes.
func TestAgentsFeedInventory(t *testing.T) {
	t.Parallel()
	g := newG(t)
	fixture(t, "agents", "agents-1", "agents-2")
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents"}})
	create(t, &chamber.Team{
		ObjectMeta: metav1.ObjectMeta{Name: "agents"},
		Spec:       chamber.TeamSpec{Pool: "agents", Namespaces: []string{"agents"}, Quotas: []chamber.TeamQuota{{Model: ft.H100, GPUs: 16}}},
	})

	gpus := map[string]*nvmlsource.FakeGPUs{}
	for _, node := range []string{"agents-1", "agents-2"} {
		fake, err := nvmlsource.NewFake("dgxh100")
		if err != nil {
			t.Fatal(err)
		}
		gpus[node] = fake
		controllertest.RunAgent(t, node, fake, nil, nil)
	}

	submit(t, "agents", "train", 4, "agents-1")
	g.Eventually(func(g gomega.Gomega) { runningPod(g, "agents", "train") }).Should(gomega.Succeed())
	// The training job keeps GPUs 0-3 of agents-1 busy (the agent has no kubelet here,
	// so the inventory gives the pod the lowest free GPUs); GPU 7 of agents-2 falls off
	// the bus.
	for i := range 4 {
		if err := gpus["agents-1"].SetUtilization(i, 90, 40); err != nil {
			t.Fatal(err)
		}
	}
	if err := gpus["agents-2"].RaiseXID(7, 79); err != nil {
		t.Fatal(err)
	}

	g.Eventually(func(g gomega.Gomega) {
		var gn chamber.GPUNode
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Name: "agents-2"}, &gn)).To(gomega.Succeed())
		g.Expect(gn.Status.GPUs).To(gomega.HaveLen(8))
		g.Expect(gn.Status.GPUs[7].Health).To(gomega.Equal(chamber.GPUUnhealthy))
		got := states(g, "agents")
		g.Expect(got["busy"]).To(gomega.Equal(4.0))
		g.Expect(got["unhealthy"]).To(gomega.Equal(1.0))
		g.Expect(got["free"]).To(gomega.Equal(11.0))
	}).Should(gomega.Succeed())
}
