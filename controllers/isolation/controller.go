// Package isolation runs Chamber's fault isolation. When a node agent reports a GPU
// Unhealthy, the controller takes out what failed: the failing GPUs alone when a GPU
// reset clears every fault (by NVIDIA's XID catalog: XID 48, double-bit ECC), the
// whole node, tainted and cordoned, when a fault needs a reboot or a replacement (XID
// 79) or the pool forces Node level. It names the fault in a Node condition and an
// Event, and asks Chamber's admission controller to evict the Kueue workloads on what it
// took out, so that Kueue requeues them onto healthy hardware. A circuit breaker per
// pool and a rate limit bound what it does; transient faults return the node after a
// run of healthy reports, hardware faults stay until an operator clears them. Silence
// is never a fault: a node whose agent stopped reporting is Unknown, and nothing is
// done to it.
package isolation

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// Defaults of Options and of a pool's IsolationPolicy.
const (
	DefaultRateLimit          = 1.0
	DefaultRateBurst          = 10
	DefaultMaxIsolatedPercent = 50
	DefaultBreakerWindow      = 5 * time.Minute
	DefaultRecoveryReports    = 3
	DefaultDrainTimeout       = 30 * time.Minute
	DefaultKueueReplaces      = 10 * time.Second
)

// Options configures fault isolation; the pool's IsolationPolicy says the rest.
type Options struct {
	// RateLimit is how many nodes per second Chamber may isolate fleet-wide once Burst
	// is spent. Default 1 per second, burst 10.
	RateLimit float64
	// RateBurst: see RateLimit.
	RateBurst int
	// EvictionGracePeriod is the checkpoint grace period of a workload evicted from
	// failing GPUs; it replaces the team's and tier's. Default 0: a GPU that fell off
	// the bus cannot checkpoint, and a job left on a failing GPU may corrupt its run.
	// Workloads on the healthy GPUs of an isolated node keep their team's grace.
	EvictionGracePeriod time.Duration
	// DrainTimeout is how long the workloads on the healthy GPUs of a node isolated at
	// node level run on (the node drains: no new pod lands) before they are evicted
	// with their team's grace, so that the node can be rebooted for its repair with
	// nothing lost. It counts from the node's taint: a node isolated at GPU level
	// first drains only once a later fault takes the node. 0 means
	// DefaultDrainTimeout (30 minutes); negative: never.
	DrainTimeout time.Duration
	// KueueReplaces is how long a workload whose pod died on a node isolated at node
	// level is left to Kueue before Chamber evicts it (at once, with no grace: nothing
	// of it runs): Kueue's topology-aware scheduling sees the node's taint and
	// replaces the node itself (TASReplaceNodeOnNodeTaints, on by default since Kueue
	// v0.17), keeping the workload's quota; an eviction of Chamber's at the same time
	// would race it. Where Kueue does not (kubernetes-sigs/kueue#14917), it fails
	// each new pod of the Job pinned to the node, one per Job back-off (10 s,
	// doubling), spending the Job's backoffLimit: keep it near that back-off. It
	// counts from the node's taint. 0 means DefaultKueueReplaces (10 s); negative:
	// no wait.
	KueueReplaces time.Duration
	// HoldNamespace is where GPU-level isolation's hold pods live (DefaultHoldNamespace
	// when empty; the chart passes its release's, where its Role lets them be made).
	HoldNamespace string
	// NodeConditions are the node condition types that, True, report the node's GPUs
	// failed: those Node Problem Detector, NVSentinel or another health checker sets.
	// Such a node is isolated at node level (a condition names no GPU) with the
	// condition's reason, whether or not Chamber's agent runs there; once the
	// condition is gone it comes back like any transient fault, after the agent's
	// healthy reports (the pool's recoveryReports), or, without an agent, when an
	// operator clears it. None by default.
	NodeConditions []corev1.NodeConditionType
	// WithoutKueue: the cluster does not serve Kueue's API. Isolation decides, taints,
	// holds and records all the same; no Kueue workload is evicted (RegisterVolcano
	// restarts the Volcano Jobs on the isolated hardware).
	WithoutKueue bool
	// GracePeriod is the checkpoint grace period of a Volcano Job on the healthy GPUs
	// of a drained node (DrainTimeout) whose team and pool set none. Kueue workloads
	// get theirs from Chamber's admission controller.
	GracePeriod time.Duration
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// Heartbeats tells which agents are silent: a silent agent's node has Unknown
	// health, never a reason to isolate. One of its own on Clock when nil.
	Heartbeats *chamber.Heartbeats
}

