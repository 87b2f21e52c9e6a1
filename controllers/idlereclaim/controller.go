// Package idlereclaim takes GPUs back from workloads that hold them idle while other
// workloads wait for them. A workload is warned (an IdleGPUs Event) when it is idle
// while another waits that would fit on its GPUs once freed (room.go), and once it
// has been idle for its pool's window (doubling with each earlier reclaim of it) with
// someone still waiting, Chamber asks for its eviction
// (chamberkueue.RequestEviction): its pods get a notice and a grace period to
// checkpoint, then Kueue evicts it; Chamber pauses it (deactivated, its Job kept)
// while anyone waits for GPUs it could use, for at most a hold that doubles with each
// reclaim (pause.go), then resumes it: Kueue requeues it, and it runs again when
// capacity frees.
package idlereclaim

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Reasons of the Events and of the eviction request.
const (
	// ReasonIdleGPUs is the warning Event of a workload idle under contention.
	ReasonIdleGPUs = "IdleGPUs"
	// ReasonIdleReclaim is the eviction request's reason, which the admission
	// controller's Events carry.
	ReasonIdleReclaim = "IdleReclaim"
	// ReasonIdleTimeLimit is the eviction request's reason when an interactive
	// workload reached its InteractiveIdleLimit.
	ReasonIdleTimeLimit = "IdleTimeLimit"
)

// Defaults of a policy's unset fields (see chamber.IdleReclaimPolicy).
const (
	DefaultUtilizationPercent = 5
	// DefaultWindow is short on purpose: it matters only while others wait for the
	// GPUs, an idle spell's end cannot be foreseen from its length (a user away stays
	// away), and ten minutes at 0% is what PyTorch's NCCL watchdog itself takes for a
	// hung job.
	DefaultWindow = 10 * time.Minute
)

// DefaultExemptTiers are the priority tiers never reclaimed unless a policy says
// otherwise.
var DefaultExemptTiers = []string{"production"}

// Options configure the idle reclaim controller.
type Options struct {
	// Interval is how often a workload holding GPUs is looked at again; contention and
	// utilization are read from the cache each time.
	Interval time.Duration
	// MaxHold is the longest a workload reclaimed for the first time stays paused
	// while others wait for its GPUs; it doubles with each further reclaim (pause.go).
	MaxHold time.Duration
	// MinWait is how long a workload must have been without quota before it counts as
	// waiting for GPUs (contention); a requeued workload Kueue readmits at once never
	// does. 0 counts every workload without quota at once.
	MinWait time.Duration
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// Heartbeats tells which agents are silent; one of its own on Clock when nil.
	Heartbeats *chamber.Heartbeats
}

// DefaultInterval is the default of Options.Interval.
const DefaultInterval = 30 * time.Second

// DefaultMinWait is the default of Options.MinWait.
const DefaultMinWait = time.Minute

// DefaultOptions are the controller's options unless flags say otherwise.
func DefaultOptions() Options {
	return Options{Interval: DefaultInterval, MaxHold: DefaultMaxHold, MinWait: DefaultMinWait}
}

// Controller reconciles admitted Workloads of pools with idle reclaim on.
type Controller struct {
	client   client.Client // the manager's cached client
	reader   client.Reader // uncached: owners' metadata, read only for workloads about to be warned
	recorder events.EventRecorder
	opts     Options

	mu sync.Mutex
	// idle holds what the controller saw of workloads that hold GPUs idle. It lives in
	// memory only: after a restart every window starts again, which delays a reclaim
	// and never hastens one.
	idle map[types.NamespacedName]*idleWorkload
}

// idleWorkload is the controller's record of one idle workload.
type idleWorkload struct {
	uid types.UID
	// lowSince is when every GPU of the workload went below the threshold, by the
	// first reports the controller saw them below it in (measure), without a reading
	// at or above it since.
	lowSince time.Time
	// contendedSince is when it first saw the workload idle while others waited for
	// its GPUs (and warned it); zero when nobody waits. The window runs from lowSince;
	// the reclaim comes no earlier than this.
	contendedSince time.Time
	// reclaimed, held and released: what this controller last wrote on the Workload
	// (the eviction request with its marks, the hold, its end), which the cache may
	// not show yet. They keep a reconcile of a stale object from doing it a second
	// time.
	reclaimed, held, released bool
}

