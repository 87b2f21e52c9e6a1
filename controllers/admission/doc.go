// Package admission runs Chamber's Kueue admission check (controllerName
// chamber.dev/fleet): a workload whose quota Kueue reserved is admitted only when the
// GPUs its pods would land on are healthy by the node agents' account. The same check
// is Chamber's one way to evict: set to Retry on an admitted workload, Kueue evicts
// and requeues it. Other controllers (idle reclaim, isolation) ask for evictions with
// RequestEviction (integrations/kueue); this package gives the pods notice and a grace period to
// checkpoint first.
package admission
