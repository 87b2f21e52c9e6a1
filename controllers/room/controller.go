// Package room makes room for big jobs. A workload that needs whole nodes (a pod of 8
// GPUs) can wait for hours while the GPUs it needs are free, spread over nodes that
// each run a small job: its ClusterQueue has the quota, Kueue's topology-aware
// scheduling finds no node with room ("topology ... doesn't allow to fit"), and Kueue's
// preemption frees quota, not a node. When such a workload has waited MinWait, Chamber
// moves the fewest lower-tier workloads off one node (then the fewest GPUs) so that it
// fits, and only when the moved workloads fit on the other nodes' free GPUs: a move
// costs them a checkpoint and a restart, never their place (each is evicted with
// notice, chamberkueue.RequestEviction, and Kueue requeues it at once, as KAI's
// consolidation does). A workload is never moved twice for the same waiter
// (chamber.AnnotationRoomMoved), interactive workloads are never moved, and no more room
// is made for a waiter until Settle has passed since the last moves.
package room

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltas "sigs.k8s.io/kueue/pkg/util/tas"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// ReasonRoomForBigJob is the moved workloads' eviction reason and the reason of the
// waiting workload's Event.
const ReasonRoomForBigJob = "RoomForBigJob"

// Defaults of Options.
const (
	// DefaultMinWait: most fragmentation clears by itself within minutes, as small jobs
	// end; a move costs the moved job a checkpoint and a restart.
	DefaultMinWait = 2 * time.Minute
	// DefaultSettle covers the moved workloads' eviction grace (the admission check's
	// default, 5 minutes) and Kueue's requeue of both sides.
	DefaultSettle = 8 * time.Minute
	// DefaultInterval is how often a waiting workload is looked at again when nothing
	// about it changed.
	DefaultInterval = 30 * time.Second
)

// Options configure the controller.
type Options struct {
	// MinWait is how long a workload must have waited for a node before room is made.
	MinWait time.Duration
	// Settle is how long after moving workloads for a waiter no more are moved for it.
	Settle time.Duration
	// Interval is how often a waiting workload is looked at again.
	Interval time.Duration
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
}

// DefaultOptions are the controller's options unless flags say otherwise.
func DefaultOptions() Options {
	return Options{MinWait: DefaultMinWait, Settle: DefaultSettle, Interval: DefaultInterval}
}

// Controller reconciles Workloads waiting for a node.
type Controller struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options
}

// Register adds the controller to the manager.
func Register(mgr ctrl.Manager, opts Options) error {
	c := newController(mgr.GetClient(), mgr.GetEventRecorder("chamber-room"), opts)
	if err := registerHolds(mgr, c); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("room").
		For(&kueue.Workload{}).
		Complete(reconcile.AsReconciler(mgr.GetClient(), c))
}

func newController(c client.Client, recorder events.EventRecorder, opts Options) *Controller {
	if opts.MinWait < 0 {
		opts.MinWait = 0
	}
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Controller{client: c, recorder: recorder, opts: opts}
}

