package isolation

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/integrations/volcano"
)

// Fault isolation for Volcano Jobs. The isolation controller decides, taints, cordons
// and records (the node's annotations, readRecord); this part reads that record and
// restarts whole every Volcano Job with a pod on what was isolated, through Volcano's
// own RestartJob Command (integrations/volcano): Volcano deletes all of the job's pods
// and its PodGroup and creates them again, and vc-scheduler places the new gang on
// nodes its predicates allow, which the isolated node's cordon and
// chamber.dev/gpu-unhealthy:NoSchedule taint are not (at GPU level, the hold pod takes
// the failing GPUs). The restart follows the eviction protocol: the job is asked
// (chamber.AnnotationEviction* on the Job), its pods get notice, and it is restarted
// once the grace period ends or it says its checkpoint is saved. Which jobs, and their
// grace, follow the Kueue path's rules (evict): the jobs on failing GPUs at once
// (Options.EvictionGracePeriod), those on the healthy GPUs of a node isolated at node
// level after DrainTimeout with their team's grace; every job on the node where the
// agent cannot tell which pod holds which GPU.

// volcanoRecheck is how often a node with a restart under way or in its grace period
// is looked at again: Chamber does not watch Volcano Jobs for this.
const volcanoRecheck = 2 * time.Second

// reissueAfter is how long a RestartJob Command that is gone (vc-controller-manager
// deletes a Command as it reads it) may go without Volcano counting the restart
// before Chamber issues it again: vc-controller-manager stopped between the two.
const reissueAfter = time.Minute

// RegisterVolcano adds fault isolation's Volcano part to the manager. Where Kueue is
// absent (opts.WithoutKueue) it registers the isolation controller too, which then
// decides, taints and records with no Kueue workload to evict.
func RegisterVolcano(mgr ctrl.Manager, opts Options) error {
	if opts.WithoutKueue {
		if err := Register(mgr, opts); err != nil {
			return err
		}
	}
	if err := volcano.SetupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	r := &VolcanoRestarts{client: mgr.GetClient(), reader: mgr.GetAPIReader(), recorder: mgr.GetEventRecorder("chamber-isolation"),
		opts: opts.withDefaults(), issued: map[types.UID]int32{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named("isolation-volcano").
		For(&corev1.Node{}, builder.WithPredicates(predicate.Funcs{
			// The isolation record is in the node's annotations.
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !maps(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations())
			},
			CreateFunc: func(e event.CreateEvent) bool { return e.Object.GetAnnotations()[chamber.AnnotationIsolatedAt] != "" },
		})).
		Complete(reconcile.AsReconciler(mgr.GetClient(), r))
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// VolcanoRestarts restarts the Volcano Jobs on the nodes and GPUs fault isolation took
// out of service.
type VolcanoRestarts struct {
	client   client.Client
	reader   client.Reader
	recorder events.EventRecorder
	opts     Options

	mu sync.Mutex
	// issued is the retryCount each job's last RestartJob Command was issued at, by
	// this process: the cache may not show the record written with it yet.
	issued map[types.UID]int32
}

// volcanoJobOn is a Volcano Job with live pods on an isolated node.
type volcanoJobOn struct {
	job *batch.Job
	// onFailing: one of its pods is on a failing GPU (or the agent cannot tell).
	onFailing bool
}

// Reconcile restarts the Volcano Jobs on the node's isolated hardware.
func (r *VolcanoRestarts) Reconcile(ctx context.Context, node *corev1.Node) (reconcile.Result, error) {
	rec, _ := readRecord(node) // the isolation controller says what it cannot read
	if !rec.Isolated {
		return reconcile.Result{}, nil
	}
	now := r.opts.Clock.Now()
	isolatedAt := levelSince(node, rec, now)
	gn := &chamber.GPUNode{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: node.Name}, gn); apierrors.IsNotFound(err) {
		gn = nil
	} else if err != nil {
		return reconcile.Result{}, fmt.Errorf("get GPUNode %s: %w", node.Name, err)
	}
	var pools chamber.GPUPoolList
	if err := r.client.List(ctx, &pools); err != nil {
		return reconcile.Result{}, fmt.Errorf("list GPUPools: %w", err)
	}
	pool := chamber.PoolOf(node.Labels, pools.Items)
	if pool == nil {
		return reconcile.Result{}, nil // isolated by hand outside any pool: not Chamber's
	}
	// Which pods: those on the failing GPUs; at node level, after the drain timeout,
	// the others too. Without the agent's map of pods to GPUs, every pod that was on
	// the node when it was isolated (one placed since got GPUs the node still offers).
	failing := readReport(gn, r.opts.Heartbeats, now).podsOnFailingGPUs()
	var res reconcile.Result
	drained := false
	if rec.Level == chamber.IsolateNode && r.opts.DrainTimeout >= 0 && failing != nil {
		if deadline := isolatedAt.Add(r.opts.DrainTimeout); now.Before(deadline) {
			res.RequeueAfter = deadline.Sub(now)
		} else {
			drained = true
		}
	}
	pods, err := volcano.PodsOnNode(ctx, r.client, node.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	jobs := map[types.NamespacedName]*volcanoJobOn{}
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			continue
		}
		onFailing := failing == nil || failing[client.ObjectKeyFromObject(pod)]
		switch {
		case failing == nil && pod.CreationTimestamp.After(isolatedAt):
			continue
		case !onFailing && !drained:
			continue
		}
		name, _ := volcano.JobOf(pod)
		key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
		on, ok := jobs[key]
		if !ok {
			job := &batch.Job{}
			if err := r.client.Get(ctx, key, job); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return reconcile.Result{}, fmt.Errorf("get Volcano Job %s: %w", key, err)
			}
			on = &volcanoJobOn{job: job}
		}
		if !volcano.CurrentPod(on.job, pod) {
			continue // Volcano is deleting this generation's pods
		}
		on.onFailing = on.onFailing || onFailing
		jobs[key] = on
	}
	for _, on := range jobs {
		again, err := r.restart(ctx, node, pool, rec, on, now)
		if err != nil {
			log.FromContext(ctx).Error(err, "restart Volcano Job", "job", client.ObjectKeyFromObject(on.job))
			continue // one job that cannot be restarted does not hold up the others
		}
		if again > 0 && (res.RequeueAfter == 0 || again < res.RequeueAfter) {
			res.RequeueAfter = again
		}
	}
	return res, nil
}

