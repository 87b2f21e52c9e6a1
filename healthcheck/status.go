package healthcheck

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
)

// Reasons of the GPUHealthy condition (GPUNode and Node) and of the source's condition
// (NVMLUnavailable, DCGMUnavailable).
const (
	// ReasonAllGPUsHealthy: GPUHealthy is True.
	ReasonAllGPUsHealthy = "AllGPUsHealthy"
	// ReasonGPUsDegraded: GPUHealthy is False, the worst GPU is Degraded (still runs work).
	ReasonGPUsDegraded = "GPUsDegraded"
	// ReasonGPUsUnhealthy: GPUHealthy is False, a GPU is Unhealthy (isolation acts on it).
	ReasonGPUsUnhealthy = "GPUsUnhealthy"
	// ReasonNoGPUs: GPUHealthy is Unknown, NVML answers but lists no GPU.
	ReasonNoGPUs = "NoGPUs"
	// ReasonNVMLUnavailable: GPUHealthy is Unknown and NVMLUnavailable True.
	ReasonNVMLUnavailable = "NVMLUnavailable"
	// ReasonNVMLAvailable: NVMLUnavailable is False.
	ReasonNVMLAvailable = "NVMLAvailable"
	// ReasonDCGMUnavailable: GPUHealthy is Unknown and DCGMUnavailable True (Prometheus
	// does not answer, or has no fresh series for the node).
	ReasonDCGMUnavailable = "DCGMUnavailable"
	// ReasonDCGMAvailable: DCGMUnavailable is False.
	ReasonDCGMAvailable = "DCGMAvailable"
)

// maxConditionMessage keeps a condition readable in kubectl; the GPUNode has the rest.
const maxConditionMessage = 1024

// PodRef names the container holding a GPU.
type PodRef struct {
	Namespace string
	Name      string
	Container string
}

// Source is who reads the GPUs for a GPUNode, with the condition that says when it
// cannot: the agent through NVML, or the controller through dcgm-exporter's series.
type Source struct {
	Name chamberv1alpha1.ReportSource
	// Condition is True while the source cannot read the GPUs (Err set).
	Condition string
	// ReasonUp and UpMessage go with the condition False, ReasonDown with it True
	// (and with GPUHealthy Unknown).
	ReasonUp, ReasonDown, UpMessage string
}

// The two sources of GPU health.
var (
	SourceNVML = Source{Name: chamberv1alpha1.SourceAgent, Condition: chamberv1alpha1.ConditionNVMLUnavailable,
		ReasonUp: ReasonNVMLAvailable, ReasonDown: ReasonNVMLUnavailable, UpMessage: "NVML answers"}
	SourceDCGM = Source{Name: chamberv1alpha1.SourceDCGM, Condition: chamberv1alpha1.ConditionDCGMUnavailable,
		ReasonUp: ReasonDCGMAvailable, ReasonDown: ReasonDCGMUnavailable, UpMessage: "Prometheus has dcgm-exporter's series for the node"}
)

// ErrNVMLUnavailable wraps every error that means NVML cannot be used at all (no driver,
// no library, not initialised). The agent reports it as the NVMLUnavailable condition and
// retries.
var ErrNVMLUnavailable = errors.New("NVML unavailable")

// StatusInput is everything one GPUNode status is built from.
type StatusInput struct {
	Now    time.Time
	Source Source
	GPUs   []GPUStatus
	// Err is non-nil while the source cannot read the GPUs.
	Err           error
	DriverVersion string
	// Pods maps device IDs (GPU UUIDs or NVML indices) to the pod holding the GPU.
	Pods      map[string]PodRef
	Util      *UtilizationWindow
	Window    time.Duration
	Heartbeat time.Duration
	// Conditions are the last written ones, whose transition times carry over.
	Conditions []metav1.Condition
}

