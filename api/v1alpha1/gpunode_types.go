package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUHealth is the health of one GPU or of a node's GPUs as a whole.
// +kubebuilder:validation:Enum=Healthy;Degraded;Unhealthy;Unknown
type GPUHealth string

// GPU health values. Unknown means the agent has not reported (recently): silence is
// never taken for a fault.
const (
	GPUHealthy   GPUHealth = "Healthy"
	GPUDegraded  GPUHealth = "Degraded"
	GPUUnhealthy GPUHealth = "Unhealthy"
	GPUUnknown   GPUHealth = "Unknown"
)

// GPUNode conditions.
const (
	// ConditionGPUHealthy is True when every GPU of the node is healthy. The agent also
	// sets a Node condition of the same type.
	ConditionGPUHealthy = "GPUHealthy"
	// ConditionNVMLUnavailable is True while the agent cannot initialise NVML (no
	// driver, no device); the agent keeps retrying.
	ConditionNVMLUnavailable = "NVMLUnavailable"
	// ConditionDCGMUnavailable is True while Chamber cannot read the node's GPUs from
	// the Prometheus that scrapes dcgm-exporter (source DCGM): the query fails or the
	// node's series are missing or stale. The heartbeat stops meanwhile, so the node's
	// GPUs count as unreported: never healthy, never idle.
	ConditionDCGMUnavailable = "DCGMUnavailable"
)

// ReportSource says who writes a GPUNode's status.
// +kubebuilder:validation:Enum=Agent;DCGM
type ReportSource string

// Report sources.
const (
	// SourceAgent is Chamber's node agent, reading NVML on the node.
	SourceAgent ReportSource = "Agent"
	// SourceDCGM is the chamber-controller reading dcgm-exporter's series from
	// Prometheus, for a node without an agent. It writes only GPUNodes no agent writes.
	SourceDCGM ReportSource = "DCGM"
)

// GPUNodeSpec is empty: a GPUNode is written by the agent on the node of the same
// name, and everything in it is observed state.
type GPUNodeSpec struct{}

