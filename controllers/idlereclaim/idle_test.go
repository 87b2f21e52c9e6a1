package idlereclaim

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

var start = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

const h100 = "pool-h100"

func TestResolvePolicy(t *testing.T) {
	defaults := Policy{UtilizationPercent: 5, Window: DefaultWindow, ExemptTiers: []string{"production"}}
	on := func(p Policy) Policy { p.Enabled = true; return p }
	cases := map[string]struct {
		pool, team *chamber.IdleReclaimPolicy
		want       Policy
	}{
		"no policy: off": {want: defaults},
		"pool on, defaults": {
			pool: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true)},
			want: on(defaults),
		},
		"team turns the pool's off": {
			pool: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true)},
			team: &chamber.IdleReclaimPolicy{Enabled: ptr.To(false)},
			want: defaults,
		},
		"team turns it on in a pool without policy": {
			team: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), UtilizationPercent: ptr.To[int32](10)},
			want: Policy{Enabled: true, UtilizationPercent: 10, Window: DefaultWindow, ExemptTiers: []string{"production"}},
		},
		"team's set fields over the pool's": {
			pool: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), UtilizationPercent: ptr.To[int32](20),
				Window: &metav1.Duration{Duration: time.Hour}, ExemptTiers: []string{"production", "standard"}},
			team: &chamber.IdleReclaimPolicy{Window: &metav1.Duration{Duration: 10 * time.Minute}},
			want: Policy{Enabled: true, UtilizationPercent: 20, Window: 10 * time.Minute, ExemptTiers: []string{"production", "standard"}},
		},
		"team exempts no tier": {
			pool: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true)},
			team: &chamber.IdleReclaimPolicy{ExemptTiers: []string{}},
			want: Policy{Enabled: true, UtilizationPercent: 5, Window: DefaultWindow, ExemptTiers: []string{}},
		},
		"the pool ignores opt-outs": {
			pool: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), WorkloadOptOut: chamber.OptOutIgnored},
			want: Policy{Enabled: true, UtilizationPercent: 5, Window: DefaultWindow, ExemptTiers: []string{"production"}, WorkloadOptOut: chamber.OptOutIgnored},
		},
		"negative window ignored": {
			pool: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), Window: &metav1.Duration{Duration: -time.Minute}},
			want: on(defaults),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ResolvePolicy(tc.pool, tc.team)); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
		})
	}
}

// gpuPod is a pod of ns "team-a" holding gpus GPUs, running on node.
func gpuPod(name, node string, gpus int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-pod-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name:      "main",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse(fmt.Sprint(gpus))}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// report is a GPUNode whose agent wrote at hb every 30s; util gives each GPU's
// utilization (-1: no figure), pods the pod named on each GPU ("" none).
func report(node string, hb time.Time, util []int32, pods []string) *chamber.GPUNode {
	gn := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	gn.Status.LastHeartbeatTime = &metav1.Time{Time: hb}
	gn.Status.HeartbeatSeconds = 30
	for i, u := range util {
		g := chamber.GPUStatus{Index: int32(i), Health: chamber.GPUHealthy}
		if u >= 0 {
			g.Utilization = &chamber.GPUUtilization{GPUPercent: u, WindowSeconds: 300}
		}
		if i < len(pods) && pods[i] != "" {
			g.Pod = &chamber.PodReference{Namespace: "team-a", Name: pods[i]}
		}
		gn.Status.GPUs = append(gn.Status.GPUs, g)
	}
	return gn
}

