// Package fleettest builds the objects the fleet model reads, for tests and
// benchmarks, in the manner of Kueue's wrappers: MakePod("ns", "p", 2).On("n1", t).Obj().
package fleettest

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// GPU models as GPU feature discovery labels them.
const (
	H100 = "NVIDIA-H100-80GB-HBM3"
	A100 = "NVIDIA-A100-SXM4-80GB"
)

func gpus(n int) corev1.ResourceList {
	return corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(int64(n), resource.DecimalSI)}
}

// NodeWrapper builds a Node.
type NodeWrapper struct{ corev1.Node }

// MakeNode is a node with n GPUs labelled H100.
func MakeNode(name string, n int) *NodeWrapper {
	return &NodeWrapper{corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{chamber.DefaultProductLabel: H100}},
		Status:     corev1.NodeStatus{Capacity: gpus(n), Allocatable: gpus(n)},
	}}
}

// Label sets a label.
func (n *NodeWrapper) Label(k, v string) *NodeWrapper { n.Labels[k] = v; return n }

// ProviderID sets spec.providerID (aws:///us-east-1a/i-0123, gce://..., azure://...).
func (n *NodeWrapper) ProviderID(id string) *NodeWrapper { n.Spec.ProviderID = id; return n }

// Cordon marks the node unschedulable.
func (n *NodeWrapper) Cordon() *NodeWrapper { n.Spec.Unschedulable = true; return n }

// Taint adds a NoSchedule taint.
func (n *NodeWrapper) Taint(key string) *NodeWrapper {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	return n
}

// Annotate sets an annotation.
func (n *NodeWrapper) Annotate(k, v string) *NodeWrapper {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[k] = v
	return n
}

// Obj returns the Node.
func (n *NodeWrapper) Obj() *corev1.Node { return &n.Node }

// PodWrapper builds a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod is a pending pod whose one container has a limit of n GPUs (none when 0).
func MakePod(ns, name string, n int) *PodWrapper {
	c := corev1.Container{Name: "main"}
	if n > 0 {
		c.Resources.Limits = gpus(n)
	}
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}}
}

// On binds the pod to a node and runs it, started at t.
func (p *PodWrapper) On(node string, t time.Time) *PodWrapper {
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = ptr.To(metav1.NewTime(t))
	return p
}

// Phase sets the pod's phase.
func (p *PodWrapper) Phase(phase corev1.PodPhase) *PodWrapper { p.Status.Phase = phase; return p }

// OwnedBy makes a Job with that UID the pod's controller.
func (p *PodWrapper) OwnedBy(uid types.UID) *PodWrapper {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "job", UID: uid, Controller: ptr.To(true)}}
	return p
}

// Workload sets the annotation Kueue puts on the pods of an admitted Workload.
func (p *PodWrapper) Workload(name string) *PodWrapper {
	p.Annotations = map[string]string{kueue.WorkloadAnnotation: name}
	return p
}

// Obj returns the Pod.
func (p *PodWrapper) Obj() *corev1.Pod { return &p.Pod }

// GPUNodeWrapper builds a GPUNode as the node agent writes it.
type GPUNodeWrapper struct{ chamber.GPUNode }

// MakeGPUNode reports n healthy H100 GPUs without utilization or pods.
func MakeGPUNode(name string, n int) *GPUNodeWrapper {
	g := &GPUNodeWrapper{chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	for i := range n {
		g.Status.GPUs = append(g.Status.GPUs, chamber.GPUStatus{
			Index: int32(i), UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: "NVIDIA H100 80GB HBM3", Health: chamber.GPUHealthy,
		})
	}
	return g
}

// Health sets GPU i's health.
func (g *GPUNodeWrapper) Health(i int, h chamber.GPUHealth) *GPUNodeWrapper {
	g.Status.GPUs[i].Health = h
	return g
}

// Util sets GPU i's utilization mean over a window.
func (g *GPUNodeWrapper) Util(i int, percent int32, window time.Duration) *GPUNodeWrapper {
	g.Status.GPUs[i].Utilization = &chamber.GPUUtilization{GPUPercent: percent, WindowSeconds: int32(window / time.Second)}
	return g
}

// UtilAll sets every GPU's utilization.
func (g *GPUNodeWrapper) UtilAll(percent int32, window time.Duration) *GPUNodeWrapper {
	for i := range g.Status.GPUs {
		g.Util(i, percent, window)
	}
	return g
}

// Heartbeat sets when the agent wrote the status and its heartbeat interval.
func (g *GPUNodeWrapper) Heartbeat(t time.Time, interval time.Duration) *GPUNodeWrapper {
	g.Status.LastHeartbeatTime = &metav1.Time{Time: t}
	g.Status.HeartbeatSeconds = int32(interval / time.Second)
	return g
}

// Pod says which pod holds GPU i, as the agent learns from the kubelet.
func (g *GPUNodeWrapper) Pod(i int, ns, name string) *GPUNodeWrapper {
	g.Status.GPUs[i].Pod = &chamber.PodReference{Namespace: ns, Name: name}
	return g
}

// Fault marks GPU i Unhealthy with an active fault of that reason.
func (g *GPUNodeWrapper) Fault(i int, reason string) *GPUNodeWrapper {
	g.Status.GPUs[i].Health = chamber.GPUUnhealthy
	g.Status.GPUs[i].Faults = append(g.Status.GPUs[i].Faults, chamber.GPUFault{Reason: reason, Severity: chamber.GPUUnhealthy})
	return g
}

// Obj returns the GPUNode.
func (g *GPUNodeWrapper) Obj() *chamber.GPUNode { return &g.GPUNode }

// WorkloadWrapper builds a Kueue Workload.
type WorkloadWrapper struct{ kueue.Workload }

// MakeWorkload is a workload in the LocalQueue "default", created at created.
func MakeWorkload(ns, name string, created time.Time) *WorkloadWrapper {
	return &WorkloadWrapper{kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("wl-" + ns + "/" + name), CreationTimestamp: metav1.NewTime(created)},
		Spec:       kueue.WorkloadSpec{QueueName: "default"},
	}}
}

