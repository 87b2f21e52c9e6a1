package idlereclaim

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Policy is the idle reclaim policy in force for a team's workloads, defaults filled in.
type Policy struct {
	Enabled bool
	// UtilizationPercent: a workload is idle while each of its GPUs is below it.
	UtilizationPercent int32
	// Window is how long a workload stays idle while others wait before it is reclaimed.
	Window      time.Duration
	ExemptTiers []string
	// InteractiveIdleLimit pauses an interactive workload idle this long, waiters or
	// not; 0 means no limit.
	InteractiveIdleLimit time.Duration
	// WorkloadOptOut: whether a workload's chamber.dev/idle-reclaim: "false" counts
	// (empty: Allowed).
	WorkloadOptOut chamber.WorkloadOptOut
}

// ResolvePolicy is the pool's policy with the team's set fields over it. Either may be
// nil. Idle reclaim is off unless one of them enables it.
func ResolvePolicy(pool, team *chamber.IdleReclaimPolicy) Policy {
	p := Policy{UtilizationPercent: DefaultUtilizationPercent, Window: DefaultWindow, ExemptTiers: DefaultExemptTiers}
	for _, layer := range []*chamber.IdleReclaimPolicy{pool, team} {
		if layer == nil {
			continue
		}
		if layer.Enabled != nil {
			p.Enabled = *layer.Enabled
		}
		if layer.UtilizationPercent != nil {
			p.UtilizationPercent = *layer.UtilizationPercent
		}
		if layer.Window != nil && layer.Window.Duration >= 0 {
			p.Window = layer.Window.Duration
		}
		if layer.ExemptTiers != nil {
			p.ExemptTiers = layer.ExemptTiers
		}
		if layer.InteractiveIdleLimit != nil && layer.InteractiveIdleLimit.Duration >= 0 {
			p.InteractiveIdleLimit = layer.InteractiveIdleLimit.Duration
		}
		if layer.WorkloadOptOut != "" {
			p.WorkloadOptOut = layer.WorkloadOptOut
		}
	}
	return p
}

func (p Policy) exempt(tier string) bool { return tier != "" && slices.Contains(p.ExemptTiers, tier) }

// usage is what a workload's GPUs do, by its node agents' reports.
type usage struct {
	// gpus is the GPUs its running pods hold.
	gpus int64
	// idle: every GPU it holds is known to be below the threshold.
	idle bool
	// lowSince is when they went below it, as far as the reports show (lowSince); now
	// where they cannot tell.
	lowSince time.Time
	// why it is not idle, for tests and logs.
	why string
}

// measure says whether the pods' GPUs are all below threshold percent. Only what the
// agents report counts: a pod not running, a node without a fresh report or a GPU
// without a utilization figure makes the workload not idle.
//
// Which GPUs a pod holds comes from the report (the agent asks the kubelet). Where the
// node's report names no pod at all (no kubelet pod-resources, e.g. kwok nodes), the
// pod's GPUs are below the threshold only if every GPU of the node is; the fleet
// inventory's guess of which GPUs a pod holds is good for dashboards, not for
// evicting someone.
func measure(pods []corev1.Pod, nodes map[string]*chamber.GPUNode, heard *chamber.Heartbeats, threshold int32, now time.Time) usage {
	var u usage
	for i := range pods {
		p := &pods[i]
		gpus := kube.PodGPUs(&p.Spec)
		if gpus == 0 || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		u.gpus += gpus
		if u.why != "" {
			continue
		}
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			u.why = fmt.Sprintf("pod %s is not running", p.Name)
			continue
		}
		var since time.Time
		since, u.why = podBelow(p, nodes[p.Spec.NodeName], heard, threshold, now)
		u.lowSince = later(u.lowSince, since)
	}
	switch {
	case u.gpus == 0:
		return usage{why: "no running pod holds GPUs"}
	case u.why != "":
		return u
	}
	u.idle = true
	return u
}

