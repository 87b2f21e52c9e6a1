package room

import (
	"cmp"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// candidate is a running workload the planner may move: of a lower tier than the
// waiting workload, all its pods bound to one node.
type candidate struct {
	key types.NamespacedName
	uid types.UID
	// queue is the ClusterQueue that admitted it.
	queue string
	// pods are the GPUs each of its pods holds on the node.
	pods []int64
}

func (c candidate) gpus() int64 {
	var n int64
	for _, g := range c.pods {
		n += g
	}
	return n
}

// nodeState is one node of the waiting workload's flavor as the planner sees it.
type nodeState struct {
	name    string
	free    int64
	movable []candidate
	// settling: a workload Kueue placed on the node has pods not bound there yet, so
	// the GPUs its pods will take are not counted in free. Such a node gets no room
	// made on it and takes no moved pod.
	settling bool
}

// plan is the room the planner found: the nodes the waiting workload's pods go to
// once the moves are done, and the workloads to move.
type plan struct {
	// rooms and want: the nodes made room on, and the GPUs of the pod each is for.
	rooms []string
	want  []int64
	moves []candidate
}

// borrowed is, by ClusterQueue of the waiter's cohort, the GPUs of the flavor it
// holds beyond its nominal quota: what the planner may pause of its workloads, since
// pausing them takes nothing of the quota its team is guaranteed.
type borrowed map[string]int64

// covers: the workloads' GPUs are within their ClusterQueues' borrowed GPUs.
func (b borrowed) covers(cs []candidate) bool {
	left := maps.Clone(b)
	for _, c := range cs {
		left[c.queue] -= c.gpus()
		if left[c.queue] < 0 {
			return false
		}
	}
	return true
}

func gpusOf(cs []candidate) int64 {
	var n int64
	for _, c := range cs {
		n += c.gpus()
	}
	return n
}

// maxCandidates bounds the subsets tried on one node (2^maxCandidates); the largest
// workloads are kept, since room comes from GPUs.
const maxCandidates = 10

// makePlan finds room for pods asking for want GPUs each, moving as few workloads as it
// can. Each pod, largest first, goes where there is room already (best fit); else to
// the node where moving the fewest workloads (then the fewest GPUs) makes room, provided
// every workload moved so far fits on the other nodes' free GPUs (the nodes rooms are
// made on left out). With pause set, the workloads need not fit elsewhere (they are
// paused: requeued until GPUs free) but must be within pause, their ClusterQueues'
// borrowed GPUs, and together free at least quota GPUs of quota. ok is false when some
// pod finds no such node, or when no move is needed (Kueue places the workload itself).
func makePlan(want []int64, nodes []nodeState, pause borrowed, quota int64) (p plan, ok bool) {
	free := chamberkueue.FreeByNode{}
	byName := map[string]*nodeState{}
	for i := range nodes {
		n := &nodes[i]
		byName[n.name] = n
		if !n.settling {
			free[n.name] = n.free
		}
	}
	moved := map[types.UID]bool{}
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b int64) int { return cmp.Compare(b, a) })
	for i, k := range want {
		if n := free.BestFit(k); n != "" {
			free[n] -= k
			continue
		}
		var options []option
		for name, f := range free {
			var cands []candidate
			for _, c := range byName[name].movable {
				if !moved[c.uid] && (pause == nil || pause[c.queue] >= c.gpus()) {
					cands = append(cands, c)
				}
			}
			options = append(options, roomOptions(name, f, k, cands)...)
		}
		slices.SortFunc(options, func(a, b option) int {
			return cmp.Or(cmp.Compare(len(a.set), len(b.set)), cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.node, b.node))
		})
		found := false
		for _, o := range options {
			moves := append(slices.Clone(p.moves), o.set...)
			switch {
			case pause == nil && !fitsElsewhere(free, append(slices.Clone(p.rooms), o.node), moves):
				continue
			case pause != nil && (!pause.covers(moves) || (i == len(want)-1 && gpusOf(moves) < quota)):
				continue
			}
			free[o.node] += o.gpus - k
			for _, c := range o.set {
				moved[c.uid] = true
			}
			p.rooms, p.want, p.moves, found = append(p.rooms, o.node), append(p.want, k), moves, true
			break
		}
		if !found {
			return plan{}, false
		}
	}
	return p, len(p.moves) > 0
}

// option is one way to make room on a node: the workloads to move off it.
type option struct {
	node string
	set  []candidate
	gpus int64
}

// roomOptions are the sets of candidates whose moving leaves at least k GPUs free on
// the node, the best few: fewest workloads, then fewest GPUs.
func roomOptions(node string, free, k int64, cands []candidate) []option {
	if free >= k {
		return nil
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(b.gpus(), a.gpus()), cmp.Compare(a.key.String(), b.key.String()))
	})
	if len(cands) > maxCandidates {
		cands = cands[:maxCandidates]
	}
	var out []option
	for mask := uint(1); mask < 1<<len(cands); mask++ {
		o := option{node: node}
		for i := range cands {
			if mask&(1<<i) != 0 {
				o.set = append(o.set, cands[i])
				o.gpus += cands[i].gpus()
			}
		}
		if free+o.gpus >= k {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b option) int {
		return cmp.Or(cmp.Compare(len(a.set), len(b.set)), cmp.Compare(a.gpus, b.gpus))
	})
	return out[:min(len(out), 4)]
}

// fitsElsewhere: the moved workloads' pods all fit on the free GPUs of the nodes other
// than the rooms.
func fitsElsewhere(free chamberkueue.FreeByNode, rooms []string, moves []candidate) bool {
	rest := chamberkueue.FreeByNode{}
	for n, f := range free {
		if !slices.Contains(rooms, n) {
			rest[n] = f
		}
	}
	var pods []int64
	for _, c := range moves {
		pods = append(pods, c.pods...)
	}
	return rest.Fits(pods)
}
