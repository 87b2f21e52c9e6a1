package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Team conditions (with ConditionReady).
const (
	// ConditionBudgetExceeded is True when the team has spent its budget for the
	// period: it no longer borrows, and with onExceeded Hold admits nothing new.
	ConditionBudgetExceeded = "BudgetExceeded"
	// ConditionBudgetWarning is True from 80% of the budget.
	ConditionBudgetWarning = "BudgetWarning"
	// ConditionPodGrace is True while pods created in the team's namespaces get at
	// least the team's eviction grace as their terminationGracePeriodSeconds (the
	// chart's MutatingAdmissionPolicy, which reads status.podGrace), False where the
	// cluster cannot do it, with the reason.
	ConditionPodGrace = "PodGrace"
)

// Reasons of a Team's PodGrace condition.
const (
	// ReasonGracePolicyApplied: the chart's MutatingAdmissionPolicy is in place and
	// reads the team's status.podGrace.
	ReasonGracePolicyApplied = "PolicyApplied"
	// ReasonNoGraceToRaise: every grace the team's tiers have is 0, so nothing is raised.
	ReasonNoGraceToRaise = "NoGraceToRaise"
	// ReasonPolicyAPINotServed: the API server serves MutatingAdmissionPolicies in no
	// version the chart installs (admissionregistration.k8s.io/v1 or v1beta1).
	ReasonPolicyAPINotServed = "MutatingAdmissionPolicyNotServed"
	// ReasonPolicyNotInstalled: the API server serves MutatingAdmissionPolicies, but
	// the chart's pod grace policy is not there (the chart's
	// pod-grace-from-eviction-policy flag false, or the policy deleted).
	ReasonPolicyNotInstalled = "PolicyNotInstalled"
)

// Reasons of a Team's Ready condition when it is False.
const (
	ReasonPoolNotFound      = "PoolNotFound"
	ReasonUnknownModel      = "UnknownModel"
	ReasonNamespaceConflict = "NamespaceConflict"
	ReasonClusterQueueTaken = "ClusterQueueNotOwned"
	ReasonAdoptedNotFound   = "AdoptedClusterQueueNotFound"
	// ReasonBackendNotServed: the team's pool compiles into a queueing system (its
	// backend) whose API the cluster does not serve.
	ReasonBackendNotServed = "BackendNotServed"
	// ReasonQueueTaken: a Volcano Queue of the team's name exists that Chamber does
	// not own; Chamber never takes it over.
	ReasonQueueTaken = "QueueNotOwned"
)

// PreemptionPolicy is Kueue's preemption policy.
// +kubebuilder:validation:Enum=Never;LowerPriority;LowerOrNewerEqualPriority;Any
type PreemptionPolicy string

// BudgetAction is what happens when a team's budget is spent.
// +kubebuilder:validation:Enum=StopBorrowing;Hold
type BudgetAction string

// Budget actions. Running work is never killed by either.
const (
	// BudgetStopBorrowing keeps the team within its own quota.
	BudgetStopBorrowing BudgetAction = "StopBorrowing"
	// BudgetHold also stops admitting new work (Kueue's stopPolicy Hold).
	BudgetHold BudgetAction = "Hold"
)

// BudgetPeriod is the period a budget covers.
// +kubebuilder:validation:Enum=Monthly;Weekly
type BudgetPeriod string

// Budget periods, in UTC: a month from the 1st, a week from Monday.
const (
	BudgetMonthly BudgetPeriod = "Monthly"
	BudgetWeekly  BudgetPeriod = "Weekly"
)

