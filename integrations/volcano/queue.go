package volcano

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// TeamQueue is the Volcano Queue a Team of a Volcano pool compiles into, named after
// the team; its jobs name it in spec.queue. Volcano's capacity plugin reads it:
//   - deserved: the team's quota, the share it gets back by reclaim when others
//     borrowed it;
//   - capability: quota plus borrowing limit, the most it may hold (none: no cap);
//   - guarantee: quota less lending limit, what is never lent (none: all may be);
//   - weight: the team's fair-share weight; reclaimable, so others get back what it
//     borrowed.
//
// Volcano's queues count resources, not GPU models: the team's quotas of every model
// add up into nvidia.com/gpu. Queues are flat (Volcano's hierarchy is off by default),
// so a pool's teams share the cluster's GPUs with every other Volcano queue.
func TeamQueue(team *chamber.Team, pool *chamber.GPUPool) *scheduling.Queue {
	var quota, capability, guarantee int64
	capped := true
	for _, q := range team.Spec.Quotas {
		quota += int64(q.GPUs)
		if q.BorrowingLimit == nil {
			capped = false
		} else {
			capability += int64(q.GPUs) + int64(*q.BorrowingLimit)
		}
		guarantee += int64(q.GPUs)
		if q.LendingLimit != nil {
			guarantee -= int64(min(*q.LendingLimit, q.GPUs))
		} else {
			guarantee -= int64(q.GPUs)
		}
	}
	gpus := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{chamberkueue.ResourceGPU: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	q := &scheduling.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: team.Name, Labels: map[string]string{
			chamberkueue.LabelManagedBy: chamberkueue.ManagedBy, chamberkueue.LabelPool: pool.Name, chamberkueue.LabelTeam: team.Name}},
		Spec: scheduling.QueueSpec{
			Weight:      ptr.Deref(team.Spec.FairShareWeight, 1),
			Deserved:    gpus(quota),
			Reclaimable: ptr.To(true),
		},
	}
	if q.Spec.Weight < 1 {
		q.Spec.Weight = 1 // Volcano's least weight; a team of weight 0 still gets its quota
	}
	if capped && len(team.Spec.Quotas) > 0 {
		q.Spec.Capability = gpus(capability)
	}
	if guarantee > 0 {
		q.Spec.Guarantee = scheduling.Guarantee{Resource: gpus(guarantee)}
	}
	return q
}
