package fleet

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Snapshot is the fleet at one instant. It shares nothing with the model, so readers
// take their time without holding it up.
type Snapshot struct {
	Time time.Time
	// Since is when the model started: the counters (PoolModels' Seconds, Usage,
	// QueueWaits) count from then.
	Since time.Time
	// GPUs is every GPU, by node and index.
	GPUs []GPU
	// Nodes is every node with GPUs, by name.
	Nodes []NodeSummary
	// PoolModels counts GPUs per pool and model, by pool then model.
	PoolModels []PoolModelSummary
	// Teams is every Team (and "" for GPUs held by pods of no team), by name.
	Teams []TeamSummary
	// Pending counts the workloads waiting in their queues per team and tier.
	Pending []PendingWorkloads
	// QueueWaits are the queue wait histograms per team and tier.
	QueueWaits []QueueWait
	// QueueWaitBuckets are the histograms' upper bounds in seconds.
	QueueWaitBuckets []float64
	// Usage is what each team ran up on each model, by team then model.
	Usage []Usage
	// Handed is what idle reclaim gave to other work, by team, the team it came from,
	// and model.
	Handed []Handed
}

// GPU is one GPU. Empty strings mean unknown or none: no pool, no pod, no team.
type GPU struct {
	Node  string
	Index int
	UUID  string
	// Model is the node's GPU model label (the name pools price), else NVML's name.
	Model  string
	Pool   string
	State  State
	Health chamber.GPUHealth
	// UtilizationPercent is the agent's mean over its window; HasUtilization says
	// whether there is one.
	UtilizationPercent float64
	HasUtilization     bool
	PodNamespace       string
	PodName            string
	Workload           string
	Team               string
	Tier               string
	// IdleSince is when the GPU turned Idle; zero unless it is.
	IdleSince time.Time
	// Faults are the reasons of the GPU's active faults as its agent reports them
	// (XID79, ECCDoubleBit, ...); empty when it reports none.
	Faults []string
}

// NodeSummary is one node's GPUs.
type NodeSummary struct {
	Name  string
	Pool  string
	Model string
	// IsolationReason is "tainted" (chamber.TaintGPUUnhealthy), "cordoned", or "" when the node
	// is not isolated.
	IsolationReason string
	// TakesWork says whether new pods may land on the node: not cordoned nor tainted
	// out of service (kube.Schedulable).
	TakesWork bool
	// Fault is why Chamber isolated the node (its isolation record, e.g. "XID79 on GPU
	// 3", or an operator's words) and IsolatedAt since when; empty and zero when
	// Chamber did not, e.g. a node cordoned by hand.
	Fault      string
	IsolatedAt time.Time
	GPUs       Counts
	// PricePerGPUHour is what an hour of one of its GPUs costs; PriceSource where that
	// comes from (docs/concepts/prices.md): table:<provider>/<instance-type>[/<capacity>]
	// (the shipped table), override:... (the user's), pool:<pool> (the pool's
	// spec.prices), or empty for no price. PriceNote says why the price table did not
	// price the node, when it did not.
	PricePerGPUHour float64
	PriceSource     string
	PriceNote       string
}

// PoolModelSummary is the GPUs of one model in one pool.
type PoolModelSummary struct {
	Pool  string
	Model string
	GPUs  Counts
	// UtilizationSum and UtilizationReported add up the agents' utilization means
	// (percent) of the GPUs that have one.
	UtilizationSum      float64
	UtilizationReported int
	// Seconds is the GPU-seconds spent in each state since the model started.
	Seconds Seconds
}

// Utilization is the mean utilization (0 to 1) of the GPUs reporting one.
func (p PoolModelSummary) Utilization() (float64, bool) {
	if p.UtilizationReported == 0 {
		return 0, false
	}
	return p.UtilizationSum / float64(p.UtilizationReported) / 100, true
}

// TeamSummary is a team's GPUs per model.
type TeamSummary struct {
	Team   string
	Pool   string
	Models []TeamModel
}

