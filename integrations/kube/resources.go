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
