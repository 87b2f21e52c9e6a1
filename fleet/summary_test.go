package fleet_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
)

// Summary is Snapshot without the list of GPUs: every node, pool, team and queue
// figure the same, from the same model at the same time.
func TestSummaryIsTheSnapshotWithoutGPUs(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := fleet.New(fleet.Options{Clock: clock})
	ft.Synthetic(40, 400, start).Feed(m)
	clock.Step(20 * time.Minute)
	snap, sum := m.Snapshot(), m.Summary()
	if len(snap.GPUs) != 320 || sum.GPUs != nil {
		t.Fatalf("Snapshot has %d GPUs, Summary %d: want 320 and none", len(snap.GPUs), len(sum.GPUs))
	}
	if len(snap.Teams) == 0 || len(snap.Nodes) != 40 {
		t.Fatalf("the fleet has %d teams and %d nodes: want some teams and 40 nodes", len(snap.Teams), len(snap.Nodes))
	}
	snap.GPUs = nil
	if diff := cmp.Diff(snap, sum); diff != "" {
		t.Errorf("Summary differs from Snapshot (-snapshot +summary):\n%s", diff)
	}
}
