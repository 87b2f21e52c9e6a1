package controlplane

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// KwokNodeAnnotation marks the nodes kwok manages (value "fake").
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// KwokPodStages are a pod's annotations that set how long kwok waits in each of its
// pod stages ("pod-create", "pod-ready", "pod-complete"). Each stage's jitter is set
// with its delay: kwok takes a jitter below the delay (its default 5 s) in place of
// the delay, so a delay alone can end a stage early.
func KwokPodStages(delays map[string]time.Duration) map[string]string {
	a := make(map[string]string, 2*len(delays))
	for stage, d := range delays {
		a[stage+".stage.kwok.x-k8s.io/delay"] = d.String()
		a[stage+".stage.kwok.x-k8s.io/jitter-delay"] = d.String()
	}
	return a
}

// PodRunsFor are the annotations with which kwok completes a pod d after it runs.
func PodRunsFor(d time.Duration) map[string]string {
	return KwokPodStages(map[string]time.Duration{"pod-complete": d})
}

// Labels that NVIDIA GPU feature discovery puts on GPU nodes.
const (
	LabelGPUCount   = "nvidia.com/gpu.count"
	LabelGPUMemory  = "nvidia.com/gpu.memory"
	LabelGPUPresent = "nvidia.com/gpu.present"
)

// GPUNode describes a simulated GPU node.
type GPUNode struct {
	Name string
	// GPUs is the node's nvidia.com/gpu capacity.
	GPUs int
	// Product is the GPU model as GPU feature discovery labels it. Default
	// "NVIDIA-H100-80GB-HBM3".
	Product string
	// GPUMemoryMiB is the memory of one GPU. Default 81559 (an H100 80GB).
	GPUMemoryMiB int
	// Labels are added to the node's labels (topology labels such as a rack).
	Labels map[string]string
}

// Object returns the Node kwok will manage: GPU feature discovery labels, GPU
// capacity, and kubernetes.io/hostname, which a kubelet would set and Kueue's
// topology-aware scheduling reads.
func (n GPUNode) Object() *corev1.Node {
	product := n.Product
	if product == "" {
		product = "NVIDIA-H100-80GB-HBM3"
	}
	mem := n.GPUMemoryMiB
	if mem == 0 {
		mem = 81559
	}
	labels := map[string]string{
		corev1.LabelHostname:        n.Name,
		corev1.LabelOSStable:        "linux",
		corev1.LabelArchStable:      "amd64",
		"type":                      "kwok",
		LabelGPUPresent:             "true",
		chamber.DefaultProductLabel: product,
		LabelGPUCount:               strconv.Itoa(n.GPUs),
		LabelGPUMemory:              strconv.Itoa(mem),
	}
	for k, v := range n.Labels {
		labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("128"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		kube.ResourceGPU:      *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.Name,
			Labels:      labels,
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
		},
	}
}

// CreateGPUNodes creates the nodes and waits until each is Ready and free of the
// not-ready taint, so pods can be scheduled onto it. It needs kwok and the
// controller manager.
func CreateGPUNodes(ctx context.Context, c client.Client, nodes ...GPUNode) error {
	for _, n := range nodes {
		// A Node keeps the status it is created with (unlike most objects), and kwok
		// keeps that capacity when it marks the node Ready.
		if err := c.Create(ctx, n.Object()); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, n := range nodes {
		for {
			var node corev1.Node
			err := c.Get(ctx, client.ObjectKey{Name: n.Name}, &node)
			if err == nil && nodeSchedulable(&node) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %s not Ready and untainted after a minute (is kwok running? last error: %v)", n.Name, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func nodeSchedulable(node *corev1.Node) bool {
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	return ready
}
