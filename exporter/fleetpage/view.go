package fleetpage

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	"chamber.dev/chamber/fleet"
)

// View is the fleet as the page shows it: the body of Path+"data". Every figure is
// the fleet model's; the page computes none of its own.
type View struct {
	Time time.Time `json:"time"`
	// Since is when the leader's fleet model started: GPU-hours, cost and queue
	// waits count from then.
	Since          time.Time `json:"since"`
	RefreshSeconds float64   `json:"refreshSeconds"`
	// GPUs counts the fleet's GPUs by state.
	GPUs StateCounts `json:"gpus"`
	// Efficiency is busy GPUs over healthy ones (fleet.Snapshot.Efficiency); absent
	// when no GPU is healthy.
	Efficiency *float64 `json:"efficiency,omitempty"`
	// IdleCostPerHour is what the idle GPUs cost an hour at their nodes' prices.
	IdleCostPerHour float64 `json:"idleCostPerHour"`
	Nodes           []Node  `json:"nodes"`
	Teams           []Team  `json:"teams"`
	Queue           []Queue `json:"queue"`
}

// StateCounts is a number of GPUs per state name (free, busy, idle, unhealthy,
// isolated), every state present.
type StateCounts map[string]int

func stateCounts(c fleet.Counts) StateCounts {
	out := make(StateCounts, len(fleet.States))
	for _, s := range fleet.States {
		out[s.String()] = c[s]
	}
	return out
}

// Node is one node and its GPUs.
type Node struct {
	Name  string `json:"name"`
	Pool  string `json:"pool,omitempty"`
	Model string `json:"model,omitempty"`
	// Isolation is how the node is out of service: "tainted" (Chamber's taint) or
	// "cordoned"; empty when it is in service.
	Isolation string `json:"isolation,omitempty"`
	// Fault is why Chamber isolated it, from its isolation record; IsolatedAt since
	// when.
	Fault      string      `json:"fault,omitempty"`
	IsolatedAt *time.Time  `json:"isolatedAt,omitempty"`
	GPUs       StateCounts `json:"gpus"`
	GPUList    []GPU       `json:"gpuList"`
}

// GPU is one GPU's cell.
type GPU struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid,omitempty"`
	State  string `json:"state"`
	Health string `json:"health"`
	// UtilizationPercent is the agent's mean over its window; absent without one.
	UtilizationPercent *float64 `json:"utilizationPercent,omitempty"`
	// Pod is the holder, namespace/name.
	Pod       string     `json:"pod,omitempty"`
	Workload  string     `json:"workload,omitempty"`
	Team      string     `json:"team,omitempty"`
	Tier      string     `json:"tier,omitempty"`
	IdleSince *time.Time `json:"idleSince,omitempty"`
	Faults    []string   `json:"faults,omitempty"`
}

// Team is a team's GPUs of one model ("" is pods of no team): held now, their
// idle part, quota, and what they ran up since the model started.
type Team struct {
	Team     string  `json:"team"`
	Model    string  `json:"model"`
	Pool     string  `json:"pool,omitempty"`
	GPUs     int     `json:"gpus"`
	Idle     int     `json:"idle"`
	Quota    float64 `json:"quota"`
	Borrowed float64 `json:"borrowed"`
	Lent     float64 `json:"lent"`
	// IdleCostPerHour is what the team's idle GPUs cost an hour now.
	IdleCostPerHour float64 `json:"idleCostPerHour"`
	GPUHours        float64 `json:"gpuHours"`
	IdleGPUHours    float64 `json:"idleGPUHours"`
	// Efficiency is 1 - IdleGPUHours / GPUHours, MeanUtilization the used over the
	// measured GPU-seconds, both 0 to 1 (docs/concepts/efficiency.md); nil without
	// GPU-hours, or without a utilization report.
	Efficiency      *float64 `json:"efficiency,omitempty"`
	MeanUtilization *float64 `json:"meanUtilization,omitempty"`
	Cost            float64  `json:"cost"`
	IdleCost        float64  `json:"idleCost"`
}

// Queue is a team's workloads of one priority tier waiting for quota and the GPUs
// they ask for, and the wait of those admitted since the model started.
type Queue struct {
	Team    string `json:"team"`
	Tier    string `json:"tier"`
	Pending int    `json:"pending"`
	// PendingGPUs is the GPUs the waiting workloads ask for.
	PendingGPUs int64 `json:"pendingGPUs"`
	// Admitted is how many got quota; MeanWaitSeconds their mean wait.
	Admitted        uint64  `json:"admitted"`
	MeanWaitSeconds float64 `json:"meanWaitSeconds"`
}

