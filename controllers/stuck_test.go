package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// A real controller-runtime controller whose reconcile of one object never returns:
// the check passes while reconciles finish, and fails once a worker has been busy
// without any reconcile finishing for the time allowed, naming the controller; it
// passes again once the reconcile returns.
func TestStuckWorkers(t *testing.T) {
	const name = "stuck-workers-test"
	release, hung := make(chan struct{}), make(chan struct{})
	c, err := controller.NewUnmanaged(name, controller.Options{
		SkipNameValidation: ptr.To(true),
		Reconciler: reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Name == "hangs" {
				close(hung)
				<-release
			}
			return reconcile.Result{}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan event.GenericEvent)
	if err := c.Watch(source.Channel(events, &handler.EnqueueRequestForObject{})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Start(ctx) }()
	defer close(release)

	clk := clocktesting.NewFakePassiveClock(time.Now())
	check := NewStuckWorkers(metrics.Registry, time.Minute, clk)
	finished := func() float64 {
		families, err := metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, f := range families {
			if f.GetName() != metricReconcileTotal {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "controller" && l.GetValue() == name {
						total += m.GetCounter().GetValue()
					}
				}
			}
		}
		return total
	}
	waitFor := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !done() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	object := func(name string) event.GenericEvent {
		return event.GenericEvent{Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}}
	}

	events <- object("quick")
	waitFor("the quick reconcile", func() bool { return finished() >= 1 })
	if err := check.Check(nil); err != nil {
		t.Fatalf("Check() with nothing busy = %v", err)
	}

	events <- object("hangs")
	<-hung
	if err := check.Check(nil); err != nil {
		t.Fatalf("Check() at the hang's start = %v", err)
	}
	clk.SetTime(clk.Now().Add(59 * time.Second))
	if err := check.Check(nil); err != nil {
		t.Fatalf("Check() 59 s into the hang = %v", err)
	}
	clk.SetTime(clk.Now().Add(2 * time.Second))
	err = check.Check(nil)
	if err == nil {
		t.Fatal("Check() a minute into the hang passed")
	}
	t.Logf("Check() = %v", err)

	before := finished()
	release <- struct{}{}
	waitFor("the hung reconcile to return", func() bool { return finished() > before })
	if err := check.Check(nil); err != nil {
		t.Fatalf("Check() after the reconcile returned = %v", err)
	}
}
