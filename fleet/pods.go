package fleet

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"chamber.dev/chamber/integrations/kube"
)

// pod is a GPU pod bound to a node and not finished: it holds gpus of the node's GPUs.
type pod struct {
	key  objKey
	uid  types.UID
	node string
	gpus int
	// owner is the controller's UID (a Job's), which its Kueue Workload also names
	// as owner.
	owner types.UID
	// workload is the Workload's name when Kueue put it on the pod (it does with
	// topology-aware scheduling on, its default since v0.14).
	workload         string
	created, started time.Time

	// Cached lookups: its Workload while wlGen is the model's workloadGen, its
	// namespace's team while teamGen is the model's teamGen.
	wl      *workload
	wlGen   uint64
	team    string
	teamGen uint64
}

// SetPod records a pod. Only pods that request GPUs, are bound to a node and have
// not finished are kept: the others hold no GPU. A pod update that changes neither
// its node nor its GPUs costs a map lookup.
func (m *Model) SetPod(obj *corev1.Pod) {
	key := objKey{obj.Namespace, obj.Name}
	gpus := int(kube.PodGPUs(&obj.Spec))
	active := gpus > 0 && obj.Spec.NodeName != "" &&
		obj.Status.Phase != corev1.PodSucceeded && obj.Status.Phase != corev1.PodFailed

	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	p := m.pods[key]
	if p != nil && (!active || p.uid != obj.UID || p.node != obj.Spec.NodeName || p.gpus != gpus) {
		m.removePod(p, now)
		p = nil
	}
	if !active {
		return
	}
	if p == nil {
		p = &pod{key: key, uid: obj.UID, node: obj.Spec.NodeName, gpus: gpus}
		m.pods[key] = p
		p.update(obj)
		n := m.nodeEntry(p.node)
		n.pods = append(n.pods, p)
		m.assign(n, now)
		return
	}
	p.update(obj)
}

func (p *pod) update(obj *corev1.Pod) {
	p.created = obj.CreationTimestamp.Time
	p.started = time.Time{}
	if obj.Status.StartTime != nil {
		p.started = obj.Status.StartTime.Time
	}
	var owner types.UID
	if ref := metav1.GetControllerOf(obj); ref != nil {
		owner = ref.UID
	}
	if wl := obj.Annotations[kueue.WorkloadAnnotation]; wl != p.workload || owner != p.owner {
		p.workload, p.owner = wl, owner
		p.wlGen = 0
	}
}

// DeletePod releases the pod's GPUs.
func (m *Model) DeletePod(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pods[objKey{namespace, name}]; p != nil {
		m.removePod(p, m.clock.Now())
	}
}

func (m *Model) removePod(p *pod, now time.Time) {
	delete(m.pods, p.key)
	n := m.nodes[p.node]
	if n == nil {
		return
	}
	n.pods = slices.DeleteFunc(n.pods, func(q *pod) bool { return q == p })
	m.assign(n, now)
	m.dropIfEmpty(n)
}
