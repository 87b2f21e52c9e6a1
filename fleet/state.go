package fleet

// State is what a GPU is doing, as the fleet sees it.
type State uint8

// GPU states. A GPU has exactly one; when several apply, the first in this list wins:
// a fault is the most specific news, an isolated node offers nothing to new work, and
// only then does use matter.
const (
	// Unhealthy: the node agent reports the GPU Unhealthy.
	Unhealthy State = iota
	// Isolated: the GPU's node is cordoned or carries the chamber.TaintGPUUnhealthy taint.
	Isolated
	// Idle: held by a pod, but its mean utilization stayed below the idle threshold
	// for the idle window.
	Idle
	// Busy: held by a pod and in use (or without a utilization report: silence is
	// never taken for idleness).
	Busy
	// Free: no pod holds it.
	Free

	numStates
)

// States lists every state in the order metrics and tables show them.
var States = [numStates]State{Free, Busy, Idle, Unhealthy, Isolated}

var stateNames = [numStates]string{Unhealthy: "unhealthy", Isolated: "isolated", Idle: "idle", Busy: "busy", Free: "free"}

// String is the state's name as metrics label it.
func (s State) String() string {
	if s >= numStates {
		return "unknown"
	}
	return stateNames[s]
}

// Counts is a number of GPUs in each state, indexed by State.
type Counts [numStates]int

// Total is the number of GPUs.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Healthy is the GPUs that can do work: free, busy or idle.
func (c Counts) Healthy() int { return c[Free] + c[Busy] + c[Idle] }

// Allocated is the GPUs a pod holds that count as working or idle.
func (c Counts) Allocated() int { return c[Busy] + c[Idle] }

func (c *Counts) add(o Counts) {
	for i := range c {
		c[i] += o[i]
	}
}

// Seconds is GPU-seconds spent in each state, indexed by State.
type Seconds [numStates]float64
