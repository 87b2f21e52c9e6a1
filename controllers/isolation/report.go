package isolation

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// fault is one Unhealthy fault of one GPU, as its agent reports it, or of the whole
// node (gpu nodeWide), as a node condition reports it.
type fault struct {
	gpu    int
	reason string
	// action is the fault's Immediate Action in NVIDIA's XID catalog, as the agent
	// reports it (chamber.FaultAction); empty when the agent does not say.
	action     chamber.FaultAction
	message    string
	persistent bool
}

// report is what the agent's GPUNode says about the node, for isolation: Healthy
// (Degraded GPUs still run work), Unhealthy, or Unknown.
type report struct {
	health chamber.GPUHealth
	// hasAgent: a GPUNode exists. A node never reported on is simply not watched.
	hasAgent bool
	// unknownReason and unknownMessage say why health is Unknown.
	unknownReason, unknownMessage string
	heartbeat                     time.Time
	// heardAt is when this controller heard the report (chamber.Heartbeats); interval
	// the agent's heartbeat interval.
	heardAt  time.Time
	interval time.Duration
	// staleAt is when the report stops counting, unless the agent writes again.
	staleAt time.Time
	faults  []fault
	// pods holds the pod on each GPU; mapped says the agent can tell (it reads the
	// kubelet's pod-resources), so that a GPU without a pod is free.
	pods   map[int]*chamber.PodReference
	mapped bool
}

// readReport reads the agent's GPUNode (nil when there is none). A silent agent's
// report (heard says when) is Unknown: silence is never a fault.
func readReport(gn *chamber.GPUNode, heard *chamber.Heartbeats, now time.Time) report {
	if gn == nil || gn.Status.LastHeartbeatTime == nil {
		// No agent, or one that has not reported yet: nothing to watch.
		return report{health: chamber.GPUUnknown}
	}
	r := report{hasAgent: true, health: chamber.GPUUnknown, pods: map[int]*chamber.PodReference{}}
	r.heartbeat, r.heardAt, r.interval = gn.Status.LastHeartbeatTime.Time, heard.HeardAt(gn), gn.Status.HeartbeatInterval()
	r.staleAt = r.heardAt.Add(heard.SilentAfter(gn))
	if !now.Before(r.staleAt) {
		r.unknownReason = chamber.ReasonAgentNotReporting
		r.unknownMessage = fmt.Sprintf("the node agent has not reported since %s (by its clock; it reports every %s): GPU health unknown; silence isolates nothing",
			r.heartbeat.UTC().Format(time.RFC3339), r.interval)
		return r
	}
	if gn.Status.Health == chamber.GPUUnknown {
		r.unknownReason, r.unknownMessage = "GPUHealthUnknown", "the node agent cannot read the GPUs (NVML unavailable): GPU health unknown"
		return r
	}
	r.health = chamber.GPUHealthy
	for _, g := range gn.Status.GPUs {
		r.pods[int(g.Index)] = g.Pod
		r.mapped = r.mapped || g.Pod != nil
		if g.Health != chamber.GPUUnhealthy {
			continue
		}
		r.health = chamber.GPUUnhealthy
		n := len(r.faults)
		for _, f := range g.Faults {
			if f.Severity == chamber.GPUUnhealthy {
				r.faults = append(r.faults, fault{gpu: int(g.Index), reason: f.Reason, action: f.Action,
					message: f.Message, persistent: f.Persistent})
			}
		}
		if len(r.faults) == n {
			r.faults = append(r.faults, fault{gpu: int(g.Index), reason: "GPUUnhealthy", message: "the agent reports the GPU Unhealthy"})
		}
	}
	return r
}

// nodeWide is the GPU of a fault that names none: a node condition's.
const nodeWide = -1

// where the fault is, for people: "GPU 3", or "the node".
func (f fault) where() string {
	if f.gpu == nodeWide {
		return "the node"
	}
	return fmt.Sprintf("GPU %d", f.gpu)
}

// withConditions adds the faults that the node's conditions of the given types report
// (Node Problem Detector's, NVSentinel's, or any health checker's that sets a node
// condition): each one True is a fault of the whole node, named by its reason (its
// type when it gives none), with no catalog action. It makes the node's health
// Unhealthy whatever the agent says, or whether one runs at all.
func (r report) withConditions(node *corev1.Node, types []corev1.NodeConditionType) report {
	for _, c := range node.Status.Conditions {
		if c.Status != corev1.ConditionTrue || !slices.Contains(types, c.Type) {
			continue
		}
		msg := "node condition " + string(c.Type)
		if c.Message != "" {
			msg += ": " + c.Message
		}
		r.faults = append(r.faults, fault{gpu: nodeWide, reason: cmp.Or(c.Reason, string(c.Type)), message: msg})
		r.health = chamber.GPUUnhealthy
	}
	return r
}

// ReasonOperator names the fault of a node an operator asked to isolate
// (chamber.AnnotationIsolate).
const ReasonOperator = "Operator"

