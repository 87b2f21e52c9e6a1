package v1alpha1

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// NamePrefix begins every label, annotation, taint and finalizer Chamber names.
const NamePrefix = "chamber.dev/"

// Labels on every object Chamber creates. Chamber changes or deletes only objects
// that carry LabelManagedBy=ManagedBy.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "chamber"
	// LabelPool names the GPUPool an object (a ResourceFlavor, a Cohort, a Volcano
	// Queue) was compiled from.
	LabelPool = "chamber.dev/pool"
	// LabelTeam names the Team an object (a ClusterQueue, a LocalQueue, a Volcano
	// Queue) was compiled from.
	LabelTeam = "chamber.dev/team"
	// LabelGPUModel is the GPU model a pool's ResourceFlavor selects.
	LabelGPUModel = "chamber.dev/gpu-model"
	// LabelHistory marks the ConfigMaps of the job history (controllers/history), its
	// value HistoryJobs.
	LabelHistory = "chamber.dev/history"
	HistoryJobs  = "jobs"
)

// Names of Chamber's Kueue admission check: placement on healthy GPUs (Kueue admits a
// workload once it is Ready). Evictions do not go through it.
const (
	// AdmissionCheckControllerName is the AdmissionCheck's spec.controllerName.
	AdmissionCheckControllerName = "chamber.dev/fleet"
	// AdmissionCheckName is the AdmissionCheck Chamber creates and attaches to every
	// team's ClusterQueue.
	AdmissionCheckName = "chamber-fleet"
)

// MultiKueueDispatcherName is the name Kueue's Configuration gives Chamber's dispatcher
// (multiKueue.dispatcherName). Any name other than Kueue's built-in dispatchers makes
// Kueue leave the nomination to an external controller: its MultiKueue then creates
// a Workload's copies only on the clusters in the Workload's
// status.nominatedClusterNames (Kueue v0.19, admissionchecks/multikueue/workload.go).
const MultiKueueDispatcherName = "chamber.dev/multikueue-dispatcher"

// LabelGPUHold marks Chamber's GPU hold pods, which take a node's failing GPUs out of
// its capacity under GPU-level isolation; its value is the node's name. The
// isolation controller writes them; the admission check counts their GPUs as taken.
const LabelGPUHold = "chamber.dev/gpu-hold"

// TaintGPUUnhealthy is the NoSchedule taint Chamber's isolation puts on a node with
// failing GPUs; its value is the fault's reason (XID79, ECCDoubleBit, ...). The GPUs
// of a node carrying it (any effect) are Isolated in the fleet's state.
const TaintGPUUnhealthy = "chamber.dev/gpu-unhealthy"

// AnnotationIdleReclaim set to "false" on a Workload, on its owner (the Job) or on its
// pods keeps the workload from being reclaimed for idling.
const AnnotationIdleReclaim = "chamber.dev/idle-reclaim"

// LabelCopiedFrom marks a GPUPool, Team or Namespace on a worker cluster that the
// manager's Chamber copied there from its pool of this name (the pool lists the worker
// in spec.workerClusters); Chamber keeps the copies in step with the manager's and
// deletes a copied Team the manager no longer has. An object without it is the
// worker's own, read and never written.
const LabelCopiedFrom = "chamber.dev/copied-from-pool"

// FinalizerWorkerCopies is on a GPUPool with worker clusters: when the pool is
// deleted, the manager's Chamber deletes the pool and Teams it copied to the workers
// (LabelCopiedFrom), then takes the finalizer off.
const FinalizerWorkerCopies = "chamber.dev/worker-copies"

// LabelInteractive "true" (a label or an annotation) on a Workload, its pod template or
// its pods marks an interactive workload (a notebook, a debug session): a policy's
// InteractiveIdleLimit applies to it, and once paused it waits for its user.
const LabelInteractive = "chamber.dev/interactive"

// ConditionNodeIsolated is the Node condition fault isolation writes: True while
// Chamber isolates the node (reason: the fault), False once healthy again or while
// isolation is withheld (reasons ReasonDryRun, ReasonIsolationHalted), Unknown while
// the agent is silent.
const ConditionNodeIsolated corev1.NodeConditionType = "ChamberIsolated"

// Reasons of ConditionNodeIsolated besides the fault's own.
const (
	ReasonHealthy           = "Healthy"
	ReasonRecovered         = "Recovered"
	ReasonCleared           = "Cleared"
	ReasonDryRun            = "DryRun"
	ReasonIsolationHalted   = "IsolationHalted"
	ReasonAgentNotReporting = "AgentNotReporting"
)

