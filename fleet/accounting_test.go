package fleet_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

var approx = cmpopts.EquateApprox(0, 1e-9)

func newModel(clock *clocktesting.FakeClock) *fleet.Model {
	return fleet.New(fleet.Options{IdleThresholdPercent: 5, IdleWindow: 5 * time.Minute, QueueWaitBuckets: []float64{10, 60}, Clock: clock})
}

// GPU-seconds, idle GPU-seconds and cost are exact: a GPU's state between two events
// is known, including the instant it turns idle, and a price change applies from the
// moment it is seen.
func TestUsage(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	m.SetPool(ft.MakePool("main", nil, map[string]string{ft.H100: "3.6"})) // 0.001 per GPU-second
	m.SetTeam(ft.MakeTeam("vision", "main", start, "vision"))
	m.SetNode(ft.MakeNode("n1", 4).Obj())
	m.SetPod(ft.MakePod("vision", "a", 2).On("n1", start).Obj())
	m.SetPod(ft.MakePod("other", "b", 1).On("n1", start).Obj())
	m.SetGPUNode(ft.MakeGPUNode("n1", 4).UtilAll(0, 0).Util(2, 90, 0).Obj())
	clock.Step(10 * time.Minute) // vision's GPUs turned idle at 5m
	m.SetPool(ft.MakePool("main", nil, map[string]string{ft.H100: "7.2"}))
	clock.Step(10 * time.Minute)
	snap := m.Snapshot()

	wantUsage := []fleet.Usage{
		{Team: "", Model: ft.H100, GPUSeconds: 1200, UsedGPUSeconds: 0.9 * 1200, MeasuredGPUSeconds: 1200,
			Cost: 600*0.001 + 600*0.002},
		{Team: "vision", Model: ft.H100, GPUSeconds: 2400, IdleGPUSeconds: 2 * (300 + 600), MeasuredGPUSeconds: 2400,
			Cost: 1200*0.001 + 1200*0.002, IdleCost: 600*0.001 + 1200*0.002},
	}
	if diff := cmp.Diff(wantUsage, snap.Usage, approx); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	var seconds fleet.Seconds
	seconds[fleet.Free], seconds[fleet.Busy], seconds[fleet.Idle] = 1200, 1200+600, 1800
	var counts fleet.Counts
	counts[fleet.Free], counts[fleet.Busy], counts[fleet.Idle] = 1, 1, 2
	want := []fleet.PoolModelSummary{{Pool: "main", Model: ft.H100, GPUs: counts, UtilizationSum: 90, UtilizationReported: 4, Seconds: seconds}}
	if diff := cmp.Diff(want, snap.PoolModels, approx); diff != "" {
		t.Errorf("pool models (-want +got):\n%s", diff)
	}
	if got, ok := snap.Efficiency(); !ok || got != 0.25 {
		t.Errorf("efficiency: got %v, %v; want 0.25 (1 busy of 4 healthy)", got, ok)
	}
	for _, g := range snap.GPUs {
		if g.State == fleet.Idle && !g.IdleSince.Equal(at(5*time.Minute)) {
			t.Errorf("GPU %d idle since %s, want %s", g.Index, g.IdleSince, at(5*time.Minute))
		}
	}

	// Node removal: the counters keep what the node ran up, and stop.
	m.DeleteNode("n1")
	clock.Step(time.Hour)
	if diff := cmp.Diff(wantUsage, m.Snapshot().Usage, approx); diff != "" {
		t.Errorf("usage after node removal (-want +got):\n%s", diff)
	}
}