// TeamSpec is a team's share of a pool.
type TeamSpec struct {
	// Pool is the GPUPool the team draws from.
	// +kubebuilder:validation:MinLength=1
	Pool string `json:"pool"`
	// Namespaces where the team submits work; each gets a LocalQueue. A namespace
	// belongs to one team at most.
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=63
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// LocalQueueName is the name of the LocalQueue in each namespace: what jobs name in
	// their kueue.x-k8s.io/queue-name label. Default "default", which Kueue also
	// uses for jobs without the label.
	// +kubebuilder:default=default
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	LocalQueueName string `json:"localQueueName,omitempty"`
	// Quotas are the team's GPUs per model in the pool.
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Quotas []TeamQuota `json:"quotas,omitempty"`
	// FairShareWeight weighs the team against the others of its pool when Kueue shares
	// unused capacity (default 1).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	FairShareWeight *int32 `json:"fairShareWeight,omitempty"`
	// Preemption overrides the defaults: reclaimWithinCohort Any (an owner gets its
	// lent quota back), withinClusterQueue LowerPriority (a higher tier preempts a
	// lower one of the same team), borrowWithinCohort Never.
	// +optional
	Preemption *TeamPreemption `json:"preemption,omitempty"`
	// Budget limits what the team spends per period.
	// +optional
	Budget *TeamBudget `json:"budget,omitempty"`
	// ClusterQueue adopts an existing Kueue ClusterQueue instead of creating one:
	// Chamber accounts for it and reports on it but never changes it, and creates no
	// LocalQueues.
	// +optional
	ClusterQueue string `json:"clusterQueue,omitempty"`
	// IdleReclaim overrides the pool's idle reclaim policy for the team's workloads.
	// +optional
	IdleReclaim *IdleReclaimPolicy `json:"idleReclaim,omitempty"`
	// Eviction overrides the pool's eviction grace periods for the team's workloads.
	// +optional
	Eviction *EvictionPolicy `json:"eviction,omitempty"`
}

// DefaultLocalQueueName is a Team's LocalQueue name unless spec.localQueueName says
// otherwise.
const DefaultLocalQueueName = "default"

// TeamQuota is a team's GPUs of one model.
// +kubebuilder:validation:XValidation:rule="!has(self.lendingLimit) || self.lendingLimit <= self.gpus",message="lendingLimit cannot exceed gpus: a team lends only GPUs of its own quota"
type TeamQuota struct {
	// Model is the GPU model as the pool's product label shows it.
	// +kubebuilder:validation:MinLength=1
	Model string `json:"model"`
	// GPUs is the team's nominal quota.
	// +kubebuilder:validation:Minimum=0
	GPUs int32 `json:"gpus"`
	// BorrowingLimit caps the GPUs the team borrows beyond its quota (default: no cap).
	// +kubebuilder:validation:Minimum=0
	// +optional
	BorrowingLimit *int32 `json:"borrowingLimit,omitempty"`
	// LendingLimit caps the GPUs of the quota that others may borrow (default: all).
	// +kubebuilder:validation:Minimum=0
	// +optional
	LendingLimit *int32 `json:"lendingLimit,omitempty"`
}

// TeamPreemption is Kueue's ClusterQueue preemption policy.
type TeamPreemption struct {
	// ReclaimWithinCohort: may the team preempt borrowers to get its quota back.
	// +optional
	ReclaimWithinCohort PreemptionPolicy `json:"reclaimWithinCohort,omitempty"`
	// WithinClusterQueue: may a workload preempt the team's own lower-priority ones.
	// +optional
	WithinClusterQueue PreemptionPolicy `json:"withinClusterQueue,omitempty"`
	// BorrowWithinCohort: may the team preempt others' workloads while borrowing.
	// +optional
	BorrowWithinCohort *BorrowWithinCohort `json:"borrowWithinCohort,omitempty"`
}

// BorrowWithinCohort is Kueue's preemption-while-borrowing policy.
type BorrowWithinCohort struct {
	// Policy is Never or LowerPriority.
	// +kubebuilder:validation:Enum=Never;LowerPriority
	Policy string `json:"policy"`
	// MaxPriorityThreshold: only workloads at or below this priority are preempted.
	// +optional
	MaxPriorityThreshold *int32 `json:"maxPriorityThreshold,omitempty"`
}

