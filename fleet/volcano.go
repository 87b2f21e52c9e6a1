package fleet

import (
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"chamber.dev/chamber/integrations/kube"
)

// podGroupPrefix keeps PodGroups' keys apart from Workloads' in the model's
// workloads: no object name has a slash.
const podGroupPrefix = "podgroup/"

// SetPodGroup records a Volcano PodGroup as a workload of its namespace's team, in
// the priority tier of its PriorityClass: it waits while Pending or Inqueue (enqueued
// but not yet placed), for the GPUs its minResources ask. Its wait is not observed
// (chamber_workload_queue_wait_seconds is Kueue's quota reservation).
func (m *Model) SetPodGroup(pg *scheduling.PodGroup) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.workloadRecord(objKey{pg.Namespace, podGroupPrefix + pg.Name}, pg.UID)
	m.setTier(w, pg.Spec.PriorityClassName)
	phase := pg.Status.Phase
	w.pending = pg.DeletionTimestamp == nil && (phase == "" || phase == scheduling.PodGroupPending || phase == scheduling.PodGroupInqueue)
	w.gpus = 0
	if pg.Spec.MinResources != nil {
		if q, ok := (*pg.Spec.MinResources)[kube.ResourceGPU]; ok {
			w.gpus = q.Value()
		}
	}
	w.teamGen = 0
}

// DeletePodGroup forgets a PodGroup.
func (m *Model) DeletePodGroup(namespace, name string) {
	m.DeleteWorkload(namespace, podGroupPrefix+name)
}
