package workload_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

// A pause (an eviction request with Pause: what room for big jobs and idle reclaim ask
// for) deactivates the workload as it is evicted, so that Kueue never admits it again
// meanwhile: under load, a workload paused for a big job was admitted again within a
// second of its eviction, before its requester deactivated it, and took back the room
// made. It stays out of its queue, evicted for Chamber's reason, until its requester
// activates it again; then it runs. No paused version carries the request: a request
// left after its eviction evicted (and paused) the next admission too, when Kueue
// admitted the workload again before Chamber saw it evicted (in the simulator, a
// notebook its user resumed at once stayed paused, with nothing left to resume it).
func TestPauseKeepsTheWorkloadOutOfItsQueue(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "pausing"
	teamFixture(t, ns, 8, []string{"pausing-1"}, nil, nil)
	create(t, job(ns, "p", 4, "").Obj())
	g.Eventually(func(g gomega.Gomega) { runningOn(g, ns, "p") }).Should(gomega.Succeed())
	wl := workloadOf(g, ns, "p")

	// Every version of the Workload from now on.
	wc, err := client.NewWithWatch(controllertest.Config, client.Options{Scheme: controlplane.Scheme})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	w, err := wc.Watch(ctx, &kueue.WorkloadList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": wl.Name})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var mu sync.Mutex
	var versions []*kueue.Workload
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if v, ok := ev.Object.(*kueue.Workload); ok {
				mu.Lock()
				versions = append(versions, v)
				mu.Unlock()
			}
		}
	}()

	g.Expect(chamberkueue.RequestEviction(ctx, k8s, wl, chamberkueue.Eviction{Reason: "TestPause", Message: "the test pauses it",
		RequestedAt: time.Now(), GracePeriod: ptr.To(time.Duration(0)), Pause: true})).To(gomega.Succeed())
	paused := func(g gomega.Gomega) {
		wl := workloadOf(g, ns, "p")
		g.Expect(wl.Spec.Active).To(gomega.HaveValue(gomega.BeFalse()))
		g.Expect(isTrue(wl, kueue.WorkloadQuotaReserved)).To(gomega.BeFalse())
		g.Expect(chamberkueue.Paused(wl)).To(gomega.Equal("TestPause"))
		g.Expect(podsOf(g, ns, "p")).To(gomega.BeEmpty())
	}
	g.Eventually(paused).Should(gomega.Succeed())
	// Quota and GPUs are free, and still it stays out of its queue.
	g.Consistently(paused).Should(gomega.Succeed())

	// Once evicted, no version up to now was admitted again.
	mu.Lock()
	beforeResume := versions
	mu.Unlock()
	evicted := false
	for _, v := range beforeResume {
		evicted = evicted || isTrue(v, kueue.WorkloadEvicted)
		_, requested := chamberkueue.RequestedEviction(v)
		g.Expect(requested && v.Spec.Active != nil && !*v.Spec.Active).To(gomega.BeFalse(),
			"paused with its eviction request still on it (resourceVersion %s)", v.ResourceVersion)
		g.Expect(evicted && isTrue(v, kueue.WorkloadQuotaReserved) && !isTrue(v, kueue.WorkloadEvicted)).To(gomega.BeFalse(),
			"admitted again after the pause (resourceVersion %s)", v.ResourceVersion)
	}
	g.Expect(evicted).To(gomega.BeTrue(), "no evicted version seen")
	g.Expect(controllertest.EvictedByChamber(workloadOf(g, ns, "p"), "TestPause")).To(gomega.BeTrue(), "the eviction is not Chamber's")
	w.Stop()
	<-done

	// Its requester lets it go: it runs again, and stays.
	wl = workloadOf(g, ns, "p")
	g.Expect(chamberkueue.PatchWorkload(ctx, k8s, wl, ptr.To(true), map[string]any{chamber.AnnotationEvictionPaused: nil})).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { runningOn(g, ns, "p") }).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		runningOn(g, ns, "p")
		g.Expect(workloadOf(g, ns, "p").Spec.Active).To(gomega.HaveValue(gomega.BeTrue()))
	}).Should(gomega.Succeed())
}
