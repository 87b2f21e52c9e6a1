package fleet_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
)

// step changes the model or moves its clock.
type step func(m *fleet.Model, c *clocktesting.FakeClock)

func setNode(n *corev1.Node) step {
	return func(m *fleet.Model, _ *clocktesting.FakeClock) { m.SetNode(n) }
}
func setPod(p *corev1.Pod) step {
	return func(m *fleet.Model, _ *clocktesting.FakeClock) { m.SetPod(p) }
}
func report(g *chamber.GPUNode) step {
	return func(m *fleet.Model, _ *clocktesting.FakeClock) { m.SetGPUNode(g) }
}
func wait(d time.Duration) step { return func(_ *fleet.Model, c *clocktesting.FakeClock) { c.Step(d) } }
func deletePod(ns, name string) step {
	return func(m *fleet.Model, _ *clocktesting.FakeClock) { m.DeletePod(ns, name) }
}
func deleteNode(name string) step {
	return func(m *fleet.Model, _ *clocktesting.FakeClock) { m.DeleteNode(name) }
}
func deleteGPUNode(name string) step {
	return func(m *fleet.Model, _ *clocktesting.FakeClock) { m.DeleteGPUNode(name) }
}
func at(d time.Duration) time.Time { return start.Add(d) }
func steps(s ...step) []step       { return s }
func node8() *corev1.Node          { return ft.MakeNode("n1", 8).Obj() }
func pod(name string, gpus int) *corev1.Pod {
	return ft.MakePod("ns", name, gpus).On("n1", start).Obj()
}

