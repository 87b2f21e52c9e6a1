package isolation

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// heartbeat is an agent's report of 8 healthy GPUs at heartbeat rv, each at util%.
func heartbeat(name, rv string, util int32) *chamber.GPUNode {
	gn := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	gn.Status.Health = chamber.GPUHealthy
	gn.Status.LastHeartbeatTime = &metav1.Time{Time: time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC).Add(time.Duration(len(rv)) * 30 * time.Second)}
	for i := range int32(8) {
		gn.Status.GPUs = append(gn.Status.GPUs, chamber.GPUStatus{Index: i, Health: chamber.GPUHealthy,
			Utilization: &chamber.GPUUtilization{GPUPercent: util}})
	}
	return gn
}

func failing(gn *chamber.GPUNode, gpu int) *chamber.GPUNode {
	out := gn.DeepCopy()
	out.ResourceVersion += "f"
	out.Status.Health = chamber.GPUUnhealthy
	out.Status.GPUs[gpu].Health = chamber.GPUUnhealthy
	out.Status.GPUs[gpu].Faults = []chamber.GPUFault{{Reason: "XID79", Severity: chamber.GPUUnhealthy, Action: "RebootNode", Count: 1}}
	return out
}

// A fault reported while heartbeats of a thousand nodes wait in the queue is
// reconciled first: the heartbeats, which say nothing new of the GPUs' health, wait
// behind it.
func TestFaultReportGoesAheadOfHeartbeats(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("isolation-test")
	defer q.ShutDown()
	ctx := context.Background()
	for _, name := range []string{"beat-1", "beat-2", "beat-3"} {
		agentReports.Update(ctx, event.UpdateEvent{ObjectOld: heartbeat(name, "1", 40), ObjectNew: heartbeat(name, "12", 45)}, q)
	}
	healthy := heartbeat("faulty", "1", 40)
	agentReports.Update(ctx, event.UpdateEvent{ObjectOld: healthy, ObjectNew: failing(healthy, 3)}, q)

	var order []string
	for q.Len() > 0 {
		req, _ := q.Get()
		order = append(order, req.Name)
		q.Done(req)
	}
	if len(order) != 4 || order[0] != "faulty" {
		t.Fatalf("reconcile order %v, want the faulty node first and every heartbeat after it", order)
	}
}

func TestHealthChanged(t *testing.T) {
	base := heartbeat("n", "1", 40)
	withPod := base.DeepCopy()
	withPod.Status.GPUs[2].Pod = &chamber.PodReference{Namespace: "team-a", Name: "train-0"}
	again := failing(base, 3)
	again.Status.GPUs[3].Faults[0].Count = 2
	for _, tc := range []struct {
		name     string
		old, cur *chamber.GPUNode
		want     bool
	}{
		{"another heartbeat, other utilization", base, heartbeat("n", "12", 90), false},
		{"a GPU fails", base, failing(base, 3), true},
		{"the fault is seen again", failing(base, 3), again, true},
		{"a pod lands on a GPU", base, withPod, true},
		{"the agent reads DCGM instead", base, func() *chamber.GPUNode { c := base.DeepCopy(); c.Status.Source = chamber.SourceDCGM; return c }(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := healthChanged(tc.old, tc.cur); got != tc.want {
				t.Errorf("healthChanged = %t, want %t", got, tc.want)
			}
		})
	}
}
