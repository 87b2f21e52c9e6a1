package kueue

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"chamber.dev/chamber/integrations/kube"
)

// FreeByNode is the GPUs each node has free, by node name: what idle reclaim frees for a
// waiter and what room for big jobs rearranges.
type FreeByNode map[string]int64

// FreeByNodeOn is the free GPUs on the schedulable nodes of the flavors
// (kube.FreeGPUs), the pods of the UIDs in gone counted as gone. Nil when a flavor is
// not known (not compiled by Chamber, or not in the cache yet). c is a cache with
// SetupIndexes' indexes.
func FreeByNodeOn(ctx context.Context, c client.Reader, flavors []kueue.ResourceFlavorReference, gone map[types.UID]bool) (FreeByNode, error) {
	r := FreeByNode{}
	for _, name := range flavors {
		var flavor kueue.ResourceFlavor
		if err := c.Get(ctx, client.ObjectKey{Name: string(name)}, &flavor); apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("get resource flavor %s: %w", name, err)
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes, client.MatchingLabels(flavor.Spec.NodeLabels), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list nodes of flavor %s: %w", name, err)
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if _, done := r[n.Name]; done || !kube.Schedulable(n) {
				continue
			}
			on, err := PodsOnNode(ctx, c, n.Name)
			if err != nil {
				return nil, err
			}
			r[n.Name] = kube.FreeGPUs(n, on, func(p *corev1.Pod) bool { return gone[p.UID] })
		}
	}
	return r, nil
}

// HoldsGPUs: the workload is admitted, not finished, not evicted and not being deleted.
func HoldsGPUs(wl *kueue.Workload) bool {
	conds := wl.Status.Conditions
	return wl.DeletionTimestamp == nil && wl.Status.Admission != nil &&
		apimeta.IsStatusConditionTrue(conds, kueue.WorkloadAdmitted) &&
		!apimeta.IsStatusConditionTrue(conds, kueue.WorkloadFinished) &&
		!apimeta.IsStatusConditionTrue(conds, kueue.WorkloadEvicted)
}

// Fits says whether pods asking for want GPUs each (largest first) all find a node
// with as many free GPUs, each GPU given once: each pod on the node with the fewest
// free GPUs that still has enough (best fit), ties to the first name. A nil room fits
// everything.
func (r FreeByNode) Fits(want []int64) bool {
	if r == nil {
		return true
	}
	free := make(FreeByNode, len(r))
	for n, f := range r {
		free[n] = f
	}
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b int64) int { return int(b - a) })
	for _, w := range want {
		best := free.BestFit(w)
		if best == "" {
			return false
		}
		free[best] -= w
	}
	return true
}

// BestFit is the node with the fewest free GPUs that still has k, ties to the first
// name; "" when none has.
func (r FreeByNode) BestFit(k int64) string {
	best := ""
	for n, f := range r {
		if f >= k && (best == "" || f < r[best] || (f == r[best] && n < best)) {
			best = n
		}
	}
	return best
}

// WorkloadPodGPUs are the GPUs each pod of the workload asks for, one entry per pod
// that asks for any.
func WorkloadPodGPUs(wl *kueue.Workload) []int64 {
	var want []int64
	for i := range wl.Spec.PodSets {
		ps := &wl.Spec.PodSets[i]
		if gpus := kube.PodGPUs(&ps.Template.Spec); gpus > 0 {
			for range ps.Count {
				want = append(want, gpus)
			}
		}
	}
	return want
}

// WorkloadGPUs is the GPUs all the workload's pods ask for.
func WorkloadGPUs(wl *kueue.Workload) int64 {
	var n int64
	for i := range wl.Spec.PodSets {
		n += int64(wl.Spec.PodSets[i].Count) * kube.PodGPUs(&wl.Spec.PodSets[i].Template.Spec)
	}
	return n
}

// Interactive: the workload, its pod template or one of its pods is marked interactive
// (chamber.LabelInteractive as a label or an annotation). The template speaks for a
// workload without pods.
func Interactive(wl *kueue.Workload, pods []corev1.Pod) bool {
	templates := make([]*corev1.PodTemplateSpec, len(wl.Spec.PodSets))
	for i := range wl.Spec.PodSets {
		templates[i] = &wl.Spec.PodSets[i].Template
	}
	return kube.MarkedInteractive(wl, templates, pods)
}
