package idlereclaim

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Why a waiter must fit: reclaiming an idle workload's GPUs helps a waiter only if it
// can run on them. A 1-GPU notebook on a node whose other 7 GPUs are busy frees no
// room for an 8-GPU job, and evicting it for one leaves its GPU free, the notebook
// paused and the job still waiting (seen in the simulator: 1-GPU jobs reclaimed again
// and again for waiters that never got their GPUs). So idle reclaim counts only a
// waiter whose pods all find a node of the idle workload's flavors with enough free
// GPUs once the idle workload's pods are gone. Quota stays Kueue's business.

// room is the GPUs each node would have free once a workload's pods were gone.
type room map[string]int64

// roomAfter is the room on the schedulable nodes of wl's GPU flavors once its pods
// are gone (roomOn).
func (c *Controller) roomAfter(ctx context.Context, wl *kueue.Workload, pods []corev1.Pod) (room, error) {
	return c.roomOn(ctx, gpuFlavors(wl), uids(pods))
}

func uids(pods []corev1.Pod) map[types.UID]bool {
	out := make(map[types.UID]bool, len(pods))
	for i := range pods {
		out[pods[i].UID] = true
	}
	return out
}

// roomOn is the room on the schedulable nodes of the flavors, the pods of UIDs gone
// counted as gone: each node's allocatable GPUs less those of the other pods on it that
// have not ended and are not being deleted (a GPU Chamber holds for a fault is such a
// pod). Nil when a flavor is
// not known (not compiled by Chamber, or not in the cache yet): then every waiter
// counts, as before any was measured.
func (c *Controller) roomOn(ctx context.Context, flavors []kueue.ResourceFlavorReference, gone map[types.UID]bool) (room, error) {
	r := room{}
	for _, name := range flavors {
		var flavor kueue.ResourceFlavor
		if err := c.client.Get(ctx, client.ObjectKey{Name: string(name)}, &flavor); apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("get resource flavor %s: %w", name, err)
		}
		var nodes corev1.NodeList
		if err := c.client.List(ctx, &nodes, client.MatchingLabels(flavor.Spec.NodeLabels), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list nodes of flavor %s: %w", name, err)
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if _, done := r[n.Name]; done || !chamberkueue.Schedulable(n) {
				continue
			}
			on, err := chamberkueue.PodsOnNode(ctx, c.client, n.Name)
			if err != nil {
				return nil, err
			}
			alloc := n.Status.Allocatable[chamberkueue.ResourceGPU]
			free := alloc.Value()
			for j := range on {
				p := &on[j]
				if gone[p.UID] || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					continue
				}
				free -= chamberkueue.PodGPUs(&p.Spec)
			}
			r[n.Name] = max(free, 0)
		}
	}
	return r, nil
}

// gpuFlavors are the flavors of the GPUs wl was admitted with.
func gpuFlavors(wl *kueue.Workload) []kueue.ResourceFlavorReference {
	var out []kueue.ResourceFlavorReference
	if wl.Status.Admission == nil {
		return nil
	}
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		if f, ok := psa.Flavors[chamberkueue.ResourceGPU]; ok && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// fits says whether every pod of the waiting workload finds a node with as many free
// GPUs as it asks for, each GPU given once: the pods, largest first, each on the
// node with the fewest free GPUs that still has enough (best fit). A nil room fits
// everyone.
func (r room) fits(wl *kueue.Workload) bool {
	if r == nil {
		return true
	}
	var want []int64
	for i := range wl.Spec.PodSets {
		ps := &wl.Spec.PodSets[i]
		if gpus := chamberkueue.PodGPUs(&ps.Template.Spec); gpus > 0 {
			for range ps.Count {
				want = append(want, gpus)
			}
		}
	}
	slices.SortFunc(want, func(a, b int64) int { return int(b - a) })
	free := make(map[string]int64, len(r))
	for n, f := range r {
		free[n] = f
	}
	for _, w := range want {
		best := ""
		for n, f := range free {
			if f >= w && (best == "" || f < free[best] || (f == free[best] && n < best)) {
				best = n
			}
		}
		if best == "" {
			return false
		}
		free[best] -= w
	}
	return true
}