// Reconcile makes room for the workload if it waits for a node, or for quota that
// lower-tier workloads borrow, long enough.
func (c *Controller) Reconcile(ctx context.Context, wl *kueue.Workload) (reconcile.Result, error) {
	if res, done, err := c.reconcilePaused(ctx, wl); done || err != nil {
		return res, err
	}
	waitingSince, quota, ok := waitsForRoom(wl)
	if !ok {
		return reconcile.Result{}, nil
	}
	now := c.opts.Clock.Now()
	if wait := waitingSince.Add(c.opts.MinWait).Sub(now); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	if at, err := time.Parse(time.RFC3339, wl.Annotations[chamber.AnnotationRoomMadeAt]); err == nil {
		if wait := at.Add(c.opts.Settle).Sub(now); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	cq, flavors, err := c.flavorsOf(ctx, wl)
	if err != nil {
		return reconcile.Result{}, err
	}
	want := chamberkueue.WorkloadPodGPUs(wl)
	moved := movedFor(wl)
	for _, flavor := range flavors {
		nodes, err := c.nodesOf(ctx, flavor, priority(wl), moved)
		if err != nil {
			return reconcile.Result{}, err
		}
		// Moves first: they cost the moved workloads a restart, not their place. A
		// workload short of quota gains nothing from them (the moved take it again).
		p, ok := plan{}, false
		if quota == 0 {
			p, ok = makePlan(want, nodes, nil, 0)
		}
		paused := false
		if !ok {
			pause, err := c.borrowedIn(ctx, cq, flavor.Name)
			if err != nil {
				return reconcile.Result{}, err
			}
			p, ok = makePlan(want, nodes, pause, quota)
			paused = ok
		}
		if ok {
			if err := c.move(ctx, wl, p, paused, now); err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{RequeueAfter: c.opts.Settle}, nil
		}
	}
	return reconcile.Result{RequeueAfter: c.opts.Interval}, nil
}

// borrowedIn is, for each ClusterQueue of cq's cohort, the GPUs of the flavor it
// holds beyond its nominal quota (Kueue's status.flavorsReservation); nil outside a
// cohort.
func (c *Controller) borrowedIn(ctx context.Context, cq *kueue.ClusterQueue, flavor string) (borrowed, error) {
	if cq == nil || cq.Spec.CohortName == "" {
		return nil, nil
	}
	var cqs kueue.ClusterQueueList
	if err := c.client.List(ctx, &cqs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list cluster queues: %w", err)
	}
	out := borrowed{}
	for i := range cqs.Items {
		q := &cqs.Items[i]
		if q.Spec.CohortName != cq.Spec.CohortName {
			continue
		}
		for _, f := range q.Status.FlavorsReservation {
			if string(f.Name) != flavor {
				continue
			}
			for _, r := range f.Resources {
				if r.Name == kube.ResourceGPU && r.Borrowed.Value() > 0 {
					out[q.Name] = r.Borrowed.Value()
				}
			}
		}
	}
	return out, nil
}

// waitsForRoom: the workload is active and without quota, and Kueue's last attempt
// found quota for it but no node (topology-aware scheduling's "doesn't allow to fit" or
// "allows to fit only"), or found its GPU quota short and is not preempting for it (its
// team would borrow, and Kueue's preemption takes nothing to let a workload borrow:
// quota says how many GPUs short). It returns since when the workload has been without
// quota.
func waitsForRoom(wl *kueue.Workload) (since time.Time, quota int64, ok bool) {
	if wl.DeletionTimestamp != nil || (wl.Spec.Active != nil && !*wl.Spec.Active) {
		return time.Time{}, 0, false
	}
	cond := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	if cond == nil || cond.Status != metav1.ConditionFalse ||
		apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
		return time.Time{}, 0, false
	}
	if strings.Contains(cond.Message, "doesn't allow to fit") || strings.Contains(cond.Message, "allows to fit only") {
		return cond.LastTransitionTime.Time, 0, true
	}
	if m := shortOfQuota.FindStringSubmatch(cond.Message); m != nil && !strings.Contains(cond.Message, "Pending the preemption") {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err == nil && n > 0 {
			return cond.LastTransitionTime.Time, n, true
		}
	}
	return time.Time{}, 0, false
}

// shortOfQuota is Kueue's message for a workload whose GPU quota falls short.
var shortOfQuota = regexp.MustCompile(`insufficient unused quota for ` + regexp.QuoteMeta(string(kube.ResourceGPU)) + ` in flavor \S+, (\d+) more needed`)

// movedFor are the UIDs of the workloads moved for wl before.
func movedFor(wl *kueue.Workload) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, uid := range strings.Split(wl.Annotations[chamber.AnnotationRoomMoved], ",") {
		if uid != "" {
			out[types.UID(uid)] = true
		}
	}
	return out
}

func priority(wl *kueue.Workload) int32 {
	if wl.Spec.Priority == nil {
		return 0
	}
	return *wl.Spec.Priority
}

// flavorsOf is the workload's ClusterQueue and those of its GPU flavors that have a
// topology (Kueue says a workload waits for a node only under topology-aware
// scheduling).
func (c *Controller) flavorsOf(ctx context.Context, wl *kueue.Workload) (*kueue.ClusterQueue, []*kueue.ResourceFlavor, error) {
	var lq kueue.LocalQueue
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: wl.Namespace, Name: string(wl.Spec.QueueName)}, &lq); apierrors.IsNotFound(err) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("get local queue %s/%s: %w", wl.Namespace, wl.Spec.QueueName, err)
	}
	var cq kueue.ClusterQueue
	if err := c.client.Get(ctx, client.ObjectKey{Name: string(lq.Spec.ClusterQueue)}, &cq); apierrors.IsNotFound(err) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("get cluster queue %s: %w", lq.Spec.ClusterQueue, err)
	}
	var out []*kueue.ResourceFlavor
	for _, rg := range cq.Spec.ResourceGroups {
		if !slices.Contains(rg.CoveredResources, kube.ResourceGPU) {
			continue
		}
		for _, f := range rg.Flavors {
			var rf kueue.ResourceFlavor
			if err := c.client.Get(ctx, client.ObjectKey{Name: string(f.Name)}, &rf); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return nil, nil, fmt.Errorf("get resource flavor %s: %w", f.Name, err)
			}
			if rf.Spec.TopologyName != nil {
				out = append(out, &rf)
			}
		}
	}
	return &cq, out, nil
}

