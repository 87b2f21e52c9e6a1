package workload

import (
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

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func gpuNode(name string, gpus int64, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)},
	}}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func gpuPod(name string, gpus int64, owner types.UID, phase corev1.PodPhase) corev1.Pod {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{UID: owner}}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{kube.ResourceGPU: q}}}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// agentReport is a GPUNode whose GPUs at failing are Unhealthy, the rest Healthy.
func agentReport(gpus int, heartbeat time.Time, failing map[int]*chamber.PodReference) *chamber.GPUNode {
	gn := &chamber.GPUNode{Status: chamber.GPUNodeStatus{LastHeartbeatTime: &metav1.Time{Time: heartbeat}, HeartbeatSeconds: 30}}
	for i := range gpus {
		g := chamber.GPUStatus{Index: int32(i), Health: chamber.GPUHealthy}
		if pod, bad := failing[i]; bad {
			g.Health, g.Pod = chamber.GPUUnhealthy, pod
			g.Faults = []chamber.GPUFault{{Reason: "XID79", Severity: chamber.GPUUnhealthy}}
		}
		gn.Status.GPUs = append(gn.Status.GPUs, g)
	}
	return gn
}

func TestNodeGPUs(t *testing.T) {
	own := ownedBy([]types.UID{"mine"})
	cases := map[string]struct {
		node        *corev1.Node
		pods        []corev1.Pod
		agent       *chamber.GPUNode
		wantFree    int64
		wantFailing []string
	}{
		"no agent: what the device plugin advertises, less other pods": {
			node: gpuNode("n", 8), pods: []corev1.Pod{gpuPod("a", 2, "other", corev1.PodRunning), gpuPod("b", 4, "mine", corev1.PodRunning)},
			wantFree: 6,
		},
		"finished pods hold nothing": {
			node: gpuNode("n", 8), pods: []corev1.Pod{gpuPod("a", 2, "other", corev1.PodSucceeded), gpuPod("b", 2, "other", corev1.PodFailed)},
			wantFree: 8,
		},
		"failing GPUs no pod holds are taken out": {
			node: gpuNode("n", 8), agent: agentReport(8, now, map[int]*chamber.PodReference{2: nil, 5: nil}),
			wantFree: 6, wantFailing: []string{"GPU 2 XID79", "GPU 5 XID79"},
		},
		"a failing GPU a pod holds is already counted as used": {
			node: gpuNode("n", 8), pods: []corev1.Pod{gpuPod("a", 1, "other", corev1.PodRunning)},
			agent:    agentReport(8, now, map[int]*chamber.PodReference{2: {Namespace: "x", Name: "a"}}),
			wantFree: 7,
		},
		"a failing GPU the device plugin withdrew is taken out once": {
			node: gpuNode("n", 7, func(n *corev1.Node) {
				n.Status.Capacity = corev1.ResourceList{kube.ResourceGPU: resource.MustParse("8")}
			}),
			pods:     []corev1.Pod{gpuPod("a", 6, "other", corev1.PodRunning)},
			agent:    agentReport(8, now, map[int]*chamber.PodReference{2: nil}),
			wantFree: 1, wantFailing: []string{"GPU 2 XID79"},
		},
		"a failing GPU Chamber's hold takes is taken out once": {
			node: gpuNode("n", 8),
			pods: []corev1.Pod{gpuPod("a", 6, "other", corev1.PodRunning), func() corev1.Pod {
				p := gpuPod("hold", 1, "node", corev1.PodRunning)
				p.Labels = map[string]string{chamber.LabelGPUHold: "n"}
				return p
			}()},
			agent:    agentReport(8, now, map[int]*chamber.PodReference{2: nil}),
			wantFree: 1, wantFailing: []string{"GPU 2 XID79"},
		},
		"a silent agent is not believed": {
			node: gpuNode("n", 8), agent: agentReport(8, now.Add(-2*time.Minute), map[int]*chamber.PodReference{2: nil}),
			wantFree: 8,
		},
		"cordoned node offers nothing": {
			node:     gpuNode("n", 8, func(n *corev1.Node) { n.Spec.Unschedulable = true }),
			wantFree: 0,
		},
		"NoSchedule taint offers nothing": {
			node: gpuNode("n", 8, func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: "chamber.dev/gpu-unhealthy", Effect: corev1.TaintEffectNoSchedule}}
			}),
			wantFree: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := nodeGPUs(tc.node, tc.pods, own, tc.agent, chamber.NewHeartbeats(clocktesting.NewFakePassiveClock(now), 0), now)
			if got.HealthyFree() != tc.wantFree {
				t.Errorf("HealthyFree() = %d, want %d", got.HealthyFree(), tc.wantFree)
			}
			if diff := cmp.Diff(tc.wantFailing, got.Failing); diff != "" {
				t.Errorf("Failing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlacedVerdict(t *testing.T) {
	assignment := func(counts map[string]int32) *kueue.TopologyAssignment {
		ta := &kueue.TopologyAssignment{Levels: []string{corev1.LabelHostname}}
		for host, n := range counts {
			ta.Slices = append(ta.Slices, kueue.TopologyAssignmentSlice{
				DomainCount:    1,
				ValuesPerLevel: []kueue.TopologyAssignmentSliceLevelValues{{Universal: ptr.To(host)}},
				PodCounts:      kueue.TopologyAssignmentSlicePodCounts{Universal: ptr.To(n)},
			})
		}
		return ta
	}
	nodes := map[string]NodeGPUs{
		"a": {Name: "a", Allocatable: 8, Schedulable: true},
		"b": {Name: "b", Allocatable: 8, Schedulable: true, Failing: []string{"GPU 2 XID79", "GPU 5 ECCDoubleBit"}},
	}
	cases := map[string]struct {
		demand    podSetDemand
		wantReady bool
		wantMsg   string
	}{
		"fits on a healthy node": {
			demand:    podSetDemand{Name: "main", Count: 2, PerPod: 4, Topology: assignment(map[string]int32{"a": 2})},
			wantReady: true, wantMsg: "pod set main: 1 node(s) with healthy GPUs",
		},
		"six GPUs fit next to two failing ones": {
			demand:    podSetDemand{Name: "main", Count: 1, PerPod: 6, Topology: assignment(map[string]int32{"b": 1})},
			wantReady: true, wantMsg: "pod set main: 1 node(s) with healthy GPUs",
		},
		"eight do not": {
			demand: podSetDemand{Name: "main", Count: 1, PerPod: 8, Topology: assignment(map[string]int32{"b": 1})},
			wantMsg: "pod set main: node b has 6 healthy free GPUs, the pods placed there need 8 " +
				"(2 advertised but failing: GPU 2 XID79; GPU 5 ECCDoubleBit)",
		},
		"a node that went away": {
			demand:  podSetDemand{Name: "main", Count: 1, PerPod: 1, Topology: assignment(map[string]int32{"gone": 1})},
			wantMsg: "pod set main: node gone is gone",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ready, msg := placedVerdict(tc.demand, nodes)
			if ready != tc.wantReady || msg != tc.wantMsg {
				t.Errorf("placedVerdict() = %t, %q; want %t, %q", ready, msg, tc.wantReady, tc.wantMsg)
			}
		})
	}
}

