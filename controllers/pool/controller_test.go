package pool_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/pool"
	"chamber.dev/chamber/fleet/fleettest"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// TestParentAndChildCountEachGPUOnce: a parent pool selecting every GPU node and a
// child selecting one rack report the rack's GPUs in the child's capacity only, so the
// quotas Kueue is given add up to the GPUs there are (they used to be counted in both).
func TestParentAndChildCountEachGPUOnce(t *testing.T) {
	parent := fleettest.MakePool("all", map[string]string{"gpu": "true"}, nil)
	child := fleettest.MakePool("rack-a", map[string]string{"gpu": "true", "rack": "a"}, nil)
	child.Spec.Parent = parent.Name
	pools := []chamber.GPUPool{*parent, *child}
	nodes := []corev1.Node{
		*fleettest.MakeNode("a-1", 8).Label("gpu", "true").Label("rack", "a").Obj(),
		*fleettest.MakeNode("a-2", 8).Label("gpu", "true").Label("rack", "a").Obj(),
		*fleettest.MakeNode("b-1", 8).Label("gpu", "true").Label("rack", "b").Obj(),
		*fleettest.MakeNode("cpu-1", 0).Label("gpu", "true").Obj(),
	}
	for _, tc := range []struct {
		pool *chamber.GPUPool
		want []chamber.PoolModel
	}{
		{pool: child, want: []chamber.PoolModel{{Model: fleettest.H100, Flavor: chamberkueue.FlavorName(child.Name, fleettest.H100), Nodes: 2, Total: 16, Allocatable: 16, Healthy: 15}}},
		{pool: parent, want: []chamber.PoolModel{{Model: fleettest.H100, Flavor: chamberkueue.FlavorName(parent.Name, fleettest.H100), Nodes: 1, Total: 8, Allocatable: 8, Healthy: 8}}},
	} {
		got := pool.CountModels(tc.pool, pool.Members(tc.pool, pools, nodes), map[string][]int{"a-1": {1}})
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("pool %s (-want +got):\n%s", tc.pool.Name, diff)
		}
	}
}

// TestHealthyCountsEachFailedGPUOnce: a GPU both withdrawn by the device plugin and
// reported by the agent is one failed GPU, not two; GPUs isolation still holds after
// the agent reports them healthy again (a hardware fault waits for an operator's
// clear) are not healthy; a node isolated whole offers none.
func TestHealthyCountsEachFailedGPUOnce(t *testing.T) {
	p := fleettest.MakePool("main", map[string]string{"gpu": "true"}, nil)
	withdrawn := fleettest.MakeNode("withdrawn", 8).Label("gpu", "true").Obj()
	withdrawn.Status.Allocatable[kube.ResourceGPU] = *resource.NewQuantity(7, resource.DecimalSI)
	held := fleettest.MakeNode("held", 8).Label("gpu", "true").Obj()
	held.Annotations = map[string]string{chamber.AnnotationIsolatedAt: "2026-12-04T12:00:00Z",
		chamber.AnnotationIsolationLevel: string(chamber.IsolateGPU), chamber.AnnotationIsolatedGPUs: "1,2"}
	whole := fleettest.MakeNode("whole", 8).Label("gpu", "true").Taint(chamber.TaintGPUUnhealthy).Obj()
	nodes := []corev1.Node{*withdrawn, *held, *whole}

	got := pool.CountModels(p, nodes, map[string][]int{"withdrawn": {3}, "held": {2, 5}})
	want := []chamber.PoolModel{{Model: fleettest.H100, Flavor: chamberkueue.FlavorName(p.Name, fleettest.H100),
		Nodes: 3, Total: 24, Allocatable: 15, Healthy: 7 + 5}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

// TestGPUNodeTaintsDoNotTakeNodesOut: GKE taints every GPU node
// nvidia.com/gpu=present:NoSchedule and operators taint nodes dedicated to a team;
// GPU workloads tolerate those taints, so the nodes' GPUs count as allocatable and
// healthy (they counted as none, which left a GKE pool's quotas that follow health at
// zero). A node the cluster is taking out (unreachable) offers none.
func TestGPUNodeTaintsDoNotTakeNodesOut(t *testing.T) {
	p := fleettest.MakePool("main", map[string]string{"gpu": "true"}, nil)
	gke := fleettest.MakeNode("gke", 8).Label("gpu", "true").Obj()
	gke.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	dedicated := fleettest.MakeNode("dedicated", 8).Label("gpu", "true").Obj()
	dedicated.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "research", Effect: corev1.TaintEffectNoSchedule}}
	unreachable := fleettest.MakeNode("unreachable", 8).Label("gpu", "true").Obj()
	unreachable.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}}

	got := pool.CountModels(p, []corev1.Node{*gke, *dedicated, *unreachable}, nil)
	want := []chamber.PoolModel{{Model: fleettest.H100, Flavor: chamberkueue.FlavorName(p.Name, fleettest.H100),
		Nodes: 3, Total: 24, Allocatable: 16, Healthy: 16}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}
