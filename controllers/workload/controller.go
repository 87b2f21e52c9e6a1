package workload

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueac "sigs.k8s.io/kueue/client-go/applyconfiguration/kueue/v1beta2"
	utiltas "sigs.k8s.io/kueue/pkg/util/tas"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Options configure the admission check and Chamber's evictions.
type Options struct {
	// Check runs Chamber's admission check (placement on healthy GPUs) on the
	// workloads of ClusterQueues that name it. Off, the controller only evicts.
	Check bool
	// PlacementTimeout is how long a workload with reserved quota waits for healthy
	// GPUs before the check gives its quota back to the queue (Retry): no workload
	// holds quota it cannot use.
	PlacementTimeout time.Duration
	// GracePeriod is how long an evicted workload's pods have to checkpoint, unless
	// the pool, the team or the tier says otherwise.
	GracePeriod time.Duration
	// AfterNotice is the SIGTERM grace of a pod marked chamber.dev/checkpoint-on-notice
	// that is deleted once its notice ran out unanswered (RegisterNotice).
	AfterNotice time.Duration
	// Recheck is how often a workload waiting for healthy GPUs, or a notified one
	// whose job may answer on its Job object, is looked at again (GPUs free up and
	// recover without an event on the workload). 0 means DefaultRecheck.
	Recheck time.Duration
	// Clock is the time source; the real clock when nil.
	Clock clock.Clock
	// Heartbeats tells which agents are silent; one of its own on Clock when nil.
	Heartbeats *chamber.Heartbeats
}

// Defaults of Options.
const (
	DefaultPlacementTimeout = 2 * time.Minute
	// DefaultGracePeriod covers a checkpoint that takes minutes to write (a large
	// model's weights and optimizer state to network storage): an eviction whose
	// notice is shorter than the write throws away the work since the last checkpoint,
	// up to an hour of every GPU, while a longer notice costs only the writes that need
	// it, since a job that has saved its progress exits (or says so with
	// chamber.dev/checkpoint-ready) and is evicted at once. Only a hung job holds its
	// GPUs to the end, so the default trades at most 5 minutes of a hung job's GPUs for
	// the checkpoints that take minutes to write.
	DefaultGracePeriod = 5 * time.Minute
	DefaultRecheck     = 5 * time.Second
)

// DefaultOptions are the check's options unless flags say otherwise.
func DefaultOptions() Options {
	return Options{Check: true, PlacementTimeout: DefaultPlacementTimeout, GracePeriod: DefaultGracePeriod, AfterNotice: DefaultAfterNotice, Recheck: DefaultRecheck}
}

const eventsComponent = "chamber-admission"

// Controller is the Workload side of the check (placement verdicts), and Chamber's
// evictions: the notice, the grace period, then Kueue's eviction.
type Controller struct {
	client client.Client
	// reader reads a pod's owner's owner (chamberkueue.WorkloadOfPod) from the API
	// server: through the cache, each kind of owner would start an informer the
	// chart's RBAC may not allow, and the read would wait on it.
	reader   client.Reader
	recorder events.EventRecorder
	opts     Options
	metrics  *metrics
	// halfStopped: admitted workloads seen with a half-stopped Job (repairHalfStopped).
	halfStopped halfStoppedJobs
}

