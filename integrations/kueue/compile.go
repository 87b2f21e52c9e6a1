package kueue

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// FlavorName is the ResourceFlavor of a GPU model in a pool, e.g.
// "main-nvidia-h100-80gb-hbm3".
func FlavorName(pool, model string) string {
	name := pool + "-" + slug(model)
	if len(name) > 253 {
		name = strings.TrimRight(name[:253], "-")
	}
	return name
}

// slug turns a GPU model into a DNS label: "NVIDIA-H100-80GB-HBM3" ->
// "nvidia-h100-80gb-hbm3".
func slug(model string) string {
	s := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(model), "-"), "-")
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-")
	}
	return s
}

func labels(extra ...string) map[string]string {
	l := map[string]string{chamber.LabelManagedBy: chamber.ManagedBy}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

// Cohort is the pool's Kueue Cohort; a parent pool's Cohort is its parent.
func Cohort(pool *chamber.GPUPool) *kueue.Cohort {
	return &kueue.Cohort{
		ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Labels: labels(chamber.LabelPool, pool.Name)},
		Spec:       kueue.CohortSpec{ParentName: kueue.CohortReference(pool.Spec.Parent)},
	}
}

// ResourceFlavor is the flavor of one GPU model of the pool: its node labels are the
// model's product label and the pool's own labels, so Kueue's placement keeps the
// pool's workloads on the pool's nodes of that model.
func ResourceFlavor(pool *chamber.GPUPool, model string) *kueue.ResourceFlavor {
	nodeLabels := map[string]string{productLabel(pool): model}
	for k, v := range pool.Spec.NodeLabels {
		nodeLabels[k] = v
	}
	return &kueue.ResourceFlavor{
		ObjectMeta: metav1.ObjectMeta{
			Name:   FlavorName(pool.Name, model),
			Labels: labels(chamber.LabelPool, pool.Name, chamber.LabelGPUModel, slug(model)),
		},
		Spec: kueue.ResourceFlavorSpec{NodeLabels: nodeLabels, TopologyName: topologyName(pool)},
	}
}

// TopologyEnabled reports whether the pool's flavors use Kueue's Topology-Aware
// Scheduling (the default). A pool with worker clusters runs its pods there, where
// the workers' own flavors place them: on the manager, Kueue v0.19 would hold its
// workloads short of Admitted waiting for a topology assignment among nodes that run
// none of them (PendingDelayedTopologyRequests).
func TopologyEnabled(pool *chamber.GPUPool) bool {
	if len(pool.Spec.WorkerClusters) > 0 {
		return false
	}
	return pool.Spec.Topology == nil || pool.Spec.Topology.Enabled == nil || *pool.Spec.Topology.Enabled
}

func topologyName(pool *chamber.GPUPool) *kueue.TopologyReference {
	if !TopologyEnabled(pool) {
		return nil
	}
	return ptr.To(kueue.TopologyReference(pool.Name))
}

// TopologyLevels are the pool's topology levels, widest first, always ending at the
// node's hostname: Kueue then places each pod on a node with room (its lowest level
// is a node).
func TopologyLevels(pool *chamber.GPUPool) []string {
	var levels []string
	if pool.Spec.Topology != nil {
		for _, l := range pool.Spec.Topology.Levels {
			if l != corev1.LabelHostname && !slices.Contains(levels, l) {
				levels = append(levels, l)
			}
		}
	}
	return append(levels, corev1.LabelHostname)
}

// Topology is the pool's Kueue Topology, named after the pool; nil when the pool
// turns topology-aware scheduling off. With it on, Kueue implies topology-aware
// placement for every workload of a ClusterQueue whose flavors all have a topology:
// jobs need no annotation.
func Topology(pool *chamber.GPUPool) *kueue.Topology {
	if !TopologyEnabled(pool) {
		return nil
	}
	t := &kueue.Topology{ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Labels: labels(chamber.LabelPool, pool.Name)}}
	for _, l := range TopologyLevels(pool) {
		t.Spec.Levels = append(t.Spec.Levels, kueue.TopologyLevel{NodeLabel: l})
	}
	return t
}