// DefaultOptions are the options unless flags say otherwise.
func DefaultOptions() Options {
	return Options{RateLimit: DefaultRateLimit, RateBurst: DefaultRateBurst, DrainTimeout: DefaultDrainTimeout, KueueReplaces: DefaultKueueReplaces}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.RateLimit <= 0 {
		o.RateLimit = d.RateLimit
	}
	if o.RateBurst <= 0 {
		o.RateBurst = d.RateBurst
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = d.DrainTimeout
	}
	if o.KueueReplaces == 0 {
		o.KueueReplaces = d.KueueReplaces
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Heartbeats == nil {
		o.Heartbeats = chamber.NewHeartbeats(o.Clock, 0)
	}
	return o
}

// Controller isolates the nodes of failing GPUs. It reconciles Nodes, one at a time,
// so that the circuit breaker counts every isolation it makes.
type Controller struct {
	client client.Client
	// reader reads what the cache does not hold: pods by node, a pod owner's owner.
	reader   client.Reader
	recorder events.EventRecorder
	opts     Options
	limiter  flowcontrol.PassiveRateLimiter

	mu sync.Mutex
	// isolated is when this process isolated each node, by pool: the breaker counts
	// them before the cache shows the node's annotation.
	isolated map[string]map[string]time.Time
	// unknown is the pool of each node whose agent is silent, for the gauge.
	unknown map[string]string
	// breakers is each pool's breaker as this process last set it, ahead of the cache.
	breakers map[string]bool
	// resets is when this process last reset each pool's breaker, ahead of the cache:
	// isolations before it no longer count.
	resets map[string]time.Time
	// asked is when this process asked for each workload's eviction: the cache may
	// not show the request yet when the next report comes.
	asked map[askedKey]time.Time
}

// New returns a controller; Register adds one to a manager.
func New(c client.Client, reader client.Reader, recorder events.EventRecorder, opts Options) *Controller {
	opts = opts.withDefaults()
	return &Controller{
		client: c, reader: reader, recorder: recorder, opts: opts,
		limiter:  flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(float32(opts.RateLimit), opts.RateBurst, opts.Clock),
		isolated: map[string]map[string]time.Time{},
		unknown:  map[string]string{},
		breakers: map[string]bool{},
		resets:   map[string]time.Time{},
		asked:    map[askedKey]time.Time{},
	}
}

// Register adds the controller to the manager.
func Register(mgr ctrl.Manager, opts Options) error {
	c := New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("chamber-isolation"), opts)
	return ctrl.NewControllerManagedBy(mgr).
		Named("isolation").
		For(&corev1.Node{}, builder.WithPredicates(predicate.Funcs{
			// kwok and kubelet heartbeats change node status only; isolation cares about
			// what people and Chamber change.
			UpdateFunc: func(e event.UpdateEvent) bool {
				return c.nodeSignature(e.ObjectOld.(*corev1.Node)) != c.nodeSignature(e.ObjectNew.(*corev1.Node))
			},
		})).
		// Every agent report counts: recovery counts healthy reports.
		Watches(&chamber.GPUNode{}, agentReports).
		Watches(&chamber.GPUPool{}, handler.EnqueueRequestsFromMapFunc(c.poolNodes), builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Complete(reconcile.AsReconciler(mgr.GetClient(), c))
}

// agentReports enqueues a GPUNode's node on each of its agent's reports, at low
// priority those that say nothing new of the GPUs' health: on a large fleet the
// agents' heartbeats keep the controller's one worker busy, and a fault's report
// queued behind them would wait seconds for its taint. A report of a fault goes ahead
// of them (controller-runtime's priority queue).
var agentReports = handler.Funcs{
	CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(nodeOf(e.Object))
	},
	UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
		if ok && !healthChanged(e.ObjectOld.(*chamber.GPUNode), e.ObjectNew.(*chamber.GPUNode)) {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, nodeOf(e.ObjectNew))
			return
		}
		q.Add(nodeOf(e.ObjectNew))
	},
	DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(nodeOf(e.Object))
	},
}

