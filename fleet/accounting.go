package fleet

import (
	"sort"
	"time"
)

// Usage is what a team's pods ran up on one GPU model since the model started.
type Usage struct {
	Team  string
	Model string
	// GPUSeconds is the time GPUs were held, in any state.
	GPUSeconds float64
	// IdleGPUSeconds is the part of it the GPUs were Idle.
	IdleGPUSeconds float64
	// UsedGPUSeconds is GPUSeconds weighted by the GPUs' utilization: a GPU-second at
	// 40% utilization adds 0.4. Only MeasuredGPUSeconds add to it.
	UsedGPUSeconds float64
	// MeasuredGPUSeconds is the part of GPUSeconds with a utilization report: the
	// mean utilization is UsedGPUSeconds / MeasuredGPUSeconds.
	MeasuredGPUSeconds float64
	// Cost is GPUSeconds at the pool's price of the model, in the pool's currency.
	Cost float64
	// IdleCost is IdleGPUSeconds at that price.
	IdleCost float64
}

// WorkloadUsage is what one workload's pods ran up since the model started, kept
// until its Workload is deleted. Its fields mean what Usage's do.
type WorkloadUsage struct {
	Namespace, Name    string
	GPUSeconds         float64
	IdleGPUSeconds     float64
	UsedGPUSeconds     float64
	MeasuredGPUSeconds float64
	Cost               float64
	IdleCost           float64
}

// MeanUtilizationPercent is the utilization-weighted mean over the measured
// GPU-seconds; ok is false when none were measured.
func (u WorkloadUsage) MeanUtilizationPercent() (percent float64, ok bool) {
	return meanPercent(u.UsedGPUSeconds, u.MeasuredGPUSeconds)
}

// MeanUtilizationPercent is the utilization-weighted mean over the measured
// GPU-seconds; ok is false when none were measured.
func (u Usage) MeanUtilizationPercent() (percent float64, ok bool) {
	return meanPercent(u.UsedGPUSeconds, u.MeasuredGPUSeconds)
}

func meanPercent(used, measured float64) (float64, bool) {
	if measured <= 0 {
		return 0, false
	}
	return 100 * used / measured, true
}

// WorkloadUsage is what the pods of the Workload namespace/name ran up, while the
// model holds the Workload; ok is false for a Workload it does not hold.
func (m *Model) WorkloadUsage(namespace, name string) (u WorkloadUsage, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.workloads[objKey{namespace, name}]
	if w == nil {
		return WorkloadUsage{}, false
	}
	m.accountAll(m.clock.Now())
	u = w.usage
	u.Namespace, u.Name = namespace, name
	return u, true
}

// accountAll brings every GPU's counters up to now: before a change that alters
// whose GPUs are whose, or what they cost, and before every snapshot.
func (m *Model) accountAll(now time.Time) {
	for _, n := range m.nodes {
		m.accountNode(n, now)
	}
}

func (m *Model) accountNode(n *node, now time.Time) {
	if len(n.gpus) == 0 {
		return
	}
	a := nodeAccount{
		seconds:   m.stateSeconds[poolModel{n.pool, n.model}],
		perSecond: n.price.PerGPUHour / 3600,
	}
	if a.seconds == nil {
		a.seconds = &Seconds{}
		m.stateSeconds[poolModel{n.pool, n.model}] = a.seconds
	}
	for i := range n.gpus {
		m.account(n, i, now, &a)
	}
}

// nodeAccount holds what the GPUs of one node share while they are accounted: a
// pod's GPUs are usually side by side, so its usage entry is looked up once.
type nodeAccount struct {
	seconds   *Seconds
	perSecond float64
	holder    *pod
	usage     *Usage
	workload  *workload // the holder's; nil for a pod of no Workload
}

// account adds a GPU's time since it was last accounted to the counters. Between two
// calls its inputs did not change (every change accounts first), so its state over
// the span is known exactly: constant, except that a held GPU below the threshold is
// Idle from lowSince + IdleWindow until its agent's report goes stale.
func (m *Model) account(n *node, i int, now time.Time, a *nodeAccount) {
	g := &n.gpus[i]
	if !now.After(g.accounted) {
		return
	}
	from := g.accounted
	g.accounted = now
	total := now.Sub(from).Seconds()

	state := m.baseState(n, i)
	idle := 0.0
	if idleFrom, idleUntil := m.idleSpan(n, g); state == Busy && !idleFrom.IsZero() {
		if idleFrom.Before(from) {
			idleFrom = from
		}
		if idleUntil.IsZero() || idleUntil.After(now) {
			idleUntil = now
		}
		idle = max(0, idleUntil.Sub(idleFrom).Seconds())
	}

	// The utilization report holds for the span until it goes stale.
	measured, used := 0.0, 0.0
	if r := n.reportOf(i); r.hasUtil && g.holder != nil {
		until := now
		if !n.reportStale.IsZero() && n.reportStale.Before(until) {
			until = n.reportStale
		}
		measured = max(0, until.Sub(from).Seconds())
		used = measured * min(max(r.util, 0), 100) / 100
	}

	sec := a.seconds
	if state == Busy {
		sec[Busy] += total - idle
		sec[Idle] += idle
	} else {
		sec[state] += total
	}

	if g.holder == nil {
		return
	}
	if a.holder != g.holder {
		tm := teamModel{m.podTeam(g.holder), n.model}
		a.holder, a.usage, a.workload = g.holder, m.usage[tm], m.workloadOf(g.holder)
		if a.usage == nil {
			a.usage = &Usage{Team: tm.team, Model: tm.model}
			m.usage[tm] = a.usage
		}
	}
	u := a.usage
	u.GPUSeconds += total
	u.IdleGPUSeconds += idle
	u.UsedGPUSeconds += used
	u.MeasuredGPUSeconds += measured
	u.Cost += total * a.perSecond
	u.IdleCost += idle * a.perSecond
	if h := g.handedFrom; h != nil && a.workload != h {
		e := m.handedEntry(handedKey{u.Team, m.workloadTeam(h), n.model})
		e.GPUSeconds += total
		e.Cost += total * a.perSecond
	}
	if w := a.workload; w != nil {
		wu := &w.usage
		wu.GPUSeconds += total
		wu.IdleGPUSeconds += idle
		wu.UsedGPUSeconds += used
		wu.MeasuredGPUSeconds += measured
		wu.Cost += total * a.perSecond
		wu.IdleCost += idle * a.perSecond
	}
}

// waitHistogram counts queue waits; counts are per bucket, not cumulative.
type waitHistogram struct {
	counts []uint64 // len(bounds)+1: the last is above every bound
	count  uint64
	sum    float64
}

func (m *Model) observeWait(key teamTier, wait time.Duration) {
	h := m.waits[key]
	if h == nil {
		h = &waitHistogram{counts: make([]uint64, len(m.opts.QueueWaitBuckets)+1)}
		m.waits[key] = h
	}
	s := max(wait.Seconds(), 0)
	h.counts[sort.SearchFloat64s(m.opts.QueueWaitBuckets, s)]++
	h.count++
	h.sum += s
}
