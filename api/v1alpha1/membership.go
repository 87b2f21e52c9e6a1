package v1alpha1

import (
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// Which pool a node belongs to, decided once for every reader (the pool controller's
// capacity, fault isolation's policy and circuit breaker, the fleet's metrics): a node
// belongs to one pool at most. Of the pools whose nodeLabels it has all of, the most
// specific wins (the most labels: a child pool selecting a rack over its parent
// selecting every GPU node), then the first by name. So no GPU counts in two pools'
// capacity, and a fault on a rack's node is handled by the rack's policy.

// Selects reports whether a pool with these nodeLabels selects a node with these
// labels: the node has every one of them. Empty nodeLabels select every node.
func Selects(poolLabels, nodeLabels map[string]string) bool {
	return labels.SelectorFromSet(poolLabels).Matches(labels.Set(nodeLabels))
}

// TakesOver reports whether pool a (its name and nodeLabels) takes a node that pool b
// selects too: it has more labels, or as many and comes first by name.
func TakesOver(aName string, aLabels map[string]string, bName string, bLabels map[string]string) bool {
	if len(aLabels) != len(bLabels) {
		return len(aLabels) > len(bLabels)
	}
	return aName < bName
}

// PoolOf is the pool, of pools, that a node with these labels belongs to; nil when no
// pool selects it.
func PoolOf(nodeLabels map[string]string, pools []GPUPool) *GPUPool {
	var best *GPUPool
	for i := range pools {
		p := &pools[i]
		if Selects(p.Spec.NodeLabels, nodeLabels) &&
			(best == nil || TakesOver(p.Name, p.Spec.NodeLabels, best.Name, best.Spec.NodeLabels)) {
			best = p
		}
	}
	return best
}

// TeamOfClusterQueue is the team, of teams, whose ClusterQueue clusterQueue is: the one
// whose status names it, else the one that adopts it (spec.clusterQueue) or is named
// after it (before the team's status is written); nil for a ClusterQueue of no team.
func TeamOfClusterQueue(teams []Team, clusterQueue string) *Team {
	if clusterQueue == "" {
		return nil
	}
	for i := range teams {
		if teams[i].Status.ClusterQueue == clusterQueue {
			return &teams[i]
		}
	}
	for i := range teams {
		t := &teams[i]
		if t.Spec.ClusterQueue == clusterQueue || (t.Spec.ClusterQueue == "" && t.Name == clusterQueue) {
			return t
		}
	}
	return nil
}

// TeamOfNamespace is the team, of teams, whose spec.namespaces holds namespace: where
// two claim it, the older (then the first by name), as the Team controller decides;
// nil for a namespace of no team.
func TeamOfNamespace(teams []Team, namespace string) *Team {
	var owner *Team
	for i := range teams {
		t := &teams[i]
		if !slices.Contains(t.Spec.Namespaces, namespace) {
			continue
		}
		if owner == nil || t.CreationTimestamp.Before(&owner.CreationTimestamp) ||
			(t.CreationTimestamp.Equal(&owner.CreationTimestamp) && t.Name < owner.Name) {
			owner = t
		}
	}
	return owner
}