// LabelPreflightNode names the node a preflight Job proves (shortened with a hash
// where the node's name is longer than a label value).
const LabelPreflightNode = "chamber.dev/preflight-node"

// Annotations an operator sets to start or end an isolation; Chamber removes them.
const (
	// AnnotationIsolate on a node asks Chamber to isolate it, its value saying why (a
	// repair, maintenance): as for a hardware fault, the node is tainted and cordoned
	// and its workloads get notice and are evicted, until an operator clears it
	// (AnnotationIsolationClear, which removes this annotation too). It bypasses the
	// pool's dry run, rate limit and circuit breaker, and does not count toward it.
	AnnotationIsolate = "chamber.dev/isolate"
	// AnnotationIsolationClear "true" on a node ends its isolation (after a hardware
	// fault was repaired).
	AnnotationIsolationClear = "chamber.dev/isolation-clear"
	// AnnotationIsolationBreakerReset "true" on a GPUPool closes the pool's circuit
	// breaker.
	AnnotationIsolationBreakerReset = "chamber.dev/isolation-breaker-reset"
)

// Annotations fault isolation keeps on a node it isolated: its record, which outlives
// a restart of Chamber and is what an operator reads. The isolation controller alone
// writes them; an operator ends an isolation with AnnotationIsolationClear.
const (
	// AnnotationIsolatedAt (RFC 3339) marks a node Chamber isolated, and when.
	AnnotationIsolatedAt = "chamber.dev/isolated-at"
	// AnnotationIsolationReason names the fault, e.g. "XID79 on GPU 3".
	AnnotationIsolationReason = "chamber.dev/isolation-reason"
	// AnnotationIsolationPersistent is "true" for a hardware fault, which only an
	// operator clears; "false" for a transient one, which clears after healthy reports.
	AnnotationIsolationPersistent = "chamber.dev/isolation-persistent"
	// AnnotationIsolationLevel is the isolation level applied: Node or GPU (never Auto).
	AnnotationIsolationLevel = "chamber.dev/isolation-level"
	// AnnotationIsolatedGPUs lists the failing GPUs' indices, e.g. "3,5"
	// (ParseGPUIndices reads it).
	AnnotationIsolatedGPUs = "chamber.dev/isolated-gpus"
	// AnnotationIsolationTainted and AnnotationIsolationCordoned say that Chamber added
	// the taint and set spec.unschedulable: only then does it take them off again, so
	// a node an operator cordoned stays cordoned.
	AnnotationIsolationTainted  = "chamber.dev/isolation-tainted"
	AnnotationIsolationCordoned = "chamber.dev/isolation-cordoned"
	// AnnotationIsolationHealthyReports counts the agent's healthy reports since the
	// fault cleared: "N@<heartbeat time>".
	AnnotationIsolationHealthyReports = "chamber.dev/isolation-healthy-reports"
	// AnnotationIsolationClearedAt (RFC 3339, nanoseconds) is when Chamber last ended an
	// isolation on an operator's clear. A report Chamber heard before then is the one
	// the operator cleared, not a new fault: only a report the agent writes after it
	// can isolate the node again.
	AnnotationIsolationClearedAt = "chamber.dev/isolation-cleared-at"
	// AnnotationIsolationPreflight is the preflight Job ("namespace/name") Chamber runs
	// on an isolated node an operator cleared, while it runs (GPUPool
	// spec.isolation.preflight).
	AnnotationIsolationPreflight = "chamber.dev/isolation-preflight"
)

// ParseGPUIndices reads a list of GPU indices such as AnnotationIsolatedGPUs holds,
// "3,5"; empty is none.
func ParseGPUIndices(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		i, err := strconv.Atoi(f)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("%q is not a list of GPU indices, e.g. 3,5", s)
		}
		out = append(out, i)
	}
	return out, nil
}

// IsolatedGPUs are the indices of the GPUs fault isolation holds on a node at GPU
// level (its record, in annotations); none when the node is not isolated, is isolated
// whole (then it is tainted), or the list cannot be read.
func IsolatedGPUs(annotations map[string]string) []int {
	if annotations[AnnotationIsolatedAt] == "" || IsolationLevel(annotations[AnnotationIsolationLevel]) != IsolateGPU {
		return nil
	}
	gpus, _ := ParseGPUIndices(annotations[AnnotationIsolatedGPUs])
	return gpus
}

