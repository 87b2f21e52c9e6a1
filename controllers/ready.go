package controllers

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// CachesSynced is chamber-controller's readiness: not ready until the manager's
// informer caches have synced, so that a replica that cannot list what it watches
// (RBAC missing, CRDs not installed, API server unreachable) never reports ready and
// a rollout stops on it. Add it to the manager (mgr.Add) and as its readyz check. It
// runs on every replica, leader or not.
type CachesSynced struct {
	cache  cache.Cache
	synced atomic.Bool
}

var _ manager.LeaderElectionRunnable = (*CachesSynced)(nil)

// NewCachesSynced watches the cache.
func NewCachesSynced(c cache.Cache) *CachesSynced { return &CachesSynced{cache: c} }

// Start waits for the caches to sync.
func (s *CachesSynced) Start(ctx context.Context) error {
	if s.cache.WaitForCacheSync(ctx) {
		s.synced.Store(true)
	}
	return nil
}

// NeedLeaderElection is false: every replica reports its own readiness.
func (s *CachesSynced) NeedLeaderElection() bool { return false }

// Check is the readyz check.
func (s *CachesSynced) Check(*http.Request) error {
	if !s.synced.Load() {
		return errors.New("informer caches not synced yet (can the controller list Nodes, Pods, GPUNodes and Kueue's objects?)")
	}
	return nil
}