// TeamBudget limits spend per period, in money (from the pool's prices) and/or
// GPU-hours.
// +kubebuilder:validation:XValidation:rule="has(self.cost) || has(self.gpuHours)",message="a budget needs cost, gpuHours or both"
type TeamBudget struct {
	// Cost per period in the pool's currency, a decimal string such as "25000".
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +optional
	Cost string `json:"cost,omitempty"`
	// GPUHours per period.
	// +kubebuilder:validation:Minimum=0
	// +optional
	GPUHours *int64 `json:"gpuHours,omitempty"`
	// Period the budget covers (UTC). Default Monthly.
	// +kubebuilder:default=Monthly
	// +optional
	Period BudgetPeriod `json:"period,omitempty"`
	// OnExceeded: StopBorrowing (default) or Hold.
	// +kubebuilder:default=StopBorrowing
	// +optional
	OnExceeded BudgetAction `json:"onExceeded,omitempty"`
}

// TeamStatus is the team's use of its pool.
type TeamStatus struct {
	// ClusterQueue is the team's Kueue ClusterQueue.
	// +optional
	ClusterQueue string `json:"clusterQueue,omitempty"`
	// Models: quota and use per GPU model.
	// +listType=map
	// +listMapKey=model
	// +optional
	Models []TeamModelUsage `json:"models,omitempty"`
	// AdmittedWorkloads holding quota now.
	// +optional
	AdmittedWorkloads int32 `json:"admittedWorkloads"`
	// PendingWorkloads waiting in the team's queue.
	// +optional
	PendingWorkloads int32 `json:"pendingWorkloads"`
	// Spend in the current budget period, kept here so a restart loses none.
	// +optional
	Spend *TeamSpend `json:"spend,omitempty"`
	// PodGrace is the least terminationGracePeriodSeconds of pods created in the
	// team's namespaces, by tier: the team's eviction grace, which the chart's
	// MutatingAdmissionPolicy gives them so that Kueue's and Volcano's preemptions
	// leave time to checkpoint. Absent where there is nothing to raise, or pod grace is
	// off (--pod-grace-from-eviction-policy=false).
	// +optional
	PodGrace *PodGrace `json:"podGrace,omitempty"`
	// Conditions: Ready, BudgetWarning, BudgetExceeded, PodGrace.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodGrace is the least terminationGracePeriodSeconds a team's pods get, by tier.
type PodGrace struct {
	// Seconds for a pod of a tier not in Tiers, or of none.
	// +kubebuilder:validation:Minimum=0
	Seconds int64 `json:"seconds"`
	// Tiers with a grace of their own. A pod's tier is its
	// kueue.x-k8s.io/priority-class label, else its priorityClassName (a Volcano
	// Job's pods).
	// +listType=map
	// +listMapKey=tier
	// +optional
	Tiers []TierPodGrace `json:"tiers,omitempty"`
}

// TierPodGrace is the least terminationGracePeriodSeconds of one tier's pods.
type TierPodGrace struct {
	Tier string `json:"tier"`
	// +kubebuilder:validation:Minimum=0
	Seconds int64 `json:"seconds"`
}

// TeamModelUsage is a team's quota and use of one GPU model.
type TeamModelUsage struct {
	Model  string `json:"model"`
	Flavor string `json:"flavor"`
	// Quota is the nominal quota.
	Quota int64 `json:"quota"`
	// Withheld is the part of Quota not given to Kueue because the pool has fewer
	// healthy GPUs of the model than its teams' quotas add up to (the pool's
	// quotasFollowHealth). The shortfall is shared in proportion to the quotas, each
	// team giving up the whole GPUs of its share; the GPUs left over by rounding come
	// from the teams with the most quota (then by name), so a small team keeps its
	// guarantee longest. Kueue's nominal quota is Quota minus Withheld.
	// +optional
	Withheld int64 `json:"withheld,omitempty"`
	// InUse is the GPUs admitted workloads hold.
	InUse int64 `json:"inUse"`
	// Borrowed is the part of InUse above the quota.
	Borrowed int64 `json:"borrowed"`
	// Lent is the part of the unused quota (within the lending limit) that other teams
	// of the pool are borrowing now. Kueue borrows from the cohort as a whole, so with
	// several lenders each reports the most it can be lending.
	Lent int64 `json:"lent"`
}

// TeamSpend is what the team used in the current period.
type TeamSpend struct {
	// PeriodStart is the start of the budget period.
	PeriodStart metav1.Time `json:"periodStart"`
	// AccountedUntil is when spend was last added up.
	AccountedUntil metav1.Time `json:"accountedUntil"`
	// GPUSeconds admitted workloads held in the period.
	GPUSeconds int64 `json:"gpuSeconds"`
	// Flavors splits GPUSeconds by flavor (GPU model), which the cost is priced by.
	// +listType=map
	// +listMapKey=flavor
	// +optional
	Flavors []FlavorSpend `json:"flavors,omitempty"`
	// Cost of those GPU-seconds at the pool's prices, a decimal string.
	// +optional
	Cost string `json:"cost,omitempty"`
	// IdleGPUSeconds is the part of the GPU time the team's pods held that the GPUs
	// were idle: utilization under the pool's idle threshold for its idle window, as
	// the fleet model and chamber_gpus{state="idle"} count it. Efficiency over the
	// period is (gpuSeconds - idleGPUSeconds) / gpuSeconds. Counted only while
	// chamber-controller runs: idle time while it was down is not in it. Absent
	// where chamber-controller runs without its fleet inventory.
	// +kubebuilder:validation:Minimum=0
	// +optional
	IdleGPUSeconds *int64 `json:"idleGPUSeconds,omitempty"`
	// UsedGPUSeconds is the GPU time the team's pods held weighted by the GPUs'
	// utilization (a GPU-second at 40% adds 0.4), over the measured GPU-seconds.
	// Counted as IdleGPUSeconds is.
	// +kubebuilder:validation:Minimum=0
	// +optional
	UsedGPUSeconds *int64 `json:"usedGPUSeconds,omitempty"`
	// MeasuredGPUSeconds is the GPU time the team's pods held with a utilization
	// report from the GPUs' agent: the mean utilization over the period is
	// usedGPUSeconds / measuredGPUSeconds. Counted as IdleGPUSeconds is.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MeasuredGPUSeconds *int64 `json:"measuredGPUSeconds,omitempty"`
	// IdleCost is the cost of IdleGPUSeconds at each node's price (the fleet model's, see
	// docs/concepts/prices.md; Cost is at the pool's prices), a decimal string.
	// Absent where IdleGPUSeconds is.
	// +optional
	IdleCost string `json:"idleCost,omitempty"`
}

// FlavorSpend is what a team held of one flavor in the period, in GPU-seconds, and
// how that compares with its quota of the flavor. The share of its quota the team
// used over the period is (gpuSeconds - borrowedGPUSeconds) / quotaGPUSeconds.
type FlavorSpend struct {
	Flavor string `json:"flavor"`
	// GPUSeconds admitted workloads held of the flavor.
	GPUSeconds int64 `json:"gpuSeconds"`
	// QuotaGPUSeconds is the team's nominal quota of the flavor times the time it
	// held: what the team could have used without borrowing.
	// +kubebuilder:validation:Minimum=0
	// +optional
	QuotaGPUSeconds int64 `json:"quotaGPUSeconds,omitempty"`
	// BorrowedGPUSeconds is the part of GPUSeconds above the quota, borrowed from
	// the other teams of the pool.
	// +kubebuilder:validation:Minimum=0
	// +optional
	BorrowedGPUSeconds int64 `json:"borrowedGPUSeconds,omitempty"`
	// LentGPUSeconds is the part of the unused quota that other teams of the pool
	// borrowed (status.models[].lent over time).
	// +kubebuilder:validation:Minimum=0
	// +optional
	LentGPUSeconds int64 `json:"lentGPUSeconds,omitempty"`
}

// Team is a group of users with a quota in a GPUPool: a Kueue ClusterQueue in the
// pool's Cohort and a LocalQueue in each of its namespaces.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.pool`
// +kubebuilder:printcolumn:name="ClusterQueue",type=string,JSONPath=`.status.clusterQueue`
// +kubebuilder:printcolumn:name="Admitted",type=integer,JSONPath=`.status.admittedWorkloads`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingWorkloads`
// +kubebuilder:printcolumn:name="Spend",type=string,JSONPath=`.status.spend.cost`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
type Team struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TeamSpec   `json:"spec,omitempty"`
	Status TeamStatus `json:"status,omitempty"`
}

// TeamList is a list of Teams.
// +kubebuilder:object:root=true
type TeamList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Team `json:"items"`
}
