package v1alpha1

import "time"

// When a node agent is silent, decided once for every reader of a GPUNode (the
// inventory, admission, isolation and idle reclaim): an agent that has not written its
// GPUNode for SilentAfterHeartbeats of its heartbeat intervals (chamber-controller's
// --silent-after-heartbeats) is silent, and its
// report counts for nothing either way: its GPUs' health is unknown (silence isolates
// nothing) and their utilization unread (silence reclaims nothing). The time since
// the last write is measured on the reader's clock, from when the reader saw the
// heartbeat change, never from the agent's own timestamp: a node whose clock runs
// behind the controller's does not look silent (Heartbeats).
const (
	// SilentAfterHeartbeats is how many heartbeat intervals an agent may go without a
	// write before it is silent, unless the controller is told otherwise.
	SilentAfterHeartbeats = 3
	// DefaultHeartbeatInterval is the agent's default --heartbeat-interval, assumed
	// for a report that does not say its own (heartbeatSeconds unset).
	DefaultHeartbeatInterval = 30 * time.Second
)

// UnhealthyGPUs are the indices of the GPUs the agent reports Unhealthy, in its order.
func (s *GPUNodeStatus) UnhealthyGPUs() []int {
	var out []int
	for _, g := range s.GPUs {
		if g.Health == GPUUnhealthy {
			out = append(out, int(g.Index))
		}
	}
	return out
}

// HeartbeatInterval is the agent's heartbeat interval as its report says, or
// DefaultHeartbeatInterval when it does not.
func (s *GPUNodeStatus) HeartbeatInterval() time.Duration {
	if s.HeartbeatSeconds > 0 {
		return time.Duration(s.HeartbeatSeconds) * time.Second
	}
	return DefaultHeartbeatInterval
}