// Register adds the controller to the manager.
func Register(mgr ctrl.Manager, opts Options) error {
	c := newController(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("chamber-idle-reclaim"), opts)
	return ctrl.NewControllerManagedBy(mgr).
		Named("idlereclaim").
		For(&kueue.Workload{}).
		Complete(c)
}

func newController(c client.Client, reader client.Reader, recorder events.EventRecorder, opts Options) *Controller {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxHold <= 0 {
		opts.MaxHold = DefaultMaxHold
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Heartbeats == nil {
		opts.Heartbeats = chamber.NewHeartbeats(opts.Clock, 0)
	}
	return &Controller{client: c, reader: reader, recorder: recorder, opts: opts, idle: map[types.NamespacedName]*idleWorkload{}}
}

// Reconcile looks at one Workload. It is a plain reconciler rather than a typed one
// so that a deleted Workload's record is dropped too.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var wl kueue.Workload
	if err := c.client.Get(ctx, req.NamespacedName, &wl); apierrors.IsNotFound(err) {
		c.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, fmt.Errorf("get workload %s: %w", req.NamespacedName, err)
	}
	return c.reconcile(ctx, &wl)
}

func (c *Controller) reconcile(ctx context.Context, wl *kueue.Workload) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(wl)
	if done, res, err := c.reconcileHold(ctx, wl); done || err != nil {
		return res, err
	}
	if !chamberkueue.HoldsGPUs(wl) {
		// Not admitted (any more), finished or on its way out: a new admission
		// starts from nothing. Kueue's update of the Workload brings it back here.
		c.forget(key)
		return reconcile.Result{}, nil
	}
	again := reconcile.Result{RequeueAfter: c.opts.Interval}
	_, requested := chamberkueue.RequestedEviction(wl)
	// Our own request may not be in the cache yet.
	if requested || c.wrote(key, wl.UID, func(r *idleWorkload) bool { return r.reclaimed }) {
		// Someone (we, or isolation) already asked: the admission controller acts.
		return again, nil
	}
	now := c.opts.Clock.Now()
	logger := log.FromContext(ctx)

	owner, err := c.ownerOf(ctx, wl)
	if err != nil {
		return reconcile.Result{}, err
	}
	team, policy := owner.team, owner.policy
	if !policy.Enabled || policy.exempt(tierOf(wl)) || policy.optedOut(wl) {
		c.forget(key)
		return again, nil
	}

	pods, err := c.podsOf(ctx, wl)
	if err != nil {
		return reconcile.Result{}, err
	}
	nodes, err := c.gpuNodesOf(ctx, pods)
	if err != nil {
		return reconcile.Result{}, err
	}
	use := measure(pods, nodes, c.opts.Heartbeats, policy.UtilizationPercent, now)
	if !use.idle {
		c.forget(key)
		return again, nil
	}
	rec := c.record(key, wl.UID, use.lowSince)

	waiting, err := c.waitingFor(ctx, wl, pods, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if waiting == nil {
		c.mu.Lock()
		rec.contendedSince = time.Time{}
		lowSince := rec.lowSince
		c.mu.Unlock()
		if limit := policy.InteractiveIdleLimit; limit > 0 && chamberkueue.Interactive(wl, pods) {
			if idleFor := now.Sub(lowSince); idleFor >= limit {
				if out, err := c.ownerOptedOut(ctx, policy, wl, pods); err != nil || out {
					return again, err
				}
				return c.pauseAtLimit(ctx, key, wl, owner, use, idleFor, now)
			}
			return reconcile.Result{RequeueAfter: min(c.opts.Interval, lowSince.Add(limit).Sub(now))}, nil
		}
		return again, nil
	}
	// Opt-outs on pods and owner are read only now: the owner costs an API call.
	if out, err := c.ownerOptedOut(ctx, policy, wl, pods); err != nil {
		return reconcile.Result{}, err
	} else if out {
		c.forget(key)
		return again, nil
	}

	c.mu.Lock()
	warn := rec.contendedSince.IsZero()
	if warn {
		rec.contendedSince = now
	}
	since, lowSince := rec.contendedSince, rec.lowSince
	c.mu.Unlock()
	// Reclaimed once it has been idle for the window and someone waits: a session
	// idle for an hour before anyone came gives its GPUs up when someone does. The
	// window doubles with each earlier reclaim of the workload.
	reclaims, _ := strconv.Atoi(wl.Annotations[chamber.AnnotationIdleReclaims])
	reclaimAt := lowSince.Add(reclaimWindow(policy.Window, reclaims))
	if reclaimAt.Before(since) {
		reclaimAt = since
	}
	if warn {
		c.recorder.Eventf(wl, waiting, corev1.EventTypeWarning, ReasonIdleGPUs, "Warn",
			"its %d GPUs are below %d%% utilization while %s/%s waits for GPUs of the pool; they will be reclaimed (the workload evicted and requeued) at %s unless they are used or nobody waits",
			use.gpus, policy.UtilizationPercent, waiting.Namespace, waiting.Name, reclaimAt.UTC().Format(time.RFC3339))
		warnings.WithLabelValues(team).Inc()
		logger.Info("idle GPUs under contention", "workload", key, "gpus", use.gpus, "waiting", client.ObjectKeyFromObject(waiting), "reclaimAt", reclaimAt)
	}
	if now.Before(reclaimAt) {
		return reconcile.Result{RequeueAfter: min(c.opts.Interval, reclaimAt.Sub(now))}, nil
	}

	idleFor := now.Sub(lowSince)
	e := chamberkueue.Eviction{
		Reason: ReasonIdleReclaim,
		Message: fmt.Sprintf("idle reclaim: its %d GPUs stayed below %d%% utilization for %s, and %s/%s waits for them",
			use.gpus, policy.UtilizationPercent, idleFor.Round(time.Second), waiting.Namespace, waiting.Name),
		RequestedAt: now,
	}
	if chamberkueue.Interactive(wl, pods) {
		e.GracePeriod = ptr.To(noNotice)
	}
	err = c.reclaim(ctx, key, wl, owner, use, idleFor, waiting.Namespace+"/"+waiting.Name, e)
	if err != nil {
		return reconcile.Result{}, err
	}
	logger.Info("idle GPUs reclaimed", "workload", key, "gpus", use.gpus, "idleFor", idleFor, "waiting", client.ObjectKeyFromObject(waiting))
	return again, nil
}