// Register adds the Workload controller to the manager and, with opts.Check, the
// check's own (the AdmissionCheck created at start-up and kept Active).
func Register(mgr ctrl.Manager, opts Options) error {
	def := DefaultOptions()
	if opts.PlacementTimeout <= 0 {
		opts.PlacementTimeout = def.PlacementTimeout
	}
	if opts.GracePeriod < 0 {
		opts.GracePeriod = def.GracePeriod
	}
	if opts.Recheck <= 0 {
		opts.Recheck = def.Recheck
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Heartbeats == nil {
		opts.Heartbeats = chamber.NewHeartbeats(opts.Clock, 0)
	}
	m, err := newMetrics()
	if err != nil {
		return err
	}
	c := &Controller{client: mgr.GetClient(), reader: mgr.GetAPIReader(), recorder: mgr.GetEventRecorder(eventsComponent), opts: opts, metrics: m}
	if opts.Check {
		if err := mgr.Add(checkCreator{client: mgr.GetClient()}); err != nil {
			return err
		}
		if err := ctrl.NewControllerManagedBy(mgr).
			Named("admissioncheck").
			For(&kueue.AdmissionCheck{}).
			Complete(reconcile.AsReconciler(mgr.GetClient(), &checkReconciler{client: mgr.GetClient()})); err != nil {
			return err
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("admission").
		// Each verdict waits on one API write. Enough of them at once that the
		// pre-approval of a new workload lands before Kueue's workload reconciler
		// writes the check's Pending entry: Kueue then finds the entry there (or its
		// write fails at once, stored nowhere) and the workload costs the API server
		// one write more than without the check, not two. With fewer at once, more
		// of a burst of new workloads pays the second write and waits longer for
		// admission; more cost only goroutines waiting on the API server. make
		// bench-controllers reports the writes per workload against Kueue alone.
		WithOptions(controller.Options{MaxConcurrentReconciles: 32}).
		// Only workloads with an eviction asked, those of ClusterQueues with the
		// check, and new ones waiting in a queue (Kueue may not have added the check
		// yet).
		For(&kueue.Workload{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			wl := o.(*kueue.Workload)
			_, asked := chamberkueue.RequestedEviction(wl)
			return asked || (opts.Check && (chamberkueue.HasCheck(wl) || (len(wl.Status.AdmissionChecks) == 0 && waiting(wl))))
		}))).
		// A job answering the eviction notice early.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(c.workloadOfPod), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectNew.GetAnnotations()[chamber.AnnotationCheckpointReady] != e.ObjectOld.GetAnnotations()[chamber.AnnotationCheckpointReady]
			},
		})).
		// A Job Kueue starts or finishes stopping (repairHalfStopped).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(c.workloadsOwnedBy), builder.OnlyMetadata, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectNew.GetAnnotations()[stoppingAnnotation] != e.ObjectOld.GetAnnotations()[stoppingAnnotation]
			},
		})).
		Complete(reconcile.AsReconciler(mgr.GetClient(), c))
}

// workloadsOwnedBy are the workloads of a job object.
func (c *Controller) workloadsOwnedBy(ctx context.Context, obj client.Object) []reconcile.Request {
	return c.workloadsOfOwner(ctx, obj.GetNamespace(), obj.GetUID())
}

func (c *Controller) workloadOfPod(ctx context.Context, obj client.Object) []reconcile.Request {
	wl, err := chamberkueue.WorkloadOfPod(ctx, c.client, c.reader, obj.(*corev1.Pod))
	if err != nil || wl == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(wl)}}
}

func (c *Controller) workloadsOfOwner(ctx context.Context, ns string, uid types.UID) []reconcile.Request {
	wls, err := chamberkueue.WorkloadsOwnedBy(ctx, c.client, ns, uid)
	if err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(wls))
	for _, wl := range wls {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&wl)})
	}
	return reqs
}

// Reconcile carries out an eviction asked for the workload, and decides the check's
// state.
func (c *Controller) Reconcile(ctx context.Context, wl *kueue.Workload) (reconcile.Result, error) {
	check := chamberkueue.CheckState(wl)
	if !c.opts.Check {
		check = nil // a check left on the workload from before is Kueue's to remove
	}
	eviction, evictionAsked := chamberkueue.RequestedEviction(wl)
	reserved := conditionTrue(wl, kueue.WorkloadQuotaReserved) &&
		!conditionTrue(wl, kueue.WorkloadFinished) && !conditionTrue(wl, kueue.WorkloadEvicted)
	if !reserved {
		// Evicted, finished or back in the queue: an eviction asked for is done.
		if evictionAsked {
			return reconcile.Result{}, c.clearEviction(ctx, wl)
		}
		if c.opts.Check && (check == nil || check.State != kueue.CheckStateReady) && waiting(wl) {
			return reconcile.Result{}, c.preApprove(ctx, wl, check)
		}
		return reconcile.Result{}, nil
	}
	if evictionAsked && eviction.Outlived(wl) {
		// Asked for an admission that ended in an eviction since (Kueue preempted the
		// workload, say, and admitted it again before this controller saw it
		// evicted): done, and not a request to evict this admission.
		return reconcile.Result{}, c.clearEviction(ctx, wl)
	}
	if chamberkueue.ReplacingNodes(wl) {
		return c.whileReplacingNodes(ctx, wl, eviction, evictionAsked)
	}
	if evictionAsked {
		if !conditionTrue(wl, kueue.WorkloadAdmitted) {
			// Quota reserved, checks not all Ready: nothing runs yet, no notice to give.
			return reconcile.Result{}, c.evict(ctx, wl, eviction)
		}
		return c.evictCooperatively(ctx, wl, eviction)
	}
	if check == nil {
		return reconcile.Result{}, nil
	}
	switch check.State {
	case kueue.CheckStatePending:
		return c.checkPlacement(ctx, wl, check)
	case kueue.CheckStateReady:
		if res, halfStopped, err := c.repairHalfStopped(ctx, wl); halfStopped || err != nil {
			return res, err
		}
		if c.preApproved(wl, check) {
			return c.verifyAtReservation(ctx, wl)
		}
	}
	return reconcile.Result{}, nil
}

