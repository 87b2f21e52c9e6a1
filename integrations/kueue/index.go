package kueue

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltas "sigs.k8s.io/kueue/pkg/util/tas"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// The cache indexes Chamber's controllers read through, registered once for the
// manager (SetupIndexes), as Kueue's pkg/controller/core/indexer does.
const (
	// IndexPodNode: pods by the node they are bound to.
	IndexPodNode = "chamber.pod.node"
	// IndexPodWorkload: pods by their workload: "namespace/name" from Kueue's
	// workload annotation, and the UID of their controller (the job the Workload is
	// owned by).
	IndexPodWorkload = "chamber.pod.workload"
	// IndexWorkloadOwner: workloads by the UIDs of their owners (their job).
	IndexWorkloadOwner = "chamber.workload.owner"
	// IndexWorkloadNode: workloads by the nodes (hostnames) Kueue's topology-aware
	// scheduling assigned them pods on.
	IndexWorkloadNode = "chamber.workload.node"
	// IndexNodeHostname: nodes by their kubernetes.io/hostname label, the level
	// topology assignments name them by.
	IndexNodeHostname = "chamber.node.hostname"
	// IndexWorkloadPending: workloads waiting in their queue (Pending), under
	// PendingValue; the others are not in the index. Who waits is asked on every
	// idle workload's reconcile, and most of a busy cluster's workloads do not.
	IndexWorkloadPending = "chamber.workload.pending"
	PendingValue         = "true"
	// IndexNodeSchedulable: nodes that take new GPU work (kube.Schedulable), under
	// SchedulableValue; the others are not in the index.
	IndexNodeSchedulable = "chamber.node.schedulable"
	SchedulableValue     = "true"
	// IndexGPUNodeFailing: GPUNodes whose agent reports a GPU Unhealthy that no pod
	// holds, under FailingValue; the others are not in the index. Only their nodes
	// can offer a failing GPU to a new pod, and a healthy fleet has none.
	IndexGPUNodeFailing = "chamber.gpunode.failing"
	FailingValue        = "true"
)

// SetupIndexes registers the indexes with the manager's field indexer.
func SetupIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &corev1.Pod{}, IndexPodNode, PodNode); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, IndexPodWorkload, PodWorkloadKeys); err != nil {
		return fmt.Errorf("index pods by workload: %w", err)
	}
	if err := idx.IndexField(ctx, &kueue.Workload{}, IndexWorkloadOwner, OwnerUIDs); err != nil {
		return fmt.Errorf("index workloads by owner: %w", err)
	}
	if err := idx.IndexField(ctx, &kueue.Workload{}, IndexWorkloadNode, WorkloadNodes); err != nil {
		return fmt.Errorf("index workloads by assigned node: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Node{}, IndexNodeHostname, NodeHostname); err != nil {
		return fmt.Errorf("index nodes by hostname: %w", err)
	}
	if err := idx.IndexField(ctx, &kueue.Workload{}, IndexWorkloadPending, PendingKeys); err != nil {
		return fmt.Errorf("index workloads waiting in their queue: %w", err)
	}
	if err := idx.IndexField(ctx, &corev1.Node{}, IndexNodeSchedulable, SchedulableKeys); err != nil {
		return fmt.Errorf("index nodes that take new work: %w", err)
	}
	if err := idx.IndexField(ctx, &chamber.GPUNode{}, IndexGPUNodeFailing, FailingKeys); err != nil {
		return fmt.Errorf("index GPUNodes with unhealthy GPUs no pod holds: %w", err)
	}
	return nil
}

// SchedulableKeys are IndexNodeSchedulable's keys: SchedulableValue for a node that
// takes new GPU work.
func SchedulableKeys(obj client.Object) []string {
	if kube.Schedulable(obj.(*corev1.Node)) {
		return []string{SchedulableValue}
	}
	return nil
}

