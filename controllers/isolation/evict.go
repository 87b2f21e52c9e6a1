package isolation

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// The eviction of what runs on isolated hardware: which workloads run there, and the
// request to Chamber's admission check (chamberkueue.RequestEviction) for each.

// evict asks Chamber's admission controller to evict every admitted workload with pods on
// the node (at GPU level, only those on the failing GPUs where the agent says which).
// A workload on a failing GPU, or whose pod there died with it, is evicted at once
// (EvictionGracePeriod); at node level the others, on healthy GPUs of the node, get
// their team's grace period to checkpoint before they leave it. Where the agent does
// not say which pod holds which GPU, every workload counts as on a failing GPU. since
// is when the isolation took its level (levelSince): the drain and Kueue's time to
// replace the node count from it.
func (c *Controller) evict(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, rec record, rep report, since, now time.Time) (reconcile.Result, error) {
	if c.opts.WithoutKueue {
		return reconcile.Result{}, nil
	}
	// The workloads on the failing GPUs go at once, at every level. The node's healthy
	// GPUs keep theirs, which run on while the isolated node takes no new pods (it
	// drains), until the drain timeout of a node-level isolation: then they get their
	// team's grace to checkpoint and go, so the node can be rebooted with nothing lost.
	// Without the agent's map of pods to GPUs, every workload on the node at once.
	failing := rep.podsOnFailingGPUs()
	only, res := failing, reconcile.Result{}
	if rec.Level == chamber.IsolateNode && c.opts.DrainTimeout >= 0 && failing != nil {
		if deadline := since.Add(c.opts.DrainTimeout); now.Before(deadline) {
			res.RequeueAfter = deadline.Sub(now)
		} else {
			only = nil
		}
	}
	bound, err := c.boundWorkloads(ctx, node)
	if err != nil {
		return reconcile.Result{}, err
	}
	wls, err := c.workloadsOn(ctx, node, bound, only)
	if err != nil {
		return reconcile.Result{}, err
	}
	lost, err := c.lostHere(ctx, node, bound, since)
	if err != nil {
		return reconcile.Result{}, err
	}
	if wait := since.Add(c.opts.KueueReplaces).Sub(now); rec.Level == chamber.IsolateNode && len(lost) > 0 && wait > 0 {
		// The node's taint is Kueue's cue to replace it for these (Options.KueueReplaces).
		wls = slices.DeleteFunc(wls, func(wl *kueue.Workload) bool { return has(lost, wl) })
		lost = nil
		if res.RequeueAfter <= 0 || wait < res.RequeueAfter {
			res.RequeueAfter = wait
		}
	}
	for _, wl := range lost {
		if !has(wls, wl) {
			wls = append(wls, wl)
		}
	}
	onFailing := wls
	if only == nil && failing != nil {
		if onFailing, err = c.workloadsOn(ctx, node, bound, failing); err != nil {
			return reconcile.Result{}, err
		}
	}
	grace := c.opts.EvictionGracePeriod
	var asked []*kueue.Workload
	for _, wl := range wls {
		if have, ok := chamberkueue.RequestedEviction(wl); (ok && have.Reason == chamber.ReasonGPUFault) || c.askedRecently(wl.UID, node.Name, now) {
			continue
		}
		if slices.Contains(wl.Status.UnhealthyNodes, kueue.UnhealthyNode{Name: node.Name}) {
			// Kueue's topology-aware scheduling is moving it off this node already
			// (none of its pods runs here any more); an eviction now would race
			// Kueue's scheduler (chamberkueue.ReplacingNodes).
			continue
		}
		msg := fmt.Sprintf("evicted from node %s, isolated for a GPU fault (%s); Kueue requeues it onto healthy GPUs", node.Name, rep.describe())
		e := chamberkueue.Eviction{Reason: chamber.ReasonGPUFault, Message: msg, RequestedAt: now}
		if failing == nil || has(onFailing, wl) || has(lost, wl) {
			// Nothing of it runs on a healthy GPU to checkpoint.
			e.GracePeriod = &grace
		} else {
			e.Message += fmt.Sprintf("; its GPUs are healthy and ran on while the node drained (%s): it has its grace period to checkpoint before the node's repair", c.opts.DrainTimeout)
		}
		if err := chamberkueue.RequestEviction(ctx, c.client, wl, e); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return reconcile.Result{}, err
		}
		c.rememberAsked(wl.UID, node.Name, now)
		asked = append(asked, wl)
	}
	if len(asked) > 0 {
		evictions.WithLabelValues(pool.Name).Add(float64(len(asked)))
		c.recorder.Eventf(node, nil, corev1.EventTypeWarning, "EvictionRequested", "Evict",
			"asked Kueue to evict and requeue %d workloads: %v", len(asked), names(asked))
	}
	return res, nil
}

// askAgain is how long an eviction request from the same node is not repeated: the
// admission controller clears a request once Kueue evicted the workload, which by
// then has left the node (and may land on another that fails next).
const askAgain = time.Minute

type askedKey struct {
	workload types.UID
	node     string
}

func (c *Controller) askedRecently(uid types.UID, node string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.asked[askedKey{uid, node}]
	return ok && now.Sub(at) < askAgain
}

func (c *Controller) rememberAsked(uid types.UID, node string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, at := range c.asked {
		if now.Sub(at) >= askAgain {
			delete(c.asked, k)
		}
	}
	c.asked[askedKey{uid, node}] = now
}