// restart asks for the job's restart, gives its pods notice, and restarts it once its
// grace period is over; it returns when to look again.
func (r *VolcanoRestarts) restart(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, rec record, on *volcanoJobOn, now time.Time) (time.Duration, error) {
	job := on.job
	if !volcano.Active(job) {
		return volcanoRecheck, nil // Volcano is restarting, stopping or has finished it
	}
	if volcano.Restarting(job) || r.issuedAt(job) {
		return r.reissue(ctx, job, now)
	}
	req, asked, err := volcano.DatedRequestOf(ctx, r.client, job, now)
	if err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	if !asked || req.Reason != chamber.ReasonGPUFault {
		grace := r.opts.EvictionGracePeriod
		msg := fmt.Sprintf("restarted whole, off node %s, isolated for a GPU fault (%s); Volcano places it again on healthy GPUs", node.Name, rec.Reason)
		if !on.onFailing {
			g, err := r.teamGrace(ctx, pool, job)
			if err != nil {
				return 0, err
			}
			grace = g
			msg += fmt.Sprintf("; its GPUs are healthy and ran on while the node drained (%s): it has its grace period to checkpoint before the node's repair", r.opts.DrainTimeout)
		}
		// A request of another reason (idle reclaim's pause) gives way: a job on failing
		// hardware is restarted whatever else was asked of it, and idle reclaim leaves
		// a job alone while another request stands.
		req = volcano.Request{Reason: chamber.ReasonGPUFault, Message: msg, RequestedAt: now, GracePeriod: grace}
		if err := kube.PatchAnnotations(ctx, r.client, job, req.Annotations()); err != nil {
			return 0, client.IgnoreNotFound(err)
		}
		r.recorder.Eventf(job, node, corev1.EventTypeWarning, "RestartRequested", "Restart", "%s: %s (grace period %s)", req.Reason, req.Message, req.GracePeriod)
	}
	pods, err := volcano.PodsOf(ctx, r.client, job)
	if err != nil {
		return 0, err
	}
	if wait := req.Deadline().Sub(now); wait > 0 && !checkpointReady(job, pods) {
		return min(wait, volcanoRecheck), r.notice(ctx, job, pods, req)
	}
	return r.issue(ctx, node, pool, job, req, now)
}

