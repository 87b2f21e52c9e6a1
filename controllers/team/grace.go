package team

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Why pods get the team's grace period: Kueue preempts a workload by suspending its
// Job, and its pods get SIGTERM and their terminationGracePeriodSeconds to exit:
// Kubernetes' default of 30 s, too short for most checkpoints, so a preempted job
// goes back to its last periodic checkpoint. Chamber's own evictions give the team's
// eviction grace period; so that Kueue's do too, the chart installs one
// MutatingAdmissionPolicy (charts/chamber/templates/pod-grace-policy.yaml) whose
// parameters are the Teams: it raises the terminationGracePeriodSeconds of every pod
// created in a team's namespaces to at least the grace in the team's status.podGrace
// (its tier's, by the pod's kueue.x-k8s.io/priority-class label or its
// priorityClassName). This controller only writes status.podGrace, from the team's,
// the pool's and the default eviction policy, and reads the policy to say in the
// PodGrace condition whether it is there: chamber-controller needs no right to write
// admission policies, which can rewrite any object. A job that saves its checkpoint
// on SIGTERM and exits frees its GPUs as soon as it is saved; only one that ignores
// SIGTERM holds them for the whole grace. A pod's own longer grace is kept.

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
	"Chamber's own evictions still give the team's grace. Turn the API on and run helm upgrade (the chart installs the policy where it is served), " +
	"or set the grace in the jobs' pod templates"

// podGrace is the team's status.podGrace: the grace of each tier its or its pool's
// eviction policy names, and of the rest; nil where every one is 0 or the team has
// no namespace (nothing to raise).
func podGrace(team *chamber.Team, pool *chamber.GPUPool, fallback time.Duration) *chamber.PodGrace {
	policies := []*chamber.EvictionPolicy{team.Spec.Eviction, pool.Spec.Eviction}
	seconds := func(tier string) int64 {
		d := chamber.ResolveGracePeriod(tier, fallback, policies...)
		return int64((d + time.Second - 1) / time.Second)
	}
	grace := &chamber.PodGrace{Seconds: seconds("")}
	longest := grace.Seconds
	for _, p := range policies {
		if p == nil {
			continue
		}
		for _, t := range p.TierGracePeriods {
			if !slices.ContainsFunc(grace.Tiers, func(have chamber.TierPodGrace) bool { return have.Tier == t.Tier }) {
				tier := chamber.TierPodGrace{Tier: t.Tier, Seconds: seconds(t.Tier)}
				grace.Tiers = append(grace.Tiers, tier)
				longest = max(longest, tier.Seconds)
			}
		}
	}
	if longest == 0 || len(team.Spec.Namespaces) == 0 {
		return nil
	}
	slices.SortFunc(grace.Tiers, func(a, b chamber.TierPodGrace) int { return strings.Compare(a.Tier, b.Tier) })
	return grace
}

// gracePolicyRecheck is how often, at most, a gracePolicy reads the chart's policy
// again: a Team is reconciled on every usage refresh (DefaultUsageRefresh), and the
// policy changes only with a helm upgrade.
const gracePolicyRecheck = time.Minute

// gracePolicy says whether the chart's grace policy named name, and its binding of
// the same name, are there in the version api names. It reads them uncached and by
// name (the chart grants get on that name alone), at most once a gracePolicyRecheck
// for all of a controller's Teams.
type gracePolicy struct {
	reader client.Reader
	clock  clock.PassiveClock
	api    PolicyAPI
	name   string

	mu      sync.Mutex
	readAt  time.Time
	missing string // what is not there; "" when both are
}

func newGracePolicy(reader client.Reader, clk clock.PassiveClock, api PolicyAPI, name string) *gracePolicy {
	if api == "" {
		api = PolicyV1
	}
	return &gracePolicy{reader: reader, clock: clk, api: api, name: name}
}

// check returns what of the policy is missing, "" when it is in place.
func (p *gracePolicy) check(ctx context.Context) (string, error) {
	if p.name == "" {
		return "no pod grace policy is named (--pod-grace-policy)", nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if !p.readAt.IsZero() && now.Sub(p.readAt) < gracePolicyRecheck {
		return p.missing, nil
	}
	missing := ""
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(schema.GroupVersionKind{Group: admissionv1.GroupName, Version: string(p.api), Kind: kind})
		err := p.reader.Get(ctx, client.ObjectKey{Name: p.name}, obj)
		if apierrors.IsNotFound(err) {
			missing = fmt.Sprintf("no %s %s", kind, p.name)
			break
		}
		if err != nil {
			return "", fmt.Errorf("get %s %s: %w", kind, p.name, err)
		}
	}
	p.readAt, p.missing = now, missing
	return missing, nil
}

// applyPodGrace sets the team's status.podGrace and returns its PodGrace condition:
// whether the chart's policy is there to read it. Both Team controllers use it: the
// pods of a Volcano Job get notice from Volcano's reclaim and preempt as those of a
// Kueue Job do from Kueue's preemptions.
func applyPodGrace(ctx context.Context, policy *gracePolicy, team *chamber.Team, pool *chamber.GPUPool, fallback time.Duration) (metav1.Condition, error) {
	cond := metav1.Condition{Type: chamber.ConditionPodGrace, Status: metav1.ConditionFalse, ObservedGeneration: team.Generation}
	team.Status.PodGrace = podGrace(team, pool, fallback)
	if policy.api == PolicyNotServed {
		cond.Reason, cond.Message = chamber.ReasonPolicyAPINotServed, policyAPINotServed
		return cond, nil
	}
	if team.Status.PodGrace == nil {
		cond.Status = metav1.ConditionTrue
		cond.Reason, cond.Message = chamber.ReasonNoGraceToRaise, "every grace the team's tiers have is 0: pods keep their own terminationGracePeriodSeconds"
		return cond, nil
	}
	missing, err := policy.check(ctx)
	if err != nil {
		return cond, err
	}
	if missing != "" {
		cond.Reason = chamber.ReasonPolicyNotInstalled
		cond.Message = fmt.Sprintf("%s: the team's pods keep their own terminationGracePeriodSeconds (Kubernetes' default is 30 s) when Kueue or Volcano preempts them; "+
			"the chart installs it, and passes its name as --pod-grace-policy, unless controller.flags.pod-grace-from-eviction-policy is false", missing)
		return cond, nil
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, chamber.ReasonGracePolicyApplied
	cond.Message = fmt.Sprintf("pods created in the team's namespaces get at least the grace in status.podGrace as terminationGracePeriodSeconds (MutatingAdmissionPolicy %s, %s/%s)",
		policy.name, admissionv1.GroupName, policy.api)
	return cond, nil
}