// podBelow says why the pod's GPUs are not all below threshold, or "" and since when
// they are (lowSince).
func podBelow(p *corev1.Pod, gn *chamber.GPUNode, heard *chamber.Heartbeats, threshold int32, now time.Time) (time.Time, string) {
	if gn == nil {
		return now, fmt.Sprintf("node %s has no agent report", p.Spec.NodeName)
	}
	if heard.Silent(gn, now) {
		return now, fmt.Sprintf("the agent of node %s is silent", gn.Name)
	}
	var mine, named []chamber.GPUStatus
	for _, g := range gn.Status.GPUs {
		if g.Pod == nil {
			continue
		}
		named = append(named, g)
		if g.Pod.Namespace == p.Namespace && g.Pod.Name == p.Name {
			mine = append(mine, g)
		}
	}
	switch {
	case len(mine) > 0:
	case len(named) > 0:
		return now, fmt.Sprintf("the agent of node %s does not name the GPUs of pod %s", gn.Name, p.Name)
	case len(gn.Status.GPUs) == 0:
		return now, fmt.Sprintf("the agent of node %s reports no GPUs", gn.Name)
	default:
		mine = gn.Status.GPUs
	}
	var since time.Time
	for _, g := range mine {
		if g.Utilization == nil {
			return now, fmt.Sprintf("GPU %d of node %s has no utilization figure", g.Index, gn.Name)
		}
		if g.Utilization.GPUPercent >= threshold {
			return now, fmt.Sprintf("GPU %d of node %s is at %d%%", g.Index, gn.Name, g.Utilization.GPUPercent)
		}
		since = later(since, lowSince(g.Utilization, threshold, now))
	}
	if p.Status.StartTime == nil {
		return now, ""
	}
	// A start time after now (the kubelet's clock ahead of ours) backdates nothing.
	if since = later(since, p.Status.StartTime.Time); since.After(now) {
		return now, ""
	}
	return since, ""
}