// nodesOf is what the planner needs of the flavor's schedulable nodes: their free GPUs
// and the workloads of a priority below the waiter's that it may move off them.
func (c *Controller) nodesOf(ctx context.Context, flavor *kueue.ResourceFlavor, below int32, moved map[types.UID]bool) ([]nodeState, error) {
	var nodes corev1.NodeList
	if err := c.client.List(ctx, &nodes, client.MatchingLabels(flavor.Spec.NodeLabels), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list nodes of flavor %s: %w", flavor.Name, err)
	}
	var out []nodeState
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if !kube.Schedulable(n) {
			continue
		}
		s, err := c.nodeState(ctx, n, below, moved)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *Controller) nodeState(ctx context.Context, n *corev1.Node, below int32, moved map[types.UID]bool) (nodeState, error) {
	pods, err := chamberkueue.PodsOnNode(ctx, c.client, n.Name)
	if err != nil {
		return nodeState{}, err
	}
	s := nodeState{name: n.Name, free: kube.FreeGPUs(n, pods, nil)}
	host := hostname(n)
	placed, err := chamberkueue.WorkloadsOnNode(ctx, c.client, host)
	if err != nil {
		return nodeState{}, err
	}
	for i := range placed {
		wl := &placed[i]
		if !chamberkueue.HoldsGPUs(wl) {
			continue
		}
		bound := boundGPUs(pods, wl)
		if int32(len(bound)) < assignedPods(wl, host) {
			s.settling = true
			continue
		}
		if movable(wl, below, moved) && slices.Equal(chamberkueue.WorkloadNodes(wl), []string{host}) && slices.ContainsFunc(bound, func(g int64) bool { return g > 0 }) {
			s.movable = append(s.movable, candidate{key: client.ObjectKeyFromObject(wl), uid: wl.UID, queue: string(wl.Status.Admission.ClusterQueue), pods: bound})
		}
	}
	return s, nil
}

// movable: a running workload of a lower priority, not interactive, not being evicted
// or moved by Kueue, not moved for this waiter before.
func movable(wl *kueue.Workload, below int32, moved map[types.UID]bool) bool {
	if priority(wl) >= below || moved[wl.UID] || chamberkueue.ReplacingNodes(wl) || chamberkueue.Interactive(wl, nil) {
		return false
	}
	_, evicting := chamberkueue.RequestedEviction(wl)
	return !evicting
}

// boundGPUs are the GPUs of each of the workload's live pods among pods (those bound
// to one node).
func boundGPUs(pods []corev1.Pod, wl *kueue.Workload) []int64 {
	var out []int64
	for i := range pods {
		if p := &pods[i]; kube.Live(p) && ownedBy(p, wl) {
			out = append(out, kube.PodGPUs(&p.Spec))
		}
	}
	return out
}

// ownedBy: the pod is one of the workload's (Kueue's annotation names it, or the
// workload's job controls the pod).
func ownedBy(p *corev1.Pod, wl *kueue.Workload) bool {
	keys := chamberkueue.PodWorkloadKeys(p)
	if slices.Contains(keys, wl.Namespace+"/"+wl.Name) {
		return true
	}
	ref := metav1.GetControllerOfNoCopy(wl)
	return ref != nil && p.Namespace == wl.Namespace && slices.Contains(keys, string(ref.UID))
}

// assignedPods is how many of the workload's pods Kueue's topology assignment puts on
// the host.
func assignedPods(wl *kueue.Workload, host string) int32 {
	var n int32
	for i := range wl.Status.Admission.PodSetAssignments {
		ta := wl.Status.Admission.PodSetAssignments[i].TopologyAssignment
		if ta == nil {
			continue
		}
		for d := range utiltas.InternalSeqFrom(ta) {
			if len(d.Values) > 0 && d.Values[len(d.Values)-1] == host {
				n += d.Count
			}
		}
	}
	return n
}

