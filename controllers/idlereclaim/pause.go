package idlereclaim

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Why a reclaimed workload is paused: Kueue puts a workload evicted by an admission
// check back in its queue at once, while the workloads waiting for that capacity sit
// in Kueue's inadmissible list until its next batched requeue (Kueue v0.19,
// pkg/cache/queue: cluster_queue.go PushOrUpdate, inadmissible_workloads.go), so an
// evicted workload left active takes its GPUs straight back and holds them idle
// again. A check's requeueAfterSeconds does not help: Kueue waits it out before it
// evicts, not after (pkg/controller/core/workload_controller.go). So idle reclaim
// pauses the workload itself: once Kueue has evicted it, it deactivates it
// (spec.active false; Kueue then neither queues nor admits it, and its Job stays,
// suspended) for as long as any workload waits for GPUs it could use, and resumes it
// (activates it again; Kueue requeues it and admits it where GPUs are free) once
// nobody does. A workload is never paused longer than
// MaxHold at its first reclaim, doubling at each further one (at most
// maxDoublings times): a workload that keeps idling stays out longer each time, and
// must idle longer before its next reclaim (reclaimWindow).
// An interactive one (a notebook) has no such limit: brought back while its user is
// away it would idle through another window while others wait; its user resumes it.

// DefaultMaxHold is the default of Options.MaxHold.
const DefaultMaxHold = 10 * time.Minute

// maxDoublings caps the back-off of repeated reclaims: the hold and the window grow
// to 8 times theirs at most.
const maxDoublings = 3

// maxHold is how long a workload reclaimed for the nth time (n from 1) may stay paused.
func (c *Controller) maxHold(reclaims int) time.Duration {
	return c.opts.MaxHold << min(max(reclaims-1, 0), maxDoublings)
}

// reclaimWindow is how long a workload reclaimed reclaims times before must idle
// before its next reclaim: the pool's window, doubling with each. A job that idles
// because it is input-bound, not hung, idles again after every restart; without the
// back-off it would be reclaimed every window while anyone waits, losing its unsaved
// work each time and freeing nothing for long.
func reclaimWindow(window time.Duration, reclaims int) time.Duration {
	return window << min(max(reclaims, 0), maxDoublings)
}

// reclaimMarks are the annotations a reclaim writes with its eviction request: the
// workload (namespace/name) its GPUs were reclaimed for, when, its count of reclaims
// and the idle GPU-hours reclaimed, this reclaim's added.
func reclaimMarks(obj metav1.Object, reclaimedFor string, at time.Time, gpuHours float64) map[string]string {
	reclaims, _ := strconv.Atoi(obj.GetAnnotations()[chamber.AnnotationIdleReclaims])
	before, _ := strconv.ParseFloat(obj.GetAnnotations()[chamber.AnnotationIdleReclaimedGPUHours], 64)
	return map[string]string{
		chamber.AnnotationIdleReclaimedFor:      reclaimedFor,
		chamber.AnnotationIdleReclaimedAt:       at.UTC().Format(time.RFC3339),
		chamber.AnnotationIdleReclaims:          strconv.Itoa(reclaims + 1),
		chamber.AnnotationIdleReclaimedGPUHours: strconv.FormatFloat(max(before, 0)+gpuHours, 'f', 3, 64),
	}
}