// TeamModel is a team's GPUs of one model.
type TeamModel struct {
	Model string
	// Allocated is the GPUs the team's pods hold; Idle is how many of them are Idle.
	Allocated int
	Idle      int
	// Quota is the nominal quota: the ClusterQueue's, else the Team spec's.
	Quota float64
	// Borrowed is the ClusterQueue's usage above its quota, from Kueue.
	Borrowed float64
	// Lent is the part of the unused quota, within the lending limit, that the other
	// queues of the cohort borrow now, as the Team's status reports it. Kueue borrows
	// from the cohort as a whole, so with several lenders each shows the most it can
	// be lending, and the lenders' sum may exceed what is borrowed.
	Lent float64
}

// PendingWorkloads is the number of workloads a team has waiting in one tier, and
// the GPUs they ask for.
type PendingWorkloads struct {
	Team  string
	Tier  string
	Count int
	GPUs  int64
}

// QueueWait is a histogram of the time workloads waited for quota: from creation
// (or their last requeue) to QuotaReserved.
type QueueWait struct {
	Team string
	Tier string
	// Buckets are cumulative counts by upper bound (seconds), as Prometheus has them.
	Buckets map[float64]uint64
	Count   uint64
	Sum     float64
}

// Snapshot brings the counters up to now and copies the fleet out.
func (m *Model) Snapshot() *Snapshot { return m.snapshot(true) }

// Summary is Snapshot without the list of every GPU (GPUs is nil): the nodes, pools,
// teams and queues, what the exporter's default metrics and the dispatcher read. The
// list of every GPU is most of a Snapshot's time and garbage on a large fleet
// (exporter's BenchmarkScrape, default against per-GPU), so Summary costs a fraction
// of it and holds the model's lock that much shorter.
func (m *Model) Summary() *Snapshot { return m.snapshot(false) }

