package volcano

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// RootQueue is the root of Volcano's queue hierarchy. vc-scheduler makes it, and
// vc-controller-manager makes it the parent of every Queue that names none.
const RootQueue = "root"

// PoolQueueName is the Volcano Queue of the pool under Volcano's queue hierarchy.
// It is not the pool's own name, which a Team's Queue may have.
func PoolQueueName(pool string) string { return "pool-" + pool }

// PoolQueues are the Queues of the Volcano pools under Volcano's queue hierarchy (the
// capacity plugin's enableHierarchy), by pool name, and what is wrong with a pool's
// spec.parent, by pool name. A pool's Queue is a child of its parent pool's Queue, or
// of Volcano's root; its children are its teams' Queues (TeamQueue) and its child
// pools' Queues. Unused capacity flows up the tree as in a Kueue pool's Cohort, and
// vc-scheduler's reclaim gives a queue back its deserved share from anywhere in it.
//
// A pool's Queue adds up its children's, so that Volcano's admission webhook, which
// refuses children that promise more than their parent, takes them:
//   - deserved and guarantee: the sum of its children's;
//   - capability: none when no child has one, since a pool has no cap of its own;
//     else the cluster's GPUs (clusterGPUs) or the largest child's capability,
//     whichever is more, the least that is no cap and that the webhook takes.
//
// A parent that cannot be used leaves the pool's Queue under the root, with the
// reason: a pool that does not exist, a Kueue pool (it has no Queue), or a parent
// below the pool (spec.parent forms a cycle).
func PoolQueues(pools []chamber.GPUPool, teams []chamber.Team, clusterGPUs int64) (map[string]*scheduling.Queue, map[string]string) {
	exists := map[string]bool{}
	volcanoPools := map[string]*chamber.GPUPool{}
	for i := range pools {
		exists[pools[i].Name] = true
		if pools[i].UsesVolcano() {
			volcanoPools[pools[i].Name] = &pools[i]
		}
	}
	// parentOf is the pool whose Queue is each pool's parent; "" for the root.
	parentOf := map[string]string{}
	problems := map[string]string{}
	for name, p := range volcanoPools {
		switch up := p.Spec.Parent; {
		case up == "":
		case !exists[up]:
			problems[name] = fmt.Sprintf("parent GPUPool %q does not exist: the pool's Volcano Queue is under Volcano's root until it does", up)
		case volcanoPools[up] == nil:
			problems[name] = fmt.Sprintf("parent GPUPool %q compiles into Kueue and has no Volcano Queue: the pool's Queue is under Volcano's root; give it a Volcano pool as its parent", up)
		case inCycle(name, volcanoPools):
			problems[name] = fmt.Sprintf("parent GPUPool %q is below this pool (the pools' spec.parent form a cycle): the pool's Volcano Queue is under Volcano's root", up)
		default:
			parentOf[name] = up
		}
	}
	children := map[string][]*scheduling.Queue{}
	for i := range teams {
		if p := volcanoPools[teams[i].Spec.Pool]; p != nil {
			children[p.Name] = append(children[p.Name], TeamQueue(&teams[i], p, true))
		}
	}

	queues := map[string]*scheduling.Queue{}
	var build func(name string) *scheduling.Queue
	build = func(name string) *scheduling.Queue {
		if q := queues[name]; q != nil {
			return q
		}
		kids := children[name]
		for child, up := range parentOf {
			if up == name {
				kids = append(kids, build(child))
			}
		}
		q := &scheduling.Queue{
			ObjectMeta: metav1.ObjectMeta{Name: PoolQueueName(name), Labels: map[string]string{
				chamber.LabelManagedBy: chamber.ManagedBy, chamber.LabelPool: name}},
			Spec: scheduling.QueueSpec{Weight: 1, Reclaimable: ptr.To(true), Parent: RootQueue},
		}
		if up, ok := parentOf[name]; ok {
			q.Spec.Parent = PoolQueueName(up)
		}
		var deserved, guarantee, capability int64
		capped := false
		for _, k := range kids {
			deserved += k.Spec.Deserved.Name(kube.ResourceGPU, "").Value()
			guarantee += k.Spec.Guarantee.Resource.Name(kube.ResourceGPU, "").Value()
			if c, ok := k.Spec.Capability[kube.ResourceGPU]; ok {
				capped, capability = true, max(capability, c.Value())
			}
		}
		q.Spec.Deserved = gpus(deserved)
		if guarantee > 0 {
			q.Spec.Guarantee = scheduling.Guarantee{Resource: gpus(guarantee)}
		}
		if capped {
			q.Spec.Capability = gpus(max(capability, clusterGPUs))
		}
		queues[name] = q
		return q
	}
	for name := range volcanoPools {
		build(name)
	}
	return queues, problems
}

// inCycle says whether following spec.parent up from the pool comes back to it.
func inCycle(name string, pools map[string]*chamber.GPUPool) bool {
	up := pools[name].Spec.Parent
	for range len(pools) {
		p := pools[up]
		if p == nil {
			return false
		}
		if up == name {
			return true
		}
		up = p.Spec.Parent
	}
	return false
}