// reconcileHold holds a reclaimed workload back from its queue and lets it go again.
// done is true when the workload is being held (or released) and nothing else is to
// be done with it now.
func (c *Controller) reconcileHold(ctx context.Context, wl *kueue.Workload) (done bool, res reconcile.Result, err error) {
	a := wl.Annotations
	waiter := a[chamber.AnnotationIdleReclaimedFor]
	active := wl.Spec.Active == nil || *wl.Spec.Active
	pausedForUs := !active && (chamberkueue.Paused(wl) == ReasonIdleReclaim || chamberkueue.Paused(wl) == ReasonIdleTimeLimit)
	if waiter == "" && pausedForUs && wl.DeletionTimestamp == nil {
		// Paused for idle reclaim without the reclaim's marks, which come with the
		// request: they were removed since (or written apart by an older Chamber, which
		// died between the two writes). Nothing says what it waits for: let it go.
		return true, reconcile.Result{}, c.patch(ctx, wl, ptr.To(true), map[string]any{chamber.AnnotationEvictionPaused: nil})
	}
	if waiter == "" || wl.DeletionTimestamp != nil || apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
		return false, reconcile.Result{}, nil
	}
	evicted := apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted)
	admitted := apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)

	if a[chamber.AnnotationIdleReclaimHeld] != "true" {
		switch {
		case pausedForUs:
			// Chamber's eviction deactivated it for this reclaim: hold it.
		case !active:
			// Someone else deactivated it: theirs to bring back.
			return false, reconcile.Result{}, c.clearReclaimed(ctx, wl)
		case admitted && !evicted:
			if e, ok := chamberkueue.RequestedEviction(wl); !ok || (e.Reason != ReasonIdleReclaim && e.Reason != ReasonIdleTimeLimit) {
				// Another eviction (a GPU fault) took over, or the admission controller
				// dropped the request (asked for an admission that has ended since, or
				// while Kueue replaces the workload's nodes): not ours to hold. (The
				// marks come and go with the request: a workload evicted for it is
				// evicted before the request is removed.)
				return false, reconcile.Result{}, c.clearReclaimed(ctx, wl)
			}
			// The admission controller is still giving notice.
			return false, reconcile.Result{}, nil
		}
		// Kueue evicts it (or already has): keep it out of the queue.
		key := client.ObjectKeyFromObject(wl)
		if c.wrote(key, wl.UID, func(r *idleWorkload) bool { return r.held }) {
			return true, reconcile.Result{RequeueAfter: c.opts.Interval}, nil // the cache is behind
		}
		if err := c.patch(ctx, wl, ptr.To(false), map[string]any{chamber.AnnotationIdleReclaimHeld: "true", chamber.AnnotationEvictionPaused: nil}); err != nil {
			return true, reconcile.Result{}, err
		}
		c.remember(key, wl.UID, idleWorkload{held: true})
		pauses.WithLabelValues(wl.Namespace).Inc()
		if waiter == chamber.IdleReclaimedForIdleLimit {
			c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, chamber.ReasonIdleReclaimPaused, "Pause",
				"paused (deactivated, its Job kept) at its team's interactive idle time limit: resume it with %s", chamberkueue.ResumeCommand(wl))
			return true, reconcile.Result{}, nil
		}
		if chamberkueue.Interactive(wl, nil) {
			c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, chamber.ReasonIdleReclaimPaused, "Pause",
				"paused (deactivated, its Job kept) after its idle GPUs were reclaimed for %s: it resumes by itself once no workload waits for GPUs it could use, or when its user resumes it with %s",
				waiter, chamberkueue.ResumeCommand(wl))
			return true, reconcile.Result{RequeueAfter: c.opts.Interval}, nil
		}
		reclaims, _ := strconv.Atoi(a[chamber.AnnotationIdleReclaims])
		c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, chamber.ReasonIdleReclaimPaused, "Pause",
			"paused (deactivated, its Job kept) after its idle GPUs were reclaimed for %s: it resumes by itself once no workload waits for GPUs it could use, or after %s (reclaim %d; the limit doubles with each)",
			waiter, c.maxHold(reclaims), reclaims)
		return true, reconcile.Result{RequeueAfter: c.opts.Interval}, nil
	}

	key := client.ObjectKeyFromObject(wl)
	if c.wrote(key, wl.UID, func(r *idleWorkload) bool { return r.released }) {
		return true, reconcile.Result{RequeueAfter: c.opts.Interval}, nil // the cache is behind
	}
	if active {
		// Activated by someone else meanwhile (its user): the hold is over.
		resumes.WithLabelValues(wl.Namespace).Inc()
		why := "resumed by its user"
		if waiter == chamber.IdleReclaimedForIdleLimit {
			why += " after its interactive idle time limit"
		}
		c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, chamber.ReasonIdleReclaimResumed, "Resume", why)
		return false, reconcile.Result{}, c.clearReclaimed(ctx, wl)
	}
	if waiter == chamber.IdleReclaimedForIdleLimit {
		return true, reconcile.Result{}, nil // its user resumes it
	}
	now := c.opts.Clock.Now()
	at, err := time.Parse(time.RFC3339, a[chamber.AnnotationIdleReclaimedAt])
	if err != nil {
		at = time.Time{} // unreadable: never keep a workload held on it
	}
	reclaims, _ := strconv.Atoi(a[chamber.AnnotationIdleReclaims])
	limit := c.maxHold(reclaims)
	deadline := at.Add(limit)
	waits, err := c.waitingForPaused(ctx, wl, now)
	if err != nil {
		return true, reconcile.Result{}, err
	}
	if waits != nil && chamberkueue.Interactive(wl, nil) {
		// A notebook has no pause limit: brought back while its user is still away it
		// would sit idle through another window while others wait. Its user resumes
		// it on coming back.
		return true, reconcile.Result{RequeueAfter: c.opts.Interval}, nil
	}
	if waits != nil && now.Before(deadline) {
		return true, reconcile.Result{RequeueAfter: min(c.opts.Interval, deadline.Sub(now))}, nil
	}
	why := "no workload waits for GPUs it could use"
	if waits != nil {
		why = fmt.Sprintf("paused for %s, its limit at reclaim %d, though %s/%s still waits", limit, reclaims, waits.Namespace, waits.Name)
	}
	if err := c.patch(ctx, wl, ptr.To(true), reclaimMarksRemoved()); err != nil {
		return true, reconcile.Result{}, err
	}
	c.remember(key, wl.UID, idleWorkload{released: true})
	c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, chamber.ReasonIdleReclaimResumed, "Resume", "resumed (activated and requeued): %s", why)
	resumes.WithLabelValues(wl.Namespace).Inc()
	return true, reconcile.Result{}, nil
}

