package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolTopology turns on Kueue's Topology-Aware Scheduling for the pool's GPU flavors.
type PoolTopology struct {
	// Enabled: Kueue places every pod of a workload on a node with room before it
	// admits the workload (a Kueue Topology per pool and topologyName on each of the
	// pool's ResourceFlavors). Default true.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Levels are node labels naming topology domains, widest first (for example a
	// block label, then a rack label). kubernetes.io/hostname is always the last level
	// and is added when missing.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=317
	// +optional
	Levels []string `json:"levels,omitempty"`
}

// IdleReclaimPolicy says when a workload holding GPUs it does not use gives them back.
// On a Team, set fields override the pool's.
type IdleReclaimPolicy struct {
	// Enabled turns idle reclaim on. Default off on a pool; a Team inherits its pool's.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// UtilizationPercent: a workload is idle while every GPU it holds stays below it.
	// Default 5.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	UtilizationPercent *int32 `json:"utilizationPercent,omitempty"`
	// Window is how long a workload must have been idle before it is reclaimed for a
	// workload that waits for its GPUs: it is reclaimed as soon as both hold (idle
	// for the window, someone waiting), whether or not anyone waited all along.
	// Default 10m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration such as 90s, 5m or 1h"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`
	// ExemptTiers are priority tiers never reclaimed. Default [production].
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ExemptTiers []string `json:"exemptTiers,omitempty"`
	// InteractiveIdleLimit pauses an interactive workload (a notebook, a debug
	// session: label or annotation chamber.dev/interactive "true" on its pods or its
	// Workload) whose GPUs stay idle this long, even when nobody waits for them, as
	// an idle GPU time limit does. It stays paused (deactivated, its Job kept) until
	// its user resumes it by setting the Workload's spec.active to true. Unset: no
	// limit. Exempt tiers and opted-out workloads are never paused.
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="must be a positive duration such as 30m or 2h"
	// +optional
	InteractiveIdleLimit *metav1.Duration `json:"interactiveIdleLimit,omitempty"`
	// WorkloadOptOut says whether a workload's own opt-out (chamber.dev/idle-reclaim:
	// "false" on the Workload, its Job or its pods, which anyone who may create them can
	// set) keeps it from idle reclaim and the interactive idle limit. Allowed (default)
	// honours it; Ignored reclaims an opted-out workload like any other.
	// +optional
	WorkloadOptOut WorkloadOptOut `json:"workloadOptOut,omitempty"`
}

// WorkloadOptOut says whether workloads may opt out of idle reclaim.
// +kubebuilder:validation:Enum=Allowed;Ignored
type WorkloadOptOut string

// Whether workloads may opt out of idle reclaim.
const (
	// OptOutAllowed: a workload annotated chamber.dev/idle-reclaim: "false" is never
	// reclaimed or paused for idling.
	OptOutAllowed WorkloadOptOut = "Allowed"
	// OptOutIgnored: the annotation counts for nothing; an idle workload is reclaimed
	// for a waiting one whatever its users say.
	OptOutIgnored WorkloadOptOut = "Ignored"
)

// EvictionPolicy is how long a workload Chamber evicts (idle reclaim, GPU faults) has
// to checkpoint: its pods get a notice, and the eviction happens after the grace
// period or as soon as the job marks itself ready. On a Team, set fields override the
// pool's.
type EvictionPolicy struct {
	// GracePeriod for every tier without one of its own, at most 24h. Default: the
	// pool's (on a Team), else chamber-controller's --eviction-grace-period (5m). A
	// grace period is how long an evicted workload keeps its GPUs from a team waiting
	// for them, or runs on failing hardware, and becomes its pods'
	// terminationGracePeriodSeconds; a checkpoint takes minutes to an hour.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration such as 90s, 5m or 1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('24h')",message="must be at most 24h: the grace period keeps the GPUs from the team waiting for them, or a job on failing ones"
	// +optional
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty"`
	// TierGracePeriods set the grace period of single priority tiers.
	// +listType=map
	// +listMapKey=tier
	// +kubebuilder:validation:MaxItems=16
	// +optional
	TierGracePeriods []TierGracePeriod `json:"tierGracePeriods,omitempty"`
}