func TestMeasure(t *testing.T) {
	low4 := []int32{0, 1, 2, 3}
	cases := map[string]struct {
		pods     []*corev1.Pod
		nodes    []*chamber.GPUNode
		wantGPUs int64
		wantIdle bool
	}{
		"the agent names the pod's GPUs, all low": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start, []int32{0, 3, 90, 90}, []string{"p", "p", "other", "other"})},
			wantGPUs: 2, wantIdle: true,
		},
		"one of the pod's GPUs at the threshold": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start, []int32{0, 5, 0, 0}, []string{"p", "p"})},
			wantGPUs: 2,
		},
		"no pod named on the node, every GPU low": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start, low4, nil)},
			wantGPUs: 2, wantIdle: true,
		},
		"no pod named, another GPU of the node busy: which are the pod's is unknown": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start, []int32{0, 0, 0, 80}, nil)},
			wantGPUs: 2,
		},
		"the agent names other pods only": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start, low4, []string{"other"})},
			wantGPUs: 2,
		},
		"a GPU without a utilization figure": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start, []int32{0, -1}, []string{"p", "p"})},
			wantGPUs: 2,
		},
		"report missed three heartbeats": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start.Add(-91*time.Second), low4, nil)},
			wantGPUs: 2,
		},
		"report two heartbeats old still counts": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start.Add(-60*time.Second), low4, nil)},
			wantGPUs: 2, wantIdle: true,
		},
		"no report for the node": {
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			wantGPUs: 2,
		},
		"a silent agent's low readings reclaim nothing": {
			// Three 30 s heartbeats missed: its last readings say nothing of now.
			pods:     []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes:    []*chamber.GPUNode{report("n1", start.Add(-2*time.Minute), low4, nil)},
			wantGPUs: 2,
		},
		"a pod not running yet": {
			pods: []*corev1.Pod{gpuPod("p", "n1", 2), func() *corev1.Pod {
				p := gpuPod("q", "", 2)
				p.Status.Phase = corev1.PodPending
				return p
			}()},
			nodes:    []*chamber.GPUNode{report("n1", start, low4, nil)},
			wantGPUs: 4,
		},
		"finished pods hold nothing": {
			pods: []*corev1.Pod{gpuPod("p", "n1", 2), func() *corev1.Pod {
				p := gpuPod("done", "n2", 8)
				p.Status.Phase = corev1.PodSucceeded
				return p
			}()},
			nodes:    []*chamber.GPUNode{report("n1", start, low4, nil)},
			wantGPUs: 2, wantIdle: true,
		},
		"pods on two nodes, both low": {
			pods: []*corev1.Pod{gpuPod("p", "n1", 4), gpuPod("q", "n2", 4)},
			nodes: []*chamber.GPUNode{report("n1", start, low4, []string{"p", "p", "p", "p"}),
				report("n2", start, low4, nil)},
			wantGPUs: 8, wantIdle: true,
		},
		"no GPU pod": {
			pods:  []*corev1.Pod{gpuPod("cpu", "n1", 0)},
			nodes: []*chamber.GPUNode{report("n1", start, low4, nil)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := measureAt(tc.pods, tc.nodes, 5)
			if got.gpus != tc.wantGPUs || got.idle != tc.wantIdle {
				t.Errorf("measure = %d GPUs, idle %v (%s); want %d GPUs, idle %v", got.gpus, got.idle, got.why, tc.wantGPUs, tc.wantIdle)
			}
			if got.idle == (got.why != "") {
				t.Errorf("idle %v with reason %q: a workload not idle says why, an idle one does not", got.idle, got.why)
			}
		})
	}
}

