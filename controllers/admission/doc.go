// Package admission runs Chamber's Kueue admission check (controllerName
// chamber.dev/fleet): a workload whose quota Kueue reserved is admitted only when the
// GPUs its pods would land on are healthy by the node agents' account. The same
// package carries out Chamber's evictions, with or without the check: other
// controllers (idle reclaim, isolation, room) ask for them with RequestEviction
// (integrations/kueue); this package gives the pods notice and a grace period to
// checkpoint, then evicts the workload as Kueue's preemption does (Evict) and Kueue
// requeues it.
package admission