// A workload's usage adds up its pods' across evictions, weighs each GPU-second by its
// utilization while the agent reports one, and stays until the Workload is deleted.
func TestWorkloadUsage(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	m.SetPool(ft.MakePool("main", nil, map[string]string{ft.H100: "3.6"})) // 0.001 per GPU-second
	m.SetNode(ft.MakeNode("n1", 4).Obj())
	m.SetWorkload(ft.MakeWorkload("ns", "train", start).OwnedBy("job-1").PodSet(1, 2).Reserved("cq", start).Obj())
	m.SetPod(ft.MakePod("ns", "train-a", 2).OwnedBy("job-1").On("n1", start).Obj())
	m.SetPod(ft.MakePod("ns", "other", 2).On("n1", start).Obj())
	m.SetGPUNode(ft.MakeGPUNode("n1", 4).Pod(0, "ns", "train-a").Pod(1, "ns", "train-a").
		Util(0, 60, time.Minute).Util(1, 20, time.Minute).Obj())
	clock.Step(10 * time.Minute)
	// Evicted; the second pod runs without a utilization report.
	m.DeletePod("ns", "train-a")
	m.SetGPUNode(ft.MakeGPUNode("n1", 4).Obj())
	clock.Step(5 * time.Minute)
	m.SetPod(ft.MakePod("ns", "train-b", 2).OwnedBy("job-1").On("n1", at(15*time.Minute)).Obj())
	clock.Step(5 * time.Minute)

	got, ok := m.WorkloadUsage("ns", "train")
	want := fleet.WorkloadUsage{Namespace: "ns", Name: "train",
		GPUSeconds: 2*600 + 2*300, UsedGPUSeconds: 0.6*600 + 0.2*600, MeasuredGPUSeconds: 2 * 600,
		Cost: (2*600 + 2*300) * 0.001}
	if diff := cmp.Diff(want, got, approx); !ok || diff != "" {
		t.Errorf("workload usage (-want +got), found %v:\n%s", ok, diff)
	}
	if pct, ok := got.MeanUtilizationPercent(); !ok || pct < 39.999 || pct > 40.001 {
		t.Errorf("mean utilization: got %v, %v; want 40%% over the measured GPU-seconds", pct, ok)
	}

	m.DeleteWorkload("ns", "train")
	if _, ok := m.WorkloadUsage("ns", "train"); ok {
		t.Error("a deleted Workload still has usage")
	}
}

