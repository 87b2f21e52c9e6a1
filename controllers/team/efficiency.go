package team

import (
	"fmt"
	"math"
	"strconv"
	"sync"

	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
)

// FleetUsage is what the Team controller reads of the fleet model: what each team's
// pods ran up since the model started (fleet.ModelRef).
type FleetUsage interface {
	// Team is the team's usage, every GPU model together; ok is false while there is
	// no model to read.
	Team(team string) (u fleet.Usage, ok bool)
}

// fleetLook is where a team's fleet counters stood when their increase was last
// added to its spend. The status holds whole GPU-seconds and cents; what the counters
// ran up beyond them waits for the next look.
type fleetLook struct {
	idle, used, measured float64 // GPU-seconds
	idleCost             float64 // in the pool's currency
}

// efficiency adds the fleet model's idle, used and measured GPU-seconds and idle cost
// to the teams' spend. The model's counters start at zero with chamber-controller,
// so only their increase since the last look is added, and the looks are kept in
// memory: the first look after a start only takes the baseline, and what the GPUs
// ran up while chamber-controller was down is not counted.
type efficiency struct {
	usage FleetUsage // nil: no fleet model, the fields stay as they are

	mu     sync.Mutex
	looked map[string]fleetLook
}

func newEfficiency(usage FleetUsage) *efficiency {
	return &efficiency{usage: usage, looked: map[string]fleetLook{}}
}

// add adds to the team's spend what its fleet counters ran up since the last look;
// at a new period (newPeriod: account just started it) or a first look it only
// takes the baseline. It returns the look to keep once the status is written, so
// that a write that fails loses nothing; nil when there is nothing to keep.
func (e *efficiency) add(team *chamber.Team, newPeriod bool) (keep func()) {
	s := team.Status.Spend
	if e.usage == nil || s == nil {
		return nil
	}
	u, ok := e.usage.Team(team.Name)
	if !ok {
		return nil
	}
	now := fleetLook{idle: u.IdleGPUSeconds, used: u.UsedGPUSeconds, measured: u.MeasuredGPUSeconds, idleCost: u.IdleCost}
	e.mu.Lock()
	last, seen := e.looked[team.Name]
	e.mu.Unlock()
	if !seen || newPeriod || now.idle < last.idle || now.used < last.used || now.measured < last.measured || now.idleCost < last.idleCost {
		// A baseline: the counters' history before it is not the period's.
		last = now
	}

	next := last
	s.IdleGPUSeconds = addWhole(s.IdleGPUSeconds, now.idle, &next.idle)
	s.UsedGPUSeconds = addWhole(s.UsedGPUSeconds, now.used, &next.used)
	s.MeasuredGPUSeconds = addWhole(s.MeasuredGPUSeconds, now.measured, &next.measured)
	cents := int64(math.Round(parseCost(s.IdleCost) * 100))
	added := int64(math.Floor((now.idleCost-next.idleCost)*100 + roundingSlack))
	next.idleCost += float64(added) / 100
	s.IdleCost = fmt.Sprintf("%d.%02d", (cents+added)/100, (cents+added)%100)
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.looked[team.Name] = next
	}
}

// addWhole adds to the status figure the whole seconds the counter ran up beyond
// *from, and moves *from by as much.
func addWhole(figure *int64, counter float64, from *float64) *int64 {
	added := int64(math.Floor(counter - *from + roundingSlack))
	*from += float64(added)
	return ptr.To(ptr.Deref(figure, 0) + added)
}

// roundingSlack keeps a whole unit the counters ran up, summed in floating point
// (0.02 of a currency as 0.019999...), from being taken for less.
const roundingSlack = 1e-6

// parseCost reads a cost the status holds; an empty or malformed one is 0.
func parseCost(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}
