package idlereclaim

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Why a waiter must fit: reclaiming an idle workload's GPUs helps a waiter only if it
// can run on them. A 1-GPU notebook on a node whose other 7 GPUs are busy frees no
// room for an 8-GPU job, and evicting it for one leaves its GPU free, the notebook
// paused and the job still waiting, and reclaims it again at every window for a
// waiter that never gets its GPUs. So idle reclaim counts only a
// waiter whose pods all find a node of the idle workload's flavors with enough free
// GPUs once the idle workload's pods are gone. Quota stays Kueue's business.

// roomAfter is the room on the schedulable nodes of wl's GPU flavors once its pods
// are gone (chamberkueue.FreeByNodeOn); nil when a flavor is not known: with no room to
// measure, every waiter counts.
func (c *Controller) roomAfter(ctx context.Context, wl *kueue.Workload, pods []corev1.Pod) (chamberkueue.FreeByNode, error) {
	return chamberkueue.FreeByNodeOn(ctx, c.client, gpuFlavors(wl), uids(pods))
}

func uids(pods []corev1.Pod) map[types.UID]bool {
	out := make(map[types.UID]bool, len(pods))
	for i := range pods {
		out[pods[i].UID] = true
	}
	return out
}

// gpuFlavors are the flavors of the GPUs wl was admitted with.
func gpuFlavors(wl *kueue.Workload) []kueue.ResourceFlavorReference {
	var out []kueue.ResourceFlavorReference
	if wl.Status.Admission == nil {
		return nil
	}
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		if f, ok := psa.Flavors[kube.ResourceGPU]; ok && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// fits says whether every pod of the waiting workload finds a node of the room with
// as many free GPUs as it asks for (FreeByNode.Fits).
func fits(r chamberkueue.FreeByNode, wl *kueue.Workload) bool {
	return r.Fits(chamberkueue.WorkloadPodGPUs(wl))
}
