package healthcheck

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Fault is an active fault on one GPU.
type Fault struct {
	Finding
	FirstSeen time.Time
	LastSeen  time.Time
	// Count is how often the fault was seen while active: events, or polls the condition held.
	Count int
}

// GPUStatus is what the agent publishes for one GPU: its latest reading and its health.
type GPUStatus struct {
	Index  int
	UUID   string
	Sample GPUSample // the latest poll; zero until the first poll
	Health Health
	Faults []Fault // active faults, ordered by reason
	// XIDCounts counts every XID seen, each repeat included, application errors too.
	XIDCounts map[uint64]uint64
	// EventsUnwatched is NVML's answer when the GPU could not be registered for events
	// (polls still cover it); empty when watched.
	EventsUnwatched string
	LastPoll        time.Time
}

// Reasons lists the reasons of the active faults, in order.
func (s GPUStatus) Reasons() []Reason {
	out := make([]Reason, len(s.Faults))
	for i, f := range s.Faults {
		out[i] = f.Reason
	}
	return out
}

// NodeStatus sums up the node for its condition.
type NodeStatus struct {
	Health   Health // the worst GPU's
	GPUs     int
	Polls    int
	LastPoll time.Time
	// EventErrors counts failed event-set waits; UnattributedEvents counts events NVML
	// could not tie to a GPU (polls still catch a lost GPU).
	EventErrors        int
	UnattributedEvents int
}

// Tracker keeps each GPU's health from polls and events. It does no NVML calls, so
// scrapes and status writers read it freely; it is safe for concurrent use.
type Tracker struct {
	cfg   Config
	clock clock.PassiveClock

	mu           sync.RWMutex
	gpus         map[int]*gpuState
	polls        int
	lastPoll     time.Time
	eventErrors  int
	unattributed int
}

type gpuState struct {
	sample    GPUSample
	polled    bool
	lastPoll  time.Time
	faults    map[Reason]*activeFault
	streak    map[Reason]int  // polls in a row a condition held, for the raise-after rules
	xidSeen   map[Reason]bool // transient XIDs seen since the last poll keep their fault alive
	xidCounts map[uint64]uint64
	unwatched string
}

type activeFault struct {
	Fault
	clean int // clean polls in a row
}

// NewTracker returns an empty tracker. cfg must be valid (Config.Validate).
func NewTracker(cfg Config, clk clock.PassiveClock) *Tracker {
	return &Tracker{cfg: cfg, clock: clk, gpus: map[int]*gpuState{}}
}

func (t *Tracker) state(i int) *gpuState {
	st, ok := t.gpus[i]
	if !ok {
		st = &gpuState{
			sample:    GPUSample{Index: i},
			faults:    map[Reason]*activeFault{},
			streak:    map[Reason]int{},
			xidSeen:   map[Reason]bool{},
			xidCounts: map[uint64]uint64{},
		}
		t.gpus[i] = st
	}
	return st
}

// raiseAfter is how many polls in a row a condition must hold before it becomes a fault:
// sustained-only rules wait, the rest raise at once.
func (t *Tracker) raiseAfter(r Reason) int {
	switch r {
	case ReasonThermalThrottle, ReasonPowerThrottle:
		return t.cfg.ThrottlePolls
	case ReasonNVMLReadError:
		return t.cfg.ReadErrorPolls
	}
	return 1
}

func (t *Tracker) ignored(r Reason) bool { return slices.Contains(t.cfg.IgnoredReasons, r) }

func (t *Tracker) raise(st *gpuState, f Finding, now time.Time) {
	if af, ok := st.faults[f.Reason]; ok {
		af.Finding, af.LastSeen, af.clean = f, now, 0
		af.Count++
		return
	}
	st.faults[f.Reason] = &activeFault{Fault: Fault{Finding: f, FirstSeen: now, LastSeen: now, Count: 1}}
}

