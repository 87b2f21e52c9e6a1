package kube

import (
	corev1 "k8s.io/api/core/v1"
)

// ResourceGPU is the resource NVIDIA's device plugin advertises.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// WithheldGPUs is how many of the node's GPUs its device plugin no longer offers:
// capacity minus allocatable. NVIDIA's device plugin marks a GPU that raised a fatal
// XID unhealthy, and the kubelet then leaves it out of allocatable, so neither
// kube-scheduler nor Kueue's topology-aware scheduling gives it to a pod.
func WithheldGPUs(node *corev1.Node) int64 {
	capacity, allocatable := node.Status.Capacity[ResourceGPU], node.Status.Allocatable[ResourceGPU]
	return max(0, capacity.Value()-allocatable.Value())
}

// PodGPUs is the GPUs a pod spec holds: the scheduler's effective request, the
// larger of its containers' sum and its largest init container. A device-plugin
// resource's request equals its limit, and either may be given alone.
func PodGPUs(spec *corev1.PodSpec) int64 {
	of := func(c *corev1.Container) int64 {
		if q, ok := c.Resources.Requests[ResourceGPU]; ok {
			return q.Value()
		}
		q := c.Resources.Limits[ResourceGPU]
		return q.Value()
	}
	var sum, initMax int64
	for i := range spec.Containers {
		sum += of(&spec.Containers[i])
	}
	for i := range spec.InitContainers {
		initMax = max(initMax, of(&spec.InitContainers[i]))
	}
	return max(sum, initMax)
}

// Live: the pod has not ended and is not being deleted; its GPUs are taken.
func Live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// FreeGPUs is the rule for the GPUs a node has free: its allocatable GPUs less those
// its live pods (Live; a GPU hold pod is one) ask for, except the pods gone says will
// leave (nil: none). pods are the pods bound to the node. Idle reclaim and room for
// big jobs count free GPUs by it. The admission check counts a pod being deleted as
// still holding its GPUs (it places pods that must start now), and the fleet counts
// each GPU by its agent's report.
func FreeGPUs(n *corev1.Node, pods []corev1.Pod, gone func(*corev1.Pod) bool) int64 {
	alloc := n.Status.Allocatable[ResourceGPU]
	free := alloc.Value()
	for i := range pods {
		p := &pods[i]
		if !Live(p) || (gone != nil && gone(p)) {
			continue
		}
		free -= PodGPUs(&p.Spec)
	}
	return max(free, 0)
}
