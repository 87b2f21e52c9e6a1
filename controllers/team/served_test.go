package team_test

import (
	"testing"

	"k8s.io/client-go/discovery"

	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/controllers/team"
	chambervolcano "chamber.dev/chamber/integrations/volcano"
)

// On this package's control plane (Kueue, no Volcano), integrations/volcano.Served
// says no, so chamber-controller starts no Volcano controller and a Volcano pool's
// team is told that Volcano is not served.
func TestVolcanoNotServed(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(controllertest.Config)
	if err != nil {
		t.Fatal(err)
	}
	served, err := chambervolcano.Served(dc)
	if err != nil {
		t.Fatalf("Served: %v", err)
	}
	if served {
		t.Error("Served = true on a control plane without Volcano's CRDs, want false")
	}
}

// This package's control plane is Kubernetes 1.36, which serves
// MutatingAdmissionPolicies in admissionregistration.k8s.io/v1.
func TestPolicyAPIServed(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(controllertest.Config)
	if err != nil {
		t.Fatal(err)
	}
	api, err := team.ServedPolicyAPI(dc)
	if err != nil {
		t.Fatalf("ServedPolicyAPI: %v", err)
	}
	if api != team.PolicyV1 {
		t.Errorf("ServedPolicyAPI = %q on Kubernetes 1.36, want %q", api, team.PolicyV1)
	}
}