// noNotice is the grace period of an interactive workload reclaimed for idleness: it
// is evicted at once, without the checkpoint notice. Its user is away, so nobody
// answers the notice, and its GPUs would sit idle through the team's grace while
// others wait (5 minutes by default, for every session reclaimed). Its pods still get
// SIGTERM and their terminationGracePeriodSeconds to save what they can. Batch work
// keeps its grace: idle is not hung, and a job stalled on its data may still write
// its checkpoint.
const noNotice time.Duration = 0

// reclaim asks for the eviction, marked reclaimed for reclaimedFor (a waiting workload,
// or chamber.IdleReclaimedForIdleLimit), which the hold reads, and counts it. The marks
// go in the same patch as the request: written apart, a leader that died between the
// two writes left a paused workload without them, which the hold could only let go.
func (c *Controller) reclaim(ctx context.Context, key types.NamespacedName, wl *kueue.Workload, owner owner, use usage, idleFor time.Duration, reclaimedFor string, e chamberkueue.Eviction) error {
	e.Pause = true // the hold keeps it out of its queue
	gpuHours := float64(use.gpus) * idleFor.Hours()
	e.Marks = reclaimMarks(wl, reclaimedFor, e.RequestedAt, gpuHours)
	if err := chamberkueue.RequestEviction(ctx, c.client, wl, e); err != nil {
		return err
	}
	evictions.WithLabelValues(owner.team).Inc()
	countIdleAtReclaim(owner.team, gpuHours, gpuHours*owner.price)
	c.remember(key, wl.UID, idleWorkload{reclaimed: true})
	return nil
}

