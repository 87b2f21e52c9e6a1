package volcano

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

func TestPoolQueues(t *testing.T) {
	pool := func(name, parent string, backend chamber.Backend) chamber.GPUPool {
		return chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.GPUPoolSpec{Parent: parent, Backend: backend}}
	}
	team := func(name, pool string, gpus int32, borrow, lend *int32) chamber.Team {
		return chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{Pool: pool,
			Quotas: []chamber.TeamQuota{{Model: "h100", GPUs: gpus, BorrowingLimit: borrow, LendingLimit: lend}}}}
	}
	pools := []chamber.GPUPool{
		pool("org", "", chamber.BackendVolcano),
		pool("vision", "org", chamber.BackendVolcano),
		pool("speech", "org", chamber.BackendVolcano),
		pool("kueue", "", chamber.BackendKueue),
		pool("under-kueue", "kueue", chamber.BackendVolcano),
		pool("orphan", "gone", chamber.BackendVolcano),
		pool("loop-a", "loop-b", chamber.BackendVolcano),
		pool("loop-b", "loop-a", chamber.BackendVolcano),
		pool("below-loop", "loop-a", chamber.BackendVolcano),
	}
	teams := []chamber.Team{
		team("platform", "org", 4, nil, ptr.To[int32](0)),  // guarantees 4, uncapped
		team("detect", "vision", 8, ptr.To[int32](8), nil), // capability 16
		team("segment", "vision", 8, nil, ptr.To[int32](2)),
		team("asr", "speech", 16, ptr.To[int32](48), nil), // capability 64, above the cluster's 32
		team("kueue-team", "kueue", 8, nil, nil),
	}
	queues, problems := PoolQueues(pools, teams, 32)

	type want struct {
		parent                          string
		deserved, capability, guarantee int64 // capability -1: none
	}
	for name, w := range map[string]want{
		"org":         {parent: RootQueue, deserved: 36, capability: 64, guarantee: 10},
		"vision":      {parent: "pool-org", deserved: 16, capability: 32, guarantee: 6},
		"speech":      {parent: "pool-org", deserved: 16, capability: 64},
		"under-kueue": {parent: RootQueue, capability: -1},
		"orphan":      {parent: RootQueue, capability: -1},
		"loop-a":      {parent: RootQueue, capability: -1},
		"loop-b":      {parent: RootQueue, capability: -1},
		"below-loop":  {parent: "pool-loop-a", capability: -1},
	} {
		q := queues[name]
		if q == nil {
			t.Errorf("pool %s: no Queue", name)
			continue
		}
		got := want{parent: q.Spec.Parent, deserved: q.Spec.Deserved.Name(kube.ResourceGPU, "").Value(), capability: -1,
			guarantee: q.Spec.Guarantee.Resource.Name(kube.ResourceGPU, "").Value()}
		if c, ok := q.Spec.Capability[kube.ResourceGPU]; ok {
			got.capability = c.Value()
		}
		if got != w {
			t.Errorf("pool %s's Queue: %+v, want %+v", name, got, w)
		}
		if q.Name != PoolQueueName(name) || !kube.Owned(q) || q.Labels[chamber.LabelPool] != name {
			t.Errorf("pool %s's Queue is named %q with labels %v", name, q.Name, q.Labels)
		}
	}
	if q := queues["kueue"]; q != nil {
		t.Errorf("a Kueue pool got a Volcano Queue: %+v", q)
	}
	for name, says := range map[string]string{"under-kueue": "compiles into Kueue", "orphan": "does not exist", "loop-a": "cycle", "loop-b": "cycle"} {
		if !strings.Contains(problems[name], says) {
			t.Errorf("pool %s's problem %q does not say %q", name, problems[name], says)
		}
	}
	for _, name := range []string{"org", "vision", "speech", "below-loop"} {
		if problems[name] != "" {
			t.Errorf("pool %s has a problem: %s", name, problems[name])
		}
	}
	if q := TeamQueue(&teams[1], &pools[1], true); q.Spec.Parent != "pool-vision" {
		t.Errorf("team detect's Queue is under %q, want its pool's, pool-vision", q.Spec.Parent)
	}
	if q := TeamQueue(&teams[1], &pools[1], false); q.Spec.Parent != RootQueue {
		t.Errorf("team detect's Queue without the hierarchy is under %q, want root", q.Spec.Parent)
	}
}
