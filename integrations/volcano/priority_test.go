package volcano

import (
	"testing"

	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// A tier's PriorityClass has the tier's name and value, is Chamber's, and is not the
// cluster's default.
func TestPriorityClass(t *testing.T) {
	pc := PriorityClass(chamberkueue.PriorityTier{Name: "production", Value: 1000})
	if pc.Name != "production" || pc.Value != 1000 || !chamberkueue.Owned(pc) || pc.GlobalDefault {
		t.Errorf("PriorityClass = %s value %d owned %t globalDefault %t, want production 1000 owned, not the default",
			pc.Name, pc.Value, chamberkueue.Owned(pc), pc.GlobalDefault)
	}
}