func nodeOf(obj client.Object) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKey{Name: obj.GetName()}}
}

// healthChanged: the agent's report says something new of its GPUs' health (the
// node's or a GPU's health, a GPU's faults or pod, the report's source), not only
// another heartbeat and utilization reading.
func healthChanged(old, cur *chamber.GPUNode) bool {
	o, n := &old.Status, &cur.Status
	if o.Health != n.Health || o.Source != n.Source || len(o.GPUs) != len(n.GPUs) {
		return true
	}
	for i := range n.GPUs {
		og, ng := &o.GPUs[i], &n.GPUs[i]
		if og.Index != ng.Index || og.Health != ng.Health || !equality.Semantic.DeepEqual(og.Pod, ng.Pod) ||
			!equality.Semantic.DeepEqual(og.Faults, ng.Faults) {
			return true
		}
	}
	return false
}

func (c *Controller) poolNodes(ctx context.Context, obj client.Object) []reconcile.Request {
	var nodes corev1.NodeList
	if err := c.client.List(ctx, &nodes, client.MatchingLabels(obj.(*chamber.GPUPool).Spec.NodeLabels)); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range nodes.Items {
		if gpuCapacity(&nodes.Items[i]) > 0 {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: nodes.Items[i].Name}})
		}
	}
	return reqs
}

