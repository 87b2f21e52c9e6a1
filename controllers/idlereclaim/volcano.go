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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/integrations/volcano"
)

// Idle reclaim for Volcano Jobs. The decision is the Kueue path's: the team's and
// pool's policy (ResolvePolicy), the agents' utilization of the job's GPUs (measure),
// the window doubling with each earlier reclaim (reclaimWindow), and a waiter: here a
// Volcano PodGroup of another team that waits (Pending or Inqueue) for no more GPUs
// than the idle job holds. The action is Volcano's: the job is asked (the eviction
// protocol's annotations on the Job; its pods get notice and its team's grace), then
// paused with an AbortJob Command (Volcano deletes its running pods and keeps the
// Job, Aborted), and resumed with a ResumeJob Command once nobody waits, or after its
// hold (maxHold). Volcano counts a resume as a retry (status.retryCount), so a job
// is paused only while it has two retries to spare (the resume and a fault's).

// VolcanoOptions configure idle reclaim for Volcano Jobs.
type VolcanoOptions struct {
	Options
	// GracePeriod is a paused job's checkpoint grace period where neither its team
	// nor its pool sets one.
	GracePeriod time.Duration
}

// RegisterVolcano adds idle reclaim for Volcano Jobs to the manager.
func RegisterVolcano(mgr ctrl.Manager, opts VolcanoOptions) error {
	base := newController(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("chamber-idle-reclaim"), opts.Options)
	opts.Options = base.opts
	r := &VolcanoJobs{client: mgr.GetClient(), recorder: base.recorder, opts: opts, idle: map[types.UID]*idleWorkload{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("idlereclaim-volcano").
		// A deleted job never reaches Reconcile: drop what was seen of it here.
		For(&batch.Job{}, builder.WithPredicates(predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
			r.forget(e.Object.GetUID())
			return false
		}})).
		Complete(reconcile.AsReconciler(mgr.GetClient(), r))
}

// VolcanoJobs pauses idle Volcano Jobs while others wait, and resumes them.
type VolcanoJobs struct {
	client   client.Client
	recorder events.EventRecorder
	opts     VolcanoOptions

	mu sync.Mutex
	// idle is what the controller saw of idle jobs, in memory only (as for Workloads).
	idle map[types.UID]*idleWorkload
}

