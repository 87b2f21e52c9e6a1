package dispatch

import (
	"cmp"
	"slices"
)

// Worker is what the dispatcher knows of one worker cluster for one workload.
type Worker struct {
	// Name is the worker's MultiKueueCluster.
	Name string
	// FreeByNode are its free healthy GPUs of the workload's model on each node: nodes
	// that take work (kube.Schedulable: not cordoned nor tainted out of
	// service), GPUs not held by
	// a running pod, not reported unhealthy by the node agent nor held by fault
	// isolation.
	FreeByNode []int64
	// PricePerGPUHour is the price of a GPU-hour of the model there.
	PricePerGPUHour float64
}

// FreeGPUs are the worker's free healthy GPUs of the model, on all its nodes.
func (w Worker) FreeGPUs() int64 {
	var sum int64
	for _, n := range w.FreeByNode {
		sum += n
	}
	return sum
}

// Nominate chooses the worker clusters for a workload whose pods ask for pods[i]
// GPUs each:
//
//  1. of the workers whose free healthy GPUs of the model hold every pod on a node
//     (Fits), the cheapest per GPU-hour;
//  2. at equal price, the one with more free GPUs (it keeps room for the next);
//  3. at equal price and room, the first by name, so the choice is stable.
//
// It nominates that one worker alone. Where none has room, it nominates every worker
// in the same order, and Kueue's MultiKueue runs the workload on the first whose
// Kueue admits it, as Kueue's own all-at-once dispatcher does. No workers: none.
func Nominate(workers []Worker, pods []int64) []string {
	ordered := slices.Clone(workers)
	slices.SortStableFunc(ordered, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(a.PricePerGPUHour, b.PricePerGPUHour), cmp.Compare(b.FreeGPUs(), a.FreeGPUs()), cmp.Compare(a.Name, b.Name))
	})
	for _, w := range ordered {
		if Fits(w.FreeByNode, pods) {
			return []string{w.Name}
		}
	}
	var names []string
	for _, w := range ordered {
		names = append(names, w.Name)
	}
	return names
}

// Fits says whether pods (GPUs per pod) can each be placed on a node with free[i]
// free GPUs: the largest pod first, each on the node it leaves the fewest GPUs free
// on (best fit decreasing, the greedy packing kube-scheduler's bin-packing scoring
// approaches). Being greedy, it may miss a packing that exists; the worker then
// counts as having no room, and is still nominated where no worker has room.
func Fits(free []int64, pods []int64) bool {
	left := slices.Clone(free)
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b int64) int { return cmp.Compare(b, a) })
	for _, p := range sorted {
		best := -1
		for i, n := range left {
			if n >= p && (best < 0 || n < left[best]) {
				best = i
			}
		}
		if best < 0 {
			return false
		}
		left[best] -= p
	}
	return true
}