// nodeSignature is what of a node the controller acts on.
func (c *Controller) nodeSignature(n *corev1.Node) string {
	// Allocatable too: the device plugin withdrawing a failing GPU resizes the hold.
	capacity, allocatable := n.Status.Capacity[kube.ResourceGPU], n.Status.Allocatable[kube.ResourceGPU]
	sig := fmt.Sprintf("%v|%v|%v|%t|%s|%s", n.Labels, n.Annotations, n.Spec.Taints, n.Spec.Unschedulable, capacity.String(), allocatable.String())
	for _, cond := range n.Status.Conditions {
		if slices.Contains(c.opts.NodeConditions, cond.Type) {
			sig += fmt.Sprintf("|%s=%s:%s:%s", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
	}
	return sig
}

func gpuCapacity(n *corev1.Node) int64 {
	q := n.Status.Capacity[kube.ResourceGPU]
	return q.Value()
}

// Reconcile isolates the node when its agent reports a GPU Unhealthy, and brings it
// back when the policy allows.
func (c *Controller) Reconcile(ctx context.Context, node *corev1.Node) (reconcile.Result, error) {
	if gpuCapacity(node) == 0 {
		return reconcile.Result{}, nil
	}
	now := c.opts.Clock.Now()
	pool, err := c.poolOf(ctx, node)
	if err != nil {
		return reconcile.Result{}, err
	}
	if pool == nil {
		// Chamber manages the capacity of pool nodes only.
		c.setUnknown(node.Name, "", false)
		return reconcile.Result{}, nil
	}
	if pool.Annotations[chamber.AnnotationIsolationBreakerReset] == "true" {
		if err := c.resetBreaker(ctx, pool); err != nil {
			return reconcile.Result{}, err
		}
	}
	breakerOpen.WithLabelValues(pool.Name).Set(map[bool]float64{true: 1}[c.halted(pool)])
	// No GPUNode: no agent, or one that has not reported yet; node conditions still count.
	agent := &chamber.GPUNode{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: node.Name}, agent); apierrors.IsNotFound(err) {
		agent = nil
	} else if err != nil {
		return reconcile.Result{}, fmt.Errorf("get GPUNode %s: %w", node.Name, err)
	}
	rep := readReport(agent, c.opts.Heartbeats, now).withConditions(node, c.opts.NodeConditions).withOperator(node)
	return c.reconcileReport(ctx, node, pool, rep, now)
}

func (c *Controller) reconcileReport(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, rep report, now time.Time) (reconcile.Result, error) {
	c.setUnknown(node.Name, pool.Name, rep.health == chamber.GPUUnknown && rep.hasAgent)
	policy := policyOf(pool)
	rec, err := readRecord(node)
	if err != nil {
		c.malformed(ctx, node, err)
	}
	var res reconcile.Result
	switch {
	case rec.Isolated:
		res, err = c.reconcileIsolated(ctx, node, pool, policy, rec, rep, now)
	case rep.health == chamber.GPUUnhealthy && clearedSince(rec, rep):
		// The operator cleared the isolation after this report: wait for the agent's
		// next one (its write brings the node back here).
		res.RequeueAfter = rep.interval
	case rep.health == chamber.GPUUnhealthy:
		res, err = c.isolate(ctx, node, pool, policy, rep, now)
	case rep.health == chamber.GPUUnknown && rep.hasAgent:
		err = c.setCondition(ctx, node, corev1.ConditionUnknown, rep.unknownReason, rep.unknownMessage, corev1.EventTypeWarning)
	case returned(node):
		// Recovered or Cleared says more than Healthy; it stays until the next change.
	default:
		err = c.setCondition(ctx, node, corev1.ConditionFalse, chamber.ReasonHealthy, "the node agent reports every GPU usable", corev1.EventTypeNormal)
	}
	if apierrors.IsConflict(err) {
		// The cache had not caught up with the node: read it again shortly.
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("node %s: %w", node.Name, err)
	}
	// Look again when the agent's report goes stale: no write tells that it stopped.
	if rep.health != chamber.GPUUnknown && !rep.staleAt.IsZero() {
		if d := rep.staleAt.Sub(now) + 100*time.Millisecond; res.RequeueAfter == 0 || d < res.RequeueAfter {
			res.RequeueAfter = d
		}
	}
	return res, nil
}

// clearedSince: an operator cleared the node's isolation after Chamber heard rep (the
// repair may not be in the agent's report yet).
func clearedSince(rec record, rep report) bool {
	return !rec.ClearedAt.IsZero() && !rep.heardAt.IsZero() && !rep.heardAt.After(rec.ClearedAt)
}

// malformed says, in the log and in an Event on the node, which of Chamber's
// annotations it cannot read; the isolation goes on with the rest.
func (c *Controller) malformed(ctx context.Context, node *corev1.Node, err error) {
	log.FromContext(ctx).Error(err, "unreadable isolation annotations", "node", node.Name)
	c.recorder.Eventf(node, nil, corev1.EventTypeWarning, "MalformedAnnotation", "Observe",
		"Chamber cannot read its isolation record: %v. Fix or remove the annotation; Chamber writes it again as it acts", err)
}

// returned: the node's condition says it came back from an isolation.
func returned(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == chamber.ConditionNodeIsolated {
			return c.Status == corev1.ConditionFalse && (c.Reason == chamber.ReasonRecovered || c.Reason == chamber.ReasonCleared)
		}
	}
	return false
}

