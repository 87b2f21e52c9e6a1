package kueue

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// NewScheme knows the kinds Chamber reads and writes: Kubernetes' built-in ones,
// Kueue's v1beta2, Volcano's Queues, PodGroups, Jobs and Commands, and Chamber's own. chamber-controller, the kubectl plugin and the
// local control plane's clients all use it.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(kueue.AddToScheme(s))
	utilruntime.Must(scheduling.AddToScheme(s))
	utilruntime.Must(batch.AddToScheme(s))
	utilruntime.Must(bus.AddToScheme(s))
	utilruntime.Must(chamber.AddToScheme(s))
	return s
}
