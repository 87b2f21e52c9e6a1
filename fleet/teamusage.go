package fleet

import "sync/atomic"

// TeamUsage is what the team's pods ran up on every GPU model together since the
// model started (Model empty); ok is false when they ran up nothing.
func (m *Model) TeamUsage(team string) (u Usage, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accountAll(m.clock.Now())
	u.Team = team
	for key, mu := range m.usage {
		if key.team != team {
			continue
		}
		ok = true
		u.GPUSeconds += mu.GPUSeconds
		u.IdleGPUSeconds += mu.IdleGPUSeconds
		u.UsedGPUSeconds += mu.UsedGPUSeconds
		u.MeasuredGPUSeconds += mu.MeasuredGPUSeconds
		u.Cost += mu.Cost
		u.IdleCost += mu.IdleCost
	}
	return u, ok
}

// TeamUsages is a read-only view of the teams' usage in the fleet model of the
// cluster Chamber runs in, for a controller set up before the model exists: the
// inventory Sets its model, the Team controller reads it. Safe for concurrent use;
// the zero value holds no model.
type TeamUsages struct {
	model atomic.Pointer[Model]
}

// Set records the model.
func (v *TeamUsages) Set(m *Model) { v.model.Store(m) }

// Team is what the team's pods ran up since the model started (Model.TeamUsage,
// zero when they ran up nothing); ok is false without a model, and before its
// watches have synced.
func (v *TeamUsages) Team(team string) (u Usage, ok bool) {
	m := v.model.Load()
	if m == nil || !m.Synced() {
		return Usage{Team: team}, false
	}
	u, _ = m.TeamUsage(team)
	return u, true
}
