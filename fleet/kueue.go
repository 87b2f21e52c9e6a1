package fleet

import (
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// workload is what the fleet needs of a Kueue Workload.
type workload struct {
	key          objKey
	uid          types.UID
	owner        types.UID
	queue        string // its LocalQueue
	clusterQueue string // from its admission
	tier         string
	// pending: active, not finished, and holding no quota: waiting in its queue.
	pending bool
	// gpus is what all its pods ask for.
	gpus int64
	// observed is the quota reservation whose wait is in the histogram.
	observed time.Time
	// team caches workloadTeam while teamGen is the model's.
	team    string
	teamGen uint64
	// usage is what its pods ran up (WorkloadUsage).
	usage WorkloadUsage
	// reclaimedAt is idle reclaim's last reclaim of it; away while it has not come
	// back since (Handed). receivers are the workloads that took its GPUs meanwhile.
	reclaimedAt time.Time
	away        bool
	receivers   map[*workload]struct{}
}

// SetWorkload records a Workload: its queue, priority tier, whether it waits, and on
// its first quota reservation seen, its wait in the queue.
func (m *Model) SetWorkload(obj *kueue.Workload) {
	key := objKey{obj.Namespace, obj.Name}
	reserved := apimeta.FindStatusCondition(obj.Status.Conditions, kueue.WorkloadQuotaReserved)
	isReserved := reserved != nil && reserved.Status == metav1.ConditionTrue
	finished := apimeta.IsStatusConditionTrue(obj.Status.Conditions, kueue.WorkloadFinished)
	active := obj.Spec.Active == nil || *obj.Spec.Active

	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.workloadRecord(key, obj.UID)
	var owner types.UID
	if ref := metav1.GetControllerOf(obj); ref != nil {
		owner = ref.UID
	}
	if owner != w.owner {
		if w.owner != "" && m.workloadsByOwner[w.owner] == w {
			delete(m.workloadsByOwner, w.owner)
		}
		w.owner = owner
		m.workloadGen++
	}
	if owner != "" {
		m.workloadsByOwner[owner] = w
	}
	w.queue = string(obj.Spec.QueueName)
	w.clusterQueue = ""
	if obj.Status.Admission != nil {
		w.clusterQueue = string(obj.Status.Admission.ClusterQueue)
	}
	tier := ""
	if ref := obj.Spec.PriorityClassRef; ref != nil {
		tier = ref.Name
	}
	m.setTier(w, tier)
	w.pending = active && !finished && !isReserved
	w.gpus = chamberkueue.WorkloadGPUs(obj)
	w.teamGen = 0 // its queues may have changed

	var reservedAt time.Time
	if isReserved {
		reservedAt = reserved.LastTransitionTime.Time
	}
	m.reclaimed(w, obj.Annotations, reservedAt, finished)

	if isReserved && !reserved.LastTransitionTime.Time.Equal(w.observed) {
		at := reserved.LastTransitionTime.Time
		w.observed = at
		// Reservations from before the model started were counted by the process
		// before it, if by any: counting them again would double them at each restart.
		if !at.Before(m.started.Truncate(time.Second)) {
			m.observeWait(teamTier{m.workloadTeam(w), w.tier}, at.Sub(queuedSince(obj)))
		}
	}
}

// workloadRecord is the model's record of the workload at key with uid, a new one
// where there is none or the one there is of an object deleted since.
func (m *Model) workloadRecord(key objKey, uid types.UID) *workload {
	w := m.workloads[key]
	if w == nil || w.uid != uid {
		if w != nil {
			m.forgetWorkload(w)
		}
		w = &workload{key: key, uid: uid}
		m.workloads[key] = w
		m.workloadGen++
		m.tiers[w.tier]++
	}
	return w
}

// setTier moves the workload to the priority tier.
func (m *Model) setTier(w *workload, tier string) {
	if tier != w.tier {
		m.untier(w)
		w.tier = tier
		m.tiers[tier]++
	}
}

// queuedSince is when the workload last entered its queue: its creation, or its
// last requeue after an eviction.
func queuedSince(obj *kueue.Workload) time.Time {
	since := obj.CreationTimestamp.Time
	if c := apimeta.FindStatusCondition(obj.Status.Conditions, kueue.WorkloadRequeued); c != nil &&
		c.Status == metav1.ConditionTrue && c.LastTransitionTime.After(since) {
		since = c.LastTransitionTime.Time
	}
	return since
}

// DeleteWorkload forgets a Workload.
func (m *Model) DeleteWorkload(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.workloads[objKey{namespace, name}]; w != nil {
		m.forgetWorkload(w)
	}
}

func (m *Model) forgetWorkload(w *workload) {
	m.cameBack(w)
	m.workloadGen++
	m.untier(w)
	delete(m.workloads, w.key)
	if w.owner != "" && m.workloadsByOwner[w.owner] == w {
		delete(m.workloadsByOwner, w.owner)
	}
}

func (m *Model) untier(w *workload) {
	if m.tiers[w.tier]--; m.tiers[w.tier] <= 0 {
		delete(m.tiers, w.tier)
	}
}

// workloadOf is the Workload of a pod: the one Kueue names on it, else the one owned
// by the pod's controller (a Job and its Workload share their owner).
func (m *Model) workloadOf(p *pod) *workload {
	if p.wlGen != m.workloadGen {
		p.wl, p.wlGen = m.findWorkload(p), m.workloadGen
	}
	return p.wl
}

func (m *Model) findWorkload(p *pod) *workload {
	if p.workload != "" {
		if w := m.workloads[objKey{p.key.namespace, p.workload}]; w != nil {
			return w
		}
	}
	if p.owner != "" {
		if w := m.workloadsByOwner[p.owner]; w != nil && w.key.namespace == p.key.namespace {
			return w
		}
	}
	return nil
}

// workloadTeam: the team of the ClusterQueue that admitted it, else of the
// ClusterQueue its LocalQueue points to, else of its namespace.
func (m *Model) workloadTeam(w *workload) string {
	if w.teamGen != m.teamGen {
		w.team, w.teamGen = m.findWorkloadTeam(w), m.teamGen
	}
	return w.team
}

func (m *Model) findWorkloadTeam(w *workload) string {
	if t, ok := m.queueTeam[w.clusterQueue]; ok && w.clusterQueue != "" {
		return t
	}
	if cq, ok := m.localQueues[objKey{w.key.namespace, w.queue}]; ok {
		if t, ok := m.queueTeam[cq]; ok {
			return t
		}
	}
	return m.namespaceTeam[w.key.namespace]
}

// podTeam is the team whose work the pod is: its Workload's, else its namespace's.
func (m *Model) podTeam(p *pod) string {
	if w := m.workloadOf(p); w != nil {
		if t := m.workloadTeam(w); t != "" {
			return t
		}
	}
	if p.teamGen != m.teamGen {
		p.team, p.teamGen = m.namespaceTeam[p.key.namespace], m.teamGen
	}
	return p.team
}

// clusterQueue is a ClusterQueue's GPU quota and usage, by ResourceFlavor.
type clusterQueue struct {
	name   string
	cohort string
	quotas map[string]flavorQuota
	usage  map[string]flavorUsage
}

type flavorQuota struct {
	nominal float64
	// lendingLimit caps what the queue lends; negative when there is no cap.
	lendingLimit float64
}

type flavorUsage struct{ total, borrowed float64 }

// SetClusterQueue records a ClusterQueue's GPU quotas and usage.
func (m *Model) SetClusterQueue(obj *kueue.ClusterQueue) {
	cq := &clusterQueue{name: obj.Name, cohort: string(obj.Spec.CohortName), quotas: map[string]flavorQuota{}, usage: map[string]flavorUsage{}}
	for _, rg := range obj.Spec.ResourceGroups {
		for _, f := range rg.Flavors {
			for _, r := range f.Resources {
				if r.Name != kube.ResourceGPU {
					continue
				}
				q := flavorQuota{nominal: float64(r.NominalQuota.Value()), lendingLimit: -1}
				if r.LendingLimit != nil {
					q.lendingLimit = float64(r.LendingLimit.Value())
				}
				cq.quotas[string(f.Name)] = q
			}
		}
	}
	for _, f := range obj.Status.FlavorsUsage {
		for _, r := range f.Resources {
			if r.Name == kube.ResourceGPU {
				cq.usage[string(f.Name)] = flavorUsage{total: float64(r.Total.Value()), borrowed: float64(r.Borrowed.Value())}
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queues[obj.Name] = cq
}

// DeleteClusterQueue forgets a ClusterQueue.
func (m *Model) DeleteClusterQueue(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.queues, name)
}

// SetLocalQueue records which ClusterQueue a LocalQueue feeds, so a workload that has
// not been admitted yet is counted for the right team.
func (m *Model) SetLocalQueue(obj *kueue.LocalQueue) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.localQueues[objKey{obj.Namespace, obj.Name}] = string(obj.Spec.ClusterQueue)
	m.teamGen++
}

// DeleteLocalQueue forgets a LocalQueue.
func (m *Model) DeleteLocalQueue(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.localQueues, objKey{namespace, name})
	m.teamGen++
}
