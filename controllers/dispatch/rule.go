package dispatch

import (
	"cmp"
	"slices"
)

// Worker is what the dispatcher knows of one worker cluster for one workload.
type Worker struct {
	// Name is the worker's MultiKueueCluster.
	Name string
	// FreeGPUs are its free healthy GPUs of the workload's model: on nodes that take
	// work (not cordoned, isolated or tainted NoSchedule), not held by a running pod,
	// not reported unhealthy by the node agent nor held by fault isolation.
	FreeGPUs int64
	// PricePerGPUHour is the price of a GPU-hour of the model there.
	PricePerGPUHour float64
}

// Nominate chooses the worker clusters for a workload asking for gpus GPUs:
//
//  1. of the workers with at least gpus free healthy GPUs of the model, the cheapest
//     per GPU-hour;
//  2. at equal price, the one with more free GPUs (it keeps room for the next);
//  3. at equal price and room, the first by name, so the choice is stable.
//
// It nominates that one worker alone. Where none has room, it nominates every worker
// in the same order, and Kueue's MultiKueue runs the workload on the first whose
// Kueue admits it, as Kueue's own all-at-once dispatcher does. No workers: none.
func Nominate(workers []Worker, gpus int64) []string {
	ordered := slices.Clone(workers)
	slices.SortStableFunc(ordered, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(a.PricePerGPUHour, b.PricePerGPUHour), cmp.Compare(b.FreeGPUs, a.FreeGPUs), cmp.Compare(a.Name, b.Name))
	})
	for _, w := range ordered {
		if w.FreeGPUs >= gpus {
			return []string{w.Name}
		}
	}
	var names []string
	for _, w := range ordered {
		names = append(names, w.Name)
	}
	return names
}
