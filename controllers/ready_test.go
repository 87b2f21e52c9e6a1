package controllers

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
)

// Not ready until the caches have synced; ready after.
func TestCachesSynced(t *testing.T) {
	informers := &informertest.FakeInformers{Synced: new(bool)}
	ready := NewCachesSynced(informers)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // caches that never sync: Start gives up with its context
	_ = ready.Start(ctx)
	if err := ready.Check(nil); err == nil {
		t.Fatal("ready with caches not synced")
	}
	*informers.Synced = true
	if err := ready.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ready.Check(nil); err != nil {
		t.Errorf("not ready with caches synced: %v", err)
	}
}