// measureAt measures the pods' GPUs at start against threshold percent, by the
// agents' reports in nodes, every agent heard.
func measureAt(pods []*corev1.Pod, nodes []*chamber.GPUNode, threshold int32) usage {
	var ps []corev1.Pod
	for _, p := range pods {
		ps = append(ps, *p)
	}
	byName := map[string]*chamber.GPUNode{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	return measure(ps, byName, chamber.NewHeartbeats(clocktesting.NewFakePassiveClock(start), 0), threshold, start)
}

// TestMeasureLowSince: an idle workload's GPUs have been below the threshold since
// their agent's window began, as far as its mean shows (a mean of 3% under a 5%
// threshold: since 2/5 of the window), never since before the pod started, and since
// now where the report cannot tell (no window, a pod without a start time).
func TestMeasureLowSince(t *testing.T) {
	const threshold = 5
	startedAgo := func(d time.Duration, name, node string) *corev1.Pod {
		p := gpuPod(name, node, 2)
		p.Status.StartTime = &metav1.Time{Time: start.Add(-d)}
		return p
	}
	window := func(gn *chamber.GPUNode, seconds int32) *chamber.GPUNode {
		for i := range gn.Status.GPUs {
			if u := gn.Status.GPUs[i].Utilization; u != nil {
				u.WindowSeconds = seconds
			}
		}
		return gn
	}
	cases := map[string]struct {
		pods  []*corev1.Pod
		nodes []*chamber.GPUNode
		want  time.Time
	}{
		"at 0% for the whole window": {
			pods:  []*corev1.Pod{startedAgo(time.Hour, "p", "n1")},
			nodes: []*chamber.GPUNode{report("n1", start, []int32{0, 0}, []string{"p", "p"})},
			want:  start.Add(-5 * time.Minute),
		},
		"a mean of 3%: at most 3/5 of the window at or above 5%": {
			pods:  []*corev1.Pod{startedAgo(time.Hour, "p", "n1")},
			nodes: []*chamber.GPUNode{report("n1", start, []int32{3, 3}, []string{"p", "p"})},
			want:  start.Add(-2 * time.Minute),
		},
		"the GPU low for the shortest time decides": {
			pods:  []*corev1.Pod{startedAgo(time.Hour, "p", "n1")},
			nodes: []*chamber.GPUNode{report("n1", start, []int32{0, 4}, []string{"p", "p"})},
			want:  start.Add(-time.Minute),
		},
		"the pod that started last decides": {
			pods: []*corev1.Pod{startedAgo(time.Hour, "p", "n1"), startedAgo(2*time.Minute, "q", "n2")},
			nodes: []*chamber.GPUNode{report("n1", start, []int32{0, 0}, []string{"p", "p"}),
				report("n2", start, []int32{0, 0}, []string{"q", "q"})},
			want: start.Add(-2 * time.Minute),
		},
		"a window from before the pod had its GPUs": {
			pods:  []*corev1.Pod{startedAgo(90*time.Second, "p", "n1")},
			nodes: []*chamber.GPUNode{report("n1", start, []int32{0, 0}, []string{"p", "p"})},
			want:  start.Add(-90 * time.Second),
		},
		"no window in the report": {
			pods:  []*corev1.Pod{startedAgo(time.Hour, "p", "n1")},
			nodes: []*chamber.GPUNode{window(report("n1", start, []int32{0, 0}, []string{"p", "p"}), 0)},
			want:  start,
		},
		"a start time after now (the kubelet's clock ahead)": {
			pods:  []*corev1.Pod{startedAgo(-time.Minute, "p", "n1")},
			nodes: []*chamber.GPUNode{report("n1", start, []int32{0, 0}, []string{"p", "p"})},
			want:  start,
		},
		"a pod without a start time": {
			pods:  []*corev1.Pod{gpuPod("p", "n1", 2)},
			nodes: []*chamber.GPUNode{report("n1", start, []int32{0, 0}, []string{"p", "p"})},
			want:  start,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := measureAt(tc.pods, tc.nodes, threshold)
			if !got.idle {
				t.Fatalf("not idle: %s", got.why)
			}
			if !got.lowSince.Equal(tc.want) {
				t.Errorf("low since %s, want %s", got.lowSince.Sub(start), tc.want.Sub(start))
			}
		})
	}
}

