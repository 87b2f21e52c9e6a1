package team

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	admissionv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
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

// PolicyAPI is the version of admissionregistration.k8s.io in which the API server
// serves MutatingAdmissionPolicies, the grace policies' kind: v1 from Kubernetes 1.36;
// v1beta1 on 1.34 and 1.35 where the MutatingAdmissionPolicy feature gate and that
// API version are turned on (they are off by default); none before, or where they
// are off.
type PolicyAPI string

const (
	PolicyV1      PolicyAPI = "v1"
	PolicyV1beta1 PolicyAPI = "v1beta1"
	// PolicyNotServed: neither version is served, so no team's pods get its grace.
	PolicyNotServed PolicyAPI = "none"
)

// ServedPolicyAPI asks the API server in which version, if any, it serves
// MutatingAdmissionPolicies and their bindings; v1 where it serves both.
func ServedPolicyAPI(dc discovery.DiscoveryInterface) (PolicyAPI, error) {
	for _, api := range []PolicyAPI{PolicyV1, PolicyV1beta1} {
		resources, err := dc.ServerResourcesForGroupVersion(admissionv1.GroupName + "/" + string(api))
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("discover %s/%s: %w", admissionv1.GroupName, api, err)
		}
		served := map[string]bool{}
		for _, r := range resources.APIResources {
			served[r.Name] = true
		}
		if served["mutatingadmissionpolicies"] && served["mutatingadmissionpolicybindings"] {
			return api, nil
		}
	}
	return PolicyNotServed, nil
}

// policyAPINotServed is the PodGrace condition's message where ServedPolicyAPI says
// none.
const policyAPINotServed = "this cluster serves MutatingAdmissionPolicies neither in admissionregistration.k8s.io/v1 (Kubernetes 1.36 and later) " +
	"nor in v1beta1 (1.34 and 1.35 with the MutatingAdmissionPolicy feature gate and --runtime-config=admissionregistration.k8s.io/v1beta1=true), " +
	"so the team's pods keep their own terminationGracePeriodSeconds (Kubernetes' default is 30 s) when Kueue or Volcano preempts them; " +
	"Chamber's own evictions still give the team's grace. Turn the API on and restart chamber-controller, or set the grace in the jobs' pod templates"

// policyObject returns the policy or binding as api serves it: the v1 object itself,
// or its v1beta1 twin (the same fields: v1 graduated v1beta1 unchanged).
func policyObject(obj client.Object, api PolicyAPI) (client.Object, error) {
	if api != PolicyV1beta1 {
		return obj, nil
	}
	var out client.Object
	switch obj.(type) {
	case *admissionv1.MutatingAdmissionPolicy:
		out = &admissionv1beta1.MutatingAdmissionPolicy{}
	case *admissionv1.MutatingAdmissionPolicyBinding:
		out = &admissionv1beta1.MutatingAdmissionPolicyBinding{}
	default:
		return nil, fmt.Errorf("%T is not a MutatingAdmissionPolicy or its binding", obj)
	}
	return out, convertPolicy(obj, out)
}

// v1Policy returns a policy or binding read in api's version as its v1 twin.
func v1Policy(obj client.Object, api PolicyAPI) (client.Object, error) {
	if api != PolicyV1beta1 {
		return obj, nil
	}
	var out client.Object
	switch obj.(type) {
	case *admissionv1beta1.MutatingAdmissionPolicy:
		out = &admissionv1.MutatingAdmissionPolicy{}
	case *admissionv1beta1.MutatingAdmissionPolicyBinding:
		out = &admissionv1.MutatingAdmissionPolicyBinding{}
	default:
		return nil, fmt.Errorf("%T is not a v1beta1 MutatingAdmissionPolicy or its binding", obj)
	}
	return out, convertPolicy(obj, out)
}

func convertPolicy(in, out client.Object) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// ownedPolicy is the grace policy's type in api, for the controllers' Owns.
func ownedPolicy(api PolicyAPI) client.Object {
	if api == PolicyV1beta1 {
		return &admissionv1beta1.MutatingAdmissionPolicy{}
	}
	return &admissionv1.MutatingAdmissionPolicy{}
}

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
// gracePolicy says, in the version api names, or deletes them when there is nothing
// to raise, and returns the team's PodGrace condition. Both Team controllers use it:
// the pods of a Volcano Job get notice from Volcano's reclaim and preempt as those of
// a Kueue Job do from Kueue's preemptions.
func applyGracePolicy(ctx context.Context, c client.Client, team *chamber.Team, pool *chamber.GPUPool, fallback time.Duration, api PolicyAPI) (metav1.Condition, error) {
	cond := metav1.Condition{Type: chamber.ConditionPodGrace, Status: metav1.ConditionTrue, ObservedGeneration: team.Generation}
	if api == PolicyNotServed {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, chamber.ReasonPolicyAPINotServed, policyAPINotServed
		return cond, nil
	}
	policy, binding := gracePolicy(team, pool, fallback)
	if policy == nil {
		for _, obj := range []client.Object{
			&admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: GracePolicyName(team)}},
			&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: GracePolicyName(team)}},
		} {
			obj, err := policyObject(obj, api)
			if err != nil {
				return cond, err
			}
			if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return cond, fmt.Errorf("delete %T %s: %w", obj, obj.GetName(), err)
			}
		}
		cond.Reason, cond.Message = chamber.ReasonNoGraceToRaise, "every grace the team's tiers have is 0: pods keep their own terminationGracePeriodSeconds"
		return cond, nil
	}
	for _, v1Want := range []client.Object{policy, binding} {
		want, err := policyObject(v1Want, api)
		if err != nil {
			return cond, err
		}
		if err := controllerutil.SetControllerReference(team, want, c.Scheme()); err != nil {
			return cond, err
		}
		have := want.DeepCopyObject().(client.Object)
		err = c.Get(ctx, client.ObjectKeyFromObject(want), have)
		switch {
		case apierrors.IsNotFound(err):
			err = c.Create(ctx, want)
		case err == nil:
			var v1Have client.Object
			if v1Have, err = v1Policy(have, api); err == nil && !specEqual(v1Have, v1Want) {
				want.SetResourceVersion(have.GetResourceVersion())
				err = c.Update(ctx, want)
			}
		}
		if err != nil {
			return cond, fmt.Errorf("apply %T %s: %w", want, want.GetName(), err)
		}
	}
	cond.Reason = chamber.ReasonGracePolicyApplied
	cond.Message = fmt.Sprintf("pods created in the team's namespaces get at least the team's eviction grace as terminationGracePeriodSeconds (MutatingAdmissionPolicy %s, %s/%s)",
		policy.Name, admissionv1.GroupName, api)
	return cond, nil
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