// isolate takes a node with Unhealthy GPUs out of service, within the dry run, the
// breaker and the rate limit; an operator's isolation is the operator's decision,
// outside all three.
func (c *Controller) isolate(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, policy chamber.IsolationPolicy, rep report, now time.Time) (reconcile.Result, error) {
	what := rep.describe()
	level, why := rep.level(policy.Level)
	operator := rep.byOperator()
	if !operator {
		if res, held, err := c.holdBack(ctx, node, pool, policy, rep, level, why, now); held || err != nil {
			return res, err
		}
	}
	rec, err := c.patchIsolated(ctx, node, rep, level, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !operator {
		c.remember(pool.Name, node.Name, now)
	}
	primary := rep.primary()
	isolations.WithLabelValues(pool.Name, string(level), primary.reason).Inc()
	c.recorder.Eventf(node, nil, corev1.EventTypeWarning, "Isolated", "Isolate", "%s (%s): %s", levelAction(level), why, what)
	if err := c.setCondition(ctx, node, corev1.ConditionTrue, primary.reason, isolatedMessage(rep, level, why), ""); err != nil {
		return reconcile.Result{}, err
	}
	if level == chamber.IsolateGPU {
		if err := c.holdGPUs(ctx, node, rep.failingGPUs()); err != nil {
			return reconcile.Result{}, err
		}
	}
	return c.evict(ctx, node, pool, rec, rep, now, now)
}

// holdBack keeps a failing node in service where the pool's dry run, its circuit
// breaker or the fleet-wide rate limit says so (held), with the condition, Event and
// metric each writes.
func (c *Controller) holdBack(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, policy chamber.IsolationPolicy, rep report, level chamber.IsolationLevel, why string, now time.Time) (res reconcile.Result, held bool, err error) {
	what := rep.describe()
	if policy.DryRun {
		if changed, err := c.setConditionChanged(ctx, node, corev1.ConditionFalse, chamber.ReasonDryRun, "would isolate: "+what); err != nil || !changed {
			return reconcile.Result{}, true, err
		}
		var wls []*kueue.Workload
		if !c.opts.WithoutKueue {
			bound, err := c.boundWorkloads(ctx, node)
			if err != nil {
				return reconcile.Result{}, true, err
			}
			if wls, err = c.workloadsOn(ctx, node, bound, nil); err != nil {
				return reconcile.Result{}, true, err
			}
		}
		c.recorder.Eventf(node, nil, corev1.EventTypeWarning, "WouldIsolate", "Isolate",
			"dry run: would %s (%s) and evict %d workloads %v: %s", levelAction(level), why, len(wls), names(wls), what)
		dryRuns.WithLabelValues(pool.Name, rep.primary().reason).Inc()
		return reconcile.Result{}, true, nil
	}
	if c.halted(pool) {
		return reconcile.Result{}, true, c.withhold(ctx, node, pool, what)
	}
	count, total, err := c.isolatedInWindow(ctx, pool, policy, now)
	if err != nil {
		return reconcile.Result{}, true, err
	}
	if limit := breakerLimit(policy, total); count+1 > limit {
		msg := fmt.Sprintf("%d of the pool's %d nodes were isolated within %s, the most the breaker allows (%d%%); node %s (%s) is not isolated. Repair the fleet, then set %s=true on the pool",
			count, total, breakerWindow(policy), maxIsolatedPercent(policy), node.Name, what, chamber.AnnotationIsolationBreakerReset)
		if err := c.openBreaker(ctx, pool, msg); err != nil {
			return reconcile.Result{}, true, err
		}
		return reconcile.Result{}, true, c.withhold(ctx, node, pool, what)
	}
	if !c.limiter.TryAccept() {
		return reconcile.Result{RequeueAfter: time.Duration(float64(time.Second) / c.opts.RateLimit)}, true, nil
	}
	return reconcile.Result{}, false, nil
}

// escalate isolates at Node level a node isolated at GPU level, once a fault there
// takes the node: it taints and cordons it, lets go of the GPU hold, which the node's
// isolation covers, and evicts every workload on it. The node was isolated already:
// neither the breaker, the rate limit nor chamber_isolations_total counts it again.
func (c *Controller) escalate(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, rep report, why string, now time.Time) (reconcile.Result, error) {
	level := chamber.IsolateNode
	rec, err := c.patchIsolated(ctx, node, rep, level, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := c.releaseGPUs(ctx, node); err != nil {
		return reconcile.Result{}, err
	}
	primary := rep.primary()
	c.recorder.Eventf(node, nil, corev1.EventTypeWarning, "Isolated", "Isolate", "from GPU level to node level, %s (%s): %s",
		levelAction(level), why, rep.describe())
	if err := c.setCondition(ctx, node, corev1.ConditionTrue, primary.reason, isolatedMessage(rep, level, why), ""); err != nil {
		return reconcile.Result{}, err
	}
	// The node drains, and Kueue sees its taint, from now: not from the record's
	// start, which the GPU-level isolation set.
	return c.evict(ctx, node, pool, rec, rep, now, now)
}

// withhold records that a node would have been isolated but the breaker is open.
func (c *Controller) withhold(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, what string) error {
	changed, err := c.setConditionChanged(ctx, node, corev1.ConditionFalse, chamber.ReasonIsolationHalted,
		fmt.Sprintf("not isolated: the circuit breaker of pool %s is open (%s)", pool.Name, what))
	if changed {
		withheld.WithLabelValues(pool.Name).Inc()
		c.recorder.Eventf(node, pool, corev1.EventTypeWarning, chamber.ReasonIsolationHalted, "Isolate",
			"not isolated, the circuit breaker of pool %s is open: %s", pool.Name, what)
	}
	return err
}

// reconcileIsolated handles a node Chamber isolated: an operator's clear, recovery
// from a transient fault, workloads still on it.
func (c *Controller) reconcileIsolated(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, policy chamber.IsolationPolicy, rec record, rep report, now time.Time) (reconcile.Result, error) {
	if node.Annotations[chamber.AnnotationIsolationClear] == "true" {
		if policy.Preflight != nil {
			return c.preflight(ctx, node, pool, policy.Preflight, rec, rep)
		}
		return reconcile.Result{}, c.release(ctx, node, pool, chamber.ReasonCleared, "an operator cleared the isolation ("+chamber.AnnotationIsolationClear+")")
	}
	level := rec.Level
	switch rep.health {
	case chamber.GPUUnhealthy:
		// Still failing: a fault that takes the node turns a GPU-level isolation into a
		// node-level one, the healthy run starts again, a new hardware fault makes the
		// isolation persistent, and any workload still there is evicted.
		if want, why := rep.level(policy.Level); level == chamber.IsolateGPU && want == chamber.IsolateNode {
			return c.escalate(ctx, node, pool, rep, why, now)
		}
		next := rec
		next.Healthy, next.HealthyAt = 0, time.Time{}
		if rep.persistent() && !rec.Persistent {
			next.Persistent, next.Reason = true, rep.describe()
		}
		if level == chamber.IsolateGPU {
			next.GPUs = rep.failingGPUs()
			if err := c.holdGPUs(ctx, node, next.GPUs); err != nil {
				return reconcile.Result{}, err
			}
		}
		if err := c.annotate(ctx, node, changes(rec, next)); err != nil {
			return reconcile.Result{}, err
		}
		return c.evict(ctx, node, pool, next, rep, levelSince(node, next, now), now)
	case chamber.GPUUnknown:
		// Silence neither isolates nor recovers.
		return reconcile.Result{}, nil
	}
	if rec.Persistent {
		return reconcile.Result{}, nil
	}
	// A transient fault: count the agent's healthy reports, each heartbeat once.
	if !rep.heartbeat.After(rec.HealthyAt) {
		return reconcile.Result{}, nil
	}
	next := rec
	next.Healthy, next.HealthyAt = rec.Healthy+1, rep.heartbeat
	if next.Healthy >= recoveryReports(policy) {
		return reconcile.Result{}, c.release(ctx, node, pool, chamber.ReasonRecovered,
			fmt.Sprintf("the transient fault cleared: %d healthy reports in a row", next.Healthy))
	}
	return reconcile.Result{}, c.annotate(ctx, node, changes(rec, next))
}

// patchIsolated taints and cordons the node (Node level) and records the isolation
// in its annotations, in one write. An isolation that began at GPU level keeps its
// start.
func (c *Controller) patchIsolated(ctx context.Context, node *corev1.Node, rep report, level chamber.IsolationLevel, now time.Time) (record, error) {
	primary := rep.primary()
	var wrote record
	err := kube.UpdateNode(ctx, c.client, node.Name, func(n *corev1.Node) {
		rec, _ := readRecord(n) // what cannot be read is written anew
		if !rec.Isolated || rec.At.IsZero() {
			rec.Isolated, rec.At = true, now
		}
		rec.Reason = rep.describe()
		// A GPU-level isolation that turns node-level stays a hardware fault's.
		rec.Persistent = rep.persistent() || rec.Persistent
		rec.Level = level
		rec.GPUs = rep.failingGPUs()
		rec.Healthy, rec.HealthyAt = 0, time.Time{}
		if level == chamber.IsolateNode {
			if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy }) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: chamber.TaintGPUUnhealthy, Value: primary.taintValue(), Effect: corev1.TaintEffectNoSchedule,
					TimeAdded: &metav1.Time{Time: now}})
				rec.Tainted = true
			}
			if !n.Spec.Unschedulable {
				n.Spec.Unschedulable = true
				rec.Cordoned = true
			}
		}
		rec.write(n)
		delete(n.Annotations, chamber.AnnotationIsolationClear)
		wrote = rec
	})
	return wrote, err
}