// ResolveGracePeriod is a tier's eviction grace period from policies, most specific
// first: a policy's tier entry beats its general one, and an earlier policy beats a
// later; fallback when none says.
func ResolveGracePeriod(tier string, fallback time.Duration, policies ...*EvictionPolicy) time.Duration {
	for _, p := range policies {
		if p == nil {
			continue
		}
		for _, t := range p.TierGracePeriods {
			if t.Tier == tier {
				return t.GracePeriod.Duration
			}
		}
	}
	for _, p := range policies {
		if p != nil && p.GracePeriod != nil {
			return p.GracePeriod.Duration
		}
	}
	return fallback
}

// TierGracePeriod is the eviction grace period of one priority tier.
type TierGracePeriod struct {
	// Tier is a priority tier (a Kueue WorkloadPriorityClass), e.g. production.
	// +kubebuilder:validation:MinLength=1
	Tier string `json:"tier"`
	// GracePeriod for workloads of the tier, at most 24h.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration such as 90s, 5m or 1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('24h')",message="must be at most 24h: the grace period keeps the GPUs from the team waiting for them, or a job on failing ones"
	GracePeriod metav1.Duration `json:"gracePeriod"`
}

// IsolationLevel says what a GPU fault takes out of service.
// +kubebuilder:validation:Enum=Auto;Node;GPU
type IsolationLevel string

// Isolation levels.
const (
	// IsolateAuto lets each fault decide, by its Immediate Action in NVIDIA's XID
	// catalog: a fault that a GPU reset clears (XID 48, a double-bit ECC error, a
	// pending row remap) isolates the failing GPU; one that needs a node reboot (XID
	// 79: the GPU fell off the bus; a GPU lost to the driver) or a drained node for a
	// hardware replacement (row remapping failed) isolates the node.
	IsolateAuto IsolationLevel = "Auto"
	// IsolateNode taints and cordons the whole node.
	IsolateNode IsolationLevel = "Node"
	// IsolateGPU takes only the failing GPUs out of the node's capacity; the node
	// stays usable for pods that fit on its healthy GPUs.
	IsolateGPU IsolationLevel = "GPU"
)

// IsolationPolicy says how the pool's failing GPUs are isolated and brought back.
type IsolationPolicy struct {
	// Level is what a fault takes out of service. Auto (default): the fault's action
	// in NVIDIA's XID catalog decides; a fault a GPU reset clears isolates that GPU,
	// one that needs a node reboot or a hardware replacement isolates the node, and
	// when a node's failing GPUs need both, the node is isolated. Node: every fault
	// isolates the node (taint and cordon). GPU: every fault isolates only the
	// failing GPUs.
	// +kubebuilder:default=Auto
	// +optional
	Level IsolationLevel `json:"level,omitempty"`
	// DryRun reports what would be isolated (Events, metrics) and changes nothing.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
	// MaxIsolatedPercent is the circuit breaker: at most this share of the pool's
	// nodes is isolated within BreakerWindow; beyond it Chamber stops isolating and
	// says so until an operator acts. Default 50.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxIsolatedPercent *int32 `json:"maxIsolatedPercent,omitempty"`
	// BreakerWindow is the circuit breaker's window. Default 5m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must be a duration such as 90s, 5m or 1h"
	// +optional
	BreakerWindow *metav1.Duration `json:"breakerWindow,omitempty"`
	// RecoveryReports: a node isolated for a transient fault returns after this many
	// consecutive healthy agent reports. Hardware faults stay isolated until an
	// operator clears them. Default 3.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	RecoveryReports *int32 `json:"recoveryReports,omitempty"`
	// Preflight proves a node before it returns to service on an operator's clear
	// (chamber.dev/isolation-clear): once its agent reports no GPU failing, Chamber
	// runs the preflight on the node (a DCGM diagnostic, an NCCL test) and returns the
	// node only if it succeeds. Without it, a clear returns the node at once.
	// +optional
	Preflight *Preflight `json:"preflight,omitempty"`
}

// Preflight is a Job Chamber runs on a node before it returns to service.
type Preflight struct {
	// PodTemplate names a PodTemplate (core/v1) whose template is the preflight's pod.
	// Chamber runs it as a Job in the PodTemplate's namespace on the node
	// (spec.nodeName; it tolerates Chamber's taint and the cordon), never retried:
	// the Job succeeds or the node stays isolated.
	PodTemplate PodTemplateReference `json:"podTemplate"`
	// Timeout fails a preflight that has not succeeded by then (the Job's
	// activeDeadlineSeconds). Default 30m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be a duration of at least 1s, such as 10m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// PodTemplateReference names a PodTemplate.
type PodTemplateReference struct {
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}
