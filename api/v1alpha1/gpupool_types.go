package v1alpha1

import (
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultProductLabel is the node label GPU feature discovery sets to the GPU model.
const DefaultProductLabel = "nvidia.com/gpu.product"

// GPUPool conditions.
const (
	// ConditionReady is True when the pool's Kueue objects are in place.
	ConditionReady = "Ready"
	// ConditionIsolationHalted is the circuit breaker of fault isolation: True while
	// Chamber isolates nothing more in the pool.
	ConditionIsolationHalted = "IsolationHalted"
)

// Reasons of a GPUPool's IsolationHalted condition.
const (
	ReasonTooManyIsolations = "TooManyIsolations"
	ReasonBreakerReset      = "ResetByOperator"
)

// Reasons of a GPUPool's Ready condition when it is False.
const (
	// ReasonQueueHierarchyOff: a Volcano pool names a parent, and Chamber compiles
	// Volcano pools flat (chamber-controller's --volcano-queue-hierarchy is off).
	ReasonQueueHierarchyOff = "QueueHierarchyOff"
	// ReasonParentNotUsable: a Volcano pool's parent does not exist, is a Kueue pool,
	// or is below it; its Queue is under Volcano's root.
	ReasonParentNotUsable = "ParentNotUsable"
)

// PriceKind says where a GPU-hour price comes from.
// +kubebuilder:validation:Enum=OnDemand;Reserved;Amortized
type PriceKind string

// Price kinds.
const (
	PriceOnDemand  PriceKind = "OnDemand"
	PriceReserved  PriceKind = "Reserved"
	PriceAmortized PriceKind = "Amortized"
)

// Backend is the queueing system a pool's Teams compile into.
// +kubebuilder:validation:Enum=Kueue;Volcano
type Backend string

// Backends.
const (
	// BackendKueue: Teams become Kueue ClusterQueues and LocalQueues.
	BackendKueue Backend = "Kueue"
	// BackendVolcano: Teams become Volcano Queues.
	BackendVolcano Backend = "Volcano"
)

// GPUPoolSpec says which nodes form the pool and what their GPUs cost.
// +kubebuilder:validation:XValidation:rule="!has(self.backend) || self.backend != 'Volcano' || !has(self.workerClusters) || size(self.workerClusters) == 0",message="workerClusters run a pool's workloads through Kueue's MultiKueue, which a Volcano pool does not use: remove them, or make the pool's backend Kueue"
type GPUPoolSpec struct {
	// Backend is the queueing system the pool's Teams compile into: Kueue (the
	// default: a ClusterQueue per team in the pool's Cohort, a LocalQueue per
	// namespace) or Volcano (a Volcano Queue per team, which jobs name in
	// spec.queue). It cannot change: make a new pool.
	// +kubebuilder:default=Kueue
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="backend cannot change: make a new pool for the other backend"
	// +optional
	Backend Backend `json:"backend,omitempty"`
	// NodeLabels select the pool's nodes: a node belongs to the pool when it has all of
	// them. They also go into each of the pool's ResourceFlavors, so Kueue places the
	// pool's workloads on the pool's nodes. Empty: every GPU node.
	// +optional
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
	// ProductLabel is the node label holding the GPU model. Default
	// nvidia.com/gpu.product (GPU feature discovery).
	// +kubebuilder:default="nvidia.com/gpu.product"
	// +optional
	ProductLabel string `json:"productLabel,omitempty"`
	// Parent names a parent GPUPool: the pool's Cohort gets the parent's Cohort as its
	// parent, so unused capacity flows up the hierarchy. For a Volcano pool, under
	// Volcano's queue hierarchy (chamber-controller's --volcano-queue-hierarchy), the
	// pool's Volcano Queue is a child of its parent's, which must be a Volcano pool.
	// +kubebuilder:validation:MinLength=1
	// +optional
	Parent string `json:"parent,omitempty"`
	// Prices per GPU-hour of each model, for cost reporting and budgets.
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Prices []GPUPrice `json:"prices,omitempty"`
	// Topology configures Kueue's topology-aware placement of the pool's workloads.
	// +optional
	Topology *PoolTopology `json:"topology,omitempty"`
	// IdleReclaim takes GPUs back from workloads that hold them idle while others wait.
	// +optional
	IdleReclaim *IdleReclaimPolicy `json:"idleReclaim,omitempty"`
	// Eviction sets the checkpoint grace period of workloads Chamber evicts.
	// +optional
	Eviction *EvictionPolicy `json:"eviction,omitempty"`
	// Isolation configures how failing GPUs are isolated.
	// +optional
	Isolation *IsolationPolicy `json:"isolation,omitempty"`
	// QuotasFollowHealth: the quotas Chamber compiles for Kueue follow the pool's
	// healthy GPUs. When fewer healthy GPUs of a model are left (failed, isolated, or on
	// cordoned or tainted nodes) than its teams' quotas add up to, the difference is
	// withheld from the teams' nominal quotas, each giving up its share by the rule of
	// TeamModelUsage.Withheld, and given back as the GPUs return; Kueue then never
	// admits against GPUs that are gone, and a team whose quota is guaranteed gets it
	// by preemption instead of waiting behind GPUs that do not exist. Default false:
	// the guarantee costs preemptions while GPUs are out (docs/results.md measures it).
	// +optional
	QuotasFollowHealth *bool `json:"quotasFollowHealth,omitempty"`
	// WorkerClusters are other clusters, each running Kueue and the pool's Teams
	// (same namespaces and queues), where Kueue's MultiKueue runs the pool's
	// workloads: Chamber compiles a MultiKueueCluster for each, one MultiKueueConfig
	// and one MultiKueue AdmissionCheck for the pool, and puts the check on each of
	// the pool's teams' ClusterQueues; the pool's flavors then have no topology (the
	// workers place the pods). Where Kueue runs Chamber's dispatcher
	// (docs/concepts/multicluster.md), a workload goes to the cheapest worker (its prices,
	// else the pool's) with enough free healthy GPUs of its model, at equal price to
	// the one with more free GPUs. Chamber copies the pool and its Teams to each worker
	// and deletes the copies from a worker dropped from the list, or from every worker
	// when the pool is deleted (the finalizer chamber.dev/worker-copies waits for it).
	// Empty: workloads run in this cluster.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=20
	// +optional
	WorkerClusters []WorkerCluster `json:"workerClusters,omitempty"`
}

// WorkerCluster is a cluster that runs a pool's workloads through Kueue's MultiKueue.
type WorkerCluster struct {
	// Name of the worker cluster, a DNS-1123 label unique in the pool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// KubeconfigSecret names a Secret in Kueue's namespace (where Kueue reads
	// MultiKueue's credentials) whose "kubeconfig" key reaches the worker's API
	// server. Kueue accepts only inline credentials there: a token or client
	// certificate and certificate-authority-data, no files, exec plugins or
	// insecure TLS.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	KubeconfigSecret string `json:"kubeconfigSecret"`
	// Prices per GPU-hour of each model on this worker, which Chamber's dispatcher
	// compares between workers that have room for a workload: the cheapest gets it.
	// A model the worker has no price for costs what the pool's spec.prices say.
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Prices []GPUPrice `json:"prices,omitempty"`
}

// ConditionWorkerClustersActive is the GPUPool condition that is True when Kueue's
// MultiKueue reaches every worker cluster of the pool; its message says which worker
// lacks its kubeconfig Secret or cannot be reached, and what to fix.
const ConditionWorkerClustersActive = "WorkerClustersActive"

// WorkerPrices are the prices of a GPU-hour on the pool's worker: the worker's own,
// and the pool's for the models the worker does not price.
func (p *GPUPool) WorkerPrices(worker string) []GPUPrice {
	prices := slices.Clone(p.Spec.Prices)
	for _, w := range p.Spec.WorkerClusters {
		if w.Name != worker {
			continue
		}
		for _, price := range w.Prices {
			if i := slices.IndexFunc(prices, func(q GPUPrice) bool { return q.Model == price.Model }); i >= 0 {
				prices[i] = price
			} else {
				prices = append(prices, price)
			}
		}
	}
	return prices
}

// WorkerPricesPerGPUHour are WorkerPrices by model, read as PricesPerGPUHour reads the
// pool's.
func (p *GPUPool) WorkerPricesPerGPUHour(worker string) map[string]float64 {
	return (&GPUPool{Spec: GPUPoolSpec{Prices: p.WorkerPrices(worker)}}).PricesPerGPUHour()
}

// FollowsHealth reports whether the pool's compiled quotas follow its healthy GPUs
// (spec.quotasFollowHealth, default false).
func (p *GPUPool) FollowsHealth() bool {
	return p.Spec.QuotasFollowHealth != nil && *p.Spec.QuotasFollowHealth
}

// PricePerGPUHour is the pool's price of a GPU-hour of model; 0 where it has none.
func (p *GPUPool) PricePerGPUHour(model string) float64 {
	return p.PricesPerGPUHour()[model]
}

// PricesPerGPUHour are the pool's prices of a GPU-hour by model: the one reading of
// spec.prices (the schema's pattern admits only decimals, so a value that does not
// parse is no price).
func (p *GPUPool) PricesPerGPUHour() map[string]float64 {
	prices := make(map[string]float64, len(p.Spec.Prices))
	for _, price := range p.Spec.Prices {
		if v, err := strconv.ParseFloat(price.PerGPUHour, 64); err == nil {
			prices[price.Model] = v
		}
	}
	return prices
}

// GPUPrice is the price of one GPU-hour of a model.
type GPUPrice struct {
	// Model is the GPU model as the product label shows it, e.g. NVIDIA-H100-80GB-HBM3.
	// +kubebuilder:validation:MinLength=1
	Model string `json:"model"`
	// PerGPUHour is the price of one GPU for one hour, in the pool's currency, as a
	// decimal string such as "2.49".
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	PerGPUHour string `json:"perGPUHour"`
	// Kind says whether it is an on-demand, reserved or amortized on-prem price.
	// +kubebuilder:default=OnDemand
	// +optional
	Kind PriceKind `json:"kind,omitempty"`
}

// GPUPoolStatus is what the pool holds now.
type GPUPoolStatus struct {
	// Cohort is the Kueue Cohort of the pool; empty for a Volcano pool, which gets no
	// Kueue object.
	// +optional
	Cohort string `json:"cohort,omitempty"`
	// Queue is the Volcano Queue of a Volcano pool under Volcano's queue hierarchy,
	// the parent of its teams' Queues; empty otherwise.
	// +optional
	Queue string `json:"queue,omitempty"`
	// Models are the GPU models found on the pool's nodes.
	// +listType=map
	// +listMapKey=model
	// +optional
	Models []PoolModel `json:"models,omitempty"`
	// Teams are the Teams in the pool.
	// +listType=set
	// +optional
	Teams []string `json:"teams,omitempty"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PoolModel counts one GPU model in a pool.
type PoolModel struct {
	// Model as the product label shows it.
	Model string `json:"model"`
	// Flavor is the Kueue ResourceFlavor made for the model; empty in a Volcano pool.
	Flavor string `json:"flavor"`
	// Nodes with this model.
	Nodes int32 `json:"nodes"`
	// Total is the GPUs the nodes have (capacity).
	Total int64 `json:"total"`
	// Allocatable is the GPUs the nodes offer to pods (schedulable nodes only).
	Allocatable int64 `json:"allocatable"`
	// Healthy is the GPUs of schedulable nodes that have not failed: capacity less
	// the GPUs the node agent reports unhealthy and those fault isolation holds, at
	// most the allocatable ones.
	Healthy int64 `json:"healthy"`
}

// GPUPool is a set of GPU nodes that teams share: one Kueue Cohort, and one
// ResourceFlavor per GPU model found on its nodes (a Volcano pool: a Volcano Queue per
// team, nothing of Kueue).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gpool
// +kubebuilder:printcolumn:name="Cohort",type=string,JSONPath=`.status.cohort`
// +kubebuilder:printcolumn:name="Models",type=string,JSONPath=`.status.models[*].model`
// +kubebuilder:printcolumn:name="Teams",type=string,JSONPath=`.status.teams`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUPoolSpec   `json:"spec,omitempty"`
	Status GPUPoolStatus `json:"status,omitempty"`
}

// GPUPoolList is a list of GPUPools.
// +kubebuilder:object:root=true
type GPUPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUPool `json:"items"`
}

// UsesVolcano says whether the pool's Teams compile into Volcano Queues.
func (p *GPUPool) UsesVolcano() bool { return p.Spec.Backend == BackendVolcano }
