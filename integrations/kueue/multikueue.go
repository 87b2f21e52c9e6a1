package kueue

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// MultiKueueControllerName is the controllerName of Kueue's MultiKueue AdmissionCheck,
// and the spec.managedBy of a Job that MultiKueue runs on a worker cluster.
const MultiKueueControllerName = "kueue.x-k8s.io/multikueue"

// MultiKueueCheckName is the pool's MultiKueue AdmissionCheck, which the team
// controller puts on the ClusterQueue of each of the pool's teams (Kueue allows one
// MultiKueue check per ClusterQueue); "" when the pool has no worker clusters.
func MultiKueueCheckName(pool *chamber.GPUPool) string {
	if len(pool.Spec.WorkerClusters) == 0 {
		return ""
	}
	return multiKueueName(pool.Name, "multikueue")
}

// MultiKueueConfigName is the pool's MultiKueueConfig.
func MultiKueueConfigName(pool *chamber.GPUPool) string {
	return multiKueueName(pool.Name)
}

// MultiKueueClusterName is the MultiKueueCluster of a pool's worker: named after the
// pool too, since MultiKueueClusters are cluster-scoped and two pools may list
// workers of the same name.
func MultiKueueClusterName(pool *chamber.GPUPool, worker string) string {
	return multiKueueName(pool.Name, worker)
}

// MultiKueueCopy reports whether wl is a worker cluster's copy of a manager's
// workload (Kueue's MultiKueue labels the copies it creates with the manager's
// origin). Where it runs is the manager's choice, not this cluster's.
func MultiKueueCopy(wl *kueue.Workload) bool {
	_, ok := wl.Labels[kueue.MultiKueueOriginLabel]
	return ok
}

// maxMultiKueueName is the longest name of a MultiKueue object Chamber makes: a
// DNS-1123 label, since Kueue copies a MultiKueueCluster's name into each Workload's
// status and into the metrics' labels.
const maxMultiKueueName = 63

// multiKueueName joins parts with "-"; a name longer than maxMultiKueueName keeps its
// head and ends with a hash of the whole, so that two long names stay distinct.
func multiKueueName(parts ...string) string {
	return kube.ShortName(strings.Join(parts, "-"), maxMultiKueueName)
}

// MultiKueue compiles the pool's worker clusters into Kueue's MultiKueue objects: a
// MultiKueueCluster per worker, reading its kubeconfig from the worker's Secret in
// Kueue's namespace; one MultiKueueConfig listing them in the pool's order (the order
// Kueue's incremental dispatcher tries them in); and the AdmissionCheck of
// controller kueue.x-k8s.io/multikueue whose parameters point at the config. All nil
// when the pool has no worker clusters.
func MultiKueue(pool *chamber.GPUPool) ([]*kueue.MultiKueueCluster, *kueue.MultiKueueConfig, *kueue.AdmissionCheck) {
	if len(pool.Spec.WorkerClusters) == 0 {
		return nil, nil, nil
	}
	clusters := make([]*kueue.MultiKueueCluster, 0, len(pool.Spec.WorkerClusters))
	names := make([]string, 0, len(pool.Spec.WorkerClusters))
	for _, w := range pool.Spec.WorkerClusters {
		name := MultiKueueClusterName(pool, w.Name)
		clusters = append(clusters, &kueue.MultiKueueCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels(chamber.LabelPool, pool.Name)},
			Spec: kueue.MultiKueueClusterSpec{ClusterSource: kueue.ClusterSource{
				KubeConfig: &kueue.KubeConfig{Location: w.KubeconfigSecret, LocationType: kueue.SecretLocationType},
			}},
		})
		names = append(names, name)
	}
	config := &kueue.MultiKueueConfig{
		ObjectMeta: metav1.ObjectMeta{Name: MultiKueueConfigName(pool), Labels: labels(chamber.LabelPool, pool.Name)},
		Spec:       kueue.MultiKueueConfigSpec{Clusters: names},
	}
	check := AdmissionCheck(MultiKueueCheckName(pool), MultiKueueControllerName)
	check.Labels[chamber.LabelPool] = pool.Name
	check.Spec.Parameters = &kueue.AdmissionCheckParametersReference{
		APIGroup: kueue.SchemeGroupVersion.Group, Kind: "MultiKueueConfig", Name: config.Name,
	}
	return clusters, config, check
}

// DefaultNamespace is the namespace Kueue runs in, where its MultiKueue reads the
// worker clusters' kubeconfig Secrets, unless its Configuration says otherwise.
const DefaultNamespace = "kueue-system"
