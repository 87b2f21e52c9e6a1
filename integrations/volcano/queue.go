package volcano

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
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
// add up into nvidia.com/gpu. Under Volcano's queue hierarchy (hierarchy true: the
// capacity plugin's enableHierarchy) the team's Queue is a child of its pool's
// (PoolQueues); without it the queues are flat, children of Volcano's root, and a
// pool's teams share the cluster's GPUs with every other Volcano queue.
func TeamQueue(team *chamber.Team, pool *chamber.GPUPool, hierarchy bool) *scheduling.Queue {
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
	q := &scheduling.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: team.Name, Labels: map[string]string{
			chamber.LabelManagedBy: chamber.ManagedBy, chamber.LabelPool: pool.Name, chamber.LabelTeam: team.Name}},
		Spec: scheduling.QueueSpec{
			Weight:      ptr.Deref(team.Spec.FairShareWeight, 1),
			Deserved:    gpus(quota),
			Reclaimable: ptr.To(true),
			Parent:      RootQueue,
		},
	}
	if hierarchy {
		q.Spec.Parent = PoolQueueName(pool.Name)
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

func gpus(n int64) corev1.ResourceList {
	return corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(n, resource.DecimalSI)}
}

// SetQueueSpec gives have the parts of want's spec Chamber compiles (weight,
// deserved, capability, guarantee, reclaimable, parent) and says whether any
// changed. A Queue without a parent is under the root (vc-controller-manager writes
// root there).
func SetQueueSpec(have, want *scheduling.Queue) bool {
	parent := func(q *scheduling.Queue) string {
		if q.Spec.Parent == "" {
			return RootQueue
		}
		return q.Spec.Parent
	}
	if have.Spec.Weight == want.Spec.Weight &&
		equality.Semantic.DeepEqual(have.Spec.Deserved, want.Spec.Deserved) &&
		equality.Semantic.DeepEqual(have.Spec.Capability, want.Spec.Capability) &&
		equality.Semantic.DeepEqual(have.Spec.Guarantee, want.Spec.Guarantee) &&
		equality.Semantic.DeepEqual(have.Spec.Reclaimable, want.Spec.Reclaimable) &&
		parent(have) == parent(want) {
		return false
	}
	have.Spec.Weight, have.Spec.Deserved, have.Spec.Capability = want.Spec.Weight, want.Spec.Deserved, want.Spec.Capability
	have.Spec.Guarantee, have.Spec.Reclaimable, have.Spec.Parent = want.Spec.Guarantee, want.Spec.Reclaimable, want.Spec.Parent
	return true
}

// DeleteQueue deletes the Queue name where Chamber made it for owner; a Queue of that
// name that Chamber did not make, or made for another object, stays.
func DeleteQueue(ctx context.Context, c client.Client, name string, owner metav1.Object) error {
	var q scheduling.Queue
	err := c.Get(ctx, client.ObjectKey{Name: name}, &q)
	if apierrors.IsNotFound(err) || (err == nil && (!kube.Owned(&q) || !metav1.IsControlledBy(&q, owner))) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get Volcano Queue %s: %w", name, err)
	}
	if err := c.Delete(ctx, &q); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Volcano Queue %s: %w", name, err)
	}
	return nil
}
