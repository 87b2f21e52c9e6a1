package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestFreeGPUs: a node's free GPUs are its allocatable ones less those of its live
// pods; ended pods, pods being deleted and pods said to be gone hold none, and a node
// asked for more than it has is full, not negative.
func TestFreeGPUs(t *testing.T) {
	node := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{ResourceGPU: resource.MustParse("8")}}}
	pod := func(name string, gpus string, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{ResourceGPU: resource.MustParse(gpus)}}}}},
			Status: corev1.PodStatus{Phase: phase},
		}
	}
	deleting := pod("deleting", "2", corev1.PodRunning)
	deleting.DeletionTimestamp = &metav1.Time{}
	pods := []corev1.Pod{
		pod("running", "2", corev1.PodRunning),
		pod("pending", "1", corev1.PodPending),
		pod("done", "4", corev1.PodSucceeded),
		pod("failed", "4", corev1.PodFailed),
		deleting,
		pod("leaving", "3", corev1.PodRunning),
	}
	if got := FreeGPUs(node, pods, nil); got != 2 {
		t.Errorf("FreeGPUs = %d, want 2 (8 less running 2, pending 1, leaving 3)", got)
	}
	gone := func(p *corev1.Pod) bool { return p.Name == "leaving" }
	if got := FreeGPUs(node, pods, gone); got != 5 {
		t.Errorf("FreeGPUs with leaving gone = %d, want 5", got)
	}
	full := append(pods, pod("big", "8", corev1.PodRunning))
	if got := FreeGPUs(node, full, nil); got != 0 {
		t.Errorf("FreeGPUs of an overcommitted node = %d, want 0", got)
	}
}
