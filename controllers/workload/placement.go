package workload

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltas "sigs.k8s.io/kueue/pkg/util/tas"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// NodeGPUs is what the check knows of one node's GPUs.
type NodeGPUs struct {
	Name string
	// Allocatable GPUs the node advertises (the device plugin's count).
	Allocatable int64
	// Schedulable is false for cordoned nodes and nodes tainted out of service
	// (kube.Schedulable).
	Schedulable bool
	// UsedByOthers: GPUs requested by running pods of other workloads, Chamber's GPU
	// hold pods among them.
	UsedByOthers int64
	// Failing are GPUs the agent reports Unhealthy that no pod holds, with what is
	// wrong with each.
	Failing []string
	// Withheld are GPUs the device plugin no longer offers (capacity minus allocatable:
	// it withdraws a GPU after a fatal XID); Held those Chamber's GPU hold pods take.
	// Either way a failing GPU is out of Allocatable-UsedByOthers already.
	Withheld, Held int64
}

// OfferedFailing is how many failing GPUs the node still offers to new pods: those
// neither its device plugin withholds nor a GPU hold takes. Counting the others again
// would turn away pods from the node's healthy GPUs.
func (n NodeGPUs) OfferedFailing() int64 {
	return max(0, int64(len(n.Failing))-n.Withheld-n.Held)
}

// HealthyFree is how many of the node's GPUs a new pod can use.
func (n NodeGPUs) HealthyFree() int64 {
	if !n.Schedulable {
		return 0
	}
	return max(0, n.Allocatable-n.UsedByOthers-n.OfferedFailing())
}

// nodeGPUs sums a node's state. pods are the pods bound to it; own says which belong
// to the workload being checked. gpuNode is the agent's report (nil: no agent); a
// silent agent's (chamber.SilentAfterHeartbeats, as heard says at now) is not believed
// either way: silence marks nothing as failing.
func nodeGPUs(node *corev1.Node, pods []corev1.Pod, own func(*corev1.Pod) bool, gpuNode *chamber.GPUNode, heard *chamber.Heartbeats, now time.Time) NodeGPUs {
	alloc := node.Status.Allocatable[kube.ResourceGPU]
	n := NodeGPUs{Name: node.Name, Allocatable: alloc.Value(), Schedulable: kube.Schedulable(node), Withheld: kube.WithheldGPUs(node)}
	for i := range pods {
		p := &pods[i]
		if own(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		gpus := kube.PodGPUs(&p.Spec)
		n.UsedByOthers += gpus
		if p.Labels[chamber.LabelGPUHold] != "" {
			n.Held += gpus
		}
	}
	if gpuNode == nil || heard.Silent(gpuNode, now) {
		return n
	}
	for _, g := range gpuNode.Status.GPUs {
		if g.Health != chamber.GPUUnhealthy || g.Pod != nil {
			continue
		}
		n.Failing = append(n.Failing, describeFault(g))
	}
	return n
}

func describeFault(g chamber.GPUStatus) string {
	var faults []string
	for _, f := range g.Faults {
		faults = append(faults, f.Reason)
	}
	if len(faults) == 0 {
		return fmt.Sprintf("GPU %d", g.Index)
	}
	return fmt.Sprintf("GPU %d %s", g.Index, strings.Join(faults, ","))
}

// podSetDemand is one pod set's GPUs: Count pods of PerPod GPUs each.
type podSetDemand struct {
	Name   kueue.PodSetReference
	Count  int32
	PerPod int64
	// Flavor is the pod set's GPU flavor.
	Flavor kueue.ResourceFlavorReference
	// Topology is Kueue's placement, when topology-aware scheduling placed it.
	Topology *kueue.TopologyAssignment
}

// demands are the GPU pod sets of an admission.
func demands(admission *kueue.Admission) []podSetDemand {
	var out []podSetDemand
	for _, psa := range admission.PodSetAssignments {
		total := psa.ResourceUsage[kube.ResourceGPU]
		count := int32(1)
		if psa.Count != nil {
			count = *psa.Count
		}
		if total.IsZero() || count <= 0 {
			continue
		}
		out = append(out, podSetDemand{
			Name: psa.Name, Count: count, PerPod: total.Value() / int64(count),
			Flavor: psa.Flavors[kube.ResourceGPU], Topology: psa.TopologyAssignment,
		})
	}
	return out
}

// Verdict is the check's answer for one workload.
type Verdict struct {
	// Ready: every pod lands on healthy GPUs.
	Ready bool
	// Message says why, for kubectl describe workload.
	Message string
}

// placedVerdict checks Kueue's topology assignment: every node it names must have
// healthy free GPUs for the pods put there. nodes are keyed by hostname label.
func placedVerdict(d podSetDemand, nodes map[string]NodeGPUs) (bool, string) {
	var problems []string
	placed := 0
	for domain := range utiltas.InternalSeqFrom(d.Topology) {
		host := domain.Values[len(domain.Values)-1]
		need := int64(domain.Count) * d.PerPod
		n, ok := nodes[host]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("node %s is gone", host))
		case n.HealthyFree() < need:
			problems = append(problems, shortOf(n, need))
		default:
			placed++
		}
	}
	if len(problems) > 0 {
		return false, fmt.Sprintf("pod set %s: %s", d.Name, strings.Join(problems, "; "))
	}
	return true, fmt.Sprintf("pod set %s: %d node(s) with healthy GPUs", d.Name, placed)
}