// release ends an isolation: it takes off only the taint and cordon Chamber set.
// The condition is written first: a reconcile that sees the annotations gone then
// sees it too (one watch delivers both in order).
func (c *Controller) release(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, reason, msg string) error {
	if err := c.setCondition(ctx, node, corev1.ConditionFalse, reason, msg, ""); err != nil {
		return err
	}
	err := kube.UpdateNode(ctx, c.client, node.Name, func(n *corev1.Node) {
		rec, _ := readRecord(n)
		if rec.Tainted {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy })
		}
		if rec.Cordoned {
			n.Spec.Unschedulable = false
		}
		(record{}).write(n)
		delete(n.Annotations, chamber.AnnotationIsolationClear)
		if reason == chamber.ReasonCleared {
			delete(n.Annotations, chamber.AnnotationIsolate)
			n.Annotations[chamber.AnnotationIsolationClearedAt] = c.opts.Clock.Now().UTC().Format(time.RFC3339Nano)
		}
	})
	if err != nil {
		return err
	}
	if err := c.releaseGPUs(ctx, node); err != nil {
		return err
	}
	recoveries.WithLabelValues(pool.Name, reason).Inc()
	c.recorder.Eventf(node, nil, corev1.EventTypeNormal, reason, "Release", "back in service: %s", msg)
	return nil
}