// Every transition of a GPU's state and holder. The idle window is 5 minutes and the
// threshold 5%; want shows node n1's GPUs (f free, b busy, i idle, u unhealthy,
// x isolated), wantPods the pod holding each ('-' for none).
func TestStateTransitions(t *testing.T) {
	tests := map[string]struct {
		steps    []step
		want     string
		wantPods string
	}{
		"a new node is free": {
			steps: steps(setNode(node8())),
			want:  "ffffffff", wantPods: "--------",
		},
		"allocation: a running pod holds its GPUs": {
			steps: steps(setNode(node8()), setPod(pod("a", 4))),
			want:  "bbbbffff", wantPods: "aaaa----",
		},
		"a pod not yet bound holds nothing": {
			steps: steps(setNode(node8()), setPod(ft.MakePod("ns", "a", 4).Obj())),
			want:  "ffffffff", wantPods: "--------",
		},
		"a pod without GPUs holds nothing": {
			steps: steps(setNode(node8()), setPod(ft.MakePod("ns", "a", 0).On("n1", start).Obj())),
			want:  "ffffffff", wantPods: "--------",
		},
		"release: a finished pod frees its GPUs": {
			steps: steps(setNode(node8()), setPod(pod("a", 4)),
				setPod(ft.MakePod("ns", "a", 4).On("n1", start).Phase(corev1.PodSucceeded).Obj())),
			want: "ffffffff", wantPods: "--------",
		},
		"release: a deleted pod frees its GPUs": {
			steps: steps(setNode(node8()), setPod(pod("a", 4)), deletePod("ns", "a")),
			want:  "ffffffff", wantPods: "--------",
		},
		"pods take the lowest free GPUs in order of start": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), setPod(ft.MakePod("ns", "b", 3).On("n1", at(time.Second)).Obj())),
			want:  "bbbbbfff", wantPods: "aabbb---",
		},
		"a pod keeps its GPUs when an earlier one leaves": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), setPod(pod("b", 2)), deletePod("ns", "a"),
				setPod(ft.MakePod("ns", "c", 1).On("n1", at(time.Minute)).Obj())),
			want: "bfbbffff", wantPods: "c-bb----",
		},
		"pods that wait for their node are placed by start time, not arrival": {
			steps: steps(
				setPod(ft.MakePod("ns", "late", 2).On("n1", at(time.Minute)).Obj()),
				setPod(ft.MakePod("ns", "early", 2).On("n1", start).Obj()),
				setNode(node8())),
			want: "bbbbffff", wantPods: "eell----",
		},
		"the agent's pod mapping wins over the guess": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).Pod(5, "ns", "a").Pod(6, "ns", "a").Obj())),
			want:  "fffffbbf", wantPods: "-----aa-",
		},
		"a mapping to a pod the model does not know is ignored": {
			steps: steps(setNode(node8()), report(ft.MakeGPUNode("n1", 8).Pod(0, "ns", "ghost").Obj())),
			want:  "ffffffff", wantPods: "--------",
		},
		"the guess skips unhealthy GPUs": {
			steps: steps(setNode(node8()), report(ft.MakeGPUNode("n1", 8).Health(0, chamber.GPUUnhealthy).Obj()), setPod(pod("a", 2))),
			want:  "ubbfffff", wantPods: "-aa-----",
		},
		"utilization below the threshold: busy until the window has passed": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).UtilAll(0, 0).Obj()),
				wait(5*time.Minute-time.Second)),
			want: "bbffffff", wantPods: "aa------",
		},
		"utilization below the threshold for the window: idle": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).UtilAll(0, 0).Obj()),
				wait(5*time.Minute)),
			want: "iiffffff", wantPods: "aa------",
		},
		"only the GPUs below the threshold turn idle": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)),
				report(ft.MakeGPUNode("n1", 8).Util(0, 4, 0).Util(1, 5, 0).Obj()), wait(time.Hour)),
			want: "ibffffff", wantPods: "aa------",
		},
		"the agent's window counts towards the idle window": {
			steps: steps(setNode(node8()), setPod(ft.MakePod("ns", "a", 2).On("n1", at(-time.Hour)).Obj()),
				report(ft.MakeGPUNode("n1", 8).UtilAll(0, 5*time.Minute).Obj())),
			want: "iiffffff", wantPods: "aa------",
		},
		"but not from before the pod had the GPU": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).UtilAll(0, 5*time.Minute).Obj()),
				wait(4*time.Minute)),
			want: "bbffffff", wantPods: "aa------",
		},
		"a report still fresh counts": {
			steps: steps(setNode(node8()), setPod(ft.MakePod("ns", "a", 2).On("n1", at(-time.Hour)).Obj()),
				report(ft.MakeGPUNode("n1", 8).UtilAll(0, 5*time.Minute).Heartbeat(start, 30*time.Second).Obj()),
				wait(89*time.Second)),
			want: "iiffffff", wantPods: "aa------",
		},
		"a stale report is silence: idle no more": {
			steps: steps(setNode(node8()), setPod(ft.MakePod("ns", "a", 2).On("n1", at(-time.Hour)).Obj()),
				report(ft.MakeGPUNode("n1", 8).UtilAll(0, 5*time.Minute).Heartbeat(start, 30*time.Second).Obj()),
				wait(90*time.Second)),
			want: "bbffffff", wantPods: "aa------",
		},
		"utilization back above the threshold: busy again": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).UtilAll(0, 0).Obj()),
				wait(10*time.Minute), report(ft.MakeGPUNode("n1", 8).UtilAll(60, 0).Obj())),
			want: "bbffffff", wantPods: "aa------",
		},
		"dropping below the threshold again restarts the window": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).UtilAll(0, 0).Obj()),
				wait(10*time.Minute), report(ft.MakeGPUNode("n1", 8).UtilAll(60, 0).Obj()),
				wait(time.Minute), report(ft.MakeGPUNode("n1", 8).UtilAll(0, 0).Obj()), wait(4*time.Minute)),
			want: "bbffffff", wantPods: "aa------",
		},
		"a new holder starts a new window": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).UtilAll(0, 0).Obj()),
				wait(10*time.Minute), deletePod("ns", "a"), setPod(ft.MakePod("ns", "b", 2).On("n1", at(10*time.Minute)).Obj()),
				wait(time.Minute)),
			want: "bbffffff", wantPods: "bb------",
		},
		"without a utilization report a held GPU is never idle": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).Obj()), wait(24*time.Hour)),
			want:  "bbffffff", wantPods: "aa------",
		},
		"a free GPU at 0% is free, not idle": {
			steps: steps(setNode(node8()), report(ft.MakeGPUNode("n1", 8).UtilAll(0, 0).Obj()), wait(time.Hour)),
			want:  "ffffffff", wantPods: "--------",
		},
		"health: the agent reports a GPU unhealthy": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).Health(1, chamber.GPUUnhealthy).Health(4, chamber.GPUUnhealthy).Obj())),
			want:  "buffufff", wantPods: "aa------",
		},
		"health: degraded and unknown GPUs still work": {
			steps: steps(setNode(node8()), report(ft.MakeGPUNode("n1", 8).Health(1, chamber.GPUDegraded).Health(2, chamber.GPUUnknown).Obj())),
			want:  "ffffffff", wantPods: "--------",
		},
		"health: restored": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).Health(1, chamber.GPUUnhealthy).Obj()),
				report(ft.MakeGPUNode("n1", 8).Obj())),
			want: "bbffffff", wantPods: "aa------",
		},
		"health: the agent's GPUNode removed": {
			steps: steps(setNode(node8()), report(ft.MakeGPUNode("n1", 8).Health(1, chamber.GPUUnhealthy).Obj()), deleteGPUNode("n1")),
			want:  "ffffffff", wantPods: "--------",
		},
		"isolation: a cordoned node": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), report(ft.MakeGPUNode("n1", 8).Health(7, chamber.GPUUnhealthy).Obj()),
				setNode(ft.MakeNode("n1", 8).Cordon().Obj())),
			want: "xxxxxxxu", wantPods: "aa------",
		},
		"isolation: Chamber's taint": {
			steps: steps(setNode(node8()), setNode(ft.MakeNode("n1", 8).Taint(chamber.TaintGPUUnhealthy).Obj())),
			want:  "xxxxxxxx", wantPods: "--------",
		},
		"isolation: other taints do not isolate": {
			steps: steps(setNode(node8()), setNode(ft.MakeNode("n1", 8).Taint("example.com/other").Obj())),
			want:  "ffffffff", wantPods: "--------",
		},
		"isolation: lifted": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), setNode(ft.MakeNode("n1", 8).Cordon().Obj()), setNode(node8())),
			want:  "bbffffff", wantPods: "aa------",
		},
		"node removal: its GPUs are gone": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), deleteNode("n1")),
			want:  "", wantPods: "",
		},
		"node removal: back again, its pods hold their GPUs": {
			steps: steps(setNode(node8()), setPod(pod("a", 2)), deleteNode("n1"), setNode(node8())),
			want:  "bbffffff", wantPods: "aa------",
		},
		"an agent that sees more GPUs than the device plugin offers": {
			steps: steps(setNode(ft.MakeNode("n1", 0).Obj()), report(ft.MakeGPUNode("n1", 2).Obj())),
			want:  "ff", wantPods: "--",
		},
		"a malformed report: an absurd GPU index is ignored": {
			steps: steps(setNode(node8()), report(func() *chamber.GPUNode {
				g := ft.MakeGPUNode("n1", 8).Health(2, chamber.GPUUnhealthy).Obj()
				g.Status.GPUs = append(g.Status.GPUs, chamber.GPUStatus{Index: 1 << 30, Health: chamber.GPUUnhealthy})
				return g
			}())),
			want: "ffufffff", wantPods: "--------",
		},
		"a GPUNode without its Node has no GPUs": {
			steps: steps(report(ft.MakeGPUNode("n1", 8).Obj())),
			want:  "", wantPods: "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(start)
			m := fleet.New(fleet.Options{IdleThresholdPercent: 5, IdleWindow: 5 * time.Minute, Clock: clock})
			for _, s := range tc.steps {
				s(m, clock)
			}
			snap := m.Snapshot()
			if diff := cmp.Diff(tc.want, stateLetters(snap, "n1")); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPods, podLetters(snap, "n1")); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}
		})
	}
}