func (m *Model) snapshot(perGPU bool) *Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.accountAll(now)

	s := &Snapshot{Time: now, Since: m.started, QueueWaitBuckets: slices.Clone(m.opts.QueueWaitBuckets)}
	names := slices.Sorted(maps.Keys(m.nodes))
	if perGPU {
		gpuCount := 0
		for _, name := range names {
			gpuCount += len(m.nodes[name].gpus)
		}
		s.GPUs = make([]GPU, 0, gpuCount)
	}
	s.Nodes = make([]NodeSummary, 0, len(names))

	poolModels := map[poolModel]*PoolModelSummary{}
	teams := map[string]*teamAgg{}
	teamOf := func(name string) *teamAgg {
		t := teams[name]
		if t == nil {
			t = &teamAgg{models: map[string]*TeamModel{}}
			teams[name] = t
		}
		return t
	}
	for key, sec := range m.stateSeconds {
		poolModels[key] = &PoolModelSummary{Pool: key.pool, Model: key.model, Seconds: *sec}
	}

	for _, name := range names {
		n := m.nodes[name]
		if len(n.gpus) == 0 {
			continue
		}
		ns := NodeSummary{Name: n.name, Pool: n.pool, Model: n.model, Fault: n.fault, IsolatedAt: n.isolatedAt, TakesWork: n.takesWork,
			PricePerGPUHour: n.price.PerGPUHour, PriceSource: n.price.Source, PriceNote: n.priceNote}
		switch {
		case n.tainted:
			ns.IsolationReason = "tainted"
		case n.cordoned:
			ns.IsolationReason = "cordoned"
		}
		pm := poolModels[poolModel{n.pool, n.model}]
		if pm == nil {
			pm = &PoolModelSummary{Pool: n.pool, Model: n.model}
			poolModels[poolModel{n.pool, n.model}] = pm
		}
		// A pod's GPUs are usually side by side: resolve it once.
		var last *pod
		var holder GPU
		var tm *TeamModel
		for i := range n.gpus {
			g := &n.gpus[i]
			r := n.reportOf(i)
			state := m.state(n, i, now)
			ns.GPUs[state]++
			if r.hasUtil {
				pm.UtilizationSum += r.util
				pm.UtilizationReported++
			}
			if p := g.holder; p != nil {
				if p != last {
					last, holder = p, GPU{PodNamespace: p.key.namespace, PodName: p.key.name, Team: m.podTeam(p)}
					if w := m.workloadOf(p); w != nil {
						holder.Workload, holder.Tier = w.key.name, w.tier
					}
					tm = teamOf(holder.Team).model(n.model)
				}
				tm.Allocated++
				if state == Idle {
					tm.Idle++
				}
			}
			if !perGPU {
				continue
			}
			out := GPU{
				Node: n.name, Index: i, UUID: r.uuid, Model: n.model, Pool: n.pool,
				State: state, Health: r.health,
				UtilizationPercent: r.util, HasUtilization: r.hasUtil, Faults: slices.Clone(r.faults),
			}
			if out.Health == "" {
				out.Health = chamber.GPUUnknown
			}
			if state == Idle {
				out.IdleSince, _ = m.idleSpan(n, g)
			}
			if g.holder != nil {
				out.PodNamespace, out.PodName, out.Workload, out.Team, out.Tier =
					holder.PodNamespace, holder.PodName, holder.Workload, holder.Team, holder.Tier
			}
			s.GPUs = append(s.GPUs, out)
		}
		pm.GPUs.add(ns.GPUs)
		s.Nodes = append(s.Nodes, ns)
	}
	for _, pm := range poolModels {
		s.PoolModels = append(s.PoolModels, *pm)
	}
	slices.SortFunc(s.PoolModels, func(a, b PoolModelSummary) int {
		return cmp.Or(strings.Compare(a.Pool, b.Pool), strings.Compare(a.Model, b.Model))
	})

	m.teamQuotas(teamOf)
	for name, t := range teams {
		if name == "" && len(t.models) == 0 {
			continue
		}
		ts := TeamSummary{Team: name}
		if def := m.teams[name]; def != nil {
			ts.Pool = def.pool
		}
		for _, tm := range t.models {
			ts.Models = append(ts.Models, *tm)
		}
		slices.SortFunc(ts.Models, func(a, b TeamModel) int { return strings.Compare(a.Model, b.Model) })
		s.Teams = append(s.Teams, ts)
	}
	slices.SortFunc(s.Teams, func(a, b TeamSummary) int { return strings.Compare(a.Team, b.Team) })

	s.Pending = m.pending()
	s.QueueWaits = m.queueWaits()
	for _, u := range m.usage {
		s.Usage = append(s.Usage, *u)
	}
	slices.SortFunc(s.Usage, func(a, b Usage) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), strings.Compare(a.Model, b.Model))
	})
	s.Handed = m.handedList()
	return s
}

type teamAgg struct{ models map[string]*TeamModel }

func (t *teamAgg) model(name string) *TeamModel {
	tm := t.models[name]
	if tm == nil {
		tm = &TeamModel{Model: name}
		t.models[name] = tm
	}
	return tm
}

// teamQuotas fills in each team's quota, borrowed and lent GPUs from its ClusterQueue,
// or for a team of a Volcano pool from its pods against its quota.
// Lent is computed as the Team controller's status has it: the unused quota, within
// the lending limit, that the cohort's other queues are borrowing.
func (m *Model) teamQuotas(teamOf func(string) *teamAgg) {
	type cohortFlavor struct{ cohort, flavor string }
	borrowed := map[cohortFlavor]float64{}
	for _, cq := range m.queues {
		if cq.cohort == "" {
			continue
		}
		for flavor, u := range cq.usage {
			borrowed[cohortFlavor{cq.cohort, flavor}] += u.borrowed
		}
	}

	// A Volcano team borrows what its pods hold beyond its quota (its Queue's
	// deserved), from the teams of its pool that hold less than theirs.
	type poolModel struct{ pool, model string }
	volcanoBorrowed := map[poolModel]float64{}
	volcanoTeam := func(t *team) bool {
		p := m.pools[t.pool]
		return p != nil && p.volcano && m.queues[t.clusterQueue] == nil
	}
	for _, t := range m.teams {
		if volcanoTeam(t) {
			for model, q := range t.quotas {
				volcanoBorrowed[poolModel{t.pool, model}] += max(0, float64(teamOf(t.name).model(model).Allocated)-q)
			}
		}
	}

	for _, t := range m.teams {
		agg := teamOf(t.name)
		cq := m.queues[t.clusterQueue]
		if cq == nil {
			for model, q := range t.quotas {
				tm := agg.model(model)
				tm.Quota = q
				if !volcanoTeam(t) {
					continue
				}
				allocated := float64(tm.Allocated)
				tm.Borrowed = max(0, allocated-q)
				lendable := max(0, q-allocated)
				if limit, ok := t.lending[model]; ok {
					lendable = min(lendable, limit)
				}
				tm.Lent = min(lendable, volcanoBorrowed[poolModel{t.pool, model}])
			}
			continue
		}
		for flavor, q := range cq.quotas {
			tm := agg.model(m.modelOfFlavor(flavor))
			tm.Quota += q.nominal
			tm.Borrowed += cq.usage[flavor].borrowed
			if cq.cohort == "" {
				continue
			}
			use := cq.usage[flavor]
			lendable := max(0, q.nominal-use.total)
			if q.lendingLimit >= 0 {
				lendable = min(lendable, q.lendingLimit)
			}
			tm.Lent += min(lendable, borrowed[cohortFlavor{cq.cohort, flavor}]-use.borrowed)
		}
	}
}

