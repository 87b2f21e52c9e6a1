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

// ModelRef is a read-only view of the fleet model of the cluster Chamber runs in, for
// the controllers set up before the model exists: the inventory Sets its model, the
// Team controller reads the teams' usage and the history's recorder each finished
// workload's. Safe for concurrent use; the zero value holds no model.
type ModelRef struct {
	model atomic.Pointer[Model]
}

// Set records the model.
func (v *ModelRef) Set(m *Model) { v.model.Store(m) }

// Team is what the team's pods ran up since the model started (Model.TeamUsage,
// zero when they ran up nothing); ok is false without a model, and before its
// watches have synced.
func (v *ModelRef) Team(team string) (u Usage, ok bool) {
	m := v.model.Load()
	if m == nil || !m.Synced() {
		return Usage{Team: team}, false
	}
	u, _ = m.TeamUsage(team)
	return u, true
}

// Workload is what the workload's pods ran up (Model.WorkloadUsage); ok is false
// without a model, or where the model does not hold the workload.
func (v *ModelRef) Workload(namespace, name string) (u WorkloadUsage, ok bool) {
	m := v.model.Load()
	if m == nil {
		return WorkloadUsage{}, false
	}
	return m.WorkloadUsage(namespace, name)
}
