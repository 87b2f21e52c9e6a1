package isolation

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// isolatedInWindow counts the pool's nodes Chamber isolated within the breaker's
// window (and since an operator last reset the breaker), and the pool's GPU nodes.
func (c *Controller) isolatedInWindow(ctx context.Context, pool *chamber.GPUPool, policy chamber.IsolationPolicy, now time.Time) (count, total int, err error) {
	var nodes corev1.NodeList
	if err := c.client.List(ctx, &nodes, client.MatchingLabels(pool.Spec.NodeLabels)); err != nil {
		return 0, 0, fmt.Errorf("list nodes of pool %s: %w", pool.Name, err)
	}
	var pools chamber.GPUPoolList
	if err := c.client.List(ctx, &pools); err != nil {
		return 0, 0, fmt.Errorf("list GPUPools: %w", err)
	}
	since := now.Add(-breakerWindow(policy))
	if cond := apimeta.FindStatusCondition(pool.Status.Conditions, chamber.ConditionIsolationHalted); cond != nil &&
		cond.Status == metav1.ConditionFalse && cond.LastTransitionTime.After(since) {
		since = cond.LastTransitionTime.Time
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A reset this process made counts even where the pool read here predates it (the
	// reset was handled in this very reconcile): else the breaker would open again.
	if reset := c.resets[pool.Name]; reset.After(since) {
		since = reset
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if gpuCapacity(n) == 0 {
			continue
		}
		if p := chamber.PoolOf(n.Labels, pools.Items); p == nil || p.Name != pool.Name {
			continue
		}
		total++
		if n.Annotations[chamber.AnnotationIsolate] != "" {
			continue // an operator's isolation is no sign of a failing fleet
		}
		at := c.isolated[pool.Name][n.Name]
		if rec, _ := readRecord(n); rec.At.After(at) {
			at = rec.At
		}
		if !at.IsZero() && !at.Before(since) {
			count++
		}
	}
	return count, total, nil
}

// remember records an isolation for the breaker before the cache shows it.
func (c *Controller) remember(pool, node string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isolated[pool] == nil {
		c.isolated[pool] = map[string]time.Time{}
	}
	c.isolated[pool][node] = at
}

// halted: the pool's breaker is open.
func (c *Controller) halted(pool *chamber.GPUPool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if open, ok := c.breakers[pool.Name]; ok {
		return open
	}
	return apimeta.IsStatusConditionTrue(pool.Status.Conditions, chamber.ConditionIsolationHalted)
}

// openBreaker sets the pool's IsolationHalted condition. The pool controller owns
// the rest of the status, so only this condition is written, on a fresh read.
func (c *Controller) openBreaker(ctx context.Context, pool *chamber.GPUPool, msg string) error {
	c.mu.Lock()
	c.breakers[pool.Name] = true
	c.mu.Unlock()
	breakerOpen.WithLabelValues(pool.Name).Set(1)
	opened, err := c.setPoolCondition(ctx, pool.Name, metav1.ConditionTrue, chamber.ReasonTooManyIsolations, msg)
	if opened {
		c.recorder.Eventf(pool, nil, corev1.EventTypeWarning, chamber.ConditionIsolationHalted, "Isolate", "circuit breaker open: %s", msg)
	}
	return err
}

// resetBreaker closes the pool's breaker at an operator's request, and removes the
// request.
func (c *Controller) resetBreaker(ctx context.Context, pool *chamber.GPUPool) error {
	msg := fmt.Sprintf("an operator reset the circuit breaker (%s); isolations count again from now", chamber.AnnotationIsolationBreakerReset)
	closed, err := c.setPoolCondition(ctx, pool.Name, metav1.ConditionFalse, chamber.ReasonBreakerReset, msg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.breakers[pool.Name] = false
	c.resets[pool.Name] = c.opts.Clock.Now()
	c.mu.Unlock()
	breakerOpen.WithLabelValues(pool.Name).Set(0)
	if closed {
		c.recorder.Eventf(pool, nil, corev1.EventTypeNormal, "IsolationResumed", "Isolate", "%s", msg)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{chamber.AnnotationIsolationBreakerReset: nil}}})
	if err := c.client.Patch(ctx, pool, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("remove %s from pool %s: %w", chamber.AnnotationIsolationBreakerReset, pool.Name, err)
	}
	return nil
}

// setPoolCondition writes the IsolationHalted condition where it differs, retrying
// on conflicts with the pool controller's status writes.
func (c *Controller) setPoolCondition(ctx context.Context, name string, status metav1.ConditionStatus, reason, msg string) (changed bool, err error) {
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		changed = false
		var pool chamber.GPUPool
		if err := c.reader.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
			return err
		}
		have := apimeta.FindStatusCondition(pool.Status.Conditions, chamber.ConditionIsolationHalted)
		if have != nil && have.Status == status && (status == metav1.ConditionTrue || have.Reason == reason) {
			return nil
		}
		apimeta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{Type: chamber.ConditionIsolationHalted, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: pool.Generation, LastTransitionTime: metav1.NewTime(c.opts.Clock.Now())})
		changed = true
		return c.client.Status().Update(ctx, &pool)
	})
	if err != nil {
		return false, fmt.Errorf("set condition %s of pool %s: %w", chamber.ConditionIsolationHalted, name, err)
	}
	return changed, nil
}

// setUnknown keeps the gauge of nodes whose agent is silent.
func (c *Controller) setUnknown(node, pool string, unknown bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, was := c.unknown[node]
	if unknown {
		c.unknown[node] = pool
	} else {
		delete(c.unknown, node)
	}
	for _, p := range []string{old, pool} {
		if p == "" || (!was && !unknown) {
			continue
		}
		n := 0
		for _, q := range c.unknown {
			if q == p {
				n++
			}
		}
		unknownNodes.WithLabelValues(p).Set(float64(n))
	}
}