// checkPlacement sets the check Ready when the workload's pods land on healthy GPUs,
// keeps it Pending with the reason while they would not, and sets Retry once the
// workload has waited PlacementTimeout, so its quota goes back to the queue.
func (c *Controller) checkPlacement(ctx context.Context, wl *kueue.Workload, check *kueue.AdmissionCheckState) (reconcile.Result, error) {
	now := c.opts.Clock.Now()
	verdict, err := c.verdict(ctx, wl, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if verdict.Ready {
		c.metrics.verdicts.WithLabelValues("ready").Inc()
		return reconcile.Result{}, c.setCheck(ctx, wl, kueue.CheckStateReady, verdict.Message)
	}
	since := now
	if cond := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); cond != nil {
		since = cond.LastTransitionTime.Time
	}
	if waited := now.Sub(since); waited >= c.opts.PlacementTimeout {
		c.metrics.verdicts.WithLabelValues("retry").Inc()
		msg := fmt.Sprintf("No healthy GPUs for the workload after %s; its quota goes back to the queue: %s", waited.Round(time.Second), verdict.Message)
		c.recorder.Eventf(wl, nil, corev1.EventTypeWarning, "NoHealthyGPUs", "Requeue", "%s", msg)
		// No requeueAfterSeconds: Kueue (v0.19) waits it out before it evicts, not
		// after, so it would only hold the quota longer.
		return reconcile.Result{}, c.setCheck(ctx, wl, kueue.CheckStateRetry, msg)
	}
	msg := "Waiting for healthy GPUs: " + verdict.Message
	if check.Message != msg {
		c.metrics.verdicts.WithLabelValues("pending").Inc()
		if err := c.setCheck(ctx, wl, kueue.CheckStatePending, msg); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: min(c.opts.Recheck, c.opts.PlacementTimeout-now.Sub(since))}, nil
}

// verdict compares the workload's admission (Kueue's topology assignment, or its
// flavor) with the GPUs the agents report. Verdicts read the informers' objects
// without copying them (client.UnsafeDisableDeepCopy): they never change what they
// read, and a verdict on every admission must not copy the fleet each time.
func (c *Controller) verdict(ctx context.Context, wl *kueue.Workload, now time.Time) (Verdict, error) {
	defer c.timeVerdict()()
	if wl.Status.Admission == nil {
		return Verdict{Message: "no admission yet"}, nil
	}
	own := ownedBy(ownerUIDs(wl))
	var msgs []string
	ready := true
	for _, d := range demands(wl.Status.Admission) {
		var ok bool
		var msg string
		if d.Topology != nil {
			nodes, err := c.nodesOfAssignment(ctx, d.Topology, own, now)
			if err != nil {
				return Verdict{}, err
			}
			ok, msg = placedVerdict(d, nodes)
		} else {
			nodes, err := c.nodesOfFlavor(ctx, d.Flavor, own, now)
			if err != nil {
				return Verdict{}, err
			}
			ok, msg = fitVerdict(d, nodes)
		}
		ready = ready && ok
		msgs = append(msgs, msg)
	}
	if len(msgs) == 0 {
		return Verdict{Ready: true, Message: "The workload uses no GPUs"}, nil
	}
	return Verdict{Ready: ready, Message: strings.Join(msgs, "; ")}, nil
}

// timeVerdict starts timing a verdict; call what it returns when the verdict is
// decided.
func (c *Controller) timeVerdict() func() {
	start := time.Now()
	return func() { c.metrics.verdictSeconds.Observe(time.Since(start).Seconds()) }
}