// Observe applies one poll: raises what the rules find, and counts a clean poll towards
// clearing each transient fault that was not seen.
func (t *Tracker) Observe(s Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	var elapsed time.Duration
	if t.polls > 0 {
		elapsed = now.Sub(t.lastPoll)
	}
	t.polls++
	t.lastPoll = now
	present := map[Reason]bool{}
	for _, cur := range s.GPUs {
		st := t.state(cur.Index)
		var prev *GPUSample
		if st.polled {
			prev = &st.sample
		}
		clear(present)
		for _, f := range Classify(prev, cur, elapsed, t.cfg) {
			if t.ignored(f.Reason) {
				continue
			}
			present[f.Reason] = true
			st.streak[f.Reason]++
			if st.streak[f.Reason] >= t.raiseAfter(f.Reason) {
				t.raise(st, f, now)
			}
		}
		for r := range st.streak {
			if !present[r] {
				delete(st.streak, r)
			}
		}
		for r, af := range st.faults {
			switch {
			case present[r] || st.xidSeen[r]:
				af.clean = 0
			case !af.Persistent:
				af.clean++
				if af.clean >= t.cfg.RecoveryPolls {
					delete(st.faults, r)
				}
			}
		}
		clear(st.xidSeen)
		st.sample, st.polled, st.lastPoll = cur, true, now
	}
}

// RecordEvent applies one NVML event. Every XID is counted; only those the catalog and
// Config do not ignore raise a fault.
func (t *Tracker) RecordEvent(ev Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := ev.Time
	if now.IsZero() {
		now = t.clock.Now()
	}
	if ev.Kind == EventWaitError {
		t.eventErrors++
		return
	}
	if ev.GPU < 0 {
		t.unattributed++
		return
	}
	st := t.state(ev.GPU)
	var f Finding
	switch ev.Kind {
	case EventXID:
		st.xidCounts[ev.XID]++
		var ok bool
		if f, ok = ClassifyXID(ev.XID, t.cfg); !ok {
			return
		}
	case EventDoubleBitECC:
		f = finding(ReasonECCDoubleBit, "double-bit ECC error event")
	case EventGPUUnavailable:
		f = finding(ReasonGPULost, "driver reported the GPU unavailable")
	case EventUnwatched:
		st.unwatched = "unknown"
		if ev.Err != nil {
			st.unwatched = ev.Err.Error()
		}
		return
	default:
		return
	}
	if t.ignored(f.Reason) {
		return
	}
	t.raise(st, f, now)
	st.xidSeen[f.Reason] = true
}

// Clear removes a fault, typically a persistent one after an operator reset the GPU. It
// reports whether the fault was active. A condition still present is raised again at the
// next poll.
func (t *Tracker) Clear(gpu int, r Reason) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.gpus[gpu]
	if !ok {
		return false
	}
	_, ok = st.faults[r]
	delete(st.faults, r)
	delete(st.streak, r)
	return ok
}

// GPUs returns a copy of every GPU's status, ordered by index.
func (t *Tracker) GPUs() []GPUStatus {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]GPUStatus, 0, len(t.gpus))
	for _, i := range slices.Sorted(maps.Keys(t.gpus)) {
		out = append(out, t.gpus[i].status(i))
	}
	return out
}

// GPU returns one GPU's status; ok is false for a GPU never polled nor named by an event.
func (t *Tracker) GPU(i int) (GPUStatus, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	st, ok := t.gpus[i]
	if !ok {
		return GPUStatus{}, false
	}
	return st.status(i), true
}

// Node sums up all GPUs.
func (t *Tracker) Node() NodeStatus {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := NodeStatus{Health: Healthy, GPUs: len(t.gpus), Polls: t.polls, LastPoll: t.lastPoll,
		EventErrors: t.eventErrors, UnattributedEvents: t.unattributed}
	for _, st := range t.gpus {
		n.Health = Worse(n.Health, st.health())
	}
	return n
}

func (st *gpuState) health() Health {
	h := Healthy
	for _, af := range st.faults {
		h = Worse(h, af.Severity)
	}
	return h
}

func (st *gpuState) status(i int) GPUStatus {
	s := GPUStatus{
		Index:           i,
		UUID:            st.sample.UUID,
		Sample:          st.sample,
		Health:          Healthy,
		XIDCounts:       maps.Clone(st.xidCounts),
		EventsUnwatched: st.unwatched,
		LastPoll:        st.lastPoll,
	}
	s.Sample.Errors = slices.Clone(st.sample.Errors)
	for _, af := range st.faults {
		s.Faults = append(s.Faults, af.Fault)
	}
	s.Health = st.health()
	slices.SortFunc(s.Faults, func(a, b Fault) int { return cmp.Compare(a.Reason, b.Reason) })
	return s
}
