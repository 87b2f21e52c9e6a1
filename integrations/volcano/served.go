// Package volcano is Chamber's floor for Volcano (volcano.sh): what the API server
// serves of it, and the Volcano objects Chamber compiles, reads and commands.
package volcano

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Served reports whether the API server serves the parts of Volcano's API Chamber
// works with: Queues and PodGroups (scheduling.volcano.sh/v1beta1), Jobs
// (batch.volcano.sh/v1alpha1) and Commands (bus.volcano.sh/v1alpha1). Where it does
// not, Chamber leaves Volcano alone.
func Served(dc discovery.DiscoveryInterface) (bool, error) {
	for gv, resources := range map[string][]string{
		scheduling.SchemeGroupVersion.String(): {"queues", "podgroups"},
		batch.SchemeGroupVersion.String():      {"jobs"},
		bus.SchemeGroupVersion.String():        {"commands"},
	} {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		have := map[string]bool{}
		for _, r := range list.APIResources {
			have[r.Name] = true
		}
		for _, r := range resources {
			if !have[r] {
				return false, nil
			}
		}
	}
	return true, nil
}