// withOperator adds the fault of an operator's isolation (chamber.AnnotationIsolate):
// one of the whole node that only a clear ends. A node being cleared has none: the
// clear is the operator's word that the node may come back, and a pool's preflight
// then waits on the agent's report alone.
func (r report) withOperator(node *corev1.Node) report {
	why := node.Annotations[chamber.AnnotationIsolate]
	if why == "" || node.Annotations[chamber.AnnotationIsolationClear] == "true" {
		return r
	}
	r.faults = append(r.faults, fault{gpu: nodeWide, reason: ReasonOperator, message: "isolated by an operator: " + why, persistent: true})
	r.health = chamber.GPUUnhealthy
	return r
}

// byOperator: an operator asked for the isolation; no dry run, limit or breaker holds
// it back.
func (r report) byOperator() bool {
	return slices.ContainsFunc(r.faults, func(f fault) bool { return f.reason == ReasonOperator && f.gpu == nodeWide })
}

// primary is the fault that names the isolation: a hardware fault before a transient
// one, and among them one that takes the node (it decides the level under Auto)
// before one a GPU reset clears; the first of a kind.
func (r report) primary() fault {
	if len(r.faults) == 0 {
		return fault{reason: "GPUUnhealthy"}
	}
	rank := func(f fault) int {
		n := 0
		if f.persistent {
			n += 2
		}
		if f.action.TakesNode() {
			n++
		}
		return n
	}
	best := r.faults[0]
	for _, f := range r.faults[1:] {
		if rank(f) > rank(best) {
			best = f
		}
	}
	return best
}

// taintValue is the fault's reason as the value of Chamber's taint, which must be a
// label value: a node condition's reason is free text ("GPU fell off the bus", a path),
// and a taint the API server refuses would fail every write that isolates the node.
// Each character a label value cannot hold becomes "_", the ends are trimmed to a
// letter or digit, and a reason longer than a label value keeps its head and ends with
// a hash of the whole; the reason itself stays in the condition's message and the Event.
func (f fault) taintValue() string {
	v := strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, f.reason)
	v = strings.Trim(v, "-_.")
	if v == "" {
		return "GPUUnhealthy"
	}
	return kube.ShortName(v, validation.LabelValueMaxLength)
}

// level is the isolation level of the report's faults under the pool's level, and
// why, for people. Node and GPU are the pool's to force. Under Auto (or unset) each
// fault's catalog action decides, and the node is isolated when any fault's action
// takes the node (a reboot, a replacement) or is unknown (a GPU the agent reports
// Unhealthy without a fault): GPU level only when a reset of the failing GPUs is all
// the faults need.
func (r report) level(pool chamber.IsolationLevel) (chamber.IsolationLevel, string) {
	for _, f := range r.faults {
		if f.gpu == nodeWide {
			// Not even a forced GPU level can hold a GPU the fault does not name.
			return chamber.IsolateNode, fmt.Sprintf("%s names no GPU", f.message)
		}
	}
	if pool == chamber.IsolateNode || pool == chamber.IsolateGPU {
		return pool, "forced by the pool's isolation policy"
	}
	for _, f := range r.faults {
		if f.action.TakesNode() {
			return chamber.IsolateNode, fmt.Sprintf("%s on %s needs %s", f.reason, f.where(), cmp.Or(string(f.action), "an action the agent did not report"))
		}
	}
	return chamber.IsolateGPU, "a reset of the failing GPUs is all the faults need"
}

func (r report) persistent() bool {
	return slices.ContainsFunc(r.faults, func(f fault) bool { return f.persistent })
}

// describe names the faults for people: "XID79 on GPU 3 (XID 79: GPU has fallen off the
// bus)".
func (r report) describe() string {
	parts := make([]string, len(r.faults))
	for i, f := range r.faults {
		parts[i] = fmt.Sprintf("%s on %s", f.reason, f.where())
		if f.message != "" {
			parts[i] += " (" + f.message + ")"
		}
	}
	return strings.Join(parts, "; ")
}

// failingGPUs are the indices of the Unhealthy GPUs, in order.
func (r report) failingGPUs() []int {
	var out []int
	for _, f := range r.faults {
		if f.gpu != nodeWide && !slices.Contains(out, f.gpu) {
			out = append(out, f.gpu)
		}
	}
	slices.Sort(out)
	return out
}

// podsOnFailingGPUs are the pods holding the failing GPUs, or nil when the agent
// cannot tell which pod holds which GPU (no kubelet pod-resources, as on kwok
// nodes): then every workload on the node must go.
func (r report) podsOnFailingGPUs() map[types.NamespacedName]bool {
	if !r.mapped {
		return nil
	}
	out := map[types.NamespacedName]bool{}
	for _, gpu := range r.failingGPUs() {
		if p := r.pods[gpu]; p != nil {
			out[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = true
		}
	}
	return out
}
