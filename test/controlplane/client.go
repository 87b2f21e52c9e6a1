package controlplane

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	configv1alpha1 "k8s.io/component-base/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	volcanobatch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	volcanobus "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	volcanoscheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Scheme knows the built-in types, CRDs, Kueue's API, Volcano's (Jobs, Queues,
// PodGroups, Commands) and Chamber's.
var Scheme = chamberkueue.NewScheme()

func init() {
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(volcanobatch.AddToScheme(Scheme))
	utilruntime.Must(volcanobus.AddToScheme(Scheme))
	utilruntime.Must(volcanoscheduling.AddToScheme(Scheme))
}

// Client returns a controller-runtime client for the control plane, with Scheme.
func (cp *ControlPlane) Client() (client.Client, error) {
	c, err := client.New(cp.Config, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cp.Config.Host, err)
	}
	return c, nil
}

func leaderElectionOff() *configv1alpha1.LeaderElectionConfiguration {
	return &configv1alpha1.LeaderElectionConfiguration{LeaderElect: ptr.To(false)}
}

// The kueue binary's own certificate management issues certificates for an in-cluster
// Service name; on loopback the harness provides them instead.
var configInternalCertManagementOff = configapi.InternalCertManagement{Enable: ptr.To(false)}

func discoveryFor(cp *ControlPlane) (*discovery.DiscoveryClient, error) {
	return discovery.NewDiscoveryClientForConfig(cp.Config)
}