// FailingKeys are IndexGPUNodeFailing's keys: FailingValue for a GPUNode that reports
// a GPU Unhealthy with no pod on it.
func FailingKeys(obj client.Object) []string {
	for _, g := range obj.(*chamber.GPUNode).Status.GPUs {
		if g.Health == chamber.GPUUnhealthy && g.Pod == nil {
			return []string{FailingValue}
		}
	}
	return nil
}

// Pending: the workload waits in its queue: active, not being deleted, without a
// quota reservation and not finished.
func Pending(wl *kueue.Workload) bool {
	conds := wl.Status.Conditions
	return wl.DeletionTimestamp == nil && (wl.Spec.Active == nil || *wl.Spec.Active) &&
		!apimeta.IsStatusConditionTrue(conds, kueue.WorkloadQuotaReserved) &&
		!apimeta.IsStatusConditionTrue(conds, kueue.WorkloadFinished)
}

// PendingKeys are IndexWorkloadPending's keys: PendingValue for a Pending workload.
func PendingKeys(obj client.Object) []string {
	if Pending(obj.(*kueue.Workload)) {
		return []string{PendingValue}
	}
	return nil
}

// WorkloadNodes are IndexWorkloadNode's keys: the hostnames of the workload's
// topology assignments that have pods (utiltas.HasTASAssignmentOnNode's rule).
func WorkloadNodes(obj client.Object) []string {
	admission := obj.(*kueue.Workload).Status.Admission
	if admission == nil {
		return nil
	}
	var hosts []string
	for i := range admission.PodSetAssignments {
		ta := admission.PodSetAssignments[i].TopologyAssignment
		if ta == nil || !utiltas.IsLowestLevelHostname(ta.Levels) {
			continue
		}
		for domain := range utiltas.InternalSeqFrom(ta) {
			if n := len(domain.Values); n > 0 && domain.Count > 0 && !slices.Contains(hosts, domain.Values[n-1]) {
				hosts = append(hosts, domain.Values[n-1])
			}
		}
	}
	return hosts
}

// NodeHostname is IndexNodeHostname's key of a node.
func NodeHostname(obj client.Object) []string {
	if h := obj.GetLabels()[corev1.LabelHostname]; h != "" {
		return []string{h}
	}
	return nil
}

// PodNode is IndexPodNode's key of a pod: its node, none while unbound.
func PodNode(obj client.Object) []string {
	if n := obj.(*corev1.Pod).Spec.NodeName; n != "" {
		return []string{n}
	}
	return nil
}

// PodWorkloadKeys are IndexPodWorkload's keys of a pod.
func PodWorkloadKeys(obj client.Object) []string {
	var keys []string
	if wl := obj.GetAnnotations()[kueue.WorkloadAnnotation]; wl != "" {
		keys = append(keys, obj.GetNamespace()+"/"+wl)
	}
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		keys = append(keys, string(ref.UID))
	}
	return keys
}

// OwnerUIDs are IndexWorkloadOwner's keys: the UIDs of the object's owners.
func OwnerUIDs(obj client.Object) []string {
	var uids []string
	for _, ref := range obj.GetOwnerReferences() {
		uids = append(uids, string(ref.UID))
	}
	return uids
}

// PodsOnNode lists the pods bound to the node, from a cache with SetupIndexes'
// indexes, as shared objects the caller must not change.
func PodsOnNode(ctx context.Context, c client.Reader, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingFields{IndexPodNode: node}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", node, err)
	}
	return pods.Items, nil
}

