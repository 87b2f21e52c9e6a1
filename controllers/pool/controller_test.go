package pool_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/pool"
	"chamber.dev/chamber/fleet/fleettest"
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
		got := pool.CountModels(tc.pool, pool.Members(tc.pool, pools, nodes), map[string]int64{"a-1": 1})
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("pool %s (-want +got):\n%s", tc.pool.Name, diff)
		}
	}
}
