// Package kube is the layer under both scheduler adapters (integrations/kueue and
// integrations/volcano): what Chamber knows of Kubernetes' own objects whichever
// scheduler queues the jobs. The GPU resource and how many GPUs a pod asks for; when
// a node takes new GPU work; which objects are Chamber's and how it writes them (merge
// patches of annotations, nodes read-modified-written under an optimistic lock,
// shortened names); the priority tiers; the mark of an interactive workload; and the
// date on an eviction request. It imports no scheduler's API.
package kube