// PodsOfWorkload lists the workload's pods: those Kueue's annotation names it on, and
// those its job controls.
func PodsOfWorkload(ctx context.Context, c client.Reader, wl *kueue.Workload) ([]corev1.Pod, error) {
	keys := []string{wl.Namespace + "/" + wl.Name}
	if ref := metav1.GetControllerOfNoCopy(wl); ref != nil {
		keys = append(keys, string(ref.UID))
	}
	var pods []corev1.Pod
	seen := map[types.UID]bool{}
	for _, k := range keys {
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(wl.Namespace), client.MatchingFields{IndexPodWorkload: k}); err != nil {
			return nil, fmt.Errorf("list pods of workload %s/%s: %w", wl.Namespace, wl.Name, err)
		}
		for _, p := range list.Items {
			if !seen[p.UID] {
				seen[p.UID] = true
				pods = append(pods, p)
			}
		}
	}
	return pods, nil
}

// WorkloadsOwnedBy lists the workloads of the job object with the given UID.
func WorkloadsOwnedBy(ctx context.Context, c client.Reader, namespace string, owner types.UID) ([]kueue.Workload, error) {
	var wls kueue.WorkloadList
	if err := c.List(ctx, &wls, client.InNamespace(namespace), client.MatchingFields{IndexWorkloadOwner: string(owner)}); err != nil {
		return nil, fmt.Errorf("list workloads owned by %s in %s: %w", owner, namespace, err)
	}
	return wls.Items, nil
}

// WorkloadOfPod is the pod's Kueue Workload, by the one rule every controller uses:
// the Workload Kueue's annotation names on the pod; else one owned by the pod itself
// (Kueue's plain-pod integration); else one owned by the pod's controller (a Job);
// else one owned by that controller's controller (a JobSet, whose Jobs own the
// pods). The Workloads are read from c (a cache with SetupIndexes' indexes), the
// controller's controller from owners (its metadata only). nil when the pod has no
// Workload.
func WorkloadOfPod(ctx context.Context, c, owners client.Reader, pod *corev1.Pod) (*kueue.Workload, error) {
	if name := pod.Annotations[kueue.WorkloadAnnotation]; name != "" {
		var wl kueue.Workload
		err := c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, &wl)
		if err == nil {
			return &wl, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get workload %s/%s of pod %s: %w", pod.Namespace, name, pod.Name, err)
		}
	}
	ownedBy := func(uid types.UID) (*kueue.Workload, error) {
		wls, err := WorkloadsOwnedBy(ctx, c, pod.Namespace, uid)
		if err != nil || len(wls) == 0 {
			return nil, err
		}
		return &wls[0], nil
	}
	if wl, err := ownedBy(pod.UID); wl != nil || err != nil {
		return wl, err
	}
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil {
		return nil, nil
	}
	if wl, err := ownedBy(owner.UID); wl != nil || err != nil {
		return wl, err
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(schema.FromAPIVersionAndKind(owner.APIVersion, owner.Kind))
	if err := owners.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: owner.Name}, meta); err != nil {
		// Gone, a kind this cluster does not serve, or one Chamber may not read (the
		// chart grants Jobs and Kueue's kinds): no Workload through it.
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apimeta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get %s %s/%s, controller of pod %s: %w", owner.Kind, pod.Namespace, owner.Name, pod.Name, err)
	}
	if up := metav1.GetControllerOfNoCopy(meta); up != nil {
		return ownedBy(up.UID)
	}
	return nil, nil
}

// WorkloadsOnNode lists the workloads Kueue's topology-aware scheduling assigned pods
// on the node (by its hostname), as shared objects the caller must not change.
func WorkloadsOnNode(ctx context.Context, c client.Reader, hostname string) ([]kueue.Workload, error) {
	var wls kueue.WorkloadList
	if err := c.List(ctx, &wls, client.MatchingFields{IndexWorkloadNode: hostname}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list workloads assigned to node %s: %w", hostname, err)
	}
	return wls.Items, nil
}

// NodesByHostname lists the nodes with the hostname label, as shared objects the
// caller must not change (one, unless labels are wrong).
func NodesByHostname(ctx context.Context, c client.Reader, hostname string) ([]corev1.Node, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.MatchingFields{IndexNodeHostname: hostname}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list nodes with hostname %s: %w", hostname, err)
	}
	return nodes.Items, nil
}