// Build makes the page's view of a snapshot.
func Build(s *fleet.Snapshot) View {
	v := View{Time: s.Time, Since: s.Since, Nodes: make([]Node, 0, len(s.Nodes))}
	if e, ok := s.Efficiency(); ok {
		v.Efficiency = &e
	}
	var total fleet.Counts
	byNode := make(map[string]int, len(s.Nodes))
	price := make([]float64, len(s.Nodes)) // a GPU-hour's, by v.Nodes' index
	for _, n := range s.Nodes {
		byNode[n.Name] = len(v.Nodes)
		price[len(v.Nodes)] = n.PricePerGPUHour
		for _, st := range fleet.States {
			total[st] += n.GPUs[st]
		}
		node := Node{Name: n.Name, Pool: n.Pool, Model: n.Model, Isolation: n.IsolationReason, Fault: n.Fault,
			IsolatedAt: timeOrNil(n.IsolatedAt), GPUs: stateCounts(n.GPUs), GPUList: make([]GPU, 0, n.GPUs.Total())}
		v.Nodes = append(v.Nodes, node)
	}
	v.GPUs = stateCounts(total)

	teams := newTable(func(team, model string) Team { return Team{Team: team, Model: model} })
	for _, g := range s.GPUs {
		i, ok := byNode[g.Node]
		if !ok {
			continue
		}
		out := GPU{Index: g.Index, UUID: g.UUID, State: g.State.String(), Health: string(g.Health), Workload: g.Workload,
			Team: g.Team, Tier: g.Tier, IdleSince: timeOrNil(g.IdleSince), Faults: g.Faults}
		if g.HasUtilization {
			u := g.UtilizationPercent
			out.UtilizationPercent = &u
		}
		if g.PodName != "" {
			out.Pod = g.PodNamespace + "/" + g.PodName
		}
		if g.State == fleet.Idle { // held by a pod, so by a team or by none
			p := price[i]
			v.IdleCostPerHour += p
			teams.row(g.Team, g.Model).IdleCostPerHour += p
		}
		v.Nodes[i].GPUList = append(v.Nodes[i].GPUList, out)
	}

	for _, ts := range s.Teams {
		for _, m := range ts.Models {
			t := teams.row(ts.Team, m.Model)
			t.Pool = ts.Pool
			t.GPUs, t.Idle, t.Quota, t.Borrowed, t.Lent = m.Allocated, m.Idle, m.Quota, m.Borrowed, m.Lent
		}
	}
	for _, u := range s.Usage {
		t := teams.row(u.Team, u.Model)
		t.GPUHours, t.IdleGPUHours = u.GPUSeconds/3600, u.IdleGPUSeconds/3600
		t.Cost, t.IdleCost = u.Cost, u.IdleCost
		if u.GPUSeconds > 0 {
			t.Efficiency = ptr.To(1 - u.IdleGPUSeconds/u.GPUSeconds)
		}
		if pct, ok := u.MeanUtilizationPercent(); ok {
			t.MeanUtilization = ptr.To(pct / 100)
		}
	}
	v.Teams = teams.sorted()

	queues := newTable(func(team, tier string) Queue { return Queue{Team: team, Tier: tier} })
	for _, p := range s.Pending {
		q := queues.row(p.Team, p.Tier)
		q.Pending, q.PendingGPUs = p.Count, p.GPUs
	}
	for _, w := range s.QueueWaits {
		q := queues.row(w.Team, w.Tier)
		q.Admitted = w.Count
		if w.Count > 0 {
			q.MeanWaitSeconds = w.Sum / float64(w.Count)
		}
	}
	v.Queue = queues.sorted()
	return v
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// table is the rows of a table by their two keys (team and model, team and tier),
// made by fresh on first use.
type table[T any] struct {
	rows  map[[2]string]*T
	fresh func(a, b string) T
}

func newTable[T any](fresh func(a, b string) T) *table[T] {
	return &table[T]{rows: map[[2]string]*T{}, fresh: fresh}
}

func (t *table[T]) row(a, b string) *T {
	k := [2]string{a, b}
	r := t.rows[k]
	if r == nil {
		v := t.fresh(a, b)
		r = &v
		t.rows[k] = r
	}
	return r
}

// sorted is the rows in the order of their keys.
func (t *table[T]) sorted() []T {
	keys := slices.SortedFunc(maps.Keys(t.rows), func(x, y [2]string) int {
		return cmp.Or(strings.Compare(x[0], y[0]), strings.Compare(x[1], y[1]))
	})
	out := make([]T, 0, len(keys))
	for _, k := range keys {
		out = append(out, *t.rows[k])
	}
	return out
}
