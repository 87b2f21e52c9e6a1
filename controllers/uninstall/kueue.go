package uninstall

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// chamberChecks are the names of Chamber's AdmissionChecks (spec.controllerName
// chamber.dev/fleet, which nothing answers once Chamber is gone): its own, and any
// other of that controller. Nil when the API server does not serve Kueue.
func (h *handBack) chamberChecks(ctx context.Context) ([]kueue.AdmissionCheck, map[kueue.AdmissionCheckReference]bool, error) {
	var list kueue.AdmissionCheckList
	if err := h.c.List(ctx, &list); err != nil {
		return nil, nil, err
	}
	var mine []kueue.AdmissionCheck
	names := map[kueue.AdmissionCheckReference]bool{chamber.AdmissionCheckName: true}
	for _, ac := range list.Items {
		if ac.Spec.ControllerName == chamber.AdmissionCheckControllerName {
			mine = append(mine, ac)
			names[kueue.AdmissionCheckReference(ac.Name)] = true
		}
	}
	return mine, names, nil
}

// clusterQueues takes Chamber's admission check off every ClusterQueue (Kueue would
// hold their workloads for it forever), gives each ClusterQueue Chamber compiled from
// a Team the quota the Team declares (without what Chamber withheld for failing
// GPUs, and without the borrowing stop and admission hold of a spent budget, which
// nothing lifts once Chamber is gone), and drops their ownerReferences to Teams, so
// that deleting the Teams strands no queued job.
func (h *handBack) clusterQueues(ctx context.Context) error {
	_, checks, err := h.chamberChecks(ctx)
	if h.notServed(err, "Kueue (kueue.x-k8s.io/v1beta2)") {
		return nil
	} else if err != nil {
		return fmt.Errorf("list AdmissionChecks: %w", err)
	}
	var list kueue.ClusterQueueList
	if err := h.c.List(ctx, &list); err != nil {
		return fmt.Errorf("list ClusterQueues: %w", err)
	}
	declared, err := h.declaredQuotas(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		cq := &list.Items[i]
		if _, err := h.write(ctx, StepClusterQueues, name("clusterqueue", cq), cq, func() []string {
			var what []string
			if s := cq.Spec.AdmissionChecksStrategy; s != nil {
				for _, rule := range s.AdmissionChecks {
					if checks[rule.Name] {
						what = append(what, "remove admission check "+string(rule.Name))
					}
				}
				s.AdmissionChecks = slices.DeleteFunc(s.AdmissionChecks, func(r kueue.AdmissionCheckStrategyRule) bool { return checks[r.Name] })
				if len(s.AdmissionChecks) == 0 {
					cq.Spec.AdmissionChecksStrategy = nil
				}
			}
			if want, ok := declared[cq.Name]; ok && kube.Owned(cq) {
				if !equality.Semantic.DeepEqual(cq.Spec.ResourceGroups, want.ResourceGroups) {
					cq.Spec.ResourceGroups = want.ResourceGroups
					what = append(what, "restore the quota its Team declares (GPUs withheld for failing hardware, a spent budget's borrowing stop)")
				}
				if p := ptr.Deref(cq.Spec.StopPolicy, kueue.None); p != kueue.None {
					cq.Spec.StopPolicy = nil
					what = append(what, fmt.Sprintf("lift stopPolicy %s (its Team's spent budget)", p))
				}
			}
			return append(what, dropChamberOwners(cq)...)
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// declaredQuotas are, by ClusterQueue name, the resource groups of each ClusterQueue
// Chamber compiles from a Team (not one it adopted) with nothing of Chamber's own on
// top: the Team's quota and borrowing limits as declared. A Team whose pool is gone
// or has no such GPU model is left out: its ClusterQueue keeps its quota.
func (h *handBack) declaredQuotas(ctx context.Context) (map[string]kueue.ClusterQueueSpec, error) {
	var teams chamber.TeamList
	if err := h.c.List(ctx, &teams); apimeta.IsNoMatchError(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("list Teams: %w", err)
	}
	out := map[string]kueue.ClusterQueueSpec{}
	for i := range teams.Items {
		team := &teams.Items[i]
		if team.Spec.ClusterQueue != "" {
			continue
		}
		var pool chamber.GPUPool
		if err := h.c.Get(ctx, client.ObjectKey{Name: team.Spec.Pool}, &pool); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("get GPUPool %s of Team %s: %w", team.Spec.Pool, team.Name, err)
		}
		models := make([]string, 0, len(pool.Status.Models))
		for _, m := range pool.Status.Models {
			models = append(models, m.Model)
		}
		cq, err := chamberkueue.ClusterQueue(team, &pool, models, chamberkueue.ClusterQueueOptions{})
		if err != nil {
			h.note("ClusterQueue %s keeps its quota as Chamber last wrote it: %v", team.Name, err)
			continue
		}
		out[cq.Name] = cq.Spec
	}
	return out, nil
}

// admissionChecks deletes Chamber's AdmissionChecks, which no ClusterQueue lists any
// more.
func (h *handBack) admissionChecks(ctx context.Context) error {
	mine, _, err := h.chamberChecks(ctx)
	if apimeta.IsNoMatchError(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("list AdmissionChecks: %w", err)
	}
	var errs []error
	for i := range mine {
		ac := &mine[i]
		errs = append(errs, h.deleteObject(ctx, StepAdmissionChecks, name("admissioncheck", ac), ac,
			"controller "+chamber.AdmissionCheckControllerName+" is Chamber, which will not answer it"))
	}
	return errors.Join(errs...)
}

// compiledKinds are the kinds Chamber compiles GPUPools and Teams into (besides
// ClusterQueues), owned by them: Kueue's, and Volcano's Queues.
var compiledKinds = []schema.GroupVersionKind{
	kueue.SchemeGroupVersion.WithKind("LocalQueue"), kueue.SchemeGroupVersion.WithKind("Cohort"),
	kueue.SchemeGroupVersion.WithKind("ResourceFlavor"), kueue.SchemeGroupVersion.WithKind("Topology"),
	kueue.SchemeGroupVersion.WithKind("WorkloadPriorityClass"), kueue.SchemeGroupVersion.WithKind("AdmissionCheck"),
	kueue.SchemeGroupVersion.WithKind("MultiKueueCluster"), kueue.SchemeGroupVersion.WithKind("MultiKueueConfig"),
	scheduling.SchemeGroupVersion.WithKind("Queue"),
}

// kueueObjects drops the ownerReferences of what Chamber compiled to its Teams and
// GPUPools: Kueue and Volcano keep them once those are deleted (the chart's Teams
// and pools go with helm uninstall), and the jobs queued in them stay queued.
func (h *handBack) kueueObjects(ctx context.Context) error {
	var errs []error
	for _, gvk := range compiledKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := h.c.List(ctx, list); apimeta.IsNoMatchError(err) {
			continue // Kueue's or Volcano's API, or an optional kind of it, not served
		} else if err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", gvk.Kind, err))
			continue
		}
		for i := range list.Items {
			obj := &list.Items[i]
			obj.SetGroupVersionKind(gvk)
			if _, err := h.write(ctx, StepKueueObjects, name(strings.ToLower(gvk.Kind), obj), obj, func() []string { return dropChamberOwners(obj) }); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// workloadMarks are the annotations Chamber's eviction, idle reclaim and room for big
// jobs keep on a Workload while it acts on it. The counts of its idle reclaims
// (chamber.AnnotationIdleReclaims, chamber.AnnotationIdleReclaimedGPUHours) are its
// history and stay.
func workloadMarks() []string {
	marks := []string{chamber.AnnotationEvictionPaused,
		chamber.AnnotationIdleReclaimedFor, chamber.AnnotationIdleReclaimedAt, chamber.AnnotationIdleReclaimHeld,
		chamber.AnnotationRoomPausedFor, chamber.AnnotationRoomPausedAt, chamber.AnnotationRoomHeld,
		chamber.AnnotationRoomMadeAt, chamber.AnnotationRoomMoved}
	for k := range chamberkueue.RequestRemoved() {
		marks = append(marks, k)
	}
	slices.Sort(marks)
	return marks
}

// pausedByChamber is the reason Chamber keeps wl deactivated: its eviction paused it
// and nobody took it over yet, or idle reclaim or room for big jobs holds it. "" when
// it is active, or someone else deactivated it (that pause is theirs).
func pausedByChamber(wl *kueue.Workload) string {
	if ptr.Deref(wl.Spec.Active, true) {
		return ""
	}
	a := wl.Annotations
	switch {
	case a[chamber.AnnotationEvictionPaused] != "":
		return a[chamber.AnnotationEvictionPaused]
	case a[chamber.AnnotationIdleReclaimHeld] == "true":
		return "idle reclaim"
	case a[chamber.AnnotationRoomHeld] == "true":
		return "room for " + a[chamber.AnnotationRoomPausedFor]
	}
	return ""
}

// workloads resumes the workloads Chamber paused (Kueue requeues them) and removes
// Chamber's marks from every Workload: an eviction request nobody will carry out,
// idle reclaim's and room's holds. No Workload is deleted.
func (h *handBack) workloads(ctx context.Context) error {
	var list kueue.WorkloadList
	if err := h.c.List(ctx, &list); apimeta.IsNoMatchError(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("list Workloads: %w", err)
	}
	marks := workloadMarks()
	var errs []error
	for i := range list.Items {
		wl := &list.Items[i]
		if _, err := h.write(ctx, StepWorkloads, name("workload", wl), wl, func() []string {
			var what []string
			if why := pausedByChamber(wl); why != "" {
				wl.Spec.Active = ptr.To(true)
				what = append(what, fmt.Sprintf("resume (paused by Chamber: %s)", why))
			}
			if e, ok := chamberkueue.RequestedEviction(wl); ok {
				what = append(what, fmt.Sprintf("withdraw eviction request (%s)", e.Reason))
			}
			return append(what, removeMarks(wl, marks...)...)
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// notices removes Chamber's eviction notices from pods (Kueue's and Volcano's): no
// eviction follows them once Chamber is gone, and a job that reads one would
// checkpoint and wait for nothing.
func (h *handBack) notices(ctx context.Context) error {
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := h.c.List(ctx, pods); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Annotations[chamber.AnnotationEvictionDeadline] == "" {
			continue
		}
		p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		if _, err := h.write(ctx, StepNotices, name("pod", p), p, func() []string {
			if removeMarks(p, chamber.AnnotationEvictionDeadline, chamber.AnnotationEvictionReason) != nil {
				return []string{"withdraw eviction notice"}
			}
			return nil
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