// BuildStatus is the GPUNode status to publish now.
func BuildStatus(in StatusInput) chamberv1alpha1.GPUNodeStatus {
	s := chamberv1alpha1.GPUNodeStatus{
		Health:            nodeHealth(in.GPUs, in.Err),
		DriverVersion:     in.DriverVersion,
		LastHeartbeatTime: &metav1.Time{Time: in.Now},
		HeartbeatSeconds:  int32(in.Heartbeat / time.Second),
		Source:            in.Source.Name,
	}
	for _, g := range in.GPUs {
		s.GPUs = append(s.GPUs, gpuStatus(g, in))
	}
	conds := make([]metav1.Condition, len(in.Conditions))
	copy(conds, in.Conditions)
	healthy := GPUHealthyCondition(in.GPUs, in.Err, in.Source)
	src := metav1.Condition{Type: in.Source.Condition, Status: metav1.ConditionFalse,
		Reason: in.Source.ReasonUp, Message: in.Source.UpMessage}
	if in.Err != nil {
		src.Status, src.Reason, src.Message = metav1.ConditionTrue, in.Source.ReasonDown, truncate(in.Err.Error())
	}
	for _, c := range []metav1.Condition{healthy, src} {
		// SetStatusCondition keeps the old transition time while the status holds.
		c.LastTransitionTime = metav1.Time{Time: in.Now}
		meta.SetStatusCondition(&conds, c)
	}
	s.Conditions = conds
	return s
}

func gpuStatus(g GPUStatus, in StatusInput) chamberv1alpha1.GPUStatus {
	out := chamberv1alpha1.GPUStatus{
		Index:     int32(g.Index),
		UUID:      g.UUID,
		Model:     g.Sample.Name,
		PCIBusID:  g.Sample.PCIBusID,
		MemoryMiB: int64(g.Sample.MemoryTotalBytes >> 20),
		Health:    chamberv1alpha1.GPUHealth(g.Health),
	}
	for _, f := range g.Faults {
		out.Faults = append(out.Faults, chamberv1alpha1.GPUFault{
			Reason:     string(f.Reason),
			Severity:   chamberv1alpha1.GPUHealth(f.Severity),
			Action:     f.Action,
			Persistent: f.Persistent,
			Message:    f.Message,
			FirstSeen:  &metav1.Time{Time: f.FirstSeen},
			Count:      int32(min(f.Count, 1<<31-1)),
		})
	}
	if gpu, mem, ok := in.Util.Mean(g.Index); ok {
		u := &chamberv1alpha1.GPUUtilization{GPUPercent: gpu, MemoryPercent: mem, WindowSeconds: int32(in.Window / time.Second),
			Signal: in.Util.Signal(g.Index)}
		if ReadingOK(&g.Sample, FieldMemory) {
			u.MemoryUsedMiB = int64(g.Sample.MemoryUsedBytes >> 20)
		}
		out.Utilization = u
	}
	if p, ok := PodOf(g, in.Pods); ok {
		out.Pod = &chamberv1alpha1.PodReference{Namespace: p.Namespace, Name: p.Name}
	}
	return out
}

// PodOf finds the pod holding GPU g: device-plugin IDs are UUIDs, or NVML indices with
// the plugin's index strategy.
func PodOf(g GPUStatus, pods map[string]PodRef) (PodRef, bool) {
	if p, ok := pods[g.UUID]; ok && g.UUID != "" {
		return p, true
	}
	p, ok := pods[strconv.Itoa(g.Index)]
	return p, ok
}

func nodeHealth(gpus []GPUStatus, nvmlErr error) chamberv1alpha1.GPUHealth {
	if nvmlErr != nil || len(gpus) == 0 {
		return chamberv1alpha1.GPUUnknown
	}
	h := Healthy
	for _, g := range gpus {
		h = Worse(h, g.Health)
	}
	return chamberv1alpha1.GPUHealth(h)
}

// GPUHealthyCondition is True when every GPU is healthy, False naming the faults, and
// Unknown when the source cannot tell (err): silence is never taken for a fault.
func GPUHealthyCondition(gpus []GPUStatus, err error, src Source) metav1.Condition {
	c := metav1.Condition{Type: chamberv1alpha1.ConditionGPUHealthy}
	switch h := nodeHealth(gpus, err); {
	case err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, src.ReasonDown, truncate(err.Error())
	case len(gpus) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonNoGPUs, "no GPUs reported on this node"
	case h == chamberv1alpha1.GPUHealthy:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonAllGPUsHealthy, fmt.Sprintf("%d GPUs healthy", len(gpus))
	case h == chamberv1alpha1.GPUDegraded:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonGPUsDegraded, faultSummary(gpus)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonGPUsUnhealthy, faultSummary(gpus)
	}
	return c
}