// queues is a pool "pool" with ClusterQueues team-a and team-b (H100 quota), team-d
// (A100 only), team-e (held by its budget), and team-c of another pool; each team
// has a LocalQueue "default" in the namespace of its name.
func queues() ([]kueue.LocalQueue, []kueue.ClusterQueue) {
	gpuQuota := func(flavor string) kueue.FlavorQuotas {
		return *utiltesting.MakeFlavorQuotas(flavor).Resource(kube.ResourceGPU, "8").Obj()
	}
	cqs := []kueue.ClusterQueue{
		*utiltesting.MakeClusterQueue("team-a").Cohort("pool").ResourceGroup(gpuQuota(h100)).Obj(),
		*utiltesting.MakeClusterQueue("team-b").Cohort("pool").ResourceGroup(gpuQuota(h100)).Obj(),
		*utiltesting.MakeClusterQueue("team-c").Cohort("other").ResourceGroup(gpuQuota(h100)).Obj(),
		*utiltesting.MakeClusterQueue("team-d").Cohort("pool").ResourceGroup(gpuQuota("pool-a100")).Obj(),
		*utiltesting.MakeClusterQueue("team-e").Cohort("pool").ResourceGroup(gpuQuota(h100)).StopPolicy(kueue.Hold).Obj(),
	}
	var lqs []kueue.LocalQueue
	for _, cq := range cqs {
		lqs = append(lqs, *utiltesting.MakeLocalQueue("default", cq.Name).ClusterQueue(cq.Name).Obj())
	}
	return lqs, cqs
}

// admittedWorkload holds 8 H100s of cq since an hour before start.
func admittedWorkload(name, ns, cq string) *utiltesting.WorkloadWrapper {
	return utiltesting.MakeWorkload(name, ns).UID(types.UID("uid-"+name)).Queue("default").Creation(start.Add(-time.Hour)).
		RequestAndLimit(kube.ResourceGPU, "8").
		SimpleReserveQuota(kueue.ClusterQueueReference(cq), h100, start.Add(-time.Hour)).AdmittedAt(true, start.Add(-time.Hour)).
		AdmissionCheck(kueue.AdmissionCheckState{Name: chamber.AdmissionCheckName, State: kueue.CheckStateReady})
}

// waitingWorkload is pending in ns's default queue, created at created.
func waitingWorkload(name, ns string, created time.Time) *utiltesting.WorkloadWrapper {
	return utiltesting.MakeWorkload(name, ns).UID(types.UID("uid-"+name)).Queue("default").Creation(created).
		RequestAndLimit(kube.ResourceGPU, "4")
}