func TestFitVerdict(t *testing.T) {
	twoFree := []NodeGPUs{{Name: "a", Allocatable: 4, UsedByOthers: 2, Schedulable: true}, {Name: "b", Allocatable: 4, UsedByOthers: 2, Schedulable: true}}
	cases := map[string]struct {
		demand    podSetDemand
		nodes     []NodeGPUs
		wantReady bool
		wantMsg   string
	}{
		"two 2-GPU pods fit on two half-free nodes": {
			demand: podSetDemand{Name: "main", Count: 2, PerPod: 2, Flavor: "f"}, nodes: twoFree,
			wantReady: true, wantMsg: "pod set main: 2 pod(s) fit on healthy GPUs of flavor f",
		},
		"one 4-GPU pod does not, though the flavor has 4 free": {
			demand: podSetDemand{Name: "main", Count: 1, PerPod: 4, Flavor: "f"}, nodes: twoFree,
			wantMsg: "pod set main: 0 of 1 pod(s) of 4 GPUs fit on the healthy free GPUs of flavor f; the most on one node is 2 on a",
		},
		"failing GPUs are named": {
			demand: podSetDemand{Name: "main", Count: 1, PerPod: 8, Flavor: "f"},
			nodes:  []NodeGPUs{{Name: "a", Allocatable: 8, Schedulable: true, Failing: []string{"GPU 1 XID48"}}},
			wantMsg: "pod set main: 0 of 1 pod(s) of 8 GPUs fit on the healthy free GPUs of flavor f; the most on one node is 7 on a; " +
				"advertised but failing: a GPU 1 XID48",
		},
		"no nodes": {
			demand:  podSetDemand{Name: "main", Count: 1, PerPod: 1, Flavor: "f"},
			wantMsg: "pod set main: 0 of 1 pod(s) of 1 GPUs fit on the healthy free GPUs of flavor f (it has no nodes)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ready, msg := fitVerdict(tc.demand, tc.nodes)
			if ready != tc.wantReady || msg != tc.wantMsg {
				t.Errorf("fitVerdict() = %t, %q; want %t, %q", ready, msg, tc.wantReady, tc.wantMsg)
			}
		})
	}
}