// nodesOfAssignment are the nodes Kueue placed pods on, keyed by hostname.
func (c *Controller) nodesOfAssignment(ctx context.Context, ta *kueue.TopologyAssignment, own func(*corev1.Pod) bool, now time.Time) (map[string]NodeGPUs, error) {
	out := map[string]NodeGPUs{}
	if len(ta.Levels) == 0 || ta.Levels[len(ta.Levels)-1] != corev1.LabelHostname {
		return out, nil
	}
	for host := range utiltas.LowestLevelValues(ta) {
		if _, done := out[host]; done {
			continue
		}
		nodes, err := chamberkueue.NodesByHostname(ctx, c.client, host)
		if err != nil {
			return nil, err
		}
		for i := range nodes {
			n, err := c.nodeGPUs(ctx, &nodes[i], own, now)
			if err != nil {
				return nil, err
			}
			out[host] = n
		}
	}
	return out, nil
}

// nodesOfFlavor are the nodes a flavor's pods may land on.
func (c *Controller) nodesOfFlavor(ctx context.Context, flavor kueue.ResourceFlavorReference, own func(*corev1.Pod) bool, now time.Time) ([]NodeGPUs, error) {
	ofFlavor, err := c.flavorNodes(ctx, flavor)
	if err != nil {
		return nil, err
	}
	var nodes corev1.NodeList
	if err := c.client.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: ofFlavor}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list nodes of flavor %s: %w", flavor, err)
	}
	var out []NodeGPUs
	for i := range nodes.Items {
		n, err := c.nodeGPUs(ctx, &nodes.Items[i], own, now)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// flavorNodes selects the flavor's nodes by its node labels.
func (c *Controller) flavorNodes(ctx context.Context, flavor kueue.ResourceFlavorReference) (labels.Selector, error) {
	var rf kueue.ResourceFlavor
	if err := c.client.Get(ctx, client.ObjectKey{Name: string(flavor)}, &rf, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("get resource flavor %s: %w", flavor, err)
	}
	return labels.SelectorFromSet(rf.Spec.NodeLabels), nil
}

func (c *Controller) nodeGPUs(ctx context.Context, node *corev1.Node, own func(*corev1.Pod) bool, now time.Time) (NodeGPUs, error) {
	pods, err := chamberkueue.PodsOnNode(ctx, c.client, node.Name)
	if err != nil {
		return NodeGPUs{}, err
	}
	var gn chamber.GPUNode
	err = c.client.Get(ctx, client.ObjectKey{Name: node.Name}, &gn, client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) {
		return nodeGPUs(node, pods, own, nil, c.opts.Heartbeats, now), nil
	}
	if err != nil {
		return NodeGPUs{}, fmt.Errorf("get GPUNode %s: %w", node.Name, err)
	}
	return nodeGPUs(node, pods, own, &gn, c.opts.Heartbeats, now), nil
}

// evictCooperatively gives the workload's pods notice, and evicts once the grace
// period is over, the job says its checkpoint is saved, or no pod of it runs: a pod
// not started yet, or a replacement the Job controller made, has nothing to save,
// and waiting would only keep it where it is asked to leave. (Moved off a node for a
// big job's room, such a pod pinned there by Kueue is failed by Kueue's topology-aware
// scheduling for the room's taint, each time counted against the Job's backoffLimit.)
func (c *Controller) evictCooperatively(ctx context.Context, wl *kueue.Workload, e chamberkueue.Eviction) (reconcile.Result, error) {
	now := c.opts.Clock.Now()
	grace, err := c.gracePeriod(ctx, wl, e)
	if err != nil {
		return reconcile.Result{}, err
	}
	if e.RequestedAt.IsZero() {
		e.RequestedAt = now
		if err := kube.DateEvictionRequest(ctx, c.client, wl, now); err != nil {
			return reconcile.Result{}, err
		}
	}
	deadline := e.RequestedAt.Add(grace)
	if !now.Before(deadline) {
		return reconcile.Result{}, c.evict(ctx, wl, e)
	}
	pods, err := c.podsOf(ctx, wl)
	if err != nil {
		return reconcile.Result{}, err
	}
	ready, err := c.checkpointReady(ctx, wl, pods)
	if err != nil {
		return reconcile.Result{}, err
	}
	if ready || !slices.ContainsFunc(pods, running) {
		return reconcile.Result{}, c.evict(ctx, wl, e)
	}
	notice := deadline.UTC().Format(time.RFC3339)
	noticed := 0
	for i := range pods {
		p := &pods[i]
		if p.Annotations[chamber.AnnotationEvictionDeadline] == notice {
			continue
		}
		err := kube.PatchAnnotations(ctx, c.client, p, map[string]any{chamber.AnnotationEvictionDeadline: notice, chamber.AnnotationEvictionReason: e.Reason})
		if client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("give pod %s/%s notice of eviction: %w", p.Namespace, p.Name, err)
		}
		noticed++
	}
	if noticed > 0 {
		c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, "EvictionNotice", "Notify",
			"%s: the workload will be evicted and requeued at %s (grace period %s) unless it reports its checkpoint earlier (annotation %s=true on a pod or the job): %s",
			e.Reason, notice, grace, chamber.AnnotationCheckpointReady, e.Message)
	}
	// The job may answer on the Job object, which is not watched: look again soon.
	return reconcile.Result{RequeueAfter: min(deadline.Sub(now), 2*c.opts.Recheck)}, nil
}

