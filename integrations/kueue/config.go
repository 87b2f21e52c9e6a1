// Package kueue is Chamber's adapter for Kueue, and holds only what concerns Kueue:
// the manager configuration Chamber relies on, the compilation of Teams and GPUPools
// into Kueue objects (Cohorts, ResourceFlavors, Topologies, ClusterQueues,
// LocalQueues, priority classes, MultiKueue), the eviction protocol on a Workload,
// the indexes over Workloads and their pods, and the free GPUs on a ClusterQueue's
// flavors (FreeByNode). What both adapters share is in integrations/kube.
package kueue

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
)

// DefaultFrameworks are the job integrations Chamber enables in Kueue.
var DefaultFrameworks = []string{"batch/job"}

// Configuration returns the parts of Kueue's manager configuration that Chamber
// relies on; the caller adds where Kueue serves (webhook, health, metrics).
//
// Controller concurrency is what Kueue's Helm chart sets. Fair sharing is on:
// ClusterQueue and Cohort fairSharing.weight (a Team's fair-share weight) and the
// fair-sharing preemption strategies take effect only when Kueue's own configuration
// has a fairSharing section.
func Configuration(frameworks []string, featureGates map[string]bool) *configapi.Configuration {
	if len(frameworks) == 0 {
		frameworks = DefaultFrameworks
	}
	namespace := "kueue-system"
	cfg := &configapi.Configuration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: configapi.SchemeGroupVersion.String(),
			Kind:       "Configuration",
		},
		Namespace: &namespace,
		Integrations: &configapi.Integrations{
			Frameworks: frameworks,
		},
		FairSharing: &configapi.FairSharing{
			PreemptionStrategies: []configapi.PreemptionStrategy{
				configapi.LessThanOrEqualToFinalShare,
				configapi.LessThanInitialShare,
			},
		},
		FeatureGates: featureGates,
	}
	// Kueue's own Helm chart runs these; its built-in default is one reconcile at a
	// time per kind, under which admission checks queue up behind each other.
	cfg.ControllerManager.Controller = &configapi.ControllerConfigurationSpec{GroupKindConcurrency: map[string]int{
		"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
		"ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1,
	}}
	return cfg
}
