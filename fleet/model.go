// Package fleet is Chamber's in-memory model of the GPU fleet: every GPU with its
// node, model, pool and state (free, busy, idle, unhealthy, isolated) and the pod,
// workload, team and priority tier holding it, with aggregates per node, model, pool
// and team and the GPU-seconds and cost each team ran up.
//
// The model is fed one object at a time (Set* and Delete* take the objects the API
// server already has: Nodes, Pods, GPUNodes, Kueue Workloads, ClusterQueues and
// LocalQueues, Volcano PodGroups, GPUPools, Teams) and never lists anything itself:
// the inventory feeds it from the manager's informers, kubectl-chamber from one list
// of each. Readers take a Snapshot, or a Summary without the per-GPU list: the
// exporter on every scrape, the fleet page, kubectl-chamber, and the MultiKueue
// dispatcher (a worker cluster's model, through Workers). The controllers that act on
// workloads (admission, isolation, idle reclaim, room) read the API objects, not the
// model. Time comes from a k8s.io/utils clock, so tests step it.
package fleet

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet/prices"
)

// Defaults of Options.
const (
	DefaultIdleThresholdPercent = 5.0
	// DefaultIdleWindow matches the node agent's default utilization window, so one
	// report below the threshold, held for as long as the pod held the GPU, is enough.
	DefaultIdleWindow = 5 * time.Minute
)

// DefaultQueueWaitBuckets are the upper bounds, in seconds, of the queue wait
// histogram: a second to a day.
var DefaultQueueWaitBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

// Options configure the model.
type Options struct {
	// IdleThresholdPercent: a held GPU whose mean utilization (GPUNode
	// status.gpus[].utilization.gpuPercent) stays below it for IdleWindow is Idle.
	// Zero means the default.
	IdleThresholdPercent float64
	// IdleWindow is how long utilization must stay below the threshold. Zero means
	// the default.
	IdleWindow time.Duration
	// QueueWaitBuckets are the queue wait histogram's bucket bounds in seconds.
	QueueWaitBuckets []float64
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// Heartbeats tells when each agent goes silent (its utilization stops counting):
	// one of its own on Clock when nil.
	Heartbeats *chamber.Heartbeats
	// Prices prices each node's GPU-hour from its instance type, region and capacity
	// type: prices.Default() when nil.
	Prices *prices.Table
}

// DefaultOptions are the options the controller uses unless flags say otherwise.
func DefaultOptions() Options {
	return Options{IdleThresholdPercent: DefaultIdleThresholdPercent, IdleWindow: DefaultIdleWindow}
}

// Model is the fleet. Its methods are safe for concurrent use: informers call the
// Set and Delete methods from their goroutines while scrapes take snapshots.
type Model struct {
	opts    Options
	clock   clock.PassiveClock
	started time.Time // admissions before it are not in the queue wait histogram
	synced  atomic.Bool

	mu sync.Mutex
	// nodes holds an entry per node that has a Node, a GPUNode or GPU pods.
	nodes map[string]*node
	// pods are the GPU pods bound to a node and not finished; others are not kept.
	pods             map[objKey]*pod
	workloads        map[objKey]*workload
	workloadsByOwner map[types.UID]*workload
	tiers            map[string]int // workloads per priority tier
	queues           map[string]*clusterQueue
	localQueues      map[objKey]string // LocalQueue -> its ClusterQueue
	pools            map[string]*pool
	teams            map[string]*team
	// Derived from teams and pools on their (rare) changes, so lookups per GPU are
	// single map reads.
	namespaceTeam map[string]string
	queueTeam     map[string]string
	flavorModel   map[string]string
	// Generations invalidate what pods and workloads cache of their workload and team,
	// so a scrape resolves each only after something it depends on changed.
	teamGen     uint64 // teams or LocalQueues changed
	workloadGen uint64 // a workload appeared, went, or changed owner

	// Counters: they only grow, and keep what removed nodes and pods ran up.
	stateSeconds map[poolModel]*Seconds
	usage        map[teamModel]*Usage
	waits        map[teamTier]*waitHistogram
	handed       map[handedKey]*Handed
}

type objKey struct{ namespace, name string }

type poolModel struct{ pool, model string }

type teamModel struct{ team, model string }

type teamTier struct{ team, tier string }

// New returns an empty model.
func New(opts Options) *Model {
	if opts.IdleThresholdPercent == 0 {
		opts.IdleThresholdPercent = DefaultIdleThresholdPercent
	}
	if opts.IdleWindow <= 0 {
		opts.IdleWindow = DefaultIdleWindow
	}
	if len(opts.QueueWaitBuckets) == 0 {
		opts.QueueWaitBuckets = DefaultQueueWaitBuckets
	}
	opts.QueueWaitBuckets = slices.Clone(opts.QueueWaitBuckets)
	slices.Sort(opts.QueueWaitBuckets)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Heartbeats == nil {
		opts.Heartbeats = chamber.NewHeartbeats(opts.Clock, 0)
	}
	if opts.Prices == nil {
		opts.Prices = prices.Default()
	}
	return &Model{
		opts:    opts,
		clock:   opts.Clock,
		started: opts.Clock.Now(),
		teamGen: 1, workloadGen: 1,

		nodes:            map[string]*node{},
		pods:             map[objKey]*pod{},
		workloads:        map[objKey]*workload{},
		workloadsByOwner: map[types.UID]*workload{},
		tiers:            map[string]int{},
		queues:           map[string]*clusterQueue{},
		localQueues:      map[objKey]string{},
		pools:            map[string]*pool{},
		teams:            map[string]*team{},
		namespaceTeam:    map[string]string{},
		queueTeam:        map[string]string{},
		flavorModel:      map[string]string{},

		stateSeconds: map[poolModel]*Seconds{},
		usage:        map[teamModel]*Usage{},
		waits:        map[teamTier]*waitHistogram{},
		handed:       map[handedKey]*Handed{},
	}
}

// Options returns the options in effect, defaults filled in.
func (m *Model) Options() Options { return m.opts }

// SetSynced records whether the model holds everything its informers had at start;
// before that its numbers are partial, and the exporter shows none.
func (m *Model) SetSynced(synced bool) { m.synced.Store(synced) }

// Synced reports what SetSynced recorded.
func (m *Model) Synced() bool { return m.synced.Load() }
