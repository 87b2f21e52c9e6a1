package fleet_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	chamber "chamber.dev/chamber/api/v1alpha1"

	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
)

// A team's usage adds up its models'; the view reads nothing before the model is set
// and synced.
func TestTeamUsage(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	m.SetPool(ft.MakePool("main", nil, map[string]string{ft.H100: "3.6", ft.A100: "1.8"})) // 0.001 and 0.0005 per GPU-second
	m.SetTeam(ft.MakeTeam("vision", "main", start, "vision"))
	m.SetNode(ft.MakeNode("n1", 2).Obj())
	m.SetNode(ft.MakeNode("n2", 2).Label(chamber.DefaultProductLabel, ft.A100).Obj())
	m.SetPod(ft.MakePod("vision", "a", 2).On("n1", start).Obj())
	m.SetPod(ft.MakePod("vision", "b", 1).On("n2", start).Obj())
	m.SetGPUNode(ft.MakeGPUNode("n1", 2).UtilAll(0, 0).Obj())
	m.SetGPUNode(ft.MakeGPUNode("n2", 2).UtilAll(50, 0).Obj())

	var view fleet.ModelRef
	if _, ok := view.Team("vision"); ok {
		t.Error("a view without a model has usage")
	}
	view.Set(m)
	if _, ok := view.Team("vision"); ok {
		t.Error("a view of a model not synced has usage")
	}
	m.SetSynced(true)
	clock.Step(10 * time.Minute) // n1's GPUs turned idle at 5m

	want := fleet.Usage{Team: "vision",
		GPUSeconds: 2*600 + 600, IdleGPUSeconds: 2 * 300, UsedGPUSeconds: 0.5 * 600, MeasuredGPUSeconds: 2*600 + 600,
		Cost: 2*600*0.001 + 600*0.0005, IdleCost: 2 * 300 * 0.001}
	got, ok := view.Team("vision")
	if diff := cmp.Diff(want, got, approx); !ok || diff != "" {
		t.Errorf("team usage (-want +got), ok %v:\n%s", ok, diff)
	}
	if got, ok := view.Team("nobody"); !ok || got != (fleet.Usage{Team: "nobody"}) {
		t.Errorf("a team with no pods: got %+v, %v; want zero usage, ok", got, ok)
	}
}