// annotate sets (string) or removes (nil) annotations, where they differ. The write
// fails with a conflict when the node read is stale (the cache may not show
// Chamber's own last write yet), so a count is never taken from an old value.
func (c *Controller) annotate(ctx context.Context, node *corev1.Node, want map[string]any) error {
	orig := node.DeepCopy()
	changed := false
	for k, v := range want {
		have, ok := node.Annotations[k]
		switch v := v.(type) {
		case string:
			if !ok || v != have {
				if node.Annotations == nil {
					node.Annotations = map[string]string{}
				}
				node.Annotations[k], changed = v, true
			}
		default:
			if ok {
				delete(node.Annotations, k)
				changed = true
			}
		}
	}
	if !changed {
		return nil
	}
	if err := c.client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("annotate node %s: %w", node.Name, err)
	}
	return nil
}

// setCondition sets the node's ChamberIsolated condition where it differs, and
// records a transition as an Event of eventType (none when empty). A healthy node
// that never had the condition is left without one.
func (c *Controller) setCondition(ctx context.Context, node *corev1.Node, status corev1.ConditionStatus, reason, msg, eventType string) error {
	changed, err := c.setConditionChanged(ctx, node, status, reason, msg)
	if err == nil && changed && eventType != "" {
		c.recorder.Eventf(node, nil, eventType, reason, "Observe", "%s", msg)
	}
	return err
}