// evict evicts the workload (chamberkueue.Evict): Kueue stops its job and requeues it.
// The request is done then, and one write right after the eviction removes it: left
// for a later reconcile to see the workload evicted, it would outlive the eviction
// whenever Kueue requeues and admits the workload again before that reconcile runs
// (under load, or when a user resumes a paused notebook at once), and evict, and
// pause, that next admission too: a notebook its user resumed would stay paused with
// nothing left to resume it. A pause deactivates it in the same write: left active,
// Kueue would requeue it as soon as its pods are gone and could admit it again before
// its requester deactivated it, and a workload paused for a big job would take back
// the room made for it. The eviction comes first so that its condition
// and Kueue's scheduling statistics carry Chamber's reason (deactivated first, Kueue
// evicts it itself, as Deactivated); the second write follows in the same reconcile,
// sooner than Kueue's stop of the job and its pods.
func (c *Controller) evict(ctx context.Context, wl *kueue.Workload, e chamberkueue.Eviction) error {
	msg := fmt.Sprintf("Evicted by Chamber (%s): %s", e.Reason, e.Message)
	if evicted, err := chamberkueue.Evict(ctx, c.client, wl, e.Reason, msg, c.opts.Clock.Now()); err != nil || !evicted {
		return err
	}
	c.metrics.evictions.WithLabelValues(e.Reason).Inc()
	c.recorder.Eventf(wl, nil, corev1.EventTypeWarning, e.Reason, "Evict", "%s", msg)
	annotations := chamberkueue.RequestRemoved()
	var active *bool
	what := "clear the eviction request of"
	switch deactivate := wl.Spec.Active == nil || *wl.Spec.Active; {
	case e.Pause && deactivate:
		active, annotations[chamber.AnnotationEvictionPaused] = ptr.To(false), e.Reason
		// Failing, the requester sees it evicted and active, and deactivates it itself.
		what = "pause"
	case chamberkueue.MultiKueueCopy(wl) && deactivate:
		// A worker cluster's copy of a manager's workload goes back to the manager,
		// which chooses where it runs next. Left active, this cluster's Kueue
		// requeues it at once and can admit it again, onto the same failed node,
		// before the manager's MultiKueue sees it evicted; deactivated,
		// it stays evicted, the manager requeues the workload and deletes this copy.
		active = ptr.To(false)
		what = "hand back to its MultiKueue manager"
	}
	if err := chamberkueue.PatchWorkload(ctx, c.client, wl, active, annotations); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("%s workload %s/%s: %w", what, wl.Namespace, wl.Name, err)
	}
	return nil
}

// gracePeriod: the request's own, else the team's tier's, the team's, the pool's
// tier's, the pool's, then the default.
func (c *Controller) gracePeriod(ctx context.Context, wl *kueue.Workload, e chamberkueue.Eviction) (time.Duration, error) {
	if e.GracePeriod != nil {
		return *e.GracePeriod, nil
	}
	tier := ""
	if wl.Spec.PriorityClassRef != nil {
		tier = wl.Spec.PriorityClassRef.Name
	}
	var policies []*chamber.EvictionPolicy
	team, pool, err := c.teamOf(ctx, wl)
	if err != nil {
		return 0, err
	}
	if team != nil {
		policies = append(policies, team.Spec.Eviction)
	}
	if pool != nil {
		policies = append(policies, pool.Spec.Eviction)
	}
	return chamber.ResolveGracePeriod(tier, c.opts.GracePeriod, policies...), nil
}

