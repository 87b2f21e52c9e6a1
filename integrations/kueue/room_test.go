package kueue

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// TestInteractive: chamber.LabelInteractive "true", as a label or an annotation, on the
// Workload, its pod template or one of its pods marks it; any other value does not.
func TestInteractive(t *testing.T) {
	on := map[string]string{chamber.LabelInteractive: "true"}
	cases := map[string]struct {
		change func(wl *kueue.Workload, pods []corev1.Pod)
		want   bool
	}{
		"unmarked":                      {change: func(*kueue.Workload, []corev1.Pod) {}},
		"a label on the Workload":       {change: func(wl *kueue.Workload, _ []corev1.Pod) { wl.Labels = on }, want: true},
		"an annotation on the Workload": {change: func(wl *kueue.Workload, _ []corev1.Pod) { wl.Annotations = on }, want: true},
		"a label on the second pod template": {
			change: func(wl *kueue.Workload, _ []corev1.Pod) { wl.Spec.PodSets[1].Template.Labels = on }, want: true,
		},
		"an annotation on the second pod": {change: func(_ *kueue.Workload, pods []corev1.Pod) { pods[1].Annotations = on }, want: true},
		"false": {
			change: func(wl *kueue.Workload, _ []corev1.Pod) {
				wl.Labels = map[string]string{chamber.LabelInteractive: "false"}
			},
		},
		"not a boolean": {
			change: func(_ *kueue.Workload, pods []corev1.Pod) {
				pods[0].Labels = map[string]string{chamber.LabelInteractive: "notebook"}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wl := &kueue.Workload{Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: "a"}, {Name: "b"}}}}
			pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p0"}}, {ObjectMeta: metav1.ObjectMeta{Name: "p1"}}}
			tc.change(wl, pods)
			if got := Interactive(wl, pods); got != tc.want {
				t.Errorf("Interactive = %v, want %v", got, tc.want)
			}
		})
	}
}
