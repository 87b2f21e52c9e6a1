package team_test

import (
	"testing"

	"k8s.io/client-go/discovery"

	"chamber.dev/chamber/controllers/controllertest"
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
