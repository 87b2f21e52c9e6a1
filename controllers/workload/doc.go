// Package workload is Chamber's controller of Kueue Workloads. It does two things to
// a Workload, in one reconcile:
//
//   - It carries out Chamber's evictions, with or without the admission check: other
//     controllers (idle reclaim, isolation, room) ask for them with RequestEviction
//     (integrations/kueue); this package gives the pods notice and a grace period to
//     checkpoint, then evicts the workload as Kueue's preemption does (Evict), and
//     Kueue requeues it.
//   - It answers Chamber's Kueue admission check (controllerName chamber.dev/fleet)
//     where a pool turns it on: a workload whose quota Kueue reserved is admitted only
//     when the GPUs its pods would land on are healthy by the node agents' account.
//
// Both read and write the same Workload (the eviction request, the check's state), so
// one reconciler owns them and no two controllers race on its status.
package workload