// OwnedBy makes a Job with that UID the workload's controller.
func (w *WorkloadWrapper) OwnedBy(uid types.UID) *WorkloadWrapper {
	w.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "job", UID: uid, Controller: ptr.To(true)}}
	return w
}

// Tier sets the WorkloadPriorityClass.
func (w *WorkloadWrapper) Tier(name string) *WorkloadWrapper {
	w.Spec.PriorityClassRef = kueue.NewWorkloadPriorityClassRef(name)
	return w
}

// Queue sets the LocalQueue.
func (w *WorkloadWrapper) Queue(name string) *WorkloadWrapper {
	w.Spec.QueueName = kueue.LocalQueueName(name)
	return w
}

// Reserved gives the workload quota in a ClusterQueue at t.
func (w *WorkloadWrapper) Reserved(cq string, t time.Time) *WorkloadWrapper {
	w.Status.Admission = &kueue.Admission{ClusterQueue: kueue.ClusterQueueReference(cq)}
	return w.Condition(kueue.WorkloadQuotaReserved, metav1.ConditionTrue, t)
}

// Condition adds a condition that changed at t.
func (w *WorkloadWrapper) Condition(typ string, status metav1.ConditionStatus, t time.Time) *WorkloadWrapper {
	w.Status.Conditions = append(w.Status.Conditions, metav1.Condition{Type: typ, Status: status, LastTransitionTime: metav1.NewTime(t), Reason: "Test"})
	return w
}

// PodSet adds a pod set of count pods asking for gpus GPUs each.
func (w *WorkloadWrapper) PodSet(count int32, gpus int64) *WorkloadWrapper {
	w.Spec.PodSets = append(w.Spec.PodSets, kueue.PodSet{
		Name:  kueue.NewPodSetReference(fmt.Sprintf("ps%d", len(w.Spec.PodSets))),
		Count: count,
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "main",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}},
		}}}},
	})
	return w
}

// Inactive deactivates the workload.
func (w *WorkloadWrapper) Inactive() *WorkloadWrapper { w.Spec.Active = ptr.To(false); return w }

// Obj returns the Workload.
func (w *WorkloadWrapper) Obj() *kueue.Workload { return &w.Workload }

// ClusterQueueWrapper builds a Kueue ClusterQueue with one GPU resource group.
type ClusterQueueWrapper struct{ kueue.ClusterQueue }

// MakeClusterQueue is a ClusterQueue in a cohort ("" for none).
func MakeClusterQueue(name, cohort string) *ClusterQueueWrapper {
	return &ClusterQueueWrapper{kueue.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: kueue.ClusterQueueSpec{CohortName: kueue.CohortReference(cohort),
			ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{kube.ResourceGPU}}}},
	}}
}

// Quota adds a flavor with a nominal GPU quota and, when lending >= 0, a lending limit.
func (q *ClusterQueueWrapper) Quota(flavor string, nominal, lending int64) *ClusterQueueWrapper {
	r := kueue.ResourceQuota{Name: kube.ResourceGPU, NominalQuota: *resource.NewQuantity(nominal, resource.DecimalSI)}
	if lending >= 0 {
		r.LendingLimit = resource.NewQuantity(lending, resource.DecimalSI)
	}
	q.Spec.ResourceGroups[0].Flavors = append(q.Spec.ResourceGroups[0].Flavors,
		kueue.FlavorQuotas{Name: kueue.ResourceFlavorReference(flavor), Resources: []kueue.ResourceQuota{r}})
	return q
}

// Usage sets the admitted GPUs of a flavor, of which borrowed are above quota.
func (q *ClusterQueueWrapper) Usage(flavor string, total, borrowed int64) *ClusterQueueWrapper {
	q.Status.FlavorsUsage = append(q.Status.FlavorsUsage, kueue.FlavorUsage{
		Name: kueue.ResourceFlavorReference(flavor),
		Resources: []kueue.ResourceUsage{{Name: kube.ResourceGPU,
			Total: *resource.NewQuantity(total, resource.DecimalSI), Borrowed: *resource.NewQuantity(borrowed, resource.DecimalSI)}},
	})
	return q
}

// Obj returns the ClusterQueue.
func (q *ClusterQueueWrapper) Obj() *kueue.ClusterQueue { return &q.ClusterQueue }

// MakePool is a GPUPool selecting nodeLabels, with prices per GPU-hour by model.
func MakePool(name string, nodeLabels map[string]string, prices map[string]string) *chamber.GPUPool {
	p := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.GPUPoolSpec{NodeLabels: nodeLabels}}
	for model, price := range prices {
		p.Spec.Prices = append(p.Spec.Prices, chamber.GPUPrice{Model: model, PerGPUHour: price})
	}
	return p
}

// MakeTeam is a Team of a pool with its namespaces, created at created.
func MakeTeam(name, pool string, created time.Time, namespaces ...string) *chamber.Team {
	return &chamber.Team{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       chamber.TeamSpec{Pool: pool, Namespaces: namespaces},
	}
}

// MakeLocalQueue is a LocalQueue feeding a ClusterQueue.
func MakeLocalQueue(ns, name, cq string) *kueue.LocalQueue {
	return &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(cq)}}
}