// teamOf finds the Team (and its pool) whose ClusterQueue admitted the workload.
func (c *Controller) teamOf(ctx context.Context, wl *kueue.Workload) (*chamber.Team, *chamber.GPUPool, error) {
	if wl.Status.Admission == nil {
		return nil, nil, nil
	}
	var cq kueue.ClusterQueue
	if err := c.client.Get(ctx, client.ObjectKey{Name: string(wl.Status.Admission.ClusterQueue)}, &cq); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	name := cq.Labels[chamber.LabelTeam]
	if name == "" {
		return nil, nil, nil
	}
	var team chamber.Team
	if err := c.client.Get(ctx, client.ObjectKey{Name: name}, &team); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	var pool chamber.GPUPool
	if err := c.client.Get(ctx, client.ObjectKey{Name: team.Spec.Pool}, &pool); err != nil {
		return &team, nil, client.IgnoreNotFound(err)
	}
	return &team, &pool, nil
}

// ownerUIDs are the UIDs of the workload's owners (its job).
func ownerUIDs(wl *kueue.Workload) []types.UID {
	var uids []types.UID
	for _, ref := range wl.OwnerReferences {
		uids = append(uids, ref.UID)
	}
	return uids
}

func (c *Controller) podsOf(ctx context.Context, wl *kueue.Workload) ([]corev1.Pod, error) {
	return chamberkueue.PodsOfWorkload(ctx, c.client, wl)
}

// checkpointReady: a pod of the workload, or the job itself, has answered the notice.
func (c *Controller) checkpointReady(ctx context.Context, wl *kueue.Workload, pods []corev1.Pod) (bool, error) {
	for _, p := range pods {
		if p.Annotations[chamber.AnnotationCheckpointReady] == "true" {
			return true, nil
		}
	}
	return c.ownerAnnotated(ctx, wl, chamber.AnnotationCheckpointReady, nil)
}

func (c *Controller) clearEviction(ctx context.Context, wl *kueue.Workload) error {
	err := kube.PatchAnnotations(ctx, c.client, wl, chamberkueue.RequestRemoved())
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("clear eviction request of workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	return nil
}

// setCheck writes the check's state; Kueue acts on it. It applies only Chamber's entry
// of status.admissionChecks (server-side apply, as Kueue's own check controllers do),
// so it never overwrites Kueue's writes to the rest of the workload, and only if the
// workload is as the check read it: a decision taken on a stale copy (the informer
// not yet showing Chamber's last write, or Kueue's reset of the check after an
// eviction) must not land. A conflict is dropped: the change that caused it brings
// the workload back to the check.
func (c *Controller) setCheck(ctx context.Context, wl *kueue.Workload, state kueue.CheckState, msg string) error {
	_, err := c.writeCheck(ctx, wl, state, msg)
	return err
}

// writeCheck is setCheck, and says whether the check now has that state.
func (c *Controller) writeCheck(ctx context.Context, wl *kueue.Workload, state kueue.CheckState, msg string) (bool, error) {
	msg = kube.TruncateMessage(msg)
	transition := metav1.NewTime(c.opts.Clock.Now())
	if current := chamberkueue.CheckState(wl); current != nil {
		if current.State == state && current.Message == msg && current.RequeueAfterSeconds == nil {
			return true, nil
		}
		if current.State == state {
			transition = current.LastTransitionTime
		}
	}
	check := kueueac.AdmissionCheckState().WithName(chamber.AdmissionCheckName).WithState(state).WithMessage(msg).WithLastTransitionTime(transition)
	apply := kueueac.Workload(wl.Name, wl.Namespace).WithUID(wl.UID).WithResourceVersion(wl.ResourceVersion).
		WithStatus(kueueac.WorkloadStatus().WithAdmissionChecks(check))
	if err := c.client.Status().Apply(ctx, apply, client.FieldOwner(chamber.AdmissionCheckControllerName), client.ForceOwnership); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// The workload was deleted, replaced or changed meanwhile.
			return false, nil
		}
		return false, fmt.Errorf("set check %s of workload %s/%s to %s: %w", chamber.AdmissionCheckName, wl.Namespace, wl.Name, state, err)
	}
	return true, nil
}

func conditionTrue(wl *kueue.Workload, t string) bool {
	return apimeta.IsStatusConditionTrue(wl.Status.Conditions, t)
}

// running says whether the pod runs (terminating or not: one told to stop may be
// writing its checkpoint).
func running(p corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }
