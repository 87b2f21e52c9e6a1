package fleet_test

import (
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
)

// The fleet: 10,000 GPUs on 1,250 nodes, 20,000 pods.
const benchNodes, benchPods = 1250, 20000

func benchFleet(b *testing.B) (*fleet.Model, *ft.Fleet, *clocktesting.FakeClock) {
	b.Helper()
	clock := clocktesting.NewFakeClock(start)
	objs := ft.Synthetic(benchNodes, benchPods, start)
	m := fleet.New(fleet.Options{Clock: clock})
	objs.Feed(m)
	clock.Step(10 * time.Minute)
	return m, objs, clock
}

// BenchmarkModelMemory builds the model from the objects and reports its heap size
// (the objects themselves, which informers hold anyway, not counted).
func BenchmarkModelMemory(b *testing.B) {
	clock := clocktesting.NewFakeClock(start)
	objs := ft.Synthetic(benchNodes, benchPods, start)
	var before, after runtime.MemStats
	var m *fleet.Model
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		m = fleet.New(fleet.Options{Clock: clock})
		objs.Feed(m)
		runtime.GC()
		runtime.ReadMemStats(&after)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB/model")
	runtime.KeepAlive(m)
	runtime.KeepAlive(objs)
}

// BenchmarkSnapshot takes one snapshot: what every scrape starts with.
func BenchmarkSnapshot(b *testing.B) {
	m, _, clock := benchFleet(b)
	var s *fleet.Snapshot
	for b.Loop() {
		clock.Step(time.Second)
		s = m.Snapshot()
	}
	b.ReportMetric(float64(len(s.GPUs)), "GPUs")
}

// BenchmarkPodUpdate is the cost of one incremental pod event.
func BenchmarkPodUpdate(b *testing.B) {
	b.Run("status change", func(b *testing.B) {
		// The common event: a running pod's status changes, its GPUs do not.
		m, objs, _ := benchFleet(b)
		p := objs.Pods[0].DeepCopy()
		for b.Loop() {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, LastTransitionTime: metav1.Now()}}
			m.SetPod(p)
		}
	})
	b.Run("finish and start", func(b *testing.B) {
		// A pod finishes and another starts on its node: its GPUs are released and
		// given out again. Each iteration is two events.
		m, objs, _ := benchFleet(b)
		running := objs.Pods[0].DeepCopy()
		done := running.DeepCopy()
		done.Status.Phase = corev1.PodSucceeded
		for b.Loop() {
			m.SetPod(done)
			m.SetPod(running)
		}
	})
}