func TestGracePeriod(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, _ := time.ParseDuration(s)
		return &metav1.Duration{Duration: v}
	}
	team := &chamber.EvictionPolicy{GracePeriod: d("10m"), TierGracePeriods: []chamber.TierGracePeriod{{Tier: "preemptible", GracePeriod: *d("1m")}}}
	pool := &chamber.EvictionPolicy{GracePeriod: d("5m"), TierGracePeriods: []chamber.TierGracePeriod{{Tier: "production", GracePeriod: *d("30m")}}}
	cases := map[string]struct {
		tier     string
		policies []*chamber.EvictionPolicy
		want     time.Duration
	}{
		"the team's tier entry":                        {tier: "preemptible", policies: []*chamber.EvictionPolicy{team, pool}, want: time.Minute},
		"a pool's tier entry beats the team's general": {tier: "production", policies: []*chamber.EvictionPolicy{team, pool}, want: 30 * time.Minute},
		"the team's general":                           {tier: "standard", policies: []*chamber.EvictionPolicy{team, pool}, want: 10 * time.Minute},
		"the pool's general when the team has none":    {tier: "standard", policies: []*chamber.EvictionPolicy{nil, pool}, want: 5 * time.Minute},
		"the default":                                  {tier: "standard", policies: []*chamber.EvictionPolicy{nil, nil}, want: DefaultGracePeriod},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := chamber.ResolveGracePeriod(tc.tier, DefaultGracePeriod, tc.policies...); got != tc.want {
				t.Errorf("GracePeriod(%q) = %s, want %s", tc.tier, got, tc.want)
			}
		})
	}
}

func TestOffersHealthyOnly(t *testing.T) {
	failing := []string{"GPU 2 XID79"}
	cases := map[string]struct {
		nodes []NodeGPUs
		want  bool
	}{
		"every node healthy": {
			nodes: []NodeGPUs{{Name: "a", Allocatable: 8, Schedulable: true}, {Name: "b", Allocatable: 8, Schedulable: true}},
			want:  true,
		},
		"a node offers a failing GPU": {
			nodes: []NodeGPUs{{Name: "a", Allocatable: 8, Schedulable: true}, {Name: "b", Allocatable: 8, Schedulable: true, Failing: failing}},
		},
		"the device plugin withdrew the failing GPU": {
			nodes: []NodeGPUs{{Name: "a", Allocatable: 8, Schedulable: true}, {Name: "b", Allocatable: 7, Schedulable: true, Failing: failing, Withheld: 1}},
			want:  true,
		},
		"a GPU hold takes the failing GPU": {
			nodes: []NodeGPUs{{Name: "b", Allocatable: 8, Schedulable: true, UsedByOthers: 1, Failing: failing, Held: 1}},
			want:  true,
		},
		"the node with the failing GPU is cordoned": {
			nodes: []NodeGPUs{{Name: "a", Allocatable: 8, Schedulable: true}, {Name: "b", Allocatable: 8, Failing: failing}},
			want:  true,
		},
		"no node takes pods": {
			nodes: []NodeGPUs{{Name: "a", Allocatable: 8}},
		},
		"no nodes": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := offersHealthyOnly(tc.nodes); got != tc.want {
				t.Errorf("offersHealthyOnly() = %t, want %t", got, tc.want)
			}
		})
	}
}
