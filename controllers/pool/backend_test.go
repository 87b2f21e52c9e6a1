package pool_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

var k8s client.Client

// TestMain runs one control plane serving both Kueue and Volcano, and Chamber's
// controllers as chamber-controller runs them there (Kueue's and Volcano's).
func TestMain(m *testing.M) {
	plane := controlplane.Full()
	plane.Volcano = true
	cfg := controllers.DefaultConfig()
	cfg.Volcano = true
	os.Exit(controllertest.MainWith(m, plane, cfg, &k8s))
}

// On a cluster serving both backends, a Volcano pool gets no Kueue object (no Cohort,
// no Topology, no ResourceFlavor) and its team a Volcano Queue and no ClusterQueue,
// while a Kueue pool beside it gets its Cohort and flavors; both pools count their
// GPUs, and a pool's backend cannot change.
func TestVolcanoPoolGetsNoKueueObjects(t *testing.T) {
	ctx := context.Background()
	g := gomega.NewWithT(t)
	g.SetDefaultEventuallyTimeout(time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	pools := map[chamber.Backend]*chamber.GPUPool{}
	for _, backend := range []chamber.Backend{chamber.BackendKueue, chamber.BackendVolcano} {
		name := "backend-" + map[chamber.Backend]string{chamber.BackendKueue: "kueue", chamber.BackendVolcano: "volcano"}[backend]
		labels := map[string]string{"chamber.dev/test-pool": name}
		if err := controlplane.CreateGPUNodes(ctx, k8s, controlplane.GPUNode{Name: name + "-1", GPUs: 8, Labels: labels}); err != nil {
			t.Fatal(err)
		}
		pools[backend] = &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.GPUPoolSpec{NodeLabels: labels, Backend: backend}}
		g.Expect(k8s.Create(ctx, pools[backend])).To(gomega.Succeed())
		team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{Pool: name,
			Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 4}}}}
		g.Expect(k8s.Create(ctx, team)).To(gomega.Succeed())
	}
	kueuePool, volcanoPool := pools[chamber.BackendKueue], pools[chamber.BackendVolcano]

	// Both pools count their GPUs; only the Kueue pool names a Cohort and flavors.
	status := func(g gomega.Gomega, p *chamber.GPUPool) chamber.GPUPoolStatus {
		var have chamber.GPUPool
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), &have)).To(gomega.Succeed())
		g.Expect(have.Status.Models).To(gomega.HaveLen(1))
		g.Expect(have.Status.Models[0].Healthy).To(gomega.BeEquivalentTo(8))
		return have.Status
	}
	g.Eventually(func(g gomega.Gomega) {
		s := status(g, kueuePool)
		g.Expect(s.Cohort).To(gomega.Equal(kueuePool.Name))
		g.Expect(s.Models[0].Flavor).To(gomega.Equal(chamberkueue.FlavorName(kueuePool.Name, "NVIDIA-H100-80GB-HBM3")))
		var cq kueue.ClusterQueue
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: kueuePool.Name}, &cq)).To(gomega.Succeed())
		s = status(g, volcanoPool)
		g.Expect(s.Cohort).To(gomega.BeEmpty())
		g.Expect(s.Models[0].Flavor).To(gomega.BeEmpty())
		g.Expect(s.Teams).To(gomega.Equal([]string{volcanoPool.Name}))
		var q scheduling.Queue
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: volcanoPool.Name}, &q)).To(gomega.Succeed())
	}).Should(gomega.Succeed())

	// Nothing of Kueue's is the Volcano pool's, by label or by name.
	ofPool := client.MatchingLabels{chamber.LabelPool: volcanoPool.Name}
	lists := map[string]client.ObjectList{"ResourceFlavors": &kueue.ResourceFlavorList{}, "Cohorts": &kueue.CohortList{},
		"Topologies": &kueue.TopologyList{}, "ClusterQueues": &kueue.ClusterQueueList{}, "AdmissionChecks": &kueue.AdmissionCheckList{}}
	for kind, list := range lists {
		g.Expect(k8s.List(ctx, list, ofPool)).To(gomega.Succeed())
		g.Expect(list).To(gomega.HaveField("Items", gomega.BeEmpty()), "%s of the Volcano pool", kind)
	}
	for _, obj := range []client.Object{&kueue.Cohort{}, &kueue.Topology{}, &kueue.ClusterQueue{}} {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: volcanoPool.Name}, obj)).NotTo(gomega.Succeed(), "%T named after the Volcano pool", obj)
	}
	var flavor kueue.ResourceFlavor
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: chamberkueue.FlavorName(volcanoPool.Name, "NVIDIA-H100-80GB-HBM3")}, &flavor)).NotTo(gomega.Succeed())

	// The backend is fixed: the API server refuses a change.
	var have chamber.GPUPool
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(volcanoPool), &have)).To(gomega.Succeed())
	have.Spec.Backend = chamber.BackendKueue
	g.Expect(k8s.Update(ctx, &have)).To(gomega.MatchError(gomega.ContainSubstring("backend cannot change")))
}