func (c *Controller) setConditionChanged(ctx context.Context, node *corev1.Node, status corev1.ConditionStatus, reason, msg string) (bool, error) {
	var have *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == chamber.ConditionNodeIsolated {
			have = &node.Status.Conditions[i]
		}
	}
	if have == nil && reason == chamber.ReasonHealthy {
		return false, nil
	}
	if have != nil && have.Status == status && have.Reason == reason && have.Message == msg {
		return false, nil
	}
	now := metav1.NewTime(c.opts.Clock.Now())
	cond := corev1.NodeCondition{Type: chamber.ConditionNodeIsolated, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	if have != nil && have.Status == status {
		cond.LastTransitionTime = have.LastTransitionTime
	}
	// A strategic merge patch keyed by type leaves the other conditions (the kubelet's,
	// kwok's, the agent's GPUHealthy) alone.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return false, err
	}
	if err := c.client.Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return false, fmt.Errorf("set condition %s: %w", chamber.ConditionNodeIsolated, err)
	}
	return true, nil
}

// poolOf is the pool the node belongs to (chamber.PoolOf), or nil.
func (c *Controller) poolOf(ctx context.Context, node *corev1.Node) (*chamber.GPUPool, error) {
	var pools chamber.GPUPoolList
	if err := c.client.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("list GPUPools: %w", err)
	}
	return chamber.PoolOf(node.Labels, pools.Items), nil
}

// levelAction says what an isolation level does, for Events.
func levelAction(level chamber.IsolationLevel) string {
	if level == chamber.IsolateGPU {
		return "hold the failing GPUs"
	}
	return "taint " + chamber.TaintGPUUnhealthy + ":NoSchedule and cordon the node"
}

func isolatedMessage(rep report, level chamber.IsolationLevel, why string) string {
	clears := fmt.Sprintf("a transient fault: it returns after healthy reports, or when an operator sets %s=true", chamber.AnnotationIsolationClear)
	if rep.persistent() {
		clears = fmt.Sprintf("a hardware fault: it stays isolated until an operator sets %s=true", chamber.AnnotationIsolationClear)
	}
	return fmt.Sprintf("%s (%s level: %s); %s", rep.describe(), level, why, clears)
}

// Policy values, with defaults.

func policyOf(pool *chamber.GPUPool) chamber.IsolationPolicy {
	if pool.Spec.Isolation == nil {
		return chamber.IsolationPolicy{}
	}
	return *pool.Spec.Isolation
}

func maxIsolatedPercent(p chamber.IsolationPolicy) int32 {
	if p.MaxIsolatedPercent == nil {
		return DefaultMaxIsolatedPercent
	}
	return *p.MaxIsolatedPercent
}

func breakerWindow(p chamber.IsolationPolicy) time.Duration {
	if p.BreakerWindow == nil {
		return DefaultBreakerWindow
	}
	return p.BreakerWindow.Duration
}

func recoveryReports(p chamber.IsolationPolicy) int {
	if p.RecoveryReports == nil {
		return DefaultRecoveryReports
	}
	return int(*p.RecoveryReports)
}

// breakerLimit is how many of total nodes may be isolated within the window: the
// percentage rounded down, but at least one, so a small pool can isolate a node.
func breakerLimit(p chamber.IsolationPolicy, total int) int {
	return max(1, int(math.Floor(float64(maxIsolatedPercent(p))*float64(total)/100)))
}
