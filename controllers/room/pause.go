package room

import (
	"context"
	"fmt"
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

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Why a paused workload is held: Kueue puts an evicted workload back in its queue at
// once, while the waiter it was paused for sits in Kueue's list of inadmissible
// workloads until Kueue, seeing the quota freed, requeues those in a batch (Kueue
// v0.19, pkg/cache/queue: cluster_queue.go PushOrUpdate, inadmissible_workloads.go),
// so an evicted workload left active takes its GPUs and quota straight back, as in
// idle reclaim (idlereclaim's pause.go). So the eviction is a pause
// (chamberkueue.Eviction.Pause): Chamber's admission controller deactivates the
// workload (spec.active false: Kueue neither queues nor admits it, its Job stays,
// suspended) before it evicts it, and this controller holds it so until the waiter
// holds quota, no longer waits for room, or is gone, and at the latest Settle after
// the pause; then it activates it again and Kueue requeues it.

// Events on a paused workload.
const (
	ReasonPaused  = "RoomPaused"
	ReasonResumed = "RoomResumed"
)

// reconcilePaused holds a workload paused for a waiter and lets it go again. done: the
// workload is one room paused, and nothing else is to be done with it now.
func (c *Controller) reconcilePaused(ctx context.Context, wl *kueue.Workload) (res reconcile.Result, done bool, err error) {
	a := wl.Annotations
	waiter := a[chamber.AnnotationRoomPausedFor]
	active := wl.Spec.Active == nil || *wl.Spec.Active
	pausedForUs := !active && chamberkueue.Paused(wl) == ReasonRoomForBigJob
	if waiter == "" {
		if pausedForUs && wl.DeletionTimestamp == nil {
			// Paused by Chamber's eviction for room whose marks are gone: let it go.
			return reconcile.Result{}, true, c.patchPaused(ctx, wl, ptr.To(true), pauseMarksRemoved())
		}
		return reconcile.Result{}, false, nil
	}
	if wl.DeletionTimestamp != nil || apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
		return reconcile.Result{}, true, c.patchPaused(ctx, wl, nil, pauseMarksRemoved())
	}
	if a[chamber.AnnotationRoomHeld] != "true" {
		evicted := apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted)
		reserved := apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
		e, asked := chamberkueue.RequestedEviction(wl)
		switch {
		case pausedForUs:
			// Chamber's eviction deactivated it for this pause: hold it.
		case !active:
			// Someone else deactivated it: theirs to bring back.
			return reconcile.Result{}, true, c.patchPaused(ctx, wl, nil, pauseMarksRemoved())
		case reserved && !evicted && asked && e.Reason == ReasonRoomForBigJob:
			return reconcile.Result{}, true, nil // the admission controller is still giving notice
		case reserved && !evicted:
			// The request was dropped, or another eviction (a GPU fault) took over.
			return reconcile.Result{}, true, c.patchPaused(ctx, wl, nil, pauseMarksRemoved())
		}
		// Kueue evicts it (or already has): keep it out of the queue.
		if err := c.patchPaused(ctx, wl, ptr.To(false), map[string]any{chamber.AnnotationRoomHeld: "true", chamber.AnnotationEvictionPaused: nil}); err != nil {
			return reconcile.Result{}, true, err
		}
		c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, ReasonPaused, "Pause",
			"paused (deactivated, its Job kept) to make room for %s: it resumes by itself once that workload is admitted, or within %s", waiter, c.opts.Settle)
		return reconcile.Result{RequeueAfter: c.opts.Interval}, true, nil
	}
	if active {
		// Activated by someone else meanwhile (its user): the pause is over.
		return reconcile.Result{}, true, c.patchPaused(ctx, wl, nil, pauseMarksRemoved())
	}
	now := c.opts.Clock.Now()
	at, err := time.Parse(time.RFC3339, a[chamber.AnnotationRoomPausedAt])
	if err != nil {
		at = time.Time{} // unreadable: never keep a workload paused on it
	}
	why, err := c.waiterDone(ctx, waiter)
	if err != nil {
		return reconcile.Result{}, true, err
	}
	if why == "" {
		if deadline := at.Add(c.opts.Settle); now.Before(deadline) {
			return reconcile.Result{RequeueAfter: min(c.opts.Interval, deadline.Sub(now))}, true, nil
		}
		why = fmt.Sprintf("paused for %s, the room's settle time, though %s still waits", c.opts.Settle, waiter)
	}
	if err := c.patchPaused(ctx, wl, ptr.To(true), pauseMarksRemoved()); err != nil {
		return reconcile.Result{}, true, err
	}
	c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, ReasonResumed, "Resume", "resumed (activated and requeued): %s", why)
	return reconcile.Result{}, true, nil
}

// waiterDone says why the waiter (namespace/name) no longer needs its room; "" while
// it still waits for it.
func (c *Controller) waiterDone(ctx context.Context, waiter string) (string, error) {
	ns, name, ok := strings.Cut(waiter, "/")
	if !ok {
		return "the workload it was paused for is unreadable (" + waiter + ")", nil
	}
	var wl kueue.Workload
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &wl); apierrors.IsNotFound(err) {
		return waiter + " is gone", nil
	} else if err != nil {
		return "", fmt.Errorf("get workload %s: %w", waiter, err)
	}
	if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
		return waiter + " was admitted", nil
	}
	if _, _, waits := waitsForRoom(&wl); !waits {
		return waiter + " no longer waits for room", nil
	}
	return "", nil
}

func pauseMarksRemoved() map[string]any {
	return map[string]any{chamber.AnnotationRoomPausedFor: nil, chamber.AnnotationRoomPausedAt: nil, chamber.AnnotationRoomHeld: nil, chamber.AnnotationEvictionPaused: nil}
}

// patchPaused sets the workload's spec.active (unless nil) and annotations.
func (c *Controller) patchPaused(ctx context.Context, wl *kueue.Workload, active *bool, annotations map[string]any) error {
	if err := chamberkueue.PatchWorkload(ctx, c.client, wl.DeepCopy(), active, annotations); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("pause workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	return nil
}
