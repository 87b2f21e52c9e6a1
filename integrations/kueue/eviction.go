package kueue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// CheckState is the workload's state of Chamber's admission check; nil when its
// ClusterQueue has no such check.
func CheckState(wl *kueue.Workload) *kueue.AdmissionCheckState {
	for i := range wl.Status.AdmissionChecks {
		if wl.Status.AdmissionChecks[i].Name == chamber.AdmissionCheckName {
			return &wl.Status.AdmissionChecks[i]
		}
	}
	return nil
}

// HasCheck reports whether the workload carries Chamber's admission check.
func HasCheck(wl *kueue.Workload) bool { return CheckState(wl) != nil }

// ReplacingNodes reports whether Kueue's topology-aware scheduling is moving the
// workload off nodes it found unhealthy (status.unhealthyNodes: a node NotReady, or
// with an untolerated NoSchedule taint, such as Chamber's isolation taint, and none
// of the workload's pods still running there). Kueue's scheduler then re-applies
// the workload's whole admission from the copy it queued, check states and
// conditions included, with server-side apply and forced ownership (v0.19:
// scheduler.admit, patching.PatchAdmissionStatus). An eviction Chamber writes
// meanwhile is overwritten when the replacement lands: the Workload reads Admitted
// while its Job stays half-stopped (suspended, with Kueue's kueue.x-k8s.io/stopping
// annotation) and never runs again. So Chamber evicts no workload while Kueue
// replaces its nodes.
func ReplacingNodes(wl *kueue.Workload) bool { return len(wl.Status.UnhealthyNodes) > 0 }

// Eviction is a request to evict a workload: Kueue requeues it and it runs again
// when capacity allows.
type Eviction struct {
	// Reason is CamelCase, e.g. IdleReclaim or GPUFault.
	Reason string
	// Message says what happened, for users.
	Message string
	// RequestedAt starts the grace period.
	RequestedAt time.Time
	// GracePeriod replaces the team's and tier's when set; zero evicts at once.
	GracePeriod *time.Duration
	// Pause deactivates the workload as it is evicted, before Kueue could requeue
	// it, and marks it paused for Reason (Paused); the requester resumes it.
	Pause bool
	// Marks are the requester's own annotations, written in the same patch as the
	// request, so that no state of a cache shows one without the other; not written
	// when a request already there stays.
	Marks map[string]string
	// Admission is the admission of the workload the request is for, counted by its
	// evictions (Evictions) when it was asked; RequestEviction sets it. Negative: not
	// known (a request written by hand), the current one.
	Admission int32
}

// Evictions is how many times the workload has been evicted, by Kueue or by Chamber
// (status.schedulingStats): a new admission follows each.
func Evictions(wl *kueue.Workload) int32 {
	var n int32
	if s := wl.Status.SchedulingStats; s != nil {
		for _, e := range s.Evictions {
			n += e.Count
		}
	}
	return n
}

// Outlived says whether the request was asked for an earlier admission of wl, which
// has ended in an eviction since: it is done, and must not evict the admission that
// followed. (Kueue may evict and admit the workload again, preempting it, say, before
// Chamber's admission controller sees it evicted and removes the request.)
func (e Eviction) Outlived(wl *kueue.Workload) bool {
	return e.Admission >= 0 && Evictions(wl) > e.Admission
}

// PendingEviction is the eviction request on wl that its current admission has not
// outlived: one still to be carried out.
func PendingEviction(wl *kueue.Workload) (Eviction, bool) {
	e, ok := RequestedEviction(wl)
	return e, ok && !e.Outlived(wl)
}

// Paused is the reason of the eviction request the workload was paused for, when it
// was deactivated by Chamber's eviction and nobody has taken it over since.
func Paused(wl *kueue.Workload) string { return wl.Annotations[chamber.AnnotationEvictionPaused] }