// lowSince is since when a GPU whose agent reports u has been below threshold, as far
// as the report tells: u is a mean over the agent's window, so at most the share
// u/threshold of the window was at or above it, and at least the rest below, taken
// as the window's last part (the same reading as the mean's: a GPU idle by it is
// idle). A GPU at 0% has been below since its window began; one just under the
// threshold, only just. The pod's start bounds it too (podBelow): the window may
// reach back to before the pod had the GPU.
func lowSince(u *chamber.GPUUtilization, threshold int32, now time.Time) time.Time {
	window := time.Duration(u.WindowSeconds) * time.Second
	below := float64(threshold-u.GPUPercent) / float64(threshold)
	return now.Add(-time.Duration(float64(window) * below))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waiting is the oldest workload that waits for GPUs wl's could serve, or nil.
//
// A workload waits when it is active, not finished, asks for GPUs and has been without
// quota for minWait or more (now is the time). Kueue reserves quota within a scheduling
// cycle where there is room: a workload that has only just been created or requeued
// (an evicted one, a reclaimed one let back) is not waiting yet, or every requeue
// would look like contention and reclaim the next idle workload, which requeues too.
//
// It could use wl's GPUs when its LocalQueue feeds wl's ClusterQueue, or another
// ClusterQueue of the same cohort (pool) that is not stopped (a team on budget hold
// admits nothing) and has quota, nominal or to borrow, of a GPU flavor wl holds.
// And its pods must fit on the room (room.go) the GPUs wl holds would leave; a nil
// room is not measured and fits everyone. Whether its quota lets it run once wl is
// gone is Kueue's business: reclaiming the GPUs is what gives it the chance.
//
// A workload that was itself reclaimed for idling (chamber.AnnotationIdleReclaims) waits in its
// queue like any other but gets no idle workload reclaimed: idle GPUs go to work that
// has not shown it leaves them idle, and idle workloads are never swapped.
func waiting(wl *kueue.Workload, workloads []kueue.Workload, localQueues []kueue.LocalQueue, clusterQueues []kueue.ClusterQueue, now time.Time, minWait time.Duration, r chamberkueue.FreeByNode) *kueue.Workload {
	if wl.Status.Admission == nil {
		return nil
	}
	q := newQueues(localQueues, clusterQueues)
	return q.firstWaiting(wl.UID, wl.Status.Admission.ClusterQueue, gpuFlavors(wl), workloads, now, minWait, r)
}

// waitingForPaused finds the oldest workload waiting for GPUs a paused (deactivated,
// so unadmitted) workload could use: pending in the ClusterQueue its LocalQueue feeds,
// or in another of its cohort with quota of one of that ClusterQueue's GPU flavors.
// Nil when nobody waits or its queue is unknown.
func waitingForPaused(wl *kueue.Workload, workloads []kueue.Workload, localQueues []kueue.LocalQueue, clusterQueues []kueue.ClusterQueue, now time.Time, minWait time.Duration) *kueue.Workload {
	q := newQueues(localQueues, clusterQueues)
	own, flavors, ok := q.queueOf(wl)
	if !ok {
		return nil
	}
	return q.firstWaiting(wl.UID, own, flavors, workloads, now, minWait, nil)
}

// queueOf is the ClusterQueue wl's LocalQueue feeds and its GPU flavors; false when
// either is unknown.
func (q queueIndex) queueOf(wl *kueue.Workload) (kueue.ClusterQueueReference, []kueue.ResourceFlavorReference, bool) {
	own, ok := q.feeds[lqKey{wl.Namespace, string(wl.Spec.QueueName)}]
	if !ok || q.cqs[own] == nil {
		return "", nil, false
	}
	return own, chamberkueue.GPUFlavors(q.cqs[own]), true
}

type lqKey struct{ namespace, name string }

// queueIndex indexes the LocalQueues (which ClusterQueue each feeds) and ClusterQueues.
type queueIndex struct {
	cqs   map[kueue.ClusterQueueReference]*kueue.ClusterQueue
	feeds map[lqKey]kueue.ClusterQueueReference
}

func newQueues(localQueues []kueue.LocalQueue, clusterQueues []kueue.ClusterQueue) queueIndex {
	q := queueIndex{cqs: make(map[kueue.ClusterQueueReference]*kueue.ClusterQueue, len(clusterQueues)),
		feeds: make(map[lqKey]kueue.ClusterQueueReference, len(localQueues))}
	for i := range clusterQueues {
		q.cqs[kueue.ClusterQueueReference(clusterQueues[i].Name)] = &clusterQueues[i]
	}
	for _, lq := range localQueues {
		q.feeds[lqKey{lq.Namespace, lq.Name}] = lq.Spec.ClusterQueue
	}
	return q
}

// firstWaiting is the oldest workload (other than self) waiting, as waiting says, in
// own or in a ClusterQueue of own's cohort with quota of one of flavors, that fits
// on r.
func (q queueIndex) firstWaiting(self types.UID, own kueue.ClusterQueueReference, flavors []kueue.ResourceFlavorReference, workloads []kueue.Workload, now time.Time, minWait time.Duration, r chamberkueue.FreeByNode) *kueue.Workload {
	var cohort kueue.CohortReference
	if cq := q.cqs[own]; cq != nil {
		cohort = cq.Spec.CohortName
	}
	var found *kueue.Workload
	for i := range workloads {
		p := &workloads[i]
		if p.UID == self || !chamberkueue.Pending(p) || (minWait > 0 && now.Sub(withoutQuotaSince(p)) < minWait) ||
			p.Annotations[chamber.AnnotationIdleReclaims] != "" || chamberkueue.WorkloadGPUs(p) == 0 {
			continue
		}
		target, ok := q.feeds[lqKey{p.Namespace, string(p.Spec.QueueName)}]
		if !ok {
			continue
		}
		cq := q.cqs[target]
		if cq == nil || (cq.Spec.StopPolicy != nil && *cq.Spec.StopPolicy != kueue.None) {
			continue
		}
		if target != own && (cohort == "" || cq.Spec.CohortName != cohort || !offersGPUFlavor(cq, flavors)) {
			continue
		}
		if (found == nil || older(p, found)) && fits(r, p) {
			found = p
		}
	}
	return found
}

// withoutQuotaSince is when the workload last lost its quota reservation (or was
// refused one), or its creation if Kueue has not said yet.
func withoutQuotaSince(wl *kueue.Workload) time.Time {
	if c := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil && c.Status == metav1.ConditionFalse {
		return c.LastTransitionTime.Time
	}
	return wl.CreationTimestamp.Time
}

func older(a, b *kueue.Workload) bool {
	return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
		cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name)) < 0
}
