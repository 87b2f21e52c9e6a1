package workload

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Chamber's check and Kueue's replacement of failed nodes must not race. While
// Kueue's topology-aware scheduling moves a workload off unhealthy nodes, its
// scheduler overwrites the workload's admission, check states and Evicted condition
// included, with the copy it queued (chamberkueue.ReplacingNodes): the check writes
// no Retry meanwhile. A fault eviction asked for such a workload is dropped, since
// Kueue moves it off the failed node itself; any other waits until the replacement
// is done.

// whileReplacingNodes is the check's answer for an admitted workload whose nodes
// Kueue is replacing.
func (c *Controller) whileReplacingNodes(ctx context.Context, wl *kueue.Workload, e chamberkueue.Eviction, asked bool) (reconcile.Result, error) {
	if !asked {
		return reconcile.Result{}, nil
	}
	if e.Reason != chamber.ReasonGPUFault {
		// The workload changes when the replacement lands, and comes back here then.
		return reconcile.Result{RequeueAfter: c.opts.Recheck}, nil
	}
	var nodes []string
	for _, n := range wl.Status.UnhealthyNodes {
		nodes = append(nodes, n.Name)
	}
	c.recorder.Eventf(wl, nil, corev1.EventTypeNormal, "NodeReplacement", "Evict",
		"%s eviction withdrawn: Kueue is moving the workload off unhealthy node(s) %s itself (%s)", e.Reason, strings.Join(nodes, ", "), e.Message)
	return reconcile.Result{}, c.clearEviction(ctx, wl)
}

// stoppingAnnotation is what Kueue's batch/v1 Job integration sets on a Job while it
// stops it (suspends it and restores its pod templates), and removes once it has.
const stoppingAnnotation = "kueue.x-k8s.io/stopping"

// halfStoppedJobs remembers admitted workloads whose Job was seen half-stopped, by
// the workload's resourceVersion then: the same version still seen a while later is
// no informer lag.
type halfStoppedJobs struct {
	mu   sync.Mutex
	seen map[types.UID]halfStoppedSeen
}

type halfStoppedSeen struct {
	resourceVersion string
	at              time.Time
}

// since is when the workload was first seen admitted with its Job half-stopped, at
// this version of the workload.
func (h *halfStoppedJobs) since(wl *kueue.Workload, now time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[types.UID]halfStoppedSeen{}
	}
	s, ok := h.seen[wl.UID]
	if !ok || s.resourceVersion != wl.ResourceVersion {
		s = halfStoppedSeen{resourceVersion: wl.ResourceVersion, at: now}
		h.seen[wl.UID] = s
	}
	return s.at
}

func (h *halfStoppedJobs) forget(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.seen, uid)
}

// repairHalfStopped sends an admitted workload whose Job Kueue left half-stopped back
// to the queue. Kueue stops a Job only once its workload is evicted or has lost its
// quota, and finishes the stop before it admits the workload again; a workload
// admitted for two rechecks on end, unchanged, while its Job still carries the
// stopping annotation is one whose eviction was overwritten (a race in Kueue, which
// whileReplacingNodes keeps Chamber out of): Kueue's Job reconciler takes such a Job
// for running and never resumes it. Evicting the workload again makes Kueue finish
// the stop, and admit it afresh. halfStopped: the workload's Job is in that
// state (res says when to look again).
func (c *Controller) repairHalfStopped(ctx context.Context, wl *kueue.Workload) (res reconcile.Result, halfStopped bool, err error) {
	if !conditionTrue(wl, kueue.WorkloadAdmitted) {
		c.halfStopped.forget(wl.UID)
		return reconcile.Result{}, false, nil
	}
	// Only batch/v1 Jobs carry the annotation, and only they are read: reading other
	// kinds would start an informer per kind from every admitted workload's reconcile.
	stopping, err := c.ownerAnnotated(ctx, wl, stoppingAnnotation, isBatchJob)
	if err != nil || !stopping {
		c.halfStopped.forget(wl.UID)
		return reconcile.Result{}, false, err
	}
	now := c.opts.Clock.Now()
	if wait := 2*c.opts.Recheck - now.Sub(c.halfStopped.since(wl, now)); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, true, nil
	}
	c.halfStopped.forget(wl.UID)
	msg := "Kueue admitted the workload while its job was still being stopped (annotation " + stoppingAnnotation +
		"), so the job would never resume; sent back to the queue to be admitted afresh"
	return reconcile.Result{}, true, c.evict(ctx, wl, chamberkueue.Eviction{Reason: "HalfStoppedJob", Message: msg})
}

// ownerAnnotated reports whether one of the workload's owners (its job) that only
// accepts (every owner when nil) carries the annotation key set to "true". Owners are
// read as metadata only.
func (c *Controller) ownerAnnotated(ctx context.Context, wl *kueue.Workload, key string, only func(metav1.OwnerReference) bool) (bool, error) {
	for _, ref := range wl.OwnerReferences {
		if only != nil && !only(ref) {
			continue
		}
		owner := &metav1.PartialObjectMetadata{}
		owner.SetGroupVersionKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
		err := c.client.Get(ctx, client.ObjectKey{Namespace: wl.Namespace, Name: ref.Name}, owner)
		if apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("get owner %s %s of workload %s/%s: %w", ref.Kind, ref.Name, wl.Namespace, wl.Name, err)
		}
		if owner.Annotations[key] == "true" {
			return true, nil
		}
	}
	return false, nil
}

func isBatchJob(ref metav1.OwnerReference) bool {
	return ref.APIVersion == batchv1.SchemeGroupVersion.String() && ref.Kind == "Job"
}
