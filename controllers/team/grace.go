package team

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Why pods get the team's grace period: Kueue preempts a workload by suspending its
// Job, and its pods get SIGTERM and their terminationGracePeriodSeconds to exit:
// Kubernetes' default of 30 s, too short for most checkpoints, so a preempted job
// goes back to its last periodic checkpoint. Chamber's own evictions give the team's
// eviction grace period; so that Kueue's do too, a MutatingAdmissionPolicy per team
// raises the terminationGracePeriodSeconds of every pod created in the team's
// namespaces to at least that grace (its tier's, by the pod's
// kueue.x-k8s.io/priority-class label where it has one). A job that saves its
// checkpoint on SIGTERM and exits frees its GPUs as soon as it is saved; only one
// that ignores SIGTERM holds them for the whole grace. A pod's own longer grace is
// kept.

// LabelTier is the pod label that names its priority tier (Kueue's
// WorkloadPriorityClass label).
const LabelTier = "kueue.x-k8s.io/priority-class"

// GracePolicyName is the name of the team's MutatingAdmissionPolicy and its binding.
func GracePolicyName(team *chamber.Team) string { return "chamber-pod-grace-" + team.Name }

// gracePolicy is the team's MutatingAdmissionPolicy and binding; nil when every grace
// it would give is 0 (nothing to raise).
func gracePolicy(team *chamber.Team, pool *chamber.GPUPool, fallback time.Duration) (*admissionv1.MutatingAdmissionPolicy, *admissionv1.MutatingAdmissionPolicyBinding) {
	policies := []*chamber.EvictionPolicy{team.Spec.Eviction, pool.Spec.Eviction}
	seconds := func(tier string) int64 {
		d := chamber.ResolveGracePeriod(tier, fallback, policies...)
		return int64((d + time.Second - 1) / time.Second)
	}
	var tiers []string
	for _, p := range policies {
		if p == nil {
			continue
		}
		for _, t := range p.TierGracePeriods {
			if !slices.Contains(tiers, t.Tier) {
				tiers = append(tiers, t.Tier)
			}
		}
	}
	slices.Sort(tiers)
	longest := seconds("")
	expr := fmt.Sprint(seconds(""))
	for i := len(tiers) - 1; i >= 0; i-- {
		expr = fmt.Sprintf("variables.tier == %q ? %d : (%s)", tiers[i], seconds(tiers[i]), expr)
		longest = max(longest, seconds(tiers[i]))
	}
	if longest == 0 || len(team.Spec.Namespaces) == 0 {
		return nil, nil
	}
	name := GracePolicyName(team)
	labels := map[string]string{chamberkueue.LabelManagedBy: chamberkueue.ManagedBy, chamberkueue.LabelTeam: team.Name}
	policy := &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: slices.Sorted(slices.Values(team.Spec.Namespaces)),
				}}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}},
			},
			Variables: []admissionv1.Variable{
				// Kueue's tier label, else the pod's PriorityClass (a Volcano Job's
				// pods name their tier there).
				{Name: "tier", Expression: fmt.Sprintf("has(object.metadata.labels) && %q in object.metadata.labels ? object.metadata.labels[%q] : "+
					"(has(object.spec.priorityClassName) ? object.spec.priorityClassName : '')", LabelTier, LabelTier)},
				{Name: "grace", Expression: expr},
			},
			Mutations: []admissionv1.Mutation{{
				PatchType: admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: strings.Join([]string{
					"Object{spec: Object.spec{terminationGracePeriodSeconds:",
					"has(object.spec.terminationGracePeriodSeconds) && object.spec.terminationGracePeriodSeconds >= variables.grace",
					"? object.spec.terminationGracePeriodSeconds : variables.grace}}",
				}, " ")},
			}},
			// A pod is never refused for want of a longer grace.
			FailurePolicy:      ptr.To(admissionv1.Ignore),
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		},
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}
	return policy, binding
}

// applyGracePolicy keeps the team's MutatingAdmissionPolicy and binding as
// gracePolicy says, or deletes them when there is nothing to raise. Both Team
// controllers use it: the pods of a Volcano Job get notice from Volcano's reclaim and
// preempt as those of a Kueue Job do from Kueue's preemptions.
func applyGracePolicy(ctx context.Context, c client.Client, team *chamber.Team, pool *chamber.GPUPool, fallback time.Duration) error {
	policy, binding := gracePolicy(team, pool, fallback)
	if policy == nil {
		for _, obj := range []client.Object{
			&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: GracePolicyName(team)}},
			&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: GracePolicyName(team)}},
		} {
			if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete %T %s: %w", obj, obj.GetName(), err)
			}
		}
		return nil
	}
	for _, want := range []client.Object{policy, binding} {
		if err := controllerutil.SetControllerReference(team, want, c.Scheme()); err != nil {
			return err
		}
		have := want.DeepCopyObject().(client.Object)
		err := c.Get(ctx, client.ObjectKeyFromObject(want), have)
		switch {
		case apierrors.IsNotFound(err):
			err = c.Create(ctx, want)
		case err == nil && !specEqual(have, want):
			want.SetResourceVersion(have.GetResourceVersion())
			err = c.Update(ctx, want)
		}
		if err != nil {
			return fmt.Errorf("apply %T %s: %w", want, want.GetName(), err)
		}
	}
	return nil
}

func specEqual(have, want client.Object) bool {
	switch w := want.(type) {
	case *admissionv1.MutatingAdmissionPolicy:
		h := have.(*admissionv1.MutatingAdmissionPolicy)
		// The API server defaults the rest of the match constraints.
		return h.Spec.MatchConstraints != nil &&
			equality.Semantic.DeepEqual(h.Spec.MatchConstraints.NamespaceSelector, w.Spec.MatchConstraints.NamespaceSelector) &&
			equality.Semantic.DeepEqual(h.Spec.Variables, w.Spec.Variables) && equality.Semantic.DeepEqual(h.Spec.Mutations, w.Spec.Mutations)
	case *admissionv1.MutatingAdmissionPolicyBinding:
		return have.(*admissionv1.MutatingAdmissionPolicyBinding).Spec.PolicyName == w.Spec.PolicyName
	}
	return false
}