// GPUNodeStatus is what the node agent observed on the node's GPUs.
type GPUNodeStatus struct {
	// Health is the worst health of the node's GPUs.
	// +optional
	Health GPUHealth `json:"health,omitempty"`
	// DriverVersion is the NVIDIA driver version NVML reports.
	// +optional
	DriverVersion string `json:"driverVersion,omitempty"`
	// GPUs is one entry per GPU, by NVML index.
	// +listType=map
	// +listMapKey=index
	// +optional
	GPUs []GPUStatus `json:"gpus,omitempty"`
	// LastHeartbeatTime is when the agent last wrote this status. A status older than
	// a few heartbeat intervals means the agent stopped reporting.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// HeartbeatSeconds is the agent's heartbeat interval: the longest it goes without
	// writing when nothing changes.
	// +kubebuilder:validation:Minimum=0
	// +optional
	HeartbeatSeconds int32 `json:"heartbeatSeconds,omitempty"`
	// Source says who wrote this status: the node agent (Agent; also when empty) or
	// the controller from dcgm-exporter's series in Prometheus (DCGM).
	// +optional
	Source ReportSource `json:"source,omitempty"`
	// Conditions: GPUHealthy, NVMLUnavailable (agent), DCGMUnavailable (DCGM).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GPUStatus is one GPU's identity, health and use.
type GPUStatus struct {
	// Index is the NVML device index.
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// UUID is the GPU's NVML UUID (GPU-...).
	// +optional
	UUID string `json:"uuid,omitempty"`
	// Model is the NVML product name, for example "NVIDIA H100 80GB HBM3".
	// +optional
	Model string `json:"model,omitempty"`
	// PCIBusID is the GPU's PCI address.
	// +optional
	PCIBusID string `json:"pciBusID,omitempty"`
	// MemoryMiB is the GPU's total memory in MiB.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// Health of this GPU.
	Health GPUHealth `json:"health"`
	// Faults are the GPU's active faults; empty when healthy.
	// +listType=atomic
	// +optional
	Faults []GPUFault `json:"faults,omitempty"`
	// Utilization summarises the GPU's use over the agent's window.
	// +optional
	Utilization *GPUUtilization `json:"utilization,omitempty"`
	// Pod is the pod holding the GPU, when the agent can tell (kubelet pod-resources).
	// +optional
	Pod *PodReference `json:"pod,omitempty"`
}

// FaultAction is what an operator (or the recovery policy) should do about a fault,
// as NVIDIA's XID catalog recommends.
// +kubebuilder:validation:Enum=Ignore;Watch;ResetGPU;RebootNode;DrainAndReplace
type FaultAction string

const (
	// FaultActionIgnore: an application error; restart the application, the GPU is fine.
	FaultActionIgnore FaultAction = "Ignore"
	// FaultActionWatch: nothing to do to the GPU itself yet (cooling, power, a marginal link); keep watching.
	FaultActionWatch FaultAction = "Watch"
	// FaultActionResetGPU: drain the GPU's work and reset it (nvidia-smi -r), or reboot the node.
	FaultActionResetGPU FaultAction = "ResetGPU"
	// FaultActionRebootNode: the GPU cannot be recovered without rebooting (or power-cycling) the node.
	FaultActionRebootNode FaultAction = "RebootNode"
	// FaultActionDrainAndReplace: the hardware is failing; drain the node and replace (RMA) the GPU.
	FaultActionDrainAndReplace FaultAction = "DrainAndReplace"
)

// TakesNode reports whether carrying out the action takes the whole node out of
// service: a reboot, or a drain to replace the hardware. A GPU reset takes the
// failing GPU alone, and Watch and Ignore take nothing. An action Chamber does not
// know (an older agent's empty one) takes the node: that is the safe side.
func (a FaultAction) TakesNode() bool {
	switch a {
	case FaultActionIgnore, FaultActionWatch, FaultActionResetGPU:
		return false
	default:
		return true
	}
}

// GPUFault is an active fault on a GPU.
type GPUFault struct {
	// Reason is machine-readable: XID79, ECCDoubleBit, RowRemapFailure, GPULost, ...
	Reason string `json:"reason"`
	// Severity is the health this fault alone implies.
	Severity GPUHealth `json:"severity"`
	// Action is what NVIDIA's XID catalog recommends: Ignore, Watch, ResetGPU,
	// RebootNode, DrainAndReplace. Under isolation level Auto it decides whether the
	// GPU alone (ResetGPU) or its node is isolated.
	// +optional
	Action FaultAction `json:"action,omitempty"`
	// Persistent faults stay until an operator clears them; the others clear after a
	// run of clean polls.
	// +optional
	Persistent bool `json:"persistent,omitempty"`
	// Message explains the fault to a human.
	// +optional
	Message string `json:"message,omitempty"`
	// FirstSeen is when the fault was first observed.
	// +optional
	FirstSeen *metav1.Time `json:"firstSeen,omitempty"`
	// Count is how often it was seen while active (events, or polls it held).
	// +optional
	Count int32 `json:"count,omitempty"`
}

// GPUUtilization is a GPU's use averaged over a window.
type GPUUtilization struct {
	// GPUPercent is the mean of the GPU's utilization over the window, as Signal
	// measures it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	GPUPercent int32 `json:"gpuPercent"`
	// MemoryPercent is the mean of NVML's memory-controller utilization.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MemoryPercent int32 `json:"memoryPercent,omitempty"`
	// MemoryUsedMiB is the framebuffer memory in use at the last poll.
	// +optional
	MemoryUsedMiB int64 `json:"memoryUsedMiB,omitempty"`
	// WindowSeconds is the length of the window averaged.
	// +optional
	WindowSeconds int32 `json:"windowSeconds,omitempty"`
	// Signal is what GPUPercent measures: SMActivity where the source has it, else
	// GPUUtilization (also when empty).
	// +optional
	Signal UtilizationSignal `json:"signal,omitempty"`
}

// UtilizationSignal is what a GPU's utilization measures.
// +kubebuilder:validation:Enum=GPUUtilization;SMActivity;GraphicsEngineActivity
type UtilizationSignal string

// Utilization signals, from the coarsest to the truest.
const (
	// SignalGPUUtilization is the share of time a kernel ran (NVML's utilization,
	// DCGM_FI_DEV_GPU_UTIL): one kernel on one SM, or a kernel spinning, counts as
	// fully busy.
	SignalGPUUtilization UtilizationSignal = "GPUUtilization"
	// SignalGraphicsEngineActivity is the share of time the graphics engine was
	// active (DCGM_FI_PROF_GR_ENGINE_ACTIVE), read where GPU utilization is not.
	SignalGraphicsEngineActivity UtilizationSignal = "GraphicsEngineActivity"
	// SignalSMActivity is the share of SM cycles with a warp resident, over all SMs
	// (DCGM_FI_PROF_SM_ACTIVE): a kernel that occupies a few SMs reads low.
	SignalSMActivity UtilizationSignal = "SMActivity"
)

// PodReference names the pod holding a GPU.
type PodReference struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// GPUNode is the GPU view of one Kubernetes node, written by Chamber's node agent;
// its name is the node's name.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gpun
// +kubebuilder:printcolumn:name="Health",type=string,JSONPath=`.status.health`
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.status.driverVersion`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUNodeSpec   `json:"spec,omitempty"`
	Status GPUNodeStatus `json:"status,omitempty"`
}

// GPUNodeList is a list of GPUNodes.
// +kubebuilder:object:root=true
type GPUNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUNode `json:"items"`
}