func shortOf(n NodeGPUs, need int64) string {
	msg := fmt.Sprintf("node %s has %d healthy free GPUs, the pods placed there need %d", n.Name, n.HealthyFree(), need)
	if !n.Schedulable {
		msg = fmt.Sprintf("node %s is cordoned or tainted", n.Name)
	}
	if n.OfferedFailing() > 0 {
		msg += fmt.Sprintf(" (%d advertised but failing: %s)", n.OfferedFailing(), strings.Join(n.Failing, "; "))
	}
	return msg
}

// fitVerdict, without a topology assignment, looks for room for every pod on the
// flavor's nodes (first fit, largest first), as kube-scheduler would find it.
func fitVerdict(d podSetDemand, candidates []NodeGPUs) (bool, string) {
	free := make([]NodeGPUs, len(candidates))
	copy(free, candidates)
	sort.Slice(free, func(i, j int) bool { return free[i].HealthyFree() > free[j].HealthyFree() })
	room := make([]int64, len(free))
	for i := range free {
		room[i] = free[i].HealthyFree()
	}
	for p := int32(0); p < d.Count; p++ {
		i := slices.IndexFunc(room, func(r int64) bool { return r >= d.PerPod })
		if i < 0 {
			return false, unfitMessage(d, p, free)
		}
		room[i] -= d.PerPod
	}
	return true, fmt.Sprintf("pod set %s: %d pod(s) fit on healthy GPUs of flavor %s", d.Name, d.Count, d.Flavor)
}

func unfitMessage(d podSetDemand, placed int32, nodes []NodeGPUs) string {
	msg := fmt.Sprintf("pod set %s: %d of %d pod(s) of %d GPUs fit on the healthy free GPUs of flavor %s",
		d.Name, placed, d.Count, d.PerPod, d.Flavor)
	if len(nodes) == 0 {
		return msg + " (it has no nodes)"
	}
	best := nodes[0]
	msg += fmt.Sprintf("; the most on one node is %d on %s", best.HealthyFree(), best.Name)
	var failing []string
	for _, n := range nodes {
		if n.OfferedFailing() == 0 {
			continue
		}
		for _, f := range n.Failing {
			failing = append(failing, n.Name+" "+f)
		}
	}
	if len(failing) > 0 {
		msg += fmt.Sprintf("; advertised but failing: %s", strings.Join(failing, "; "))
	}
	return msg
}

// ownedBy reports whether a pod belongs to one of the owners (the workload's job).
func ownedBy(owners []types.UID) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, ref := range p.OwnerReferences {
			if slices.Contains(owners, ref.UID) {
				return true
			}
		}
		return false
	}
}
