package kube

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Schedulable reports whether a node takes new GPU work: it is not cordoned and has
// no NoSchedule or NoExecute taint that takes it out of service (OutOfServiceTaint).
// Other such taints keep other pods off GPU nodes, and GPU workloads tolerate them:
// GKE puts nvidia.com/gpu=present:NoSchedule on every GPU node, and operators taint
// nodes dedicated to a team; those nodes take GPU work. The pool controller counts a
// pool's schedulable GPUs by it, the admission check its placements, room for big jobs
// its nodes and the MultiKueue dispatcher a worker's free GPUs.
func Schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && OutOfServiceTaint(t.Key) {
			return false
		}
	}
	return true
}

// OutOfServiceTaint reports whether a taint of this key says that a node takes no new
// work, whatever the pod: Chamber's own (chamber.dev/: isolation of failing GPUs, room
// kept for a big job), Kubernetes' node lifecycle and kubelet conditions
// (node.kubernetes.io/: not-ready, unreachable, unschedulable, memory, disk and PID
// pressure, network-unavailable, out-of-service), the cloud provider's
// (node.cloudprovider.kubernetes.io/: uninitialized, shutdown), and the autoscalers'
// before they remove a node (Cluster Autoscaler's ToBeDeletedByClusterAutoscaler,
// Karpenter's karpenter.sh/disrupted).
func OutOfServiceTaint(key string) bool {
	for _, prefix := range []string{chamber.NamePrefix, "node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"} {
		if strings.HasPrefix(key, prefix) {
			return true
		}
	}
	switch key {
	case "ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", "karpenter.sh/disruption":
		return true
	}
	return false
}

// UpdateNode changes the node as read from c and writes the change as a merge patch
// that fails on a stale read, retried on conflicts.
func UpdateNode(ctx context.Context, c client.Client, name string, change func(*corev1.Node)) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		orig := n.DeepCopy()
		change(&n)
		return c.Patch(ctx, &n, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return fmt.Errorf("update node %s: %w", name, err)
	}
	return nil
}