// podLetters shows the first letter of the pod holding each of a node's GPUs.
func podLetters(s *fleet.Snapshot, node string) string {
	var out []byte
	for _, g := range s.GPUs {
		if g.Node != node {
			continue
		}
		if g.PodName == "" {
			out = append(out, '-')
		} else {
			out = append(out, g.PodName[0])
		}
	}
	return string(out)
}

// Why a node and its GPUs are out of service: the isolation record Chamber keeps on
// the node, and the agent's fault reasons per GPU.
func TestFaultsAndIsolationRecord(t *testing.T) {
	isolatedAt := start.Add(-time.Hour)
	tests := map[string]struct {
		node       *corev1.Node
		report     *chamber.GPUNode
		wantFault  string
		wantAt     time.Time
		wantFaults [][]string // by GPU index
	}{
		"isolated by Chamber, a GPU failing": {
			node: ft.MakeNode("n1", 2).Taint(chamber.TaintGPUUnhealthy).Cordon().
				Annotate(chamber.AnnotationIsolatedAt, isolatedAt.Format(time.RFC3339)).
				Annotate(chamber.AnnotationIsolationReason, "XID79 on GPU 1").Obj(),
			report:     ft.MakeGPUNode("n1", 2).Fault(1, "XID79").Fault(1, "GPULost").Obj(),
			wantFault:  "XID79 on GPU 1",
			wantAt:     isolatedAt,
			wantFaults: [][]string{nil, {"XID79", "GPULost"}},
		},
		"cordoned by hand: no record": {
			node:       ft.MakeNode("n1", 2).Cordon().Obj(),
			report:     ft.MakeGPUNode("n1", 2).Obj(),
			wantFaults: [][]string{nil, nil},
		},
		"a reason without its time is no record": {
			node:       ft.MakeNode("n1", 2).Annotate(chamber.AnnotationIsolationReason, "XID79 on GPU 1").Obj(),
			report:     ft.MakeGPUNode("n1", 2).Obj(),
			wantFaults: [][]string{nil, nil},
		},
		"a time that does not parse keeps the fault": {
			node: ft.MakeNode("n1", 2).Annotate(chamber.AnnotationIsolatedAt, "yesterday").
				Annotate(chamber.AnnotationIsolationReason, "Operator: fan").Obj(),
			report:     ft.MakeGPUNode("n1", 2).Obj(),
			wantFault:  "Operator: fan",
			wantFaults: [][]string{nil, nil},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := fleet.New(fleet.Options{Clock: clocktesting.NewFakeClock(start)})
			m.SetNode(tc.node)
			m.SetGPUNode(tc.report)
			snap := m.Snapshot()
			if len(snap.Nodes) != 1 {
				t.Fatalf("nodes %+v, want n1", snap.Nodes)
			}
			n := snap.Nodes[0]
			if n.Fault != tc.wantFault || !n.IsolatedAt.Equal(tc.wantAt) {
				t.Errorf("fault %q at %v, want %q at %v", n.Fault, n.IsolatedAt, tc.wantFault, tc.wantAt)
			}
			var faults [][]string
			for _, g := range snap.GPUs {
				faults = append(faults, g.Faults)
			}
			if diff := cmp.Diff(tc.wantFaults, faults); diff != "" {
				t.Errorf("faults by GPU (-want +got):\n%s", diff)
			}
			m.DeleteNode("n1")
			m.SetNode(ft.MakeNode("n1", 2).Obj())
			if f := m.Snapshot().Nodes[0].Fault; f != "" {
				t.Errorf("fault %q after the record is gone", f)
			}
		})
	}
}
