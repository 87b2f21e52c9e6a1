package v1alpha1

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Heartbeats tells when each node's agent was last heard, on this process's clock:
// the moment it first saw the GPUNode's current lastHeartbeatTime. Whether an agent
// is silent (SilentAfterHeartbeats) is judged from that moment, never from
// the agent's own timestamp, the way the node lifecycle controller judges a kubelet's
// lease: a node whose clock runs behind the controller's does not look silent, one
// whose clock runs ahead does not look alive after it stopped.
//
// Only at first sight of a node (a restart, a new node) is the agent's timestamp
// used, and only to tell an agent already silent then: a report older than its
// silence on the reader's clock counts as heard then. The cost is that a node whose
// clock runs that far behind looks silent until its next write.
//
// Every reader of GPUNodes in one process shares one Heartbeats; it is safe for
// concurrent use.
// +kubebuilder:object:generate=false
type Heartbeats struct {
	clock  clock.PassiveClock
	missed int

	mu    sync.Mutex
	heard map[string]heard
}

type heard struct {
	beat time.Time // the lastHeartbeatTime seen
	at   time.Time // when it was first seen, on this process's clock
}

// NewHeartbeats starts a record on the clock (the real clock when nil) in which an
// agent is silent after missing missed heartbeats (SilentAfterHeartbeats when
// 0 or less).
func NewHeartbeats(c clock.PassiveClock, missed int) *Heartbeats {
	if c == nil {
		c = clock.RealClock{}
	}
	if missed <= 0 {
		missed = SilentAfterHeartbeats
	}
	return &Heartbeats{clock: c, missed: missed, heard: map[string]heard{}}
}

// SilentAfter is how long after its last write gn's agent is silent.
func (h *Heartbeats) SilentAfter(gn *GPUNode) time.Duration {
	return time.Duration(h.missed) * gn.Status.HeartbeatInterval()
}

// HeardAt is when this process first saw gn's current heartbeat; zero when the agent
// has never written one. A reader that sees every update (an informer's handler)
// makes it exact; one that looks only now and then makes it later, which delays a
// verdict of silence and never hastens one.
func (h *Heartbeats) HeardAt(gn *GPUNode) time.Time {
	hb := gn.Status.LastHeartbeatTime
	if hb == nil {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if seen, ok := h.heard[gn.Name]; ok && seen.beat.Equal(hb.Time) {
		return seen.at
	}
	now := h.clock.Now()
	at := now
	_, known := h.heard[gn.Name]
	if !known && now.Sub(hb.Time) > h.SilentAfter(gn) {
		at = hb.Time // first sight of a report already silent by its own word
	}
	h.heard[gn.Name] = heard{beat: hb.Time, at: at}
	return at
}

// SilentAt is when the agent becomes silent unless it writes again; zero when it has
// never written (silent from the start).
func (h *Heartbeats) SilentAt(gn *GPUNode) time.Time {
	at := h.HeardAt(gn)
	if at.IsZero() {
		return at
	}
	return at.Add(h.SilentAfter(gn))
}

// Silent says whether the agent is silent at now: it never wrote, or it has not
// written for SilentAfter on this process's clock.
func (h *Heartbeats) Silent(gn *GPUNode, now time.Time) bool {
	at := h.SilentAt(gn)
	return at.IsZero() || !now.Before(at)
}

// Forget drops what was heard of a node whose GPUNode is gone.
func (h *Heartbeats) Forget(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.heard, node)
}