// Reconcile looks at one Volcano Job.
func (r *VolcanoJobs) Reconcile(ctx context.Context, job *batch.Job) (reconcile.Result, error) {
	again := reconcile.Result{RequeueAfter: r.opts.Interval}
	now := r.opts.Clock.Now()
	if job.Annotations[chamber.AnnotationIdleReclaimHeld] == "true" {
		return r.reconcilePaused(ctx, job, now)
	}
	req, requested, err := volcano.DatedRequestOf(ctx, r.client, job, now)
	if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if requested {
		if req.Reason != ReasonIdleReclaim {
			return again, nil // fault isolation's: it restarts the job
		}
		return r.pause(ctx, job, req, now)
	}
	if job.Status.State.Phase != batch.Running {
		// Not running: its next phase brings it back here.
		r.forget(job.UID)
		return reconcile.Result{}, nil
	}
	team, pool, err := r.teamOf(ctx, job.Namespace)
	if err != nil || team == nil {
		return again, err
	}
	var poolPolicy *chamber.IdleReclaimPolicy
	if pool != nil {
		poolPolicy = pool.Spec.IdleReclaim
	}
	policy := ResolvePolicy(poolPolicy, team.Spec.IdleReclaim)
	if !policy.Enabled || policy.exempt(job.Spec.PriorityClassName) || policy.optedOut(job) {
		r.forget(job.UID)
		return again, nil
	}
	pods, err := r.currentPods(ctx, job)
	if err != nil {
		return reconcile.Result{}, err
	}
	nodes, err := r.gpuNodesOf(ctx, pods)
	if err != nil {
		return reconcile.Result{}, err
	}
	use := measure(pods, nodes, r.opts.Heartbeats, policy.UtilizationPercent, now)
	if !use.idle {
		r.forget(job.UID)
		return again, nil
	}
	rec := r.record(job.UID, use.lowSince)
	waiting, err := r.waiter(ctx, job, team, use.gpus, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.mu.Lock()
	if waiting == nil {
		rec.contendedSince = time.Time{}
	}
	warn := waiting != nil && rec.contendedSince.IsZero()
	if warn {
		rec.contendedSince = now
	}
	since, lowSince := rec.contendedSince, rec.lowSince
	r.mu.Unlock()
	if waiting == nil {
		return again, nil
	}
	reclaims, _ := strconv.Atoi(job.Annotations[chamber.AnnotationIdleReclaims])
	reclaimAt := lowSince.Add(reclaimWindow(policy.Window, reclaims))
	if reclaimAt.Before(since) {
		reclaimAt = since
	}
	if warn {
		r.recorder.Eventf(job, waiting, corev1.EventTypeWarning, ReasonIdleGPUs, "Warn",
			"its %d GPUs are below %d%% utilization while %s/%s waits for GPUs; they will be reclaimed (the job paused) at %s unless they are used or nobody waits",
			use.gpus, policy.UtilizationPercent, waiting.Namespace, waiting.Name, reclaimAt.UTC().Format(time.RFC3339))
		warnings.WithLabelValues(team.Name).Inc()
	}
	if now.Before(reclaimAt) {
		return reconcile.Result{RequeueAfter: min(r.opts.Interval, reclaimAt.Sub(now))}, nil
	}
	// Volcano counts the resume as a retry: the job is paused only while the resume
	// and a fault's restart after it leave it running, so that idling never costs it
	// the retry a fault needs (with Volcano's default maxRetry of 3, a job is paused
	// once at most, before any restart).
	if !volcano.RetriesLeft(job, 2) {
		return again, nil
	}
	idleFor := now.Sub(lowSince)
	var policies []*chamber.EvictionPolicy
	policies = append(policies, team.Spec.Eviction)
	if pool != nil {
		policies = append(policies, pool.Spec.Eviction)
	}
	req = volcano.Request{Reason: ReasonIdleReclaim, RequestedAt: now,
		GracePeriod: chamber.ResolveGracePeriod(job.Spec.PriorityClassName, r.opts.GracePeriod, policies...),
		Message: fmt.Sprintf("idle reclaim: its %d GPUs stayed below %d%% utilization for %s, and %s/%s waits for them; the job is paused (Volcano AbortJob) and resumed when GPUs free",
			use.gpus, policy.UtilizationPercent, idleFor.Round(time.Second), waiting.Namespace, waiting.Name)}
	if kube.MarkedInteractive(job, volcano.Templates(job), pods) {
		req.GracePeriod = noNotice
	}
	gpuHours := float64(use.gpus) * idleFor.Hours()
	patch := req.Annotations()
	for k, v := range reclaimMarks(job, waiting.Namespace+"/"+waiting.Name, now, gpuHours) {
		patch[k] = v
	}
	if err := kube.PatchAnnotations(ctx, r.client, job, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	evictions.WithLabelValues(team.Name).Inc()
	countIdleAtReclaim(team.Name, gpuHours, 0)
	r.recorder.Eventf(job, waiting, corev1.EventTypeWarning, ReasonIdleReclaim, "Reclaim", "%s (grace period %s)", req.Message, req.GracePeriod)
	log.FromContext(ctx).Info("idle GPUs reclaimed", "job", client.ObjectKeyFromObject(job), "gpus", use.gpus, "idleFor", idleFor, "waiting", client.ObjectKeyFromObject(waiting))
	r.forget(job.UID)
	return reconcile.Result{RequeueAfter: min(r.opts.Interval, max(req.GracePeriod, time.Second))}, nil
}

// pause gives the job's pods notice, and pauses the job once its grace period ends
// or it says its checkpoint is saved: an AbortJob Command, and the hold's mark.
func (r *VolcanoJobs) pause(ctx context.Context, job *batch.Job, req volcano.Request, now time.Time) (reconcile.Result, error) {
	pods, err := r.currentPods(ctx, job)
	if err != nil {
		return reconcile.Result{}, err
	}
	if wait := req.Deadline().Sub(now); wait > 0 && !checkpointReady(job, pods) {
		deadline := req.Deadline().UTC().Format(time.RFC3339)
		for i := range pods {
			p := &pods[i]
			if p.Annotations[chamber.AnnotationEvictionDeadline] == deadline {
				continue
			}
			err := kube.PatchAnnotations(ctx, r.client, p, map[string]any{chamber.AnnotationEvictionDeadline: deadline, chamber.AnnotationEvictionReason: req.Reason})
			if client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, fmt.Errorf("give pod %s/%s notice of pause: %w", p.Namespace, p.Name, err)
			}
		}
		return reconcile.Result{RequeueAfter: min(wait, r.opts.Interval)}, nil
	}
	// The hold's mark first, in the patch that ends the request: a mark without a
	// Command is issued again below on the next look (the Command's name is fixed).
	patch := volcano.ClearRequest()
	patch[chamber.AnnotationIdleReclaimHeld] = "true"
	if err := kube.PatchAnnotations(ctx, r.client, job, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{RequeueAfter: r.opts.Interval}, r.command(ctx, job, bus.AbortJobAction, req.Reason, req.Message)
}

// reconcilePaused resumes a job idle reclaim paused, once nobody waits for GPUs it
// could use or its hold is over; until Volcano has aborted it, it makes sure the
// AbortJob Command was issued.
func (r *VolcanoJobs) reconcilePaused(ctx context.Context, job *batch.Job, now time.Time) (reconcile.Result, error) {
	again := reconcile.Result{RequeueAfter: r.opts.Interval}
	switch job.Status.State.Phase {
	case batch.Aborted:
	case batch.Running, batch.Pending:
		if job.Status.RetryCount > retryAtPause(job) {
			break // resumed already (by its user, or Chamber before a restart): the hold is over
		}
		return again, r.command(ctx, job, bus.AbortJobAction, ReasonIdleReclaim, "paused by idle reclaim")
	default:
		return again, nil // Aborting, Restarting: Volcano is at it
	}
	if job.Status.State.Phase == batch.Aborted {
		team, _, err := r.teamOf(ctx, job.Namespace)
		if err != nil {
			return reconcile.Result{}, err
		}
		at, _ := time.Parse(time.RFC3339, job.Annotations[chamber.AnnotationIdleReclaimedAt])
		reclaims, _ := strconv.Atoi(job.Annotations[chamber.AnnotationIdleReclaims])
		hold := r.opts.MaxHold << min(max(reclaims-1, 0), maxDoublings)
		gpus := jobGPUs(job)
		waiting, err := r.waiter(ctx, job, team, gpus, now)
		if err != nil {
			return reconcile.Result{}, err
		}
		if waiting != nil && now.Sub(at) < hold {
			return again, nil
		}
		if err := r.command(ctx, job, bus.ResumeJobAction, chamber.ReasonIdleReclaimResumed, "resumed by idle reclaim: GPUs are free"); err != nil {
			return reconcile.Result{}, err
		}
		r.recorder.Eventf(job, nil, corev1.EventTypeNormal, chamber.ReasonIdleReclaimResumed, "Resume", "resumed: nobody waits for GPUs it could use, or its hold (%s) is over", hold)
	}
	err := kube.PatchAnnotations(ctx, r.client, job, map[string]any{chamber.AnnotationIdleReclaimHeld: nil, chamber.AnnotationIdleReclaimPausedAtRetry: nil})
	return again, client.IgnoreNotFound(err)
}

func retryAtPause(job *batch.Job) int32 {
	n, err := strconv.Atoi(job.Annotations[chamber.AnnotationIdleReclaimPausedAtRetry])
	if err != nil {
		return job.Status.RetryCount
	}
	return int32(n)
}

// command creates a Command of action on the job under a name fixed by the action and
// the job's retryCount, so that it is created once.
func (r *VolcanoJobs) command(ctx context.Context, job *batch.Job, action bus.Action, reason, msg string) error {
	if action == bus.AbortJobAction && job.Annotations[chamber.AnnotationIdleReclaimPausedAtRetry] == "" {
		err := kube.PatchAnnotations(ctx, r.client, job, map[string]any{chamber.AnnotationIdleReclaimPausedAtRetry: strconv.Itoa(int(job.Status.RetryCount))})
		if err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	cmd := volcano.JobCommand(job, action, volcano.CommandName(job, action, job.Status.RetryCount), reason, msg)
	if err := r.client.Create(ctx, cmd); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s Volcano Job %s/%s: %w", action, job.Namespace, job.Name, err)
	}
	return nil
}

// waiter is a PodGroup of another team of the same pool (a team of another pool
// cannot use these GPUs) that waits for no more GPUs than gpus, created at least
// MinWait ago, of a job never reclaimed itself; nil when none does.
func (r *VolcanoJobs) waiter(ctx context.Context, job *batch.Job, team *chamber.Team, gpus int64, now time.Time) (*scheduling.PodGroup, error) {
	var pgs scheduling.PodGroupList
	if err := r.client.List(ctx, &pgs); err != nil {
		return nil, fmt.Errorf("list PodGroups: %w", err)
	}
	// The pool of each namespace a team lists, read once for all PodGroups.
	poolOf := map[string]string{}
	if team != nil {
		var teams chamber.TeamList
		if err := r.client.List(ctx, &teams); err != nil {
			return nil, fmt.Errorf("list Teams: %w", err)
		}
		for _, t := range teams.Items {
			for _, ns := range t.Spec.Namespaces {
				if _, taken := poolOf[ns]; !taken {
					poolOf[ns] = t.Spec.Pool
				}
			}
		}
	}
	for i := range pgs.Items {
		pg := &pgs.Items[i]
		if phase := pg.Status.Phase; phase != scheduling.PodGroupPending && phase != scheduling.PodGroupInqueue {
			continue
		}
		if team != nil && slices.Contains(team.Spec.Namespaces, pg.Namespace) {
			continue
		}
		if now.Sub(pg.CreationTimestamp.Time) < r.opts.MinWait || pg.Spec.MinResources == nil {
			continue
		}
		want := (*pg.Spec.MinResources)[kube.ResourceGPU]
		if want.Value() == 0 || want.Value() > gpus {
			continue
		}
		// A waiting job of another pool cannot use these GPUs; nor can Chamber say
		// which it could use where no team lists its namespace.
		if team != nil && poolOf[pg.Namespace] != team.Spec.Pool {
			continue
		}
		// A job reclaimed for idling gets no other reclaimed while it waits (as for
		// Workloads): two idle jobs would take turns.
		if owner := metav1.GetControllerOfNoCopy(pg); owner != nil && owner.Kind == "Job" {
			var waiting batch.Job
			err := r.client.Get(ctx, client.ObjectKey{Namespace: pg.Namespace, Name: owner.Name}, &waiting)
			if client.IgnoreNotFound(err) != nil {
				return nil, fmt.Errorf("get Volcano Job %s/%s: %w", pg.Namespace, owner.Name, err)
			}
			if err == nil && waiting.Annotations[chamber.AnnotationIdleReclaims] != "" {
				continue
			}
		}
		return pg, nil
	}
	return nil, nil
}

// jobGPUs is how many GPUs the job's gang asks for: its tasks' replicas times their
// pods' GPUs.
func jobGPUs(job *batch.Job) int64 {
	var n int64
	for _, t := range job.Spec.Tasks {
		n += int64(t.Replicas) * kube.PodGPUs(&t.Template.Spec)
	}
	return n
}

func (r *VolcanoJobs) currentPods(ctx context.Context, job *batch.Job) ([]corev1.Pod, error) {
	pods, err := volcano.PodsOf(ctx, r.client, job)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pods, func(p corev1.Pod) bool { return !volcano.CurrentPod(job, &p) }), nil
}

func (r *VolcanoJobs) gpuNodesOf(ctx context.Context, pods []corev1.Pod) (map[string]*chamber.GPUNode, error) {
	out := map[string]*chamber.GPUNode{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || out[p.Spec.NodeName] != nil {
			continue
		}
		var gn chamber.GPUNode
		if err := r.client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &gn); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("get GPUNode %s: %w", p.Spec.NodeName, err)
		}
		out[p.Spec.NodeName] = &gn
	}
	return out, nil
}