func TestWaiting(t *testing.T) {
	now := start.Add(time.Hour)
	idle := admittedWorkload("idle", "team-a", "team-a").Obj()
	cases := map[string]struct {
		workloads []*kueue.Workload
		// noCohort: team-a is a ClusterQueue without a cohort.
		noCohort bool
		want     string
	}{
		"nobody waits":                        {},
		"a workload of the same queue waits":  {workloads: []*kueue.Workload{waitingWorkload("w", "team-a", start).Obj()}, want: "team-a/w"},
		"another team of the pool waits":      {workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Obj()}, want: "team-b/w"},
		"a team of another pool waits":        {workloads: []*kueue.Workload{waitingWorkload("w", "team-c", start).Obj()}},
		"a team without quota of the flavor":  {workloads: []*kueue.Workload{waitingWorkload("w", "team-d", start).Obj()}},
		"a team on budget hold admits nobody": {workloads: []*kueue.Workload{waitingWorkload("w", "team-e", start).Obj()}},
		"a deactivated workload does not wait": {
			workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Active(false).Obj()},
		},
		"a workload holding quota does not wait": {
			workloads: []*kueue.Workload{admittedWorkload("w", "team-b", "team-b").Obj()},
		},
		"a finished workload does not wait": {
			workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Finished().Obj()},
		},
		"a workload asking for no GPU": {
			workloads: []*kueue.Workload{utiltesting.MakeWorkload("w", "team-b").Queue("default").Request(corev1.ResourceCPU, "1").Obj()},
		},
		"a workload of an unknown queue": {
			workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Queue("nope").Obj()},
		},
		"created a moment ago, not tried yet": {
			workloads: []*kueue.Workload{waitingWorkload("w", "team-b", now.Add(-time.Second)).Obj()},
		},
		"requeued a moment ago (Kueue readmits it where there is room)": {
			workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).
				Condition(metav1.Condition{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: "Pending",
					Message: "The workload was evicted", LastTransitionTime: metav1.NewTime(now.Add(-time.Second))}).Obj()},
		},
		"refused quota for a minute": {
			workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).
				Condition(metav1.Condition{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: "Pending",
					Message: "couldn't assign flavors", LastTransitionTime: metav1.NewTime(now.Add(-DefaultMinWait))}).Obj()},
			want: "team-b/w",
		},
		"a workload reclaimed for idling before": {
			workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Annotation(chamber.AnnotationIdleReclaims, "1").Obj()},
		},
		"the oldest of two": {
			workloads: []*kueue.Workload{waitingWorkload("new", "team-b", start).Obj(), waitingWorkload("old", "team-a", start.Add(-time.Minute)).Obj()},
			want:      "team-a/old",
		},
		"no cohort: the same queue only": {
			noCohort:  true,
			workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Obj(), waitingWorkload("mine", "team-a", start).Obj()},
			want:      "team-a/mine",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lqs, cqs := queues()
			if tc.noCohort {
				cqs[0].Spec.CohortName = ""
			}
			got := keyOf(waiting(idle, withOthers(idle, tc.workloads), lqs, cqs, now, DefaultMinWait, nil))
			if got != tc.want {
				t.Errorf("waiting = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWaitingForPaused(t *testing.T) {
	now := start.Add(time.Hour)
	// paused: reclaimed and deactivated, so without admission; its queue feeds team-a.
	paused := waitingWorkload("paused", "team-a", start.Add(-2*time.Hour)).Active(false).Annotation(chamber.AnnotationIdleReclaims, "1").Obj()
	cases := map[string]struct {
		paused    *kueue.Workload
		workloads []*kueue.Workload
		want      string
	}{
		"nobody waits":                           {},
		"its own queue waits":                    {workloads: []*kueue.Workload{waitingWorkload("w", "team-a", start).Obj()}, want: "team-a/w"},
		"another team of the pool waits":         {workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Obj()}, want: "team-b/w"},
		"a team of another pool waits":           {workloads: []*kueue.Workload{waitingWorkload("w", "team-c", start).Obj()}},
		"a team waiting for another GPU model":   {workloads: []*kueue.Workload{waitingWorkload("w", "team-d", start).Obj()}},
		"another paused workload does not count": {workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Active(false).Obj()}},
		"one reclaimed before does not count":    {workloads: []*kueue.Workload{waitingWorkload("w", "team-b", start).Annotation(chamber.AnnotationIdleReclaims, "2").Obj()}},
		"a queue Chamber does not know: no one":  {paused: waitingWorkload("paused", "team-a", start).Queue("nope").Active(false).Obj(), workloads: []*kueue.Workload{waitingWorkload("w", "team-a", start).Obj()}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lqs, cqs := queues()
			p := paused
			if tc.paused != nil {
				p = tc.paused
			}
			got := keyOf(waitingForPaused(p, withOthers(p, tc.workloads), lqs, cqs, now, DefaultMinWait))
			if got != tc.want {
				t.Errorf("waitingForPaused = %q, want %q", got, tc.want)
			}
		})
	}
}

// withOthers is the cache's workloads: self and the others.
func withOthers(self *kueue.Workload, others []*kueue.Workload) []kueue.Workload {
	all := []kueue.Workload{*self}
	for _, w := range others {
		all = append(all, *w)
	}
	return all
}

// keyOf is "namespace/name", or "" for no workload.
func keyOf(w *kueue.Workload) string {
	if w == nil {
		return ""
	}
	return w.Namespace + "/" + w.Name
}
