package idlereclaim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"chamber.dev/chamber/controllers/admission"
)

// Why a reclaimed workload is held back: Kueue puts a workload evicted by an
// admission check back in its queue at once, while the workloads waiting for that
// capacity sit in Kueue's inadmissible list until its next batched requeue, so the
// evicted workload takes its GPUs straight back (seen here with Kueue v0.19.2). A
// check's requeueAfterSeconds does not help: Kueue waits it out before it evicts,
// not after. So idle reclaim keeps the workload out of the queue itself: once Kueue
// has evicted it, it deactivates it (spec.active false; Kueue then neither queues nor
// admits it) until the workload it was reclaimed for has quota, has stopped waiting,
// or MaxHold has passed, and then activates it again: Kueue requeues it, and it runs
// again when capacity frees.

// Annotations on a reclaimed Workload, written by idle reclaim alone.
const (
	// AnnotationReclaimedFor is the waiting workload (namespace/name) the GPUs were
	// reclaimed for.
	AnnotationReclaimedFor = "chamber.dev/idle-reclaimed-for"
	// AnnotationReclaimedAt is when the eviction was asked for (RFC 3339).
	AnnotationReclaimedAt = "chamber.dev/idle-reclaimed-at"
	// AnnotationHeld is "true" while idle reclaim keeps the workload deactivated.
	AnnotationHeld = "chamber.dev/idle-reclaim-held"
	// AnnotationReclaims counts the workload's reclaims; it stays when the hold ends.
	// A workload reclaimed for idling does not get other idle workloads reclaimed
	// while it waits (see waiting).
	AnnotationReclaims = "chamber.dev/idle-reclaims"
)

// Events of the hold.
const (
	ReasonHeld     = "IdleReclaimHeld"
	ReasonReleased = "IdleReclaimReleased"
)

// DefaultMaxHold is the default of Options.MaxHold.
const DefaultMaxHold = 10 * time.Minute

// markReclaimed records on the Workload what the hold needs: the workload (namespace/
// name) its GPUs were reclaimed for, and when; and counts the reclaim.
func (c *Controller) markReclaimed(ctx context.Context, key types.NamespacedName, wl *kueue.Workload, waiter string, at time.Time) error {
	reclaims, _ := strconv.Atoi(wl.Annotations[AnnotationReclaims])
	err := c.patch(ctx, wl, nil, map[string]any{
		AnnotationReclaimedFor: waiter,
		AnnotationReclaimedAt:  at.UTC().Format(time.RFC3339),
		AnnotationHeld:         nil,
		AnnotationReclaims:     strconv.Itoa(reclaims + 1),
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rec := c.idle[key]; rec != nil && rec.uid == wl.UID {
		rec.marked = true
	}
	return nil
}

// reconcileHold holds a reclaimed workload back from its queue and lets it go again.
// done is true when the workload is being held (or released) and nothing else is to
// be done with it now.
func (c *Controller) reconcileHold(ctx context.Context, wl *kueue.Workload) (done bool, res reconcile.Result, err error) {
	a := wl.Annotations
	waiter := a[AnnotationReclaimedFor]
	if waiter == "" || wl.DeletionTimestamp != nil || apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
		return false, reconcile.Result{}, nil
	}
	active := wl.Spec.Active == nil || *wl.Spec.Active
	evicted := apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted)
	admitted := apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)

	if a[AnnotationHeld] != "true" {
		switch {
		case !active:
			// Someone else deactivated it: theirs to bring back.
			return false, reconcile.Result{}, c.clearReclaimed(ctx, wl)
		case admitted && !evicted:
			if e, ok := admission.RequestedEviction(wl); ok && e.Reason != ReasonIdleReclaim {
				// Another eviction (a GPU fault) took over: not ours to hold.
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
		if err := c.patch(ctx, wl, ptr.To(false), map[string]any{AnnotationHeld: "true"}); err != nil {
			return true, reconcile.Result{}, err
		}
		c.remember(key, wl.UID, idleWorkload{held: true})
		c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, ReasonHeld, "Hold",
			"reclaimed for %s: deactivated until that workload has quota or stops waiting (at most %s), then requeued", waiter, c.opts.MaxHold)
		return true, reconcile.Result{RequeueAfter: c.opts.Interval}, nil
	}

	key := client.ObjectKeyFromObject(wl)
	if c.wrote(key, wl.UID, func(r *idleWorkload) bool { return r.released }) {
		return true, reconcile.Result{RequeueAfter: c.opts.Interval}, nil // the cache is behind
	}
	if active {
		// Activated by someone else meanwhile: the hold is over.
		return false, reconcile.Result{}, c.clearReclaimed(ctx, wl)
	}
	now := c.opts.Clock.Now()
	at, err := time.Parse(time.RFC3339, a[AnnotationReclaimedAt])
	if err != nil {
		at = time.Time{} // unreadable: never keep a workload held on it
	}
	deadline := at.Add(c.opts.MaxHold)
	stillWaits, err := c.stillWaiting(ctx, waiter)
	if err != nil {
		return true, reconcile.Result{}, err
	}
	if stillWaits && now.Before(deadline) {
		return true, reconcile.Result{RequeueAfter: min(c.opts.Interval, deadline.Sub(now))}, nil
	}
	why := fmt.Sprintf("%s is no longer waiting", waiter)
	if stillWaits {
		why = fmt.Sprintf("%s still waits after %s", waiter, c.opts.MaxHold)
	}
	if err := c.patch(ctx, wl, ptr.To(true), map[string]any{AnnotationReclaimedFor: nil, AnnotationReclaimedAt: nil, AnnotationHeld: nil}); err != nil {
		return true, reconcile.Result{}, err
	}
	c.remember(key, wl.UID, idleWorkload{released: true})
	c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, ReasonReleased, "Release", "activated again and requeued: %s", why)
	return true, reconcile.Result{}, nil
}

// stillWaiting: the workload named "namespace/name" exists and waits for quota.
func (c *Controller) stillWaiting(ctx context.Context, ref string) (bool, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return false, nil
	}
	var w kueue.Workload
	err := c.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &w)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get waiting workload %s: %w", ref, err)
	}
	return pending(&w), nil
}

func (c *Controller) clearReclaimed(ctx context.Context, wl *kueue.Workload) error {
	return c.patch(ctx, wl, nil, map[string]any{AnnotationReclaimedFor: nil, AnnotationReclaimedAt: nil, AnnotationHeld: nil})
}

// patch merges annotations (nil values remove) and, when active is set, spec.active
// into the Workload.
func (c *Controller) patch(ctx context.Context, wl *kueue.Workload, active *bool, annotations map[string]any) error {
	body := map[string]any{"metadata": map[string]any{"annotations": annotations}}
	if active != nil {
		body["spec"] = map[string]any{"active": *active}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if err := c.client.Patch(ctx, wl, client.RawPatch(types.MergePatchType, data)); err != nil {
		return fmt.Errorf("update idle reclaim state of workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	return nil
}
