package kueue

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Served reports whether the API server serves Kueue's API (kueue.x-k8s.io/v1beta2,
// with Workloads): where it does not, Chamber can only monitor.
func Served(dc discovery.DiscoveryInterface) (bool, error) {
	list, err := dc.ServerResourcesForGroupVersion(kueue.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == "workloads" {
			return true, nil
		}
	}
	return false, nil
}
