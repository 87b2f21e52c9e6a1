package kueue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Names of Chamber's admission check, the one way Chamber evicts: set to Retry on an
// admitted workload, Kueue evicts and requeues it.
const (
	// CheckControllerName is the AdmissionCheck's spec.controllerName.
	CheckControllerName = "chamber.dev/fleet"
	// CheckName is the AdmissionCheck Chamber creates and attaches to every team's
	// ClusterQueue.
	CheckName = "chamber-fleet"
)

// CheckState is the workload's state of Chamber's admission check; nil when its
// ClusterQueue has no such check.
func CheckState(wl *kueue.Workload) *kueue.AdmissionCheckState {
	for i := range wl.Status.AdmissionChecks {
		if wl.Status.AdmissionChecks[i].Name == CheckName {
			return &wl.Status.AdmissionChecks[i]
		}
	}
	return nil
}

// HasCheck reports whether the workload carries Chamber's admission check: without it
// an eviction request goes unanswered.
func HasCheck(wl *kueue.Workload) bool { return CheckState(wl) != nil }

// Annotations of the eviction protocol. Controllers ask for an eviction by annotating
// the Workload (RequestEviction); Chamber's admission controller alone writes the
// check state. The pods get a notice, and the job may answer it.
const (
	// On the Workload: why Chamber wants it evicted, a CamelCase reason (IdleReclaim,
	// GPUFault) that becomes the Events' reason.
	AnnotationEvictionReason = "chamber.dev/eviction-reason"
	// On the Workload: the message users read in its Events and check state.
	AnnotationEvictionMessage = "chamber.dev/eviction-message"
	// On the Workload: when the eviction was asked for (RFC 3339).
	AnnotationEvictionRequestedAt = "chamber.dev/eviction-requested-at"
	// On the Workload, optional: a grace period (Go duration) replacing the team's
	// and tier's; "0s" evicts at once.
	AnnotationEvictionGracePeriod = "chamber.dev/eviction-grace-period"

	// On the pods: the notice, the time (RFC 3339) the pod will be stopped. A pod
	// sees it through the downward API (annotations in a volume update live).
	AnnotationEvictionDeadline = "chamber.dev/eviction-deadline"
	// On a pod or its Job, set by the job: "true" once it has saved a checkpoint, so
	// the eviction need not wait out the grace period.
	AnnotationCheckpointReady = "chamber.dev/checkpoint-ready"
)

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
}

// RequestEviction asks for wl to be evicted. Chamber's admission controller notifies the
// pods, waits out the grace period (or the job's checkpoint), then sets Chamber's
// admission check to Retry so that Kueue evicts and requeues the workload. A request
// already there stays, unless this one would evict sooner.
func RequestEviction(ctx context.Context, c client.Client, wl *kueue.Workload, e Eviction) error {
	if e.Reason == "" {
		return fmt.Errorf("evict workload %s/%s: a reason is required", wl.Namespace, wl.Name)
	}
	if have, ok := RequestedEviction(wl); ok && !evictsSooner(e, have) {
		return nil
	}
	annotations := map[string]any{
		AnnotationEvictionReason:      e.Reason,
		AnnotationEvictionMessage:     e.Message,
		AnnotationEvictionRequestedAt: e.RequestedAt.UTC().Format(time.RFC3339),
		AnnotationEvictionGracePeriod: nil,
	}
	if e.GracePeriod != nil {
		annotations[AnnotationEvictionGracePeriod] = e.GracePeriod.String()
	}
	if err := PatchAnnotations(ctx, c, wl, annotations); err != nil {
		return fmt.Errorf("request eviction of workload %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	return nil
}

// PatchAnnotations sets (a string) or removes (nil) annotations of obj in one merge
// patch, leaving the others and the rest of the object alone.
func PatchAnnotations(ctx context.Context, c client.Client, obj client.Object, annotations map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
}

// RequestedEviction is the eviction asked for on wl, if any.
func RequestedEviction(wl *kueue.Workload) (Eviction, bool) {
	a := wl.Annotations
	reason := a[AnnotationEvictionReason]
	if reason == "" {
		return Eviction{}, false
	}
	e := Eviction{Reason: reason, Message: a[AnnotationEvictionMessage]}
	if t, err := time.Parse(time.RFC3339, a[AnnotationEvictionRequestedAt]); err == nil {
		e.RequestedAt = t
	}
	if d, err := time.ParseDuration(a[AnnotationEvictionGracePeriod]); err == nil && d >= 0 {
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