// pauseAtLimit asks for the eviction of an interactive workload idle for its limit; the
// hold then keeps it paused until its user resumes it
// (chamber.IdleReclaimedForIdleLimit).
func (c *Controller) pauseAtLimit(ctx context.Context, key types.NamespacedName, wl *kueue.Workload, owner owner, use usage, idleFor time.Duration, now time.Time) (reconcile.Result, error) {
	policy := owner.policy
	err := c.reclaim(ctx, key, wl, owner, use, idleFor, chamber.IdleReclaimedForIdleLimit, chamberkueue.Eviction{
		Reason: ReasonIdleTimeLimit,
		Message: fmt.Sprintf("interactive idle time limit: its %d GPUs stayed below %d%% utilization for %s (limit %s); resume it with spec.active true",
			use.gpus, policy.UtilizationPercent, idleFor.Round(time.Second), policy.InteractiveIdleLimit),
		RequestedAt: now,
		GracePeriod: ptr.To(noNotice),
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	log.FromContext(ctx).Info("interactive workload paused at its idle time limit", "workload", key, "gpus", use.gpus, "idleFor", idleFor)
	return reconcile.Result{RequeueAfter: c.opts.Interval}, nil
}

// record returns the record of the idle workload, starting one if there is none or
// the one there is of an earlier Workload of the same name; low from since unless it
// already was.
func (c *Controller) record(key types.NamespacedName, uid types.UID, since time.Time) *idleWorkload {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.idle[key]
	if rec == nil || rec.uid != uid {
		rec = &idleWorkload{uid: uid}
		c.idle[key] = rec
	}
	if rec.lowSince.IsZero() {
		rec.lowSince = since
	}
	return rec
}

// remember replaces the workload's record with one that only says what was written.
func (c *Controller) remember(key types.NamespacedName, uid types.UID, rec idleWorkload) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec.uid = uid
	c.idle[key] = &rec
}

// wrote says whether the record of the workload (this UID) has what is asked.
func (c *Controller) wrote(key types.NamespacedName, uid types.UID, what func(*idleWorkload) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.idle[key]
	return rec != nil && rec.uid == uid && what(rec)
}

func (c *Controller) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.idle, key)
}

// tierOf is the workload's priority tier: its Kueue WorkloadPriorityClass.
func tierOf(wl *kueue.Workload) string {
	if ref := wl.Spec.PriorityClassRef; ref != nil && ref.Kind == kueue.WorkloadPriorityClassKind {
		return ref.Name
	}
	return ""
}

// optedOut reads the annotation on one object; it counts only where the policy
// allows workloads to opt out.
func (p Policy) optedOut(obj metav1.Object) bool {
	if p.WorkloadOptOut == chamber.OptOutIgnored {
		return false
	}
	v, ok := obj.GetAnnotations()[chamber.AnnotationIdleReclaim]
	if !ok {
		return false
	}
	on, err := strconv.ParseBool(v)
	return err == nil && !on
}

// ownerOptedOut reads the annotation on the workload's pods and its owner (the Job
// users annotate), where the policy lets them opt out. An owner that is gone opts out
// of nothing.
func (c *Controller) ownerOptedOut(ctx context.Context, policy Policy, wl *kueue.Workload, pods []corev1.Pod) (bool, error) {
	if policy.WorkloadOptOut == chamber.OptOutIgnored {
		return false, nil
	}
	for i := range pods {
		if policy.optedOut(&pods[i]) {
			return true, nil
		}
	}
	for _, ref := range wl.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			continue
		}
		owner := &metav1.PartialObjectMetadata{}
		owner.SetGroupVersionKind(gv.WithKind(ref.Kind))
		err = c.reader.Get(ctx, client.ObjectKey{Namespace: wl.Namespace, Name: ref.Name}, owner)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read %s %s/%s, owner of workload %s: %w", ref.Kind, wl.Namespace, ref.Name, wl.Name, err)
		}
		if policy.optedOut(owner) {
			return true, nil
		}
	}
	return false, nil
}

// owner is who answers for a workload's GPUs: the team whose ClusterQueue admitted it
// ("" for a ClusterQueue of no team, whose workloads are never reclaimed), the idle
// reclaim policy in force for it, and what one of its GPU-hours costs at the team's
// pool's price (0 without one).
type owner struct {
	team   string
	policy Policy
	price  float64
}

// ownerOf reads the workload's owner.
func (c *Controller) ownerOf(ctx context.Context, wl *kueue.Workload) (owner, error) {
	var teams chamber.TeamList
	if err := c.client.List(ctx, &teams); err != nil {
		return owner{}, fmt.Errorf("list teams: %w", err)
	}
	team := chamber.TeamOfClusterQueue(teams.Items, string(wl.Status.Admission.ClusterQueue))
	if team == nil {
		return owner{}, nil
	}
	var pool chamber.GPUPool
	err := c.client.Get(ctx, client.ObjectKey{Name: team.Spec.Pool}, &pool)
	if apierrors.IsNotFound(err) {
		return owner{team: team.Name, policy: ResolvePolicy(nil, team.Spec.IdleReclaim)}, nil
	}
	if err != nil {
		return owner{}, fmt.Errorf("get pool %s of team %s: %w", team.Spec.Pool, team.Name, err)
	}
	return owner{team: team.Name, policy: ResolvePolicy(pool.Spec.IdleReclaim, team.Spec.IdleReclaim), price: gpuPrice(team, &pool, gpuFlavors(wl))}, nil
}

