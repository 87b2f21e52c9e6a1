package team

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
)

// efficiencyFigures are the fields of a spend that efficiency adds.
type efficiencyFigures struct {
	Idle, Used, Measured *int64
	IdleCost             string
}

func figures(s *chamber.TeamSpend) efficiencyFigures {
	return efficiencyFigures{s.IdleGPUSeconds, s.UsedGPUSeconds, s.MeasuredGPUSeconds, s.IdleCost}
}

// The team's spend gets what the fleet model's counters ran up since the last look,
// in whole seconds and cents, the remainders carried; the first look after a start,
// and the first of a period, only take the baseline; a look whose status write
// failed is taken again.
func TestEfficiency(t *testing.T) {
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakeClock(start)
	// Idle under 5% for 5 minutes.
	m := fleet.New(fleet.Options{IdleThresholdPercent: 5, IdleWindow: 5 * time.Minute, Clock: clock})
	m.SetPool(ft.MakePool("main", nil, map[string]string{ft.H100: "3.60"})) // 0.001 per GPU-second
	m.SetTeam(ft.MakeTeam("vision", "main", start, "vision"))
	m.SetNode(ft.MakeNode("n1", 4).Obj())
	// Two GPUs at 1% (idle from 5 minutes on), two at 60%.
	m.SetPod(ft.MakePod("vision", "a", 4).On("n1", start).Obj())
	m.SetGPUNode(ft.MakeGPUNode("n1", 4).Util(0, 1, 0).Util(1, 1, 0).Util(2, 60, 0).Util(3, 60, 0).Obj())
	var view fleet.ModelRef
	view.Set(m)

	team := &chamber.Team{}
	team.Name = "vision"
	team.Status.Spend = &chamber.TeamSpend{GPUSeconds: 4 * 3600, Cost: "14.40"}
	look := func(e *efficiency, newPeriod, written bool) efficiencyFigures {
		t.Helper()
		if keep := e.add(team, newPeriod); keep != nil && written {
			keep()
		}
		return figures(team.Status.Spend)
	}
	check := func(what string, got, want efficiencyFigures) {
		t.Helper()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}

	e := newEfficiency(&view)
	check("before the model has synced", look(e, false, true), efficiencyFigures{})
	m.SetSynced(true)
	clock.Step(time.Hour)
	check("the first look takes the baseline", look(e, false, true), efficiencyFigures{ptr.To[int64](0), ptr.To[int64](0), ptr.To[int64](0), "0.00"})

	// 10 minutes and a half: 4 GPUs measured for 630 s, 2 of them at 60% and 2 at
	// 1%, the 1% ones idle throughout (their 5 minutes passed long ago).
	clock.Step(630*time.Second + 500*time.Millisecond)
	// Measured 4 x 630.5 = 2522 s; used (2 x 0.6 + 2 x 0.01) x 630.5 = 769.21 s; idle
	// 2 x 630.5 = 1261 s, at 0.001: 1.261.
	want := efficiencyFigures{ptr.To[int64](1261), ptr.To[int64](769), ptr.To[int64](2522), "1.26"}
	check("what the counters ran up", look(e, false, true), want)

	// Another second carries the used seconds' remainder: 0.21 + 1.22 makes one more
	// than the 1.22 alone; the idle cost's 0.001 + 0.002 makes no cent yet.
	clock.Step(time.Second)
	want = efficiencyFigures{ptr.To[int64](1263), ptr.To[int64](770), ptr.To[int64](2526), "1.26"}
	check("the remainders carried", look(e, false, true), want)

	// A failed write: the status stays as it was, and the next look adds from the
	// last kept one.
	clock.Step(100 * time.Second)
	before := *team.Status.Spend
	look(e, false, false)
	team.Status.Spend = &before
	clock.Step(100 * time.Second)
	// 200 s: idle 400, used 0.43 + 244, measured 800, idle cost 0.003 + 0.4.
	want = efficiencyFigures{ptr.To[int64](1263 + 400), ptr.To[int64](770 + 244), ptr.To[int64](2526 + 800), "1.66"}
	check("after a failed write", look(e, false, true), want)

	// A restart forgets the looks: the first look after it takes the baseline, and the
	// hour before it is not counted.
	clock.Step(time.Hour)
	check("a restart's first look", look(newEfficiency(&view), false, true), want)

	// A new period: account reset the spend; the baseline is taken again.
	team.Status.Spend = &chamber.TeamSpend{Cost: "0.00"}
	clock.Step(time.Minute)
	check("a new period", look(e, true, true), efficiencyFigures{ptr.To[int64](0), ptr.To[int64](0), ptr.To[int64](0), "0.00"})
	clock.Step(10 * time.Second)
	check("within the new period", look(e, false, true), efficiencyFigures{ptr.To[int64](20), ptr.To[int64](12), ptr.To[int64](40), "0.02"})

	// Without a model the figures stay absent.
	team.Status.Spend = &chamber.TeamSpend{Cost: "0.00"}
	check("no model", look(newEfficiency(nil), false, true), efficiencyFigures{})
	check("no model in the view", look(newEfficiency(&fleet.ModelRef{}), false, true), efficiencyFigures{})
}
