package kueue

import (
	"fmt"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// The pause protocol: idle reclaim pauses a Workload by deactivating it (spec.active
// false) with its marks (chamber.AnnotationIdleReclaim*); its user, or idle reclaim
// once nobody waits, resumes it by activating it again. These read the marks for
// anyone who shows or counts paused workloads (kubectl chamber, the simulator).

// IdleReclaimPaused says whether idle reclaim keeps wl paused (deactivated), for a
// waiter or at its interactive idle time limit. Its user may resume it any time
// (spec.active true).
func IdleReclaimPaused(wl *kueue.Workload) bool {
	return wl.Annotations[chamber.AnnotationIdleReclaimedFor] != "" && wl.Annotations[chamber.AnnotationIdleReclaimHeld] == "true" &&
		wl.Spec.Active != nil && !*wl.Spec.Active
}

// PausedAtIdleLimit says whether idle reclaim keeps wl paused at its team's
// interactive idle time limit: deactivated, waiting for its user to resume it (set
// spec.active true). A workload paused for a waiter resumes by itself and is not.
func PausedAtIdleLimit(wl *kueue.Workload) bool {
	return IdleReclaimPaused(wl) && wl.Annotations[chamber.AnnotationIdleReclaimedFor] == chamber.IdleReclaimedForIdleLimit
}

// ResumeCommand is what a user runs to resume a paused workload.
func ResumeCommand(wl *kueue.Workload) string {
	return fmt.Sprintf(`kubectl patch workload %s -n %s --type=merge -p '{"spec":{"active":true}}'`, wl.Name, wl.Namespace)
}