// FailedGPUs are a node's failed GPUs, sorted, each once: those its agent reports
// unhealthy (GPUNodeStatus.UnhealthyGPUs) and those fault isolation holds at GPU
// level (IsolatedGPUs), which stay held until an operator clears a hardware fault
// even once the agent reports them healthy again.
func FailedGPUs(nodeAnnotations map[string]string, unhealthy []int) []int {
	return slices.Compact(slices.Sorted(slices.Values(append(IsolatedGPUs(nodeAnnotations), unhealthy...))))
}

// ReasonGPUFault is the reason (AnnotationEvictionReason) of the evictions fault
// isolation asks for: the workload runs, or was placed, on a node or GPU Chamber
// isolated.
const ReasonGPUFault = "GPUFault"

// Annotations of Chamber's eviction protocol. Chamber's controllers (and anyone, by
// hand) ask for an eviction by annotating the Workload (integrations/kueue's
// RequestEviction); Chamber's admission controller alone writes the check state. The
// pods get a notice, and the job may answer it.
const (
	// On the Workload: why Chamber wants it evicted, a CamelCase reason (IdleReclaim,
	// GPUFault) that becomes the Events' reason.
	AnnotationEvictionReason = "chamber.dev/eviction-reason"
	// On the Workload: the message users read in its Events and check state.
	AnnotationEvictionMessage = "chamber.dev/eviction-message"
	// On the Workload: when the eviction was asked for (RFC 3339).
	AnnotationEvictionRequestedAt = "chamber.dev/eviction-requested-at"
	// On the Workload, optional: a grace period (Go duration) replacing the team's
	// and tier's; "0s" evicts at once.
	AnnotationEvictionGracePeriod = "chamber.dev/eviction-grace-period"
	// On the Workload, optional: "true" asks for a pause, not a requeue: the workload
	// is deactivated (spec.active false) before it is evicted, so that Kueue cannot
	// admit it again in between; whoever asked for it resumes it.
	AnnotationEvictionPause = "chamber.dev/eviction-pause"
	// On the Workload, written with the request: the admission it is for, as the count
	// of evictions in the Workload's status.schedulingStats when it was asked. Once the
	// workload has been evicted since (by Kueue or by Chamber), the request is done:
	// Chamber removes it and does not evict the workload's next admission for it. A
	// request without it (written by hand) is for whatever admission is current.
	AnnotationEvictionAdmission = "chamber.dev/eviction-admission"
	// On the Workload: the reason of the pause Chamber's admission controller carried
	// out (it deactivated the workload for that request), until the requester takes
	// the workload over; it tells a pause of Chamber's from a user's deactivation.
	AnnotationEvictionPaused = "chamber.dev/eviction-paused"

	// On the pods: the notice, the time (RFC 3339) the pod will be stopped. A pod
	// sees it through the downward API (annotations in a volume update live).
	AnnotationEvictionDeadline = "chamber.dev/eviction-deadline"
	// On a pod or its Job, set by the job: "true" once it has saved a checkpoint, so
	// the eviction need not wait out the grace period.
	AnnotationCheckpointReady = "chamber.dev/checkpoint-ready"
	// On a pod (its template), set by whoever writes the job: "true" says the job
	// checkpoints on the notice (it reads AnnotationEvictionDeadline and answers with
	// AnnotationCheckpointReady). Such a pod, deleted once its notice ran out
	// unanswered, has had its grace: it is hung, or cannot save, and gets Kubernetes'
	// default SIGTERM grace (30 s) instead of the eviction grace that Chamber's
	// MutatingAdmissionPolicy raised its terminationGracePeriodSeconds to for Kueue's
	// preemptions, which give no notice. Without it a pod gets both, the notice and
	// then that SIGTERM grace, since a job that only handles SIGTERM needs the second.
	AnnotationCheckpointOnNotice = "chamber.dev/checkpoint-on-notice"
)

// Annotations room for big jobs writes on a waiting Workload it moved others for.
const (
	// AnnotationRoomMadeAt: when Chamber last moved workloads to make room for it
	// (RFC 3339); it makes no more room for it until the moves have had time to settle.
	AnnotationRoomMadeAt = "chamber.dev/room-made-at"
	// AnnotationRoomMoved: the UIDs of the workloads moved to make room for it, comma
	// separated; none is moved for it twice.
	AnnotationRoomMoved = "chamber.dev/room-moved"
)

