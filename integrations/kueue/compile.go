package kueue

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// ResourceGPU is the resource NVIDIA's device plugin advertises.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// WithheldGPUs is how many of the node's GPUs its device plugin no longer offers:
// capacity minus allocatable. NVIDIA's device plugin marks a GPU that raised a fatal
// XID unhealthy, and the kubelet then leaves it out of allocatable, so neither
// kube-scheduler nor Kueue's topology-aware scheduling gives it to a pod.
func WithheldGPUs(node *corev1.Node) int64 {
	capacity, allocatable := node.Status.Capacity[ResourceGPU], node.Status.Allocatable[ResourceGPU]
	return max(0, capacity.Value()-allocatable.Value())
}

// Schedulable reports whether a node takes new GPU work: it is not cordoned and has
// no NoSchedule or NoExecute taint that takes it out of service (OutOfServiceTaint).
// Other such taints keep other pods off GPU nodes, and GPU workloads tolerate them:
// GKE puts nvidia.com/gpu=present:NoSchedule on every GPU node, and operators taint
// nodes dedicated to a team; those nodes take GPU work. The pool controller counts a
// pool's schedulable GPUs by it, the admission check its placements, room for big jobs
// its nodes and the MultiKueue dispatcher a worker's free GPUs.
func Schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && OutOfServiceTaint(t.Key) {
			return false
		}
	}
	return true
}

// OutOfServiceTaint reports whether a taint of this key says that a node takes no new
// work, whatever the pod: Chamber's own (chamber.dev/: isolation of failing GPUs, room
// kept for a big job), Kubernetes' node lifecycle and kubelet conditions
// (node.kubernetes.io/: not-ready, unreachable, unschedulable, memory, disk and PID
// pressure, network-unavailable, out-of-service), the cloud provider's
// (node.cloudprovider.kubernetes.io/: uninitialized, shutdown), and the autoscalers'
// before they remove a node (Cluster Autoscaler's ToBeDeletedByClusterAutoscaler,
// Karpenter's karpenter.sh/disrupted).
func OutOfServiceTaint(key string) bool {
	for _, prefix := range []string{chamber.NamePrefix, "node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"} {
		if strings.HasPrefix(key, prefix) {
			return true
		}
	}
	switch key {
	case "ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", "karpenter.sh/disruption":
		return true
	}
	return false
}

// PodGPUs is the GPUs a pod spec holds: the scheduler's effective request, the
// larger of its containers' sum and its largest init container. A device-plugin
// resource's request equals its limit, and either may be given alone.
func PodGPUs(spec *corev1.PodSpec) int64 {
	of := func(c *corev1.Container) int64 {
		if q, ok := c.Resources.Requests[ResourceGPU]; ok {
			return q.Value()
		}
		q := c.Resources.Limits[ResourceGPU]
		return q.Value()
	}
	var sum, initMax int64
	for i := range spec.Containers {
		sum += of(&spec.Containers[i])
	}
	for i := range spec.InitContainers {
		initMax = max(initMax, of(&spec.InitContainers[i]))
	}
	return max(sum, initMax)
}

// Owned reports whether Chamber created the object.
func Owned(obj metav1.Object) bool {
	return obj.GetLabels()[chamber.LabelManagedBy] == chamber.ManagedBy
}

// Adopt makes owner the controller of obj, an object Chamber created that has none:
// one an uninstall of Chamber orphaned (controllers/uninstall), so that a reinstall
// owns it again and deleting its Team or GPUPool deletes it as before. It reports
// whether it changed obj.
func Adopt(owner, obj metav1.Object, scheme *runtime.Scheme) (bool, error) {
	if !Owned(obj) || metav1.GetControllerOf(obj) != nil {
		return false, nil
	}
	return true, controllerutil.SetControllerReference(owner, obj, scheme)
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// FlavorName is the ResourceFlavor of a GPU model in a pool, e.g. "main-nvidia-h100-80gb-hbm3".
func FlavorName(pool, model string) string {
	name := pool + "-" + slug(model)
	if len(name) > 253 {
		name = strings.TrimRight(name[:253], "-")
	}
	return name
}

// slug turns a GPU model into a DNS label: "NVIDIA-H100-80GB-HBM3" -> "nvidia-h100-80gb-hbm3".
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
		quota := kueue.ResourceQuota{Name: ResourceGPU, NominalQuota: *resource.NewQuantity(0, resource.DecimalSI)}
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
		cq.Spec.ResourceGroups = []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{ResourceGPU}, Flavors: flavors}}
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

// PriorityTier is a named workload priority.
type PriorityTier struct {
	Name  string
	Value int32
}

// DefaultPriorityTiers are the tiers Chamber ships: jobs pick one with the
// kueue.x-k8s.io/priority-class label.
var DefaultPriorityTiers = []PriorityTier{
	{Name: "production", Value: 1000},
	{Name: "standard", Value: 500},
	{Name: "preemptible", Value: 100},
}

// WorkloadPriorityClass is the Kueue priority class of a tier.
func WorkloadPriorityClass(t PriorityTier) *kueue.WorkloadPriorityClass {
	return &kueue.WorkloadPriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: t.Name, Labels: labels()},
		Value:       t.Value,
		Description: "Chamber priority tier " + t.Name,
	}
}

// ParsePriorityTiers parses "production=1000,standard=500,preemptible=100": each
// name a WorkloadPriorityClass name (a DNS subdomain), once; each value a whole number
// that fits Kueue's int32.
func ParsePriorityTiers(s string) ([]PriorityTier, error) {
	var tiers []PriorityTier
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 32)
		switch {
		case !ok || err != nil || name == "":
			return nil, fmt.Errorf("priority tier %q: want name=value, the value a whole number (at most %d), e.g. production=1000", part, math.MaxInt32)
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			return nil, fmt.Errorf("priority tier %q: %q is not a WorkloadPriorityClass name: %s", part, name, strings.Join(validation.IsDNS1123Subdomain(name), "; "))
		case seen[name]:
			return nil, fmt.Errorf("priority tier %q: %s is given twice", part, name)
		}
		seen[name] = true
		tiers = append(tiers, PriorityTier{Name: name, Value: int32(v)})
	}
	return tiers, nil
}

// GPUFlavors lists the flavors a ClusterQueue has GPU quota of.
func GPUFlavors(cq *kueue.ClusterQueue) []kueue.ResourceFlavorReference {
	var out []kueue.ResourceFlavorReference
	for _, rg := range cq.Spec.ResourceGroups {
		if !slices.Contains(rg.CoveredResources, ResourceGPU) {
			continue
		}
		for _, f := range rg.Flavors {
			out = append(out, f.Name)
		}
	}
	return out
}