// notice gives the job's current pods the eviction protocol's notice: the time they
// will be stopped, and why.
func (r *VolcanoRestarts) notice(ctx context.Context, job *batch.Job, pods []corev1.Pod, req volcano.Request) error {
	deadline := req.Deadline().UTC().Format(time.RFC3339)
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || !volcano.CurrentPod(job, p) || p.Annotations[chamber.AnnotationEvictionDeadline] == deadline {
			continue
		}
		err := kube.PatchAnnotations(ctx, r.client, p, map[string]any{chamber.AnnotationEvictionDeadline: deadline, chamber.AnnotationEvictionReason: req.Reason})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("give pod %s/%s notice of restart: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// checkpointReady: a pod of the job, or the job itself, answered the notice.
func checkpointReady(job *batch.Job, pods []corev1.Pod) bool {
	return job.Annotations[chamber.AnnotationCheckpointReady] == "true" || slices.ContainsFunc(pods, func(p corev1.Pod) bool {
		return p.Annotations[chamber.AnnotationCheckpointReady] == "true"
	})
}

// issue records the restart on the job, then creates the RestartJob Command: a record
// without a Command (Chamber stopped between the two) is issued again by reissue; a
// Command without a record cannot happen.
func (r *VolcanoRestarts) issue(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, job *batch.Job, req volcano.Request, now time.Time) (time.Duration, error) {
	if !volcano.RetriesLeft(job, 1) {
		// RestartJob would fail it: Volcano fails a job whose restarts reach maxRetry.
		r.recorder.Eventf(job, node, corev1.EventTypeWarning, "RestartWithheld", "Restart",
			"not restarted: its restarts reached spec.maxRetry (%d); Volcano's own policies decide what happens to its pods on node %s", job.Spec.MaxRetry, node.Name)
		return 0, nil
	}
	rs := volcano.Restart{From: job.Status.RetryCount, At: now}
	if err := kube.PatchAnnotations(ctx, r.client, job, rs.Annotations()); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	r.remember(job)
	if err := r.command(ctx, job, req.Reason, req.Message); err != nil {
		return 0, err
	}
	volcanoRestarts.WithLabelValues(pool.Name).Inc()
	r.recorder.Eventf(job, node, corev1.EventTypeWarning, req.Reason, "Restart", "Volcano RestartJob issued: %s", req.Message)
	return volcanoRecheck, nil
}

// reissue creates the Command again when Volcano neither counted the restart nor has
// the Command any more, reissueAfter after it was issued.
func (r *VolcanoRestarts) reissue(ctx context.Context, job *batch.Job, now time.Time) (time.Duration, error) {
	rs, ok := volcano.RestartOf(job)
	if !ok || job.Status.RetryCount != rs.From || now.Sub(rs.At) < reissueAfter {
		return volcanoRecheck, nil
	}
	name := volcano.CommandName(job, bus.RestartJobAction, rs.From)
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: name}, &bus.Command{})
	if err == nil || !apierrors.IsNotFound(err) {
		return volcanoRecheck, client.IgnoreNotFound(err)
	}
	return volcanoRecheck, r.command(ctx, job, chamber.ReasonGPUFault, "issued again: Volcano did not restart the job within "+reissueAfter.String())
}

func (r *VolcanoRestarts) command(ctx context.Context, job *batch.Job, reason, msg string) error {
	cmd := volcano.JobCommand(job, bus.RestartJobAction, volcano.CommandName(job, bus.RestartJobAction, job.Status.RetryCount), reason, msg)
	if err := r.client.Create(ctx, cmd); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("restart Volcano Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return nil
}

// issuedAt: this process issued the job's restart at its present retryCount.
func (r *VolcanoRestarts) issuedAt(job *batch.Job) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	from, ok := r.issued[job.UID]
	return ok && job.Status.RetryCount <= from
}

func (r *VolcanoRestarts) remember(job *batch.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.issued[job.UID] = job.Status.RetryCount
}

// teamGrace is the grace period of a job on healthy GPUs: its team's (the Team whose
// namespaces hold it), else the node's pool's, else Options.GracePeriod.
func (r *VolcanoRestarts) teamGrace(ctx context.Context, pool *chamber.GPUPool, job *batch.Job) (time.Duration, error) {
	var policies []*chamber.EvictionPolicy
	var teams chamber.TeamList
	if err := r.client.List(ctx, &teams); err != nil {
		return 0, fmt.Errorf("list Teams: %w", err)
	}
	for _, t := range teams.Items {
		if slices.Contains(t.Spec.Namespaces, job.Namespace) {
			policies = append(policies, t.Spec.Eviction)
		}
	}
	policies = append(policies, pool.Spec.Eviction)
	return chamber.ResolveGracePeriod(job.Spec.PriorityClassName, r.opts.GracePeriod, policies...), nil
}