// waitingForPaused lists what contention needs from the cache and finds a workload
// waiting for GPUs the paused workload could use. Every such waiter counts, whether it
// fits on the GPUs free now or not: one that does not (an 8-GPU job waiting for a
// whole node) needs the GPUs that free next, and the paused workload, back in its
// queue, would take them first.
func (c *Controller) waitingForPaused(ctx context.Context, wl *kueue.Workload, now time.Time) (*kueue.Workload, error) {
	workloads, localQueues, clusterQueues, err := c.queueState(ctx)
	if err != nil {
		return nil, err
	}
	return waitingForPaused(wl, workloads, localQueues, clusterQueues, now, c.opts.MinWait), nil
}

func (c *Controller) clearReclaimed(ctx context.Context, wl *kueue.Workload) error {
	return c.patch(ctx, wl, nil, reclaimMarksRemoved())
}

// reclaimMarksRemoved is the annotation patch that ends a reclaim and its pause;
// chamber.AnnotationIdleReclaims stays.
func reclaimMarksRemoved() map[string]any {
	return map[string]any{chamber.AnnotationIdleReclaimedFor: nil, chamber.AnnotationIdleReclaimedAt: nil, chamber.AnnotationIdleReclaimHeld: nil, chamber.AnnotationEvictionPaused: nil}
}

// patch merges annotations (nil values remove) and, when active is set, spec.active
// into the Workload.
func (c *Controller) patch(ctx context.Context, wl *kueue.Workload, active *bool, annotations map[string]any) error {
	if err := chamberkueue.PatchWorkload(ctx, c.client, wl, active, annotations); err != nil {
		return fmt.Errorf("update idle reclaim state of workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	return nil
}
