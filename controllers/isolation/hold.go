package isolation

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// GPU-level isolation takes the failing GPUs out of the node's capacity with a "GPU
// hold" pod bound to the node: it requests as many nvidia.com/gpu as the node has
// failing GPUs that its device plugin still offers (the plugin withdraws a GPU after
// a fatal XID itself, and holding that one again would idle a healthy GPU), so
// kube-scheduler and Kueue's topology-aware scheduling (which counts pods it did not
// admit as usage) place nothing on them. On a real node the device plugin, not
// Chamber, picks which GPUs the hold pod gets: unless the plugin itself withholds the
// failing ones, it may get healthy ones. A pool that cannot take that
// forces Node level; under Auto, GPU level is kept for faults a GPU reset clears.
const (
	// DefaultHoldNamespace is where the hold pods live unless Options say otherwise:
	// the chart's default namespace.
	DefaultHoldNamespace = "chamber-system"
	// holdImage is the pause image: the hold pod runs nothing.
	holdImage = "registry.k8s.io/pause:3.10"
	// ReasonGPUHoldNameTaken is the Event of a pod of the hold's name that is not
	// Chamber's hold.
	ReasonGPUHoldNameTaken = "GPUHoldNameTaken"
)

func holdPodName(node string) string { return "chamber-gpu-hold-" + node }

func (c *Controller) holdNamespace() string {
	if c.opts.HoldNamespace != "" {
		return c.opts.HoldNamespace
	}
	return DefaultHoldNamespace
}

// holdGPUs makes the node's hold pod request the failing GPUs the node still offers:
// len(gpus) less those its device plugin withholds already (kube.WithheldGPUs).
// Holding those too would take healthy GPUs out of service. A pod's requests cannot
// change, so a hold of another size is replaced; none is left when nothing is to hold.
func (c *Controller) holdGPUs(ctx context.Context, node *corev1.Node, gpus []int) error {
	want := max(0, int64(len(gpus))-kube.WithheldGPUs(node))
	key := client.ObjectKey{Namespace: c.holdNamespace(), Name: holdPodName(node.Name)}
	var have corev1.Pod
	err := c.reader.Get(ctx, key, &have)
	switch {
	case err == nil && !isHold(&have, node):
		c.foreignHold(ctx, node, &have)
		return nil
	case err == nil:
		q := have.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
		if q.Value() == want && have.DeletionTimestamp == nil {
			return nil
		}
		if err := c.deleteHold(ctx, &have); err != nil {
			return fmt.Errorf("replace GPU hold pod of node %s: %w", node.Name, err)
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get GPU hold pod of node %s: %w", node.Name, err)
	}
	if want == 0 {
		return nil
	}
	gpuQty := *resource.NewQuantity(want, resource.DecimalSI)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			Labels:      map[string]string{chamber.LabelGPUHold: node.Name, chamber.LabelManagedBy: chamber.ManagedBy},
			Annotations: map[string]string{chamber.AnnotationIsolatedGPUs: joinInts(gpus)},
			// The node owns its hold: deleting the node deletes it.
			OwnerReferences: []metav1.OwnerReference{holdOwner(node)},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node.Name,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name:  "hold",
				Image: holdImage,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{kube.ResourceGPU: gpuQty},
					Limits:   corev1.ResourceList{kube.ResourceGPU: gpuQty},
				},
			}},
		},
	}
	if err := c.client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create GPU hold pod of node %s: %w", node.Name, err)
	}
	return nil
}

// releaseGPUs deletes the node's hold pod, if any: a pod of the hold's name that is
// not Chamber's hold of this node is left alone, and reported.
func (c *Controller) releaseGPUs(ctx context.Context, node *corev1.Node) error {
	var have corev1.Pod
	err := c.reader.Get(ctx, client.ObjectKey{Namespace: c.holdNamespace(), Name: holdPodName(node.Name)}, &have)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get GPU hold pod of node %s: %w", node.Name, err)
	case !isHold(&have, node):
		c.foreignHold(ctx, node, &have)
		return nil
	}
	if err := c.deleteHold(ctx, &have); err != nil {
		return fmt.Errorf("delete GPU hold pod of node %s: %w", node.Name, err)
	}
	return nil
}

// deleteHold deletes the hold pod as read: the UID precondition keeps a delete from
// reaching another pod that took its name since.
func (c *Controller) deleteHold(ctx context.Context, pod *corev1.Pod) error {
	err := c.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or replaced by another pod since: not the hold read, so not to delete.
		return nil
	}
	return err
}

// isHold: the pod is Chamber's GPU hold of the node, labelled and owned as holdGPUs
// creates it. Anyone who may create pods in the hold namespace can take its name.
func isHold(pod *corev1.Pod, node *corev1.Node) bool {
	owner := holdOwner(node)
	return pod.Labels[chamber.LabelGPUHold] == node.Name && pod.Labels[chamber.LabelManagedBy] == chamber.ManagedBy &&
		slices.ContainsFunc(pod.OwnerReferences, func(r metav1.OwnerReference) bool {
			return r.Kind == owner.Kind && r.Name == owner.Name && r.UID == owner.UID
		})
}

func holdOwner(node *corev1.Node) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
}

// foreignHold reports a pod that has the name of the node's hold but is not Chamber's:
// it is left alone, and the failing GPUs are not held until it is gone.
func (c *Controller) foreignHold(ctx context.Context, node *corev1.Node, pod *corev1.Pod) {
	log.FromContext(ctx).Info("a pod that is not Chamber's has the name of the node's GPU hold; the failing GPUs are not held", "node", node.Name, "pod", client.ObjectKeyFromObject(pod))
	c.recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonGPUHoldNameTaken, "Hold",
		"pod %s/%s is not Chamber's GPU hold of the node (labels %s=%s, %s=%s, owner the Node): Chamber leaves it alone and holds no failing GPU of the node until it is renamed or deleted",
		pod.Namespace, pod.Name, chamber.LabelGPUHold, node.Name, chamber.LabelManagedBy, chamber.ManagedBy)
}
