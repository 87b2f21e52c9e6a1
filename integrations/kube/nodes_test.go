package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestSchedulable(t *testing.T) {
	taint := func(effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: "chamber.dev/isolated", Value: "true", Effect: effect}
	}
	for _, tc := range []struct {
		name string
		spec corev1.NodeSpec
		want bool
	}{
		{"plain", corev1.NodeSpec{}, true},
		{"cordoned", corev1.NodeSpec{Unschedulable: true}, false},
		{"NoSchedule taint", corev1.NodeSpec{Taints: []corev1.Taint{taint(corev1.TaintEffectNoSchedule)}}, false},
		{"NoExecute taint", corev1.NodeSpec{Taints: []corev1.Taint{taint(corev1.TaintEffectNoExecute)}}, false},
		// A preference only: kube-scheduler still places pods there.
		{"PreferNoSchedule taint", corev1.NodeSpec{Taints: []corev1.Taint{taint(corev1.TaintEffectPreferNoSchedule)}}, true},
		{"room for a big job", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "chamber.dev/room-for", Effect: corev1.TaintEffectNoSchedule}}}, false},
		{"unreachable", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}}}, false},
		{"not ready", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}}, false},
		{"cloud node shut down", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.cloudprovider.kubernetes.io/shutdown", Effect: corev1.TaintEffectNoSchedule}}}, false},
		{"Cluster Autoscaler removing it", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}}, false},
		{"Karpenter disrupting it", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}}}, false},
		// Taints that keep other pods off GPU nodes, which GPU workloads tolerate.
		{"GKE's GPU node taint", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}}, true},
		{"dedicated to a team", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "ml-research", Effect: corev1.TaintEffectNoSchedule}}}, true},
		{"dedicated and cordoned", corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}}, false},
	} {
		if got := Schedulable(&corev1.Node{Spec: tc.spec}); got != tc.want {
			t.Errorf("%s: Schedulable = %t, want %t", tc.name, got, tc.want)
		}
	}
}