// boundPod is a pod bound to a node, neither being deleted nor failed (a terminating
// pod is on its way out: its workload was evicted, and may already run elsewhere),
// with its workload (nil when it has none).
type boundPod struct {
	workload  *kueue.Workload
	succeeded bool
}

// boundWorkloads finds the workload of each pod bound to the node, by pod.
func (c *Controller) boundWorkloads(ctx context.Context, node *corev1.Node) (map[types.NamespacedName]boundPod, error) {
	pods, err := chamberkueue.PodsOnNode(ctx, c.client, node.Name)
	if err != nil {
		return nil, err
	}
	out := make(map[types.NamespacedName]boundPod, len(pods))
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		wl, err := chamberkueue.WorkloadOfPod(ctx, c.client, c.reader, pod)
		if err != nil {
			return nil, err
		}
		out[client.ObjectKeyFromObject(pod)] = boundPod{workload: wl, succeeded: pod.Status.Phase == corev1.PodSucceeded}
	}
	return out, nil
}

// workloadsOn finds the admitted, unfinished Kueue workloads with running pods among
// bound (boundWorkloads), or placed on the node by topology-aware scheduling. only,
// when set, keeps the workloads of those pods (GPU level, where the agent names each
// GPU's pod).
func (c *Controller) workloadsOn(ctx context.Context, node *corev1.Node, bound map[types.NamespacedName]boundPod, only map[types.NamespacedName]bool) ([]*kueue.Workload, error) {
	found := map[types.NamespacedName]*kueue.Workload{}
	for key, p := range bound {
		if p.succeeded || p.workload == nil || (only != nil && !only[key]) {
			continue
		}
		if running(p.workload) {
			found[client.ObjectKeyFromObject(p.workload)] = p.workload
		}
	}
	if only == nil {
		// Pods of a workload TAS placed on the node may not be bound yet.
		placed, err := chamberkueue.WorkloadsOnNode(ctx, c.client, hostname(node))
		if err != nil {
			return nil, err
		}
		for i := range placed {
			if running(&placed[i]) {
				found[client.ObjectKeyFromObject(&placed[i])] = placed[i].DeepCopy() // the cache's object, shared
			}
		}
	}
	out := make([]*kueue.Workload, 0, len(found))
	for _, wl := range found {
		out = append(out, wl)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out, nil
}

// lostHere are the workloads topology-aware scheduling placed on the node before its
// isolation that have no live pod bound to it any more: their pod there died with the
// failing GPU. Kueue keeps such a workload placed on an untainted node (GPU-level
// isolation), so its Job's new pod would wait there for GPUs that stay out until the
// repair; evicted at once (nothing of it runs to checkpoint), it is placed again on
// healthy GPUs. A node isolated at node level is tainted, which Kueue answers by
// replacing the node itself: evict waits Options.KueueReplaces for that. A workload Kueue
// placed on the node after its isolation is left alone: it was given GPUs the node
// still offers, and its pods have yet to land. A pod that succeeded there counts as
// live: its work is done.
func (c *Controller) lostHere(ctx context.Context, node *corev1.Node, bound map[types.NamespacedName]boundPod, isolatedAt time.Time) ([]*kueue.Workload, error) {
	placed, err := chamberkueue.WorkloadsOnNode(ctx, c.client, hostname(node))
	if err != nil || len(placed) == 0 {
		return nil, err
	}
	live := map[types.UID]bool{}
	for _, p := range bound {
		if p.workload != nil {
			live[p.workload.UID] = true
		}
	}
	var out []*kueue.Workload
	for i := range placed {
		wl := &placed[i]
		reserved := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
		if !running(wl) || live[wl.UID] || reserved == nil || reserved.LastTransitionTime.After(isolatedAt) {
			continue
		}
		out = append(out, wl.DeepCopy()) // the cache's object, shared
	}
	return out, nil
}

// hostname is the node's name in topology assignments: its hostname label.
func hostname(node *corev1.Node) string {
	if host := node.Labels[corev1.LabelHostname]; host != "" {
		return host
	}
	return node.Name
}

// running: Kueue reserved quota for it, and it has neither finished nor been evicted.
// An evicted workload is on its way out (Kueue stops its pods): its eviction request,
// if any, is done and removed, and a new one would apply to its next admission.
func running(wl *kueue.Workload) bool {
	return apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) &&
		!apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) &&
		!apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted)
}

// has says whether wls holds wl (by UID).
func has(wls []*kueue.Workload, wl *kueue.Workload) bool {
	return slices.ContainsFunc(wls, func(have *kueue.Workload) bool { return have.UID == wl.UID })
}

// levelSince is when the node's isolation took its level: for a node isolated at node
// level, when Chamber tainted it (the taint's time, to the second). An isolation that
// began at GPU level keeps that start in its record, but the node drains, and Kueue
// answers its taint, only from the taint on. now where the record has no readable
// start.
func levelSince(node *corev1.Node, rec record, now time.Time) time.Time {
	if rec.Level == chamber.IsolateNode && rec.Tainted {
		for _, t := range node.Spec.Taints {
			if t.Key == chamber.TaintGPUUnhealthy && t.TimeAdded != nil {
				return t.TimeAdded.Time
			}
		}
	}
	if rec.At.IsZero() {
		return now
	}
	return rec.At
}

func names(wls []*kueue.Workload) []string {
	out := make([]string, len(wls))
	for i, wl := range wls {
		out[i] = wl.Namespace + "/" + wl.Name
	}
	return out
}