func productLabel(pool *chamber.GPUPool) string {
	if pool.Spec.ProductLabel != "" {
		return pool.Spec.ProductLabel
	}
	return chamber.DefaultProductLabel
}

// Default preemption of a Team's ClusterQueue.
const (
	DefaultReclaimWithinCohort = kueue.PreemptionPolicyAny
	DefaultWithinClusterQueue  = kueue.PreemptionPolicyLowerPriority
)

// ClusterQueueOptions are the parts of a team's ClusterQueue that come from outside
// its spec.
type ClusterQueueOptions struct {
	// StopBorrowing sets every borrowing limit to zero (budget spent).
	StopBorrowing bool
	// Hold stops admission (Kueue's stopPolicy Hold: running work finishes).
	Hold bool
	// AdmissionChecks are attached to the queue.
	AdmissionChecks []string
	// Withheld are the GPUs of each model's quota withheld because the pool's healthy
	// GPUs do not cover its teams' quotas (WithheldQuota).
	Withheld map[string]int64
}

// ClusterQueue compiles a Team into its ClusterQueue in the pool's Cohort. poolModels
// are the models found in the pool: each becomes a flavor, with the team's quota or
// zero, so a team can borrow models it has no quota of. It fails on a quota for a
// model the pool does not have.
func ClusterQueue(team *chamber.Team, pool *chamber.GPUPool, poolModels []string, opts ClusterQueueOptions) (*kueue.ClusterQueue, error) {
	var unknown []string
	for _, q := range team.Spec.Quotas {
		if !slices.Contains(poolModels, q.Model) {
			unknown = append(unknown, q.Model)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("pool %s has no GPUs of model %s (it has: %s)",
			pool.Name, strings.Join(unknown, ", "), strings.Join(poolModels, ", "))
	}
	// The team's own models first, in its order: Kueue tries flavors in order.
	models := make([]string, 0, len(poolModels))
	for _, q := range team.Spec.Quotas {
		models = append(models, q.Model)
	}
	for _, m := range poolModels {
		if !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	var flavors []kueue.FlavorQuotas
	for _, m := range models {
		quota := kueue.ResourceQuota{Name: kube.ResourceGPU, NominalQuota: *resource.NewQuantity(0, resource.DecimalSI)}
		for _, q := range team.Spec.Quotas {
			if q.Model != m {
				continue
			}
			nominal := max(0, int64(q.GPUs)-opts.Withheld[m])
			quota.NominalQuota = *resource.NewQuantity(nominal, resource.DecimalSI)
			if q.BorrowingLimit != nil {
				quota.BorrowingLimit = resource.NewQuantity(int64(*q.BorrowingLimit), resource.DecimalSI)
			}
			if q.LendingLimit != nil {
				// Kueue refuses a lending limit above the nominal quota.
				quota.LendingLimit = resource.NewQuantity(min(int64(*q.LendingLimit), nominal), resource.DecimalSI)
			}
		}
		if opts.StopBorrowing {
			quota.BorrowingLimit = resource.NewQuantity(0, resource.DecimalSI)
		}
		flavors = append(flavors, kueue.FlavorQuotas{
			Name:      kueue.ResourceFlavorReference(FlavorName(pool.Name, m)),
			Resources: []kueue.ResourceQuota{quota},
		})
	}

	cq := &kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: team.Name, Labels: labels(chamber.LabelPool, pool.Name, chamber.LabelTeam, team.Name)},
		Spec: kueue.ClusterQueueSpec{
			CohortName:        kueue.CohortReference(pool.Name),
			NamespaceSelector: ClusterQueueNamespaceSelector(team.Spec.Namespaces),
			QueueingStrategy:  kueue.BestEffortFIFO,
			Preemption:        preemption(team.Spec.Preemption),
			FlavorFungibility: &kueue.FlavorFungibility{
				WhenCanBorrow:  kueue.MayStopSearch,
				WhenCanPreempt: kueue.TryNextFlavor,
			},
		},
	}
	if len(flavors) > 0 {
		cq.Spec.ResourceGroups = []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{kube.ResourceGPU}, Flavors: flavors}}
	}
	if team.Spec.FairShareWeight != nil {
		cq.Spec.FairSharing = &kueue.FairSharing{Weight: resource.NewQuantity(int64(*team.Spec.FairShareWeight), resource.DecimalSI)}
	}
	if opts.Hold {
		cq.Spec.StopPolicy = ptr.To(kueue.Hold)
	}
	for _, ac := range opts.AdmissionChecks {
		if cq.Spec.AdmissionChecksStrategy == nil {
			cq.Spec.AdmissionChecksStrategy = &kueue.AdmissionChecksStrategy{}
		}
		cq.Spec.AdmissionChecksStrategy.AdmissionChecks = append(cq.Spec.AdmissionChecksStrategy.AdmissionChecks,
			kueue.AdmissionCheckStrategyRule{Name: kueue.AdmissionCheckReference(ac)})
	}
	return cq, nil
}