// RequestEviction asks for wl to be evicted. Chamber's admission controller notifies the
// pods, waits out the grace period (or the job's checkpoint), then evicts it (Evict)
// and Kueue requeues it. A request
// already there stays, unless this one would evict sooner.
func RequestEviction(ctx context.Context, c client.Client, wl *kueue.Workload, e Eviction) error {
	if e.Reason == "" {
		return fmt.Errorf("evict workload %s/%s: a reason is required", wl.Namespace, wl.Name)
	}
	if have, ok := PendingEviction(wl); ok && !evictsSooner(e, have) {
		return nil
	}
	e.Admission = Evictions(wl)
	if err := kube.PatchAnnotations(ctx, c, wl, e.annotations()); err != nil {
		return fmt.Errorf("request eviction of workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	return nil
}

// annotations are the request's annotations as RequestEviction writes them (nil
// removes one), which RequestedEviction reads back.
func (e Eviction) annotations() map[string]any {
	annotations := map[string]any{
		chamber.AnnotationEvictionReason:      e.Reason,
		chamber.AnnotationEvictionMessage:     e.Message,
		chamber.AnnotationEvictionRequestedAt: e.RequestedAt.UTC().Format(time.RFC3339),
		chamber.AnnotationEvictionGracePeriod: nil,
		chamber.AnnotationEvictionPause:       nil,
		chamber.AnnotationEvictionAdmission:   nil,
	}
	if e.Admission >= 0 {
		annotations[chamber.AnnotationEvictionAdmission] = strconv.Itoa(int(e.Admission))
	}
	if e.Pause {
		annotations[chamber.AnnotationEvictionPause] = "true"
	}
	if e.GracePeriod != nil {
		annotations[chamber.AnnotationEvictionGracePeriod] = e.GracePeriod.String()
	}
	for k, v := range e.Marks {
		annotations[k] = v
	}
	return annotations
}

// RequestRemoved is the annotation patch that removes an eviction request (every
// annotation RequestEviction writes, the requester's marks apart): the request is done
// once the workload is evicted, and a request left behind would evict its next
// admission.
func RequestRemoved() map[string]any {
	removed := Eviction{}.annotations()
	for k := range removed {
		removed[k] = nil
	}
	return removed
}

// PatchWorkload sets (a string) or removes (nil) annotations of the workload and, when
// active is set, its spec.active, in one merge patch: how Chamber pauses a workload
// (deactivated, Kueue neither queues nor admits it, its job kept) and resumes it.
func PatchWorkload(ctx context.Context, c client.Client, wl *kueue.Workload, active *bool, annotations map[string]any) error {
	body := map[string]any{"metadata": map[string]any{"annotations": annotations}}
	if active != nil {
		body["spec"] = map[string]any{"active": *active}
	}
	patch, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.Patch(ctx, wl, client.RawPatch(types.MergePatchType, patch))
}

// RequestedEviction is the eviction asked for on wl, if any.
func RequestedEviction(wl *kueue.Workload) (Eviction, bool) {
	a := wl.Annotations
	reason := a[chamber.AnnotationEvictionReason]
	if reason == "" {
		return Eviction{}, false
	}
	e := Eviction{Reason: reason, Message: a[chamber.AnnotationEvictionMessage], Pause: a[chamber.AnnotationEvictionPause] == "true", Admission: -1}
	if n, err := strconv.ParseInt(a[chamber.AnnotationEvictionAdmission], 10, 32); err == nil && n >= 0 {
		e.Admission = int32(n)
	}
	if t, err := time.Parse(time.RFC3339, a[chamber.AnnotationEvictionRequestedAt]); err == nil {
		e.RequestedAt = t
	}
	if d, err := time.ParseDuration(a[chamber.AnnotationEvictionGracePeriod]); err == nil && d >= 0 {
		e.GracePeriod = &d
	}
	return e, true
}

// evictsSooner: only a request with its own, earlier deadline replaces one there.
func evictsSooner(e, have Eviction) bool {
	if e.GracePeriod == nil {
		return false
	}
	if have.GracePeriod == nil {
		return true
	}
	return e.RequestedAt.Add(*e.GracePeriod).Before(have.RequestedAt.Add(*have.GracePeriod))
}

// Evict evicts an admitted workload the way Kueue's own preemption does: it sets the
// workload's Evicted condition (reason Preempted, the message saying why), and Kueue
// stops the job, gives the quota back and requeues the workload at once. It is the one
// way Chamber evicts, on any ClusterQueue, with or without Chamber's admission check:
// a check needs a write on every admission to say Ready, an eviction only this one.
// As Kueue does when it evicts, the workload's admission checks go back to Pending
// (each is asked again when the workload is next admitted), and the eviction is
// counted in status.schedulingStats, with Chamber's reason as its underlying cause.
// The write is a merge patch on the workload as read: it lands only if nobody wrote
// the workload meanwhile. evicted: the workload is now evicted (false on a conflict,
// or when it is gone; the change that caused it brings the workload back).
func Evict(ctx context.Context, c client.Client, wl *kueue.Workload, cause, message string, now time.Time) (evicted bool, err error) {
	if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) {
		return true, nil
	}
	message = kube.TruncateMessage(message)
	out := wl.DeepCopy()
	apimeta.SetStatusCondition(&out.Status.Conditions, metav1.Condition{
		Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: kueue.WorkloadEvictedByPreemption,
		Message: message, ObservedGeneration: wl.Generation, LastTransitionTime: metav1.NewTime(now),
	})
	for i := range out.Status.AdmissionChecks {
		check := &out.Status.AdmissionChecks[i]
		if check.State != kueue.CheckStatePending {
			*check = kueue.AdmissionCheckState{Name: check.Name, State: kueue.CheckStatePending,
				Message: "Reset to Pending after eviction. Previously: " + string(check.State), LastTransitionTime: metav1.NewTime(now)}
		}
	}
	countEviction(out, kueue.EvictionUnderlyingCause(cause))
	if err := c.Status().Patch(ctx, out, client.MergeFromWithOptions(wl, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("evict workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	return true, nil
}

// countEviction adds one eviction by preemption for cause to the workload's scheduling
// statistics, as Kueue counts its own.
func countEviction(wl *kueue.Workload, cause kueue.EvictionUnderlyingCause) {
	if wl.Status.SchedulingStats == nil {
		wl.Status.SchedulingStats = &kueue.SchedulingStats{}
	}
	stats := wl.Status.SchedulingStats
	for i := range stats.Evictions {
		if e := &stats.Evictions[i]; e.Reason == kueue.WorkloadEvictedByPreemption && e.UnderlyingCause == cause {
			e.Count++
			return
		}
	}
	stats.Evictions = append(stats.Evictions, kueue.WorkloadSchedulingStatsEviction{Reason: kueue.WorkloadEvictedByPreemption, UnderlyingCause: cause, Count: 1})
}