// gpuPrice is the pool's price of a GPU-hour of the model of the workload's GPU flavor
// (the team's status maps flavors to models); 0 without one.
func gpuPrice(team *chamber.Team, pool *chamber.GPUPool, flavors []kueue.ResourceFlavorReference) float64 {
	for _, m := range team.Status.Models {
		if !slices.Contains(flavors, kueue.ResourceFlavorReference(m.Flavor)) {
			continue
		}
		if price := pool.PricePerGPUHour(m.Model); price > 0 {
			return price
		}
	}
	return 0
}

// podsOf lists the workload's pods from the cache.
func (c *Controller) podsOf(ctx context.Context, wl *kueue.Workload) ([]corev1.Pod, error) {
	return chamberkueue.PodsOfWorkload(ctx, c.client, wl)
}

// gpuNodesOf gets the agents' reports of the nodes the pods run on; a node without one
// is left out.
func (c *Controller) gpuNodesOf(ctx context.Context, pods []corev1.Pod) (map[string]*chamber.GPUNode, error) {
	nodes := map[string]*chamber.GPUNode{}
	for i := range pods {
		name := pods[i].Spec.NodeName
		if _, done := nodes[name]; done || name == "" {
			continue
		}
		var gn chamber.GPUNode
		err := c.client.Get(ctx, client.ObjectKey{Name: name}, &gn)
		if apierrors.IsNotFound(err) {
			nodes[name] = nil
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get GPUNode %s: %w", name, err)
		}
		nodes[name] = &gn
	}
	return nodes, nil
}

// waitingFor lists what contention needs from the cache and finds a workload waiting
// for the GPUs wl holds (its pods are pods), one that would fit once they are free.
func (c *Controller) waitingFor(ctx context.Context, wl *kueue.Workload, pods []corev1.Pod, now time.Time) (*kueue.Workload, error) {
	workloads, localQueues, clusterQueues, err := c.queueState(ctx)
	if err != nil {
		return nil, err
	}
	r, err := c.roomAfter(ctx, wl, pods)
	if err != nil {
		return nil, err
	}
	return waiting(wl, workloads, localQueues, clusterQueues, now, c.opts.MinWait, r), nil
}

// queueState lists the pending Workloads (through their index: not every workload of
// the cluster), the LocalQueues and the ClusterQueues from the cache.
func (c *Controller) queueState(ctx context.Context) ([]kueue.Workload, []kueue.LocalQueue, []kueue.ClusterQueue, error) {
	var workloads kueue.WorkloadList
	if err := c.client.List(ctx, &workloads, client.MatchingFields{chamberkueue.IndexWorkloadPending: chamberkueue.PendingValue}); err != nil {
		return nil, nil, nil, fmt.Errorf("list pending workloads: %w", err)
	}
	var localQueues kueue.LocalQueueList
	if err := c.client.List(ctx, &localQueues); err != nil {
		return nil, nil, nil, fmt.Errorf("list local queues: %w", err)
	}
	var clusterQueues kueue.ClusterQueueList
	if err := c.client.List(ctx, &clusterQueues); err != nil {
		return nil, nil, nil, fmt.Errorf("list cluster queues: %w", err)
	}
	return workloads.Items, localQueues.Items, clusterQueues.Items, nil
}

// offersGPUFlavor says whether the ClusterQueue has quota (nominal, or 0 to borrow)
// for GPUs of one of the flavors.
func offersGPUFlavor(cq *kueue.ClusterQueue, flavors []kueue.ResourceFlavorReference) bool {
	for _, rg := range cq.Spec.ResourceGroups {
		if !slices.Contains(rg.CoveredResources, kube.ResourceGPU) {
			continue
		}
		for _, f := range rg.Flavors {
			if slices.Contains(flavors, f.Name) {
				return true
			}
		}
	}
	return false
}