// ClusterQueueNamespaceSelector admits workloads from the team's namespaces only; with
// none, Kueue's nil selector admits from no namespace.
func ClusterQueueNamespaceSelector(namespaces []string) *metav1.LabelSelector {
	if len(namespaces) == 0 {
		return nil
	}
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key:      corev1.LabelMetadataName,
		Operator: metav1.LabelSelectorOpIn,
		Values:   slices.Sorted(slices.Values(namespaces)),
	}}}
}

func preemption(p *chamber.TeamPreemption) *kueue.ClusterQueuePreemption {
	out := &kueue.ClusterQueuePreemption{
		ReclaimWithinCohort: DefaultReclaimWithinCohort,
		WithinClusterQueue:  DefaultWithinClusterQueue,
		BorrowWithinCohort:  &kueue.BorrowWithinCohort{Policy: kueue.BorrowWithinCohortPolicyNever},
	}
	if p == nil {
		return out
	}
	if p.ReclaimWithinCohort != "" {
		out.ReclaimWithinCohort = kueue.PreemptionPolicy(p.ReclaimWithinCohort)
	}
	if p.WithinClusterQueue != "" {
		out.WithinClusterQueue = kueue.PreemptionPolicy(p.WithinClusterQueue)
	}
	if p.BorrowWithinCohort != nil {
		out.BorrowWithinCohort = &kueue.BorrowWithinCohort{
			Policy:               kueue.BorrowWithinCohortPolicy(p.BorrowWithinCohort.Policy),
			MaxPriorityThreshold: p.BorrowWithinCohort.MaxPriorityThreshold,
		}
	}
	return out
}

// AdmissionCheck is a check of controllerName; Kueue holds each workload of the
// ClusterQueues that list it until the check's controller says Ready.
func AdmissionCheck(name, controllerName string) *kueue.AdmissionCheck {
	return &kueue.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels()},
		Spec:       kueue.AdmissionCheckSpec{ControllerName: controllerName},
	}
}

// LocalQueue is the team's queue in one of its namespaces.
func LocalQueue(team *chamber.Team, namespace string) *kueue.LocalQueue {
	name := team.Spec.LocalQueueName
	if name == "" {
		name = chamber.DefaultLocalQueueName
	}
	return &kueue.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(chamber.LabelTeam, team.Name)},
		Spec:       kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(team.Name)},
	}
}

// WorkloadPriorityClass is the Kueue priority class of a tier.
func WorkloadPriorityClass(t kube.PriorityTier) *kueue.WorkloadPriorityClass {
	return &kueue.WorkloadPriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: t.Name, Labels: labels()},
		Value:       t.Value,
		Description: "Chamber priority tier " + t.Name,
	}
}

// GPUFlavors lists the flavors a ClusterQueue has GPU quota of.
func GPUFlavors(cq *kueue.ClusterQueue) []kueue.ResourceFlavorReference {
	var out []kueue.ResourceFlavorReference
	for _, rg := range cq.Spec.ResourceGroups {
		if !slices.Contains(rg.CoveredResources, kube.ResourceGPU) {
			continue
		}
		for _, f := range rg.Flavors {
			out = append(out, f.Name)
		}
	}
	return out
}