// Idle time stops when the agent goes silent, chamber.SilentAfterHeartbeats heartbeats
// after the model saw its report.
func TestStaleReportUsage(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	m.SetNode(ft.MakeNode("n1", 2).Obj())
	m.SetPod(ft.MakePod("ns", "a", 2).On("n1", at(-time.Hour)).Obj())
	m.SetGPUNode(ft.MakeGPUNode("n1", 2).UtilAll(0, 5*time.Minute).Heartbeat(start, 30*time.Second).Obj())
	clock.Step(10 * time.Minute)
	want := []fleet.Usage{{Team: "", Model: ft.H100, GPUSeconds: 2 * 600, IdleGPUSeconds: 2 * 90, MeasuredGPUSeconds: 2 * 90}}
	if diff := cmp.Diff(want, m.Snapshot().Usage, approx); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// Whose GPUs are whose: the Workload's ClusterQueue's team, else the namespace's
// (the older team's when two claim it); quota, borrowed and lent from the queues.
func TestTeams(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	flavor := chamberkueue.FlavorName("main", ft.H100)
	pool := ft.MakePool("main", map[string]string{"pool": "main"}, nil)
	pool.Status.Models = []chamber.PoolModel{{Model: ft.H100, Flavor: flavor}}
	m.SetPool(pool)
	m.SetTeam(ft.MakeTeam("a", "main", start, "a"))
	m.SetTeam(ft.MakeTeam("b", "main", start, "b"))
	m.SetTeam(ft.MakeTeam("c", "main", start, "c"))
	late := ft.MakeTeam("late", "main", at(time.Hour), "a") // a's namespace stays a's
	m.SetTeam(late)
	adopted := ft.MakeTeam("d", "main", start)
	adopted.Spec.ClusterQueue = "legacy"
	m.SetTeam(adopted)
	unqueued := ft.MakeTeam("e", "main", start)
	unqueued.Spec.Quotas = []chamber.TeamQuota{{Model: ft.H100, GPUs: 2}}
	m.SetTeam(unqueued)

	// b borrows 6; a could lend 8 and c 2 (its lending limit): a lends at most 6, c 2.
	m.SetClusterQueue(ft.MakeClusterQueue("a", "main").Quota(flavor, 8, -1).Obj())
	m.SetClusterQueue(ft.MakeClusterQueue("b", "main").Quota(flavor, 8, -1).Usage(flavor, 14, 6).Obj())
	m.SetClusterQueue(ft.MakeClusterQueue("c", "main").Quota(flavor, 8, 2).Usage(flavor, 4, 0).Obj())
	m.SetClusterQueue(ft.MakeClusterQueue("legacy", "").Quota("legacy-flavor", 4, -1).Usage("legacy-flavor", 1, 0).Obj())

	m.SetNode(ft.MakeNode("n1", 8).Label("pool", "main").Obj())
	m.SetPod(ft.MakePod("a", "p1", 1).On("n1", start).Obj())
	m.SetWorkload(ft.MakeWorkload("b", "wl-b", start).OwnedBy("job-b").Tier("production").Reserved("b", start).Obj())
	m.SetPod(ft.MakePod("b", "p2", 2).On("n1", start).OwnedBy("job-b").Obj())
	m.SetWorkload(ft.MakeWorkload("shared", "wl-d", start).Reserved("legacy", start).Obj())
	m.SetPod(ft.MakePod("shared", "p3", 1).On("n1", start).Workload("wl-d").Obj())
	m.SetPod(ft.MakePod("nobody", "p4", 1).On("n1", start).Obj())
	snap := m.Snapshot()

	want := []fleet.TeamSummary{
		{Team: "", Models: []fleet.TeamModel{{Model: ft.H100, Allocated: 1}}},
		{Team: "a", Pool: "main", Models: []fleet.TeamModel{{Model: ft.H100, Allocated: 1, Quota: 8, Lent: 6}}},
		{Team: "b", Pool: "main", Models: []fleet.TeamModel{{Model: ft.H100, Allocated: 2, Quota: 8, Borrowed: 6}}},
		{Team: "c", Pool: "main", Models: []fleet.TeamModel{{Model: ft.H100, Quota: 8, Lent: 2}}},
		{Team: "d", Pool: "main", Models: []fleet.TeamModel{{Model: ft.H100, Allocated: 1}, {Model: "legacy-flavor", Quota: 4}}},
		{Team: "e", Pool: "main", Models: []fleet.TeamModel{{Model: ft.H100, Quota: 2}}},
		{Team: "late", Pool: "main"},
	}
	if diff := cmp.Diff(want, snap.Teams, approx); diff != "" {
		t.Errorf("teams (-want +got):\n%s", diff)
	}
	wantGPUs := map[string][3]string{ // pod -> team, workload, tier
		"p1": {"a", "", ""}, "p2": {"b", "wl-b", "production"}, "p3": {"d", "wl-d", ""}, "p4": {"", "", ""},
	}
	for _, g := range snap.GPUs {
		if g.PodName == "" {
			continue
		}
		if diff := cmp.Diff(wantGPUs[g.PodName], [3]string{g.Team, g.Workload, g.Tier}); diff != "" {
			t.Errorf("GPU %d of pod %s: team, workload, tier (-want +got):\n%s", g.Index, g.PodName, diff)
		}
	}
}

// A team of a Volcano pool has no ClusterQueue: it borrows what its pods hold beyond
// its quota (its Queue's deserved), and lends its unused quota, within its lending
// limit, to what the pool's teams borrow.
func TestVolcanoTeamsBorrowAndLend(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	pool := ft.MakePool("vc", map[string]string{"pool": "vc"}, nil)
	pool.Spec.Backend = chamber.BackendVolcano
	m.SetPool(pool)
	quota := func(name string, lending *int32) *chamber.Team {
		tm := ft.MakeTeam(name, "vc", start, name)
		tm.Spec.Quotas = []chamber.TeamQuota{{Model: ft.H100, GPUs: 4, LendingLimit: lending}}
		return tm
	}
	m.SetTeam(quota("x", nil))
	m.SetTeam(quota("y", ptr.To[int32](1)))
	m.SetTeam(quota("z", nil))
	m.SetNode(ft.MakeNode("n1", 8).Label("pool", "vc").Obj())
	m.SetNode(ft.MakeNode("n2", 8).Label("pool", "vc").Obj())
	m.SetPod(ft.MakePod("x", "x1", 7).On("n1", start).Obj())
	m.SetPod(ft.MakePod("y", "y1", 1).On("n2", start).Obj())

	// x borrows 3; y could lend 3 but its limit is 1; z lends 3 of its 4.
	want := []fleet.TeamSummary{
		{Team: "x", Pool: "vc", Models: []fleet.TeamModel{{Model: ft.H100, Allocated: 7, Quota: 4, Borrowed: 3}}},
		{Team: "y", Pool: "vc", Models: []fleet.TeamModel{{Model: ft.H100, Allocated: 1, Quota: 4, Lent: 1}}},
		{Team: "z", Pool: "vc", Models: []fleet.TeamModel{{Model: ft.H100, Quota: 4, Lent: 3}}},
	}
	if diff := cmp.Diff(want, m.Snapshot().Teams, approx); diff != "" {
		t.Errorf("teams (-want +got):\n%s", diff)
	}
}

// Queue depth counts active, unfinished workloads without quota, and the GPUs all
// their pods ask for, by the team their LocalQueue leads to; the wait histogram has each reservation once, from creation
// or the last requeue.
func TestQueues(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	m.SetTeam(ft.MakeTeam("a", "main", start, "a"))
	adopted := ft.MakeTeam("d", "main", start)
	adopted.Spec.ClusterQueue = "legacy"
	m.SetTeam(adopted)
	m.SetLocalQueue(ft.MakeLocalQueue("shared", "lq", "legacy"))

	m.SetWorkload(ft.MakeWorkload("a", "pending-prod", start).Tier("production").PodSet(2, 8).Obj())
	m.SetWorkload(ft.MakeWorkload("a", "pending", start).PodSet(1, 1).PodSet(3, 0).Obj())
	m.SetWorkload(ft.MakeWorkload("a", "inactive", start).Inactive().PodSet(1, 4).Obj())
	m.SetWorkload(ft.MakeWorkload("a", "finished", start).Condition(kueue.WorkloadFinished, metav1.ConditionTrue, start).Obj())
	m.SetWorkload(ft.MakeWorkload("shared", "via-local-queue", start).Queue("lq").Obj())
	admitted := ft.MakeWorkload("a", "admitted", start).Tier("production").Reserved("a", at(30*time.Second)).Obj()
	m.SetWorkload(admitted)
	m.SetWorkload(admitted) // seen again: counted once
	m.SetWorkload(ft.MakeWorkload("a", "before-start", at(-time.Hour)).Reserved("a", at(-time.Minute)).Obj())
	m.SetWorkload(ft.MakeWorkload("a", "requeued", at(-time.Hour)).
		Condition(kueue.WorkloadRequeued, metav1.ConditionTrue, at(time.Minute)).Reserved("a", at(2*time.Minute+5*time.Second)).Obj())
	m.SetWorkload(ft.MakeWorkload("a", "deleted", start).Obj())
	m.DeleteWorkload("a", "deleted")
	snap := m.Snapshot()

	wantPending := []fleet.PendingWorkloads{
		{Team: "a", Tier: "", Count: 1, GPUs: 1}, {Team: "a", Tier: "production", Count: 1, GPUs: 16},
		{Team: "d", Tier: "", Count: 1}, {Team: "d", Tier: "production", Count: 0},
	}
	if diff := cmp.Diff(wantPending, snap.Pending); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	wantWaits := []fleet.QueueWait{
		{Team: "a", Tier: "", Buckets: map[float64]uint64{10: 0, 60: 0}, Count: 1, Sum: 65},
		{Team: "a", Tier: "production", Buckets: map[float64]uint64{10: 0, 60: 1}, Count: 1, Sum: 30},
	}
	if diff := cmp.Diff(wantWaits, snap.QueueWaits); diff != "" {
		t.Errorf("queue waits (-want +got):\n%s", diff)
	}
}

// A node belongs to the most specific pool whose labels it has; its model is the
// pool's product label, else NVML's name; the agent's GPUs without a Node count for
// nothing.
func TestPools(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	m.SetPool(ft.MakePool("all", nil, nil))
	m.SetPool(ft.MakePool("rack-1", map[string]string{"rack": "1"}, nil))
	custom := ft.MakePool("custom", map[string]string{"rack": "1", "custom": "yes"}, nil)
	custom.Spec.ProductLabel = "example.com/gpu"
	m.SetPool(custom)
	m.SetNode(ft.MakeNode("plain", 1).Obj())
	m.SetNode(ft.MakeNode("in-rack", 1).Label("rack", "1").Obj())
	m.SetNode(ft.MakeNode("custom", 1).Label("rack", "1").Label("custom", "yes").Label("example.com/gpu", "B200").Obj())
	unlabelled := ft.MakeNode("unlabelled", 1).Obj()
	delete(unlabelled.Labels, chamber.DefaultProductLabel)
	m.SetNode(unlabelled)
	m.SetGPUNode(ft.MakeGPUNode("unlabelled", 1).Obj())

	got := map[string][2]string{}
	for _, n := range m.Snapshot().Nodes {
		got[n.Name] = [2]string{n.Pool, n.Model}
	}
	want := map[string][2]string{
		"plain": {"all", ft.H100}, "in-rack": {"rack-1", ft.H100}, "custom": {"custom", "B200"},
		"unlabelled": {"all", "NVIDIA H100 80GB HBM3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pool and model per node (-want +got):\n%s", diff)
	}

	m.DeletePool("rack-1")
	for _, n := range m.Snapshot().Nodes {
		if n.Name == "in-rack" && n.Pool != "all" {
			t.Errorf("after its pool was deleted, node in-rack is in pool %q, want all", n.Pool)
		}
	}
}

// What idle reclaim gave: the GPU-seconds another team's workload held on the GPUs a
// reclaimed workload left, from when it took them until the reclaimed workload's quota
// was reserved again; the minutes the GPUs sat free count nothing.
func TestHanded(t *testing.T) {
	clock := clocktesting.NewFakeClock(start)
	m := newModel(clock)
	m.SetPool(ft.MakePool("main", nil, map[string]string{ft.H100: "3.6"})) // 0.001 per GPU-second
	m.SetTeam(ft.MakeTeam("a", "main", start, "a"))
	m.SetTeam(ft.MakeTeam("b", "main", start, "b"))
	m.SetNode(ft.MakeNode("n1", 2).Obj())
	notebook := ft.MakeWorkload("a", "notebook", start).OwnedBy("nb").PodSet(1, 2).Reserved("a", start)
	m.SetWorkload(notebook.Obj())
	m.SetPod(ft.MakePod("a", "notebook-0", 2).OwnedBy("nb").On("n1", start).Obj())
	m.SetWorkload(ft.MakeWorkload("b", "train", start).OwnedBy("tr").PodSet(1, 2).Obj())

	clock.Step(10 * time.Minute)
	reclaimed := notebook.Obj().DeepCopy()
	reclaimed.Annotations = map[string]string{chamber.AnnotationIdleReclaimedAt: at(10 * time.Minute).Format(time.RFC3339)}
	m.SetWorkload(reclaimed)
	clock.Step(time.Minute)
	m.DeletePod("a", "notebook-0")
	clock.Step(4 * time.Minute) // free: nothing handed yet
	if got := m.Snapshot().Handed; len(got) != 0 {
		t.Errorf("handed while the GPUs sat free: %+v", got)
	}
	m.SetWorkload(ft.MakeWorkload("b", "train", start).OwnedBy("tr").PodSet(1, 2).Reserved("b", at(15*time.Minute)).Obj())
	m.SetPod(ft.MakePod("b", "train-0", 2).OwnedBy("tr").On("n1", at(15*time.Minute)).Obj())
	clock.Step(30 * time.Minute)
	// The notebook's quota is reserved again (its pods wait for room elsewhere).
	back := reclaimed.DeepCopy()
	back.Annotations = nil
	back.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(45 * time.Minute))
	m.SetWorkload(back)
	clock.Step(15 * time.Minute)

	want := []fleet.Handed{{Team: "b", FromTeam: "a", Model: ft.H100, GPUSeconds: 2 * 30 * 60, Cost: 2 * 30 * 60 * 0.001, Workloads: 1}}
	if diff := cmp.Diff(want, m.Snapshot().Handed, approx); diff != "" {
		t.Errorf("handed (-want +got):\n%s", diff)
	}
}
