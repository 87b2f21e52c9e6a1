package volcano

import (
	"testing"

	"k8s.io/client-go/discovery"

	chambervolcano "chamber.dev/chamber/integrations/volcano"
)

// chamber-controller decides from discovery whether to run its Volcano controllers:
// on a control plane with Volcano's CRDs, integrations/volcano.Served says yes.
func TestVolcanoServed(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	served, err := chambervolcano.Served(dc)
	if err != nil {
		t.Fatalf("Served: %v", err)
	}
	if !served {
		t.Error("Served = false on a control plane running Volcano, want true")
	}
}