// teamOf is the Team whose namespaces hold ns, and its pool.
func (r *VolcanoJobs) teamOf(ctx context.Context, ns string) (*chamber.Team, *chamber.GPUPool, error) {
	var teams chamber.TeamList
	if err := r.client.List(ctx, &teams); err != nil {
		return nil, nil, fmt.Errorf("list Teams: %w", err)
	}
	for i := range teams.Items {
		team := &teams.Items[i]
		if !slices.Contains(team.Spec.Namespaces, ns) {
			continue
		}
		var pool chamber.GPUPool
		if err := r.client.Get(ctx, client.ObjectKey{Name: team.Spec.Pool}, &pool); apierrors.IsNotFound(err) {
			return team, nil, nil
		} else if err != nil {
			return nil, nil, fmt.Errorf("get GPUPool %s: %w", team.Spec.Pool, err)
		}
		return team, &pool, nil
	}
	return nil, nil, nil
}

func checkpointReady(job *batch.Job, pods []corev1.Pod) bool {
	return job.Annotations[chamber.AnnotationCheckpointReady] == "true" || slices.ContainsFunc(pods, func(p corev1.Pod) bool {
		return p.Annotations[chamber.AnnotationCheckpointReady] == "true"
	})
}

func (r *VolcanoJobs) record(uid types.UID, since time.Time) *idleWorkload {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.idle[uid]
	if rec == nil {
		rec = &idleWorkload{uid: uid, lowSince: since}
		r.idle[uid] = rec
	}
	return rec
}

func (r *VolcanoJobs) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.idle, uid)
}