// Annotations room for big jobs writes on a workload it paused for a waiting one (a
// lower-tier workload whose ClusterQueue borrows the GPUs, which fits nowhere else).
const (
	// AnnotationRoomPausedFor: the waiting workload (namespace/name) it was paused for.
	AnnotationRoomPausedFor = "chamber.dev/room-paused-for"
	// AnnotationRoomPausedAt: when (RFC 3339); it is resumed at the latest the room's
	// settle time later.
	AnnotationRoomPausedAt = "chamber.dev/room-paused-at"
	// AnnotationRoomHeld is "true" while Chamber keeps it deactivated (spec.active
	// false) once Kueue evicted it, so that it does not take back the GPUs and quota
	// it left before the waiting workload is admitted.
	AnnotationRoomHeld = "chamber.dev/room-held"
)

// TaintRoom is the NoSchedule taint room for big jobs puts on a node it is freeing for
// a waiting workload, while the moved workloads leave: nothing else is placed there
// meanwhile. Its value is the waiting workload's UID; the node's annotations
// AnnotationRoomFor (namespace/name), AnnotationRoomGPUs (the GPUs its pod needs there)
// and AnnotationRoomMadeAt say for whom and since when. Chamber takes it off as soon as
// the room is whole, the workload no longer waits, or the room's settle time passed.
const TaintRoom = "chamber.dev/room-for"

// Annotations on a node room is being made on.
const (
	AnnotationRoomFor  = "chamber.dev/room-for"
	AnnotationRoomGPUs = "chamber.dev/room-gpus"
)

// Annotations on a Workload (or a Volcano Job) idle reclaim paused, written by idle
// reclaim alone.
const (
	// AnnotationIdleReclaimedFor is the waiting workload (namespace/name) the GPUs
	// were reclaimed for.
	AnnotationIdleReclaimedFor = "chamber.dev/idle-reclaimed-for"
	// IdleReclaimedForIdleLimit in AnnotationIdleReclaimedFor marks a workload paused
	// at its interactive idle time limit: nobody waited; it stays paused until its
	// user activates it again.
	IdleReclaimedForIdleLimit = "interactive-idle-time-limit"
	// AnnotationIdleReclaimedAt is when the eviction was asked for (RFC 3339).
	AnnotationIdleReclaimedAt = "chamber.dev/idle-reclaimed-at"
	// AnnotationIdleReclaimHeld is "true" while idle reclaim keeps the workload
	// deactivated.
	AnnotationIdleReclaimHeld = "chamber.dev/idle-reclaim-held"
	// AnnotationIdleReclaims counts the workload's reclaims; it stays when the hold
	// ends. A workload reclaimed for idling does not get other idle workloads
	// reclaimed while it waits.
	AnnotationIdleReclaims = "chamber.dev/idle-reclaims"
	// AnnotationIdleReclaimedGPUHours adds up the GPU-hours the workload had held idle
	// at each of its reclaims (as chamber_idle_reclaimed_gpu_hours_total counts them);
	// it stays when the hold ends, and `kubectl chamber status` sums it.
	AnnotationIdleReclaimedGPUHours = "chamber.dev/idle-reclaimed-gpu-hours"
	// AnnotationIdleReclaimPausedAtRetry is a Volcano Job's status.retryCount when
	// idle reclaim paused it: Volcano counts the resume, so a higher one says it was
	// resumed.
	AnnotationIdleReclaimPausedAtRetry = "chamber.dev/idle-reclaim-paused-at-retry"
)

// Events of idle reclaim's pause: `kubectl describe workload` shows why it is paused
// and when it resumed.
const (
	ReasonIdleReclaimPaused  = "IdleReclaimPaused"
	ReasonIdleReclaimResumed = "IdleReclaimResumed"
)

// Annotations Chamber writes on a Volcano Job it restarts. The request before it (the
// notice and grace) uses the eviction protocol's annotations (AnnotationEviction*), as
// on a Kueue Workload.
const (
	// AnnotationVolcanoRestartFrom is the Job's status.retryCount when Chamber issued
	// its RestartJob Command. Volcano adds one as it restarts the Job: while the two
	// are equal the restart is under way, and Chamber issues no other.
	AnnotationVolcanoRestartFrom = "chamber.dev/volcano-restart-from-retry"
	// AnnotationVolcanoRestartedAt is when Chamber issued it (RFC 3339).
	AnnotationVolcanoRestartedAt = "chamber.dev/volcano-restarted-at"
)
