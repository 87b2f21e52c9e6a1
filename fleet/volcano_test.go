package fleet_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
	"chamber.dev/chamber/integrations/kube"
)

// A Volcano PodGroup waiting to be placed (Pending or Inqueue) is in its namespace's
// team's queue, in its PriorityClass's tier, for the GPUs its minResources ask; once
// running, or deleted, it is not.
func TestPodGroupsAreTheirTeamsQueue(t *testing.T) {
	m := newModel(clocktesting.NewFakeClock(start))
	m.SetTeam(ft.MakeTeam("vision", "main", start, "vision"))
	podGroup := func(name string, phase scheduling.PodGroupPhase, tier string, gpus int64) *scheduling.PodGroup {
		min := corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}
		return &scheduling.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "vision", Name: name, UID: types.UID("uid-" + name)},
			Spec:   scheduling.PodGroupSpec{MinResources: &min, PriorityClassName: tier},
			Status: scheduling.PodGroupStatus{Phase: phase}}
	}
	m.SetPodGroup(podGroup("pending", scheduling.PodGroupPending, "production", 16))
	m.SetPodGroup(podGroup("inqueue", scheduling.PodGroupInqueue, "", 8))
	m.SetPodGroup(podGroup("running", scheduling.PodGroupRunning, "", 4))
	m.SetPodGroup(podGroup("started", scheduling.PodGroupPending, "", 2))
	m.SetPodGroup(podGroup("started", scheduling.PodGroupRunning, "", 2)) // placed since
	m.SetPodGroup(podGroup("gone", scheduling.PodGroupPending, "", 1))
	m.DeletePodGroup("vision", "gone")

	want := []fleet.PendingWorkloads{{Team: "vision", Tier: "", Count: 1, GPUs: 8}, {Team: "vision", Tier: "production", Count: 1, GPUs: 16}}
	if diff := cmp.Diff(want, m.Snapshot().Pending); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
}
