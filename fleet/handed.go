package fleet

import (
	"cmp"
	"slices"
	"strings"
	"time"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Handed is what idle reclaim gave to other work: GPU-seconds that workloads of Team
// held on GPUs that a reclaimed workload of FromTeam had left, while that workload
// stayed away (paused or requeued, until its quota is reserved again, it finishes or
// it is deleted). Time the freed GPUs sat free counts nothing.
type Handed struct {
	Team, FromTeam, Model string
	// GPUSeconds the receiving workloads held those GPUs.
	GPUSeconds float64
	// Cost is GPUSeconds at the node's price.
	Cost float64
	// Workloads counts the receiving workloads (Kueue Workloads; pods of no Workload
	// add GPU-seconds but are not counted), each once per reclaim it received from.
	Workloads int
}

type handedKey struct{ team, fromTeam, model string }

// reclaimed follows the idle reclaim marks on a Workload (chamber.AnnotationIdleReclaimedAt):
// a workload is away from a new reclaim until its quota is reserved after it, it
// finishes, or it is deleted. The marks are removed when idle reclaim releases a
// paused workload, before it is admitted again, so the time is kept, not the mark.
func (m *Model) reclaimed(w *workload, annotations map[string]string, reservedAt time.Time, finished bool) {
	if at, err := time.Parse(time.RFC3339, annotations[chamber.AnnotationIdleReclaimedAt]); err == nil && at.After(w.reclaimedAt) {
		w.reclaimedAt, w.away = at, true
	}
	if w.away && (finished || !reservedAt.IsZero() && !reservedAt.Before(w.reclaimedAt)) {
		m.cameBack(w)
	}
}

// cameBack ends what the GPUs a reclaimed workload left give to others.
func (m *Model) cameBack(w *workload) {
	if !w.away {
		return
	}
	w.away = false
	now := m.clock.Now()
	for _, n := range m.nodes {
		for i := range n.gpus {
			if n.gpus[i].handedFrom == w {
				m.accountNode(n, now)
				n.gpus[i].handedFrom = nil
			}
		}
	}
	clear(w.receivers)
}

// handOver is called as a GPU changes holder: the GPU a reclaimed workload's pod
// leaves is marked as its, and a workload taking a marked GPU is counted once as a
// receiver.
func (m *Model) handOver(n *node, g *gpu, from, to *pod) {
	if from != nil {
		if w := m.workloadOf(from); w != nil && w.away {
			g.handedFrom = w
		}
	}
	h := g.handedFrom
	if to == nil || h == nil {
		return
	}
	w := m.workloadOf(to)
	if w == nil || w == h {
		return
	}
	if _, seen := h.receivers[w]; seen {
		return
	}
	if h.receivers == nil {
		h.receivers = map[*workload]struct{}{}
	}
	h.receivers[w] = struct{}{}
	m.handedEntry(handedKey{m.podTeam(to), m.workloadTeam(h), n.model}).Workloads++
}

func (m *Model) handedEntry(k handedKey) *Handed {
	h := m.handed[k]
	if h == nil {
		h = &Handed{Team: k.team, FromTeam: k.fromTeam, Model: k.model}
		m.handed[k] = h
	}
	return h
}

func (m *Model) handedList() []Handed {
	out := make([]Handed, 0, len(m.handed))
	for _, h := range m.handed {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b Handed) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), strings.Compare(a.FromTeam, b.FromTeam), strings.Compare(a.Model, b.Model))
	})
	return out
}