// faultSummary names each faulty GPU and its reasons. It leaves out the faults' own
// messages, which carry rates and temperatures that change every poll: the condition
// must change only when the faults do, or every poll would be a write.
func faultSummary(gpus []GPUStatus) string {
	var parts []string
	for _, g := range gpus {
		if len(g.Faults) == 0 {
			continue
		}
		reasons := make([]string, len(g.Faults))
		for i, f := range g.Faults {
			reasons[i] = describeReason(f.Reason)
		}
		parts = append(parts, fmt.Sprintf("GPU %d %s: %s", g.Index, g.Health, strings.Join(reasons, ", ")))
	}
	return truncate(strings.Join(parts, "; "))
}

// describeReason adds the catalog's name to an XID, e.g. "XID79 (GPU has fallen off the
// bus)".
func describeReason(r Reason) string {
	code, err := strconv.ParseUint(strings.TrimPrefix(string(r), "XID"), 10, 64)
	if !strings.HasPrefix(string(r), "XID") || err != nil {
		return string(r)
	}
	if info := LookupXID(code); info.Known {
		return fmt.Sprintf("%s (%s)", r, info.Name)
	}
	return string(r)
}

func truncate(s string) string {
	if len(s) <= maxConditionMessage {
		return s
	}
	return s[:maxConditionMessage-3] + "..."
}

// significant strips what changes without anything happening: the heartbeat, the
// utilization (refreshed at heartbeats only), fault counts and messages (a held fault
// counts up every poll, rate messages change). Two statuses equal here need no write.
func significant(s chamberv1alpha1.GPUNodeStatus) chamberv1alpha1.GPUNodeStatus {
	s.LastHeartbeatTime = nil
	gpus := make([]chamberv1alpha1.GPUStatus, len(s.GPUs))
	for i, g := range s.GPUs {
		g.Utilization = nil
		faults := make([]chamberv1alpha1.GPUFault, len(g.Faults))
		for j, f := range g.Faults {
			f.Count, f.Message = 0, ""
			faults[j] = f
		}
		g.Faults = faults
		gpus[i] = g
	}
	s.GPUs = gpus
	return s
}

// StatusChanged reports whether status differs from the last written one in a way that
// must be published before the next heartbeat.
func StatusChanged(last *chamberv1alpha1.GPUNodeStatus, status chamberv1alpha1.GPUNodeStatus) bool {
	return last == nil || !equality.Semantic.DeepEqual(significant(*last), significant(status))
}

// NodeCondition is the Node's GPUHealthy condition for the GPUNode's; prev is the last
// one written, whose transition time carries over while the status holds.
func NodeCondition(c metav1.Condition, prev *corev1.NodeCondition, now time.Time) corev1.NodeCondition {
	nc := corev1.NodeCondition{
		Type:               corev1.NodeConditionType(chamberv1alpha1.ConditionGPUHealthy),
		Status:             corev1.ConditionStatus(c.Status),
		Reason:             c.Reason,
		Message:            c.Message,
		LastHeartbeatTime:  metav1.Time{Time: now},
		LastTransitionTime: metav1.Time{Time: now},
	}
	if prev != nil && prev.Status == nc.Status {
		nc.LastTransitionTime = prev.LastTransitionTime
	}
	return nc
}

// NodeConditionChanged reports whether the Node needs a patch: only status, reason and
// message count, so the Node is written on change only (the GPUNode carries the heartbeat).
func NodeConditionChanged(prev *corev1.NodeCondition, c metav1.Condition) bool {
	return prev == nil || string(prev.Status) != string(c.Status) || prev.Reason != c.Reason || prev.Message != c.Message
}
