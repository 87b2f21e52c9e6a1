package volcano

import (
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// PriorityClass is the PriorityClass (scheduling.k8s.io) a priority tier becomes
// where Volcano is served, of the tier's own name and value: a Volcano Job names it in
// spec.priorityClassName, as a Kueue job names the tier's WorkloadPriorityClass, and
// Volcano's priority plugin orders a queue's jobs by its value (the job's PodGroup
// and pods carry it). The same name is the tier for Chamber's own rules (idle
// reclaim's exempt tiers, grace periods, the metrics' tier label).
func PriorityClass(t kube.PriorityTier) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: t.Name, Labels: map[string]string{chamber.LabelManagedBy: chamber.ManagedBy}},
		Value:       t.Value,
		Description: "Chamber priority tier " + t.Name + " (Volcano Jobs name it in spec.priorityClassName)",
	}
}
