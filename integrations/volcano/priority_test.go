package volcano

import (
	"testing"

	"chamber.dev/chamber/integrations/kube"
)

// A tier's PriorityClass has the tier's name and value, is Chamber's, and is not the
// cluster's default.
func TestPriorityClass(t *testing.T) {
	pc := PriorityClass(kube.PriorityTier{Name: "production", Value: 1000})
	if pc.Name != "production" || pc.Value != 1000 || !kube.Owned(pc) || pc.GlobalDefault {
		t.Errorf("PriorityClass = %s value %d owned %t globalDefault %t, want production 1000 owned, not the default",
			pc.Name, pc.Value, kube.Owned(pc), pc.GlobalDefault)
	}
}
