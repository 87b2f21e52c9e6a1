// Package volcanoresync gets Volcano Jobs that vc-controller-manager left stalled going
// again.
//
// vc-controller-manager acts on a Volcano Job only on an event: a change of its spec
// or phase, a pod's, a Command. Two restarts can leave a Job with none to come:
//   - Pending with no PodGroup. Restarting a Job, Volcano writes its new phase, then
//     deletes its PodGroup; the write's event may be handled while the informer still
//     holds the old PodGroup, so no new one is created, and the PodGroup's deletion is
//     no event of the Job's (volcano-sh/volcano#2044 and #5385 are of this kind).
//     vc-scheduler places PodGroups, so the Job waits for ever.
//   - Restarting with no pod left: the pods' deletions were counted before the last
//     one was seen gone (status.terminating stays above 0), and no pod is left to
//     bring another event.
//
// Volcano's own restarts (its reclaim, preempt and fault policies) can leave a Job
// either way, with Chamber or without. A Job found so for After gets a ResumeJob
// Command, as vcctl issues one: in either phase Volcano then syncs the Job again
// (Pending: its PodGroup and pods are made; Restarting: its pods are counted again,
// none, and it goes Pending), and a resume of a Job that was not stalled changes
// nothing. Volcano does not count it as a retry there.
package volcanoresync

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"chamber.dev/chamber/integrations/volcano"
)

// DefaultAfter is how long a Job stays stalled before Chamber resumes it: far longer
// than vc-controller-manager takes to make a PodGroup or to see a pod gone
// (milliseconds), short against a job's wait.
const DefaultAfter = 30 * time.Second

// ReasonResynced is the reason of the Event on a Job Chamber resumed, and of its
// Command.
const ReasonResynced = "Resynced"

// Options configure the controller.
type Options struct {
	// After is how long a Job is seen stalled before it is resumed; 0 means
	// DefaultAfter.
	After time.Duration
	// Clock is the time source (tests).
	Clock clock.PassiveClock
}

// Register adds the controller ("resync-volcano") to the manager.
func Register(mgr ctrl.Manager, opts Options) error {
	if opts.After <= 0 {
		opts.After = DefaultAfter
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	r := &Resync{client: mgr.GetClient(), recorder: mgr.GetEventRecorder("chamber-resync"), opts: opts, since: map[types.UID]time.Time{}}
	// The events that can leave a Job stalled (its own phase's change, its PodGroup's
	// deletion, its last pod's) and end a stall (its PodGroup made).
	owner := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &batch.Job{}, handler.OnlyControllerOwner())
	noUpdates := predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
	deletes := predicate.And(noUpdates, predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }})
	return ctrl.NewControllerManagedBy(mgr).
		Named("resync-volcano").
		For(&batch.Job{}, builder.WithPredicates(predicate.Funcs{DeleteFunc: func(e event.DeleteEvent) bool {
			r.forget(e.Object.GetUID())
			return false
		}})).
		Watches(&scheduling.PodGroup{}, owner, builder.WithPredicates(noUpdates)).
		Watches(&corev1.Pod{}, owner, builder.WithPredicates(deletes)).
		Complete(reconcile.AsReconciler(mgr.GetClient(), r))
}

// Resync resumes stalled Volcano Jobs.
type Resync struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options

	mu sync.Mutex
	// since is when each Job was first seen stalled, in memory: after a restart of
	// the controller a stalled Job waits After again.
	since map[types.UID]time.Time
}

// Reconcile looks at one Volcano Job.
func (r *Resync) Reconcile(ctx context.Context, job *batch.Job) (reconcile.Result, error) {
	why, err := r.stalled(ctx, job)
	if err != nil {
		return reconcile.Result{}, err
	}
	if why == "" {
		r.forget(job.UID)
		return reconcile.Result{}, nil
	}
	now := r.opts.Clock.Now()
	// Stalled since the later of its phase's start and when it was first seen so:
	// Volcano gets After to act on its own, whichever event came first.
	since := r.seen(job.UID, now)
	if phaseAt := job.Status.State.LastTransitionTime.Time; phaseAt.After(since) {
		since = phaseAt
	}
	if wait := since.Add(r.opts.After).Sub(now); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	phase := job.Status.State.Phase
	msg := fmt.Sprintf("vc-controller-manager left the Job %s for %s (%s): Chamber resumed it (ResumeJob) so that Volcano syncs it again",
		phase, now.Sub(since).Round(time.Second), why)
	name := fmt.Sprintf("%s-chamber-resync-%d", job.Name, job.Status.Version)
	cmd := volcano.JobCommand(job, bus.ResumeJobAction, name, ReasonResynced, msg)
	if err := r.client.Create(ctx, cmd); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, fmt.Errorf("resume stalled Volcano Job %s/%s: %w", job.Namespace, job.Name, err)
		}
		// Volcano has not read the last one yet: look again later.
		return reconcile.Result{RequeueAfter: r.opts.After}, nil
	}
	resynced.WithLabelValues(string(phase)).Inc()
	r.recorder.Eventf(job, nil, corev1.EventTypeWarning, ReasonResynced, "Resume", msg)
	log.FromContext(ctx).Info("resumed a stalled Volcano Job", "phase", phase, "why", why)
	r.forget(job.UID)
	// If it stays stalled (Volcano did not act on the Command), once more after After.
	return reconcile.Result{RequeueAfter: r.opts.After}, nil
}

// stalled says why the job waits on an event that will not come, or "" when it does
// not: Pending with no PodGroup, or Restarting with no pod.
func (r *Resync) stalled(ctx context.Context, job *batch.Job) (string, error) {
	if job.DeletionTimestamp != nil {
		return "", nil
	}
	switch job.Status.State.Phase {
	case batch.Pending:
		if job.Status.State.LastTransitionTime.IsZero() {
			return "", nil // not initiated yet: Volcano has yet to write its first status
		}
		if pg, err := volcano.PodGroupOf(ctx, r.client, job); err != nil || pg != nil {
			return "", err
		}
		return "no PodGroup: vc-scheduler has nothing to place", nil
	case batch.Restarting:
		pods, err := volcano.PodsOf(ctx, r.client, job)
		if err != nil || len(pods) > 0 {
			return "", err
		}
		return fmt.Sprintf("no pod left, %d counted terminating", job.Status.Terminating), nil
	}
	return "", nil
}

func (r *Resync) seen(uid types.UID, now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.since[uid]; ok {
		return at
	}
	r.since[uid] = now
	return now
}

func (r *Resync) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.since, uid)
}
