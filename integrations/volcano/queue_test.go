package volcano

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

func TestTeamQueue(t *testing.T) {
	pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "lab"}, Spec: chamber.GPUPoolSpec{Backend: chamber.BackendVolcano}}
	gpus := func(q map[string]int64) (deserved, capability, guarantee int64) {
		return q["deserved"], q["capability"], q["guarantee"]
	}
	for _, tc := range []struct {
		name   string
		quotas []chamber.TeamQuota
		weight *int32
		// want: deserved, capability (-1: none), guarantee (0: none), weight
		deserved, capability, guarantee int64
		w                               int32
	}{
		{name: "no limits: lends all, borrows without cap", quotas: []chamber.TeamQuota{{Model: "h100", GPUs: 8}},
			deserved: 8, capability: -1, guarantee: 0, w: 1},
		{name: "limits on both sides", quotas: []chamber.TeamQuota{{Model: "h100", GPUs: 8, BorrowingLimit: ptr.To[int32](4), LendingLimit: ptr.To[int32](2)}},
			weight: ptr.To[int32](3), deserved: 8, capability: 12, guarantee: 6, w: 3},
		{name: "models add up; one without a borrowing cap leaves the queue uncapped",
			quotas:   []chamber.TeamQuota{{Model: "h100", GPUs: 8, BorrowingLimit: ptr.To[int32](0), LendingLimit: ptr.To[int32](0)}, {Model: "a100", GPUs: 4}},
			deserved: 12, capability: -1, guarantee: 8, w: 1},
		{name: "lending limit above the quota guarantees nothing", quotas: []chamber.TeamQuota{{Model: "h100", GPUs: 2, LendingLimit: ptr.To[int32](5), BorrowingLimit: ptr.To[int32](0)}},
			weight: ptr.To[int32](0), deserved: 2, capability: 2, guarantee: 0, w: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			team := &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "ml"}, Spec: chamber.TeamSpec{Pool: "lab", Quotas: tc.quotas, FairShareWeight: tc.weight}}
			q := TeamQueue(team, pool, false)
			if q.Name != "ml" || !kube.Owned(q) || q.Labels[chamber.LabelTeam] != "ml" || q.Labels[chamber.LabelPool] != "lab" {
				t.Errorf("name %q, labels %v: want ml, owned by Chamber, team ml, pool lab", q.Name, q.Labels)
			}
			got := map[string]int64{"deserved": q.Spec.Deserved.Name(kube.ResourceGPU, resource.DecimalSI).Value(), "capability": -1}
			if c, ok := q.Spec.Capability[kube.ResourceGPU]; ok {
				got["capability"] = c.Value()
			}
			if g, ok := q.Spec.Guarantee.Resource[kube.ResourceGPU]; ok {
				got["guarantee"] = g.Value()
			}
			d, c, g := gpus(got)
			if d != tc.deserved || c != tc.capability || g != tc.guarantee || q.Spec.Weight != tc.w {
				t.Errorf("deserved %d, capability %d, guarantee %d, weight %d; want %d, %d, %d, %d", d, c, g, q.Spec.Weight, tc.deserved, tc.capability, tc.guarantee, tc.w)
			}
			if q.Spec.Reclaimable == nil || !*q.Spec.Reclaimable {
				t.Error("the queue is not reclaimable: others could keep what it lends")
			}
		})
	}
}
