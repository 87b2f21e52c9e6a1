package uninstall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// chamberTaints are the taints Chamber puts on nodes: fault isolation's and room for
// big jobs'.
var chamberTaints = []string{chamber.TaintGPUUnhealthy, chamber.TaintRoom}

// nodeAnnotations are those Chamber writes on nodes, and those an operator writes to
// ask Chamber for something (isolate, clear), which nothing answers once it is gone:
// left, a reinstalled Chamber would act on them.
var nodeAnnotations = []string{
	chamber.AnnotationIsolate, chamber.AnnotationIsolationClear,
	chamber.AnnotationIsolatedAt, chamber.AnnotationIsolationReason, chamber.AnnotationIsolationPersistent,
	chamber.AnnotationIsolationLevel, chamber.AnnotationIsolatedGPUs, chamber.AnnotationIsolationTainted,
	chamber.AnnotationIsolationCordoned, chamber.AnnotationIsolationHealthyReports, chamber.AnnotationIsolationClearedAt,
	chamber.AnnotationIsolationPreflight, chamber.AnnotationRoomFor, chamber.AnnotationRoomGPUs, chamber.AnnotationRoomMadeAt,
}

// nodeConditions are the node conditions Chamber writes: fault isolation's, and the
// GPU health its agents (or its DCGM source) report. Nothing updates them once
// Chamber is gone, and a stale one misleads whoever reads the node.
var nodeConditions = []corev1.NodeConditionType{chamber.ConditionNodeIsolated, chamber.ConditionGPUHealthy}

// nodes returns the nodes Chamber took out of service: it lifts Chamber's taints, the
// cordons Chamber made (its record, chamber.AnnotationIsolationCordoned, says which:
// an operator's own cordon stays), and removes Chamber's annotations and conditions.
func (h *handBack) nodes(ctx context.Context) error {
	var list corev1.NodeList
	if err := h.c.List(ctx, &list); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	var errs []error
	for i := range list.Items {
		n := &list.Items[i]
		var faulty string
		what, err := h.patch(ctx, name("node", n), n, func() []string {
			var what []string
			faulty = hardwareFault(n)
			for _, key := range chamberTaints {
				if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key }) {
					what = append(what, "remove taint "+key)
				}
			}
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return slices.Contains(chamberTaints, t.Key) })
			if n.Spec.Unschedulable && n.Annotations[chamber.AnnotationIsolationCordoned] == "true" {
				if h.opts.KeepFaultyCordoned && faulty != "" {
					what = append(what, "keep cordoned, as the operator's cordon now (a hardware fault: "+faulty+")")
				} else {
					n.Spec.Unschedulable = false
					what = append(what, "uncordon")
				}
			}
			return append(what, removeMarks(n, nodeAnnotations...)...)
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		conditions, err := h.removeConditions(ctx, n)
		if err != nil {
			errs = append(errs, err)
		}
		if what = append(what, conditions...); len(what) > 0 {
			h.record(StepNodes, name("node", n), strings.Join(what, "; "))
		}
		if faulty != "" && slices.Contains(what, "uncordon") {
			h.note("node %s was isolated for a hardware fault (%s) and takes pods again: cordon it until it is repaired "+
				"(or keep such nodes cordoned: --keep-faulty-nodes-cordoned)", n.Name, faulty)
		}
	}
	return errors.Join(errs...)
}

// hardwareFault is the fault a node is isolated for when only a repair clears it
// (Chamber's record says persistent); "" otherwise.
func hardwareFault(n *corev1.Node) string {
	a := n.Annotations
	if a[chamber.AnnotationIsolatedAt] == "" || a[chamber.AnnotationIsolationPersistent] != "true" {
		return ""
	}
	return a[chamber.AnnotationIsolationReason]
}

// removeConditions deletes Chamber's conditions from the node's status (as read) and
// says which: a strategic merge patch keyed by type, so the kubelet's and other
// conditions, written all the time, neither conflict nor change.
func (h *handBack) removeConditions(ctx context.Context, n *corev1.Node) ([]string, error) {
	var found []any
	var names []string
	for _, c := range n.Status.Conditions {
		if slices.Contains(nodeConditions, c.Type) {
			found = append(found, map[string]any{"type": c.Type, "$patch": "delete"})
			names = append(names, string(c.Type))
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	if !h.opts.DryRun {
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": found}})
		if err != nil {
			return nil, err
		}
		if err := h.c.Status().Patch(ctx, n, client.RawPatch(types.StrategicMergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("remove conditions of node %s: %w", n.Name, err)
		}
	}
	return []string{"remove conditions " + strings.Join(names, ", ")}, nil
}

// gpuHolds deletes fault isolation's GPU hold pods, which keep a node's failing GPUs
// from every job, wherever they live (chamber-controller's --hold-namespace).
func (h *handBack) gpuHolds(ctx context.Context) error {
	var pods corev1.PodList
	if err := h.c.List(ctx, &pods, client.HasLabels{chamber.LabelGPUHold}); err != nil {
		return fmt.Errorf("list GPU hold pods: %w", err)
	}
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		q := p.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
		why := fmt.Sprintf("it holds %s of node %s's GPUs, which Chamber isolated", q.String(), p.Labels[chamber.LabelGPUHold])
		errs = append(errs, h.deleteObject(ctx, StepGPUHolds, name("pod", p), p, why, client.GracePeriodSeconds(0)))
	}
	return errors.Join(errs...)
}

// policyVersions are the versions MutatingAdmissionPolicies are served in: v1 from
// Kubernetes 1.36, v1beta1 in 1.34 and 1.35 (with the feature and the API turned on).
var policyVersions = []string{"v1", "v1beta1"}

// policies deletes the MutatingAdmissionPolicies and bindings Chamber 0.2 made per
// team (the teams' pod grace periods), in the first version the API server serves:
// they would keep raising the grace of new pods with nobody to change them. Chamber
// makes none since (the chart installs one policy, which helm uninstall deletes), and
// its controller may not list them: run as its ServiceAccount (the chart's hook),
// this step notes what to run instead.
func (h *handBack) policies(ctx context.Context) error {
	for _, v := range policyVersions {
		var errs []error
		served := true
		for _, kind := range []string{"MutatingAdmissionPolicyBinding", "MutatingAdmissionPolicy"} {
			gvk := schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: v, Kind: kind}
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(kind + "List"))
			err := h.c.List(ctx, list, client.MatchingLabels{chamber.LabelManagedBy: chamber.ManagedBy})
			if apimeta.IsNoMatchError(err) {
				served = false
				break
			}
			if apierrors.IsForbidden(err) {
				h.note("%ss: this identity may not list them; where Chamber 0.2 ran, delete the ones it made per team: "+
					"kubectl delete mutatingadmissionpolicybindings,mutatingadmissionpolicies -l %s=%s", kind, chamber.LabelManagedBy, chamber.ManagedBy)
				return nil
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("list %ss: %w", kind, err))
				continue
			}
			for i := range list.Items {
				obj := &list.Items[i]
				obj.SetGroupVersionKind(gvk)
				errs = append(errs, h.deleteObject(ctx, StepPolicies, name(strings.ToLower(kind), obj), obj, "a team's pod grace period, kept by Chamber"))
			}
		}
		if served {
			return errors.Join(errs...)
		}
	}
	h.note("MutatingAdmissionPolicies: not served by the API server, nothing to hand back")
	return nil
}