// hostname is the node's kubernetes.io/hostname label, which topology assignments name
// it by; its name without one.
func hostname(n *corev1.Node) string {
	if h := n.Labels[corev1.LabelHostname]; h != "" {
		return h
	}
	return n.Name
}

// move records the moves on the waiting workload, taints the nodes the room is made on
// (chamber.TaintRoom: the moved workloads, requeued at once, cannot come back there,
// and nothing else takes the GPUs they free one by one), then asks for each moved
// workload's eviction (with its team's grace, to checkpoint): recorded first, so that a
// failure half-way never moves a workload twice for the same waiter. paused: the moved
// workloads need not fit elsewhere (GPUs their ClusterQueues borrow): they wait in the
// queue for GPUs to free.
func (c *Controller) move(ctx context.Context, wl *kueue.Workload, p plan, paused bool, now time.Time) error {
	uids := slices.Collect(func(yield func(string) bool) {
		for uid := range movedFor(wl) {
			if !yield(string(uid)) {
				return
			}
		}
	})
	var names []string
	for _, m := range p.moves {
		uids = append(uids, string(m.uid))
		names = append(names, m.key.String())
	}
	slices.Sort(uids)
	if err := kube.PatchAnnotations(ctx, c.client, wl.DeepCopy(), map[string]any{
		chamber.AnnotationRoomMadeAt: now.UTC().Format(time.RFC3339),
		chamber.AnnotationRoomMoved:  strings.Join(uids, ","),
	}); err != nil {
		return fmt.Errorf("record room made for workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	for i, node := range p.rooms {
		if err := c.holdRoom(ctx, node, wl, p.want[i], now); err != nil {
			return err
		}
	}
	rooms := strings.Join(slices.Compact(slices.Sorted(slices.Values(p.rooms))), ", ")
	for _, m := range p.moves {
		var target kueue.Workload
		if err := c.client.Get(ctx, m.key, &target); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("get workload %s: %w", m.key, err)
		}
		if target.UID != m.uid {
			continue
		}
		msg := fmt.Sprintf("moved off node %s to make room for %s/%s (priority %d), which waits for a node with %d free GPUs; it fits on the GPUs free on other nodes",
			rooms, wl.Namespace, wl.Name, priority(wl), slices.Max(chamberkueue.WorkloadPodGPUs(wl)))
		if paused {
			msg = fmt.Sprintf("paused to make room on node %s for %s/%s (priority %d), which waits for %d GPUs; its ClusterQueue %s borrows these GPUs beyond its nominal quota; it stays paused until that workload is admitted (at most %s), then Kueue requeues it",
				rooms, wl.Namespace, wl.Name, priority(wl), slices.Max(chamberkueue.WorkloadPodGPUs(wl)), m.queue, c.opts.Settle)
		}
		e := chamberkueue.Eviction{Reason: ReasonRoomForBigJob, Message: msg, RequestedAt: now, Pause: paused}
		if paused {
			// The marks go in the request's own patch: written apart, a reconcile
			// between the two patches reads the workload as one whose request was
			// dropped and removes its marks, and once Chamber's eviction pauses it,
			// reconcilePaused lets a paused workload without marks go at once, and it
			// takes the room back.
			e.Marks = map[string]string{
				chamber.AnnotationRoomPausedFor: wl.Namespace + "/" + wl.Name,
				chamber.AnnotationRoomPausedAt:  now.UTC().Format(time.RFC3339),
			}
		}
		err := chamberkueue.RequestEviction(ctx, c.client, &target, e)
		if err != nil {
			return err
		}
		moves.Inc()
	}
	how := "they fit on other nodes' free GPUs"
	if paused {
		how = "they wait in their queues: their ClusterQueues borrow these GPUs beyond their nominal quota"
	}
	c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, ReasonRoomForBigJob, "MakeRoom",
		"moving %d lower-tier workload(s) (%s) off node %s so that this workload fits there; %s",
		len(p.moves), strings.Join(names, ", "), rooms, how)
	roomsMade.Inc()
	log.FromContext(ctx).Info("making room", "workload", client.ObjectKeyFromObject(wl), "nodes", p.rooms, "moving", names, "paused", paused)
	return nil
}