func (m *Model) pending() []PendingWorkloads {
	counts := map[teamTier]PendingWorkloads{}
	for _, w := range m.workloads {
		if w.pending {
			key := teamTier{m.workloadTeam(w), w.tier}
			c := counts[key]
			c.Count++
			c.GPUs += w.gpus
			counts[key] = c
		}
	}
	// Every team shows every tier in use, zeros included, so a queue that drains
	// reads 0 rather than vanishing.
	for t := range m.teams {
		for tier := range m.tiers {
			if _, ok := counts[teamTier{t, tier}]; !ok {
				counts[teamTier{t, tier}] = PendingWorkloads{}
			}
		}
	}
	out := make([]PendingWorkloads, 0, len(counts))
	for k, c := range counts {
		c.Team, c.Tier = k.team, k.tier
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b PendingWorkloads) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), strings.Compare(a.Tier, b.Tier))
	})
	return out
}

func (m *Model) queueWaits() []QueueWait {
	out := make([]QueueWait, 0, len(m.waits))
	for k, h := range m.waits {
		qw := QueueWait{Team: k.team, Tier: k.tier, Count: h.count, Sum: h.sum, Buckets: make(map[float64]uint64, len(m.opts.QueueWaitBuckets))}
		var cum uint64
		for i, bound := range m.opts.QueueWaitBuckets {
			cum += h.counts[i]
			qw.Buckets[bound] = cum
		}
		out = append(out, qw)
	}
	slices.SortFunc(out, func(a, b QueueWait) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), strings.Compare(a.Tier, b.Tier))
	})
	return out
}

// Efficiency is the cluster efficiency score: busy GPUs over healthy GPUs (free, busy
// and idle; unhealthy and isolated ones can do no work, so they do not count against
// it). A GPU is busy only when a pod holds it and its utilization over the idle
// window is at or above the threshold, so the score is the share of usable GPUs
// doing real work. ok is false when no GPU is healthy.
func (s *Snapshot) Efficiency() (score float64, ok bool) {
	var c Counts
	for _, pm := range s.PoolModels {
		c.add(pm.GPUs)
	}
	if c.Healthy() == 0 {
		return 0, false
	}
	return float64(c[Busy]) / float64(c.Healthy()), true
}

// CountsByPool adds up the GPUs per pool.
func (s *Snapshot) CountsByPool() map[string]Counts {
	out := map[string]Counts{}
	for _, pm := range s.PoolModels {
		c := out[pm.Pool]
		c.add(pm.GPUs)
		out[pm.Pool] = c
	}
	return out
}

// CountsByModel adds up the GPUs per model.
func (s *Snapshot) CountsByModel() map[string]Counts {
	out := map[string]Counts{}
	for _, pm := range s.PoolModels {
		c := out[pm.Model]
		c.add(pm.GPUs)
		out[pm.Model] = c
	}
	return out
}
