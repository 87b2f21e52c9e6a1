package pool

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/integrations/volcano"
)

// applyVolcano makes the Volcano pool's Queue under Volcano's queue hierarchy
// (integrations/volcano.PoolQueues), or deletes the one Chamber made when the
// hierarchy is off. It returns the Queue's name (empty: none) and, where the pool's
// parent is not used, a condition saying why.
func (c *Controller) applyVolcano(ctx context.Context, pool *chamber.GPUPool, pools []chamber.GPUPool, teams []chamber.Team) (string, *metav1.Condition, error) {
	if !c.opts.VolcanoQueueHierarchy {
		if err := volcano.DeleteQueue(ctx, c.client, volcano.PoolQueueName(pool.Name), pool); err != nil {
			return "", nil, err
		}
		if pool.Spec.Parent == "" {
			return "", nil, nil
		}
		return "", &metav1.Condition{Reason: chamber.ReasonQueueHierarchyOff, Message: fmt.Sprintf(
			"spec.parent names %q, but chamber-controller compiles Volcano pools flat: turn on Volcano's queue hierarchy "+
				"(vc-scheduler's capacity plugin with enableHierarchy: true, and chamber-controller's --volcano-queue-hierarchy, the chart's controller.flags), or remove spec.parent",
			pool.Spec.Parent)}, nil
	}
	var nodes corev1.NodeList
	if err := c.client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return "", nil, fmt.Errorf("list nodes: %w", err)
	}
	var clusterGPUs int64
	for i := range nodes.Items {
		clusterGPUs += nodes.Items[i].Status.Allocatable.Name(kube.ResourceGPU, "").Value()
	}
	queues, problems := volcano.PoolQueues(pools, teams, clusterGPUs)
	want := queues[pool.Name]
	if err := c.apply(ctx, pool, want); err != nil {
		return "", &metav1.Condition{Reason: "VolcanoQueueNotApplied", Message: err.Error()}, nil
	}
	if problems[pool.Name] != "" {
		return want.Name, &metav1.Condition{Reason: chamber.ReasonParentNotUsable, Message: problems[pool.Name]}, nil
	}
	return want.Name, nil, nil
}
