package workload

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltas "sigs.k8s.io/kueue/pkg/util/tas"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// The check stays off Kueue's admission path where it has nothing to say. While a
// workload waits in its queue, Chamber sets the check Ready if every GPU it could be
// given is healthy (or it fits on healthy free GPUs now): Kueue then writes
// QuotaReserved and Admitted in one patch, as it would with no check at all. At
// reservation Chamber looks again, and sends the workload back to the queue (Retry)
// only if the GPUs it was given stopped being healthy in between. A workload that
// could not be pre-approved takes the check's usual path: its verdict at reservation.

// preApprovedPrefix starts the message of a check set Ready before reservation.
const preApprovedPrefix = "Pre-approved in the queue: "

// waiting reports whether the workload waits in its queue for quota.
func waiting(wl *kueue.Workload) bool {
	return !conditionTrue(wl, kueue.WorkloadQuotaReserved) && !conditionTrue(wl, kueue.WorkloadFinished) &&
		ptr.Deref(wl.Spec.Active, true)
}

// preApprove sets the check of a waiting workload Ready when every flavor its
// ClusterQueue may give it GPUs of is healthy, or has room for it on healthy free
// GPUs now. Otherwise it writes nothing: the check is decided at reservation. A new
// workload of a ClusterQueue with Chamber's check may have no entry for it yet:
// Chamber writes the entry, and Kueue, finding it there, does not write its own
// Pending one (or, from a cache that has not seen it yet, tries and gets a conflict,
// which stores nothing).
func (c *Controller) preApprove(ctx context.Context, wl *kueue.Workload, check *kueue.AdmissionCheckState) error {
	cq, err := c.clusterQueueOf(ctx, wl)
	if err != nil || cq == nil {
		return err
	}
	if check == nil && !hasCheck(cq) {
		return nil
	}
	reasons, ok, err := c.preApproval(ctx, wl, cq)
	if err != nil {
		return err
	}
	if !ok {
		return c.leaveForReservation(ctx, wl, check)
	}
	c.metrics.verdicts.WithLabelValues("preapproved").Inc()
	return c.setCheck(ctx, wl, kueue.CheckStateReady, preApprovedPrefix+strings.Join(reasons, "; "))
}

// preApproval decides whether a waiting workload of cq may be pre-approved, and why.
func (c *Controller) preApproval(ctx context.Context, wl *kueue.Workload, cq *kueue.ClusterQueue) (reasons []string, ok bool, err error) {
	defer c.timeVerdict()()
	if len(specDemands(wl, "")) == 0 {
		return []string{"the workload uses no GPUs"}, true, nil
	}
	now := c.opts.Clock.Now()
	own := ownedBy(ownerUIDs(wl))
	for _, flavor := range chamberkueue.GPUFlavors(cq) {
		healthyOnly, err := c.flavorOffersHealthyOnly(ctx, flavor, own, now)
		if err != nil {
			return nil, false, err
		}
		if healthyOnly {
			reasons = append(reasons, fmt.Sprintf("every GPU of flavor %s that can be given is healthy", flavor))
			continue
		}
		nodes, err := c.nodesOfFlavor(ctx, flavor, own, now)
		if err != nil {
			return nil, false, err
		}
		for _, d := range specDemands(wl, flavor) {
			if ok, _ := fitVerdict(d, nodes); !ok {
				return nil, false, nil
			}
		}
		reasons = append(reasons, fmt.Sprintf("it fits on the healthy free GPUs of flavor %s", flavor))
	}
	// No flavor of its ClusterQueue has GPUs: not pre-approved.
	return reasons, len(reasons) > 0, nil
}

// flavorOffersHealthyOnly is offersHealthyOnly of the flavor's nodes, from a few of
// them: a verdict on every waiting workload must not walk the fleet. Only a node whose
// agent reports a GPU Unhealthy that no pod holds can offer a failing GPU
// (chamberkueue.IndexGPUNodeFailing), and of the others one schedulable node
// (chamberkueue.IndexNodeSchedulable) says as much as all of them.
func (c *Controller) flavorOffersHealthyOnly(ctx context.Context, flavor kueue.ResourceFlavorReference, own func(*corev1.Pod) bool, now time.Time) (bool, error) {
	ofFlavor, err := c.flavorNodes(ctx, flavor)
	if err != nil {
		return false, err
	}
	var candidates corev1.NodeList
	if err := c.client.List(ctx, &candidates, client.MatchingFields{chamberkueue.IndexNodeSchedulable: chamberkueue.SchedulableValue},
		client.MatchingLabelsSelector{Selector: ofFlavor}, client.Limit(1), client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("list schedulable nodes of flavor %s: %w", flavor, err)
	}
	var failing chamber.GPUNodeList
	if err := c.client.List(ctx, &failing, client.MatchingFields{chamberkueue.IndexGPUNodeFailing: chamberkueue.FailingValue}, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("list GPUNodes with failing GPUs: %w", err)
	}
	for i := range failing.Items {
		var node corev1.Node
		err := c.client.Get(ctx, client.ObjectKey{Name: failing.Items[i].Name}, &node, client.UnsafeDisableDeepCopy)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("get node %s: %w", failing.Items[i].Name, err)
		}
		if err == nil && ofFlavor.Matches(labels.Set(node.Labels)) {
			candidates.Items = append(candidates.Items, node)
		}
	}
	nodes := make([]NodeGPUs, 0, len(candidates.Items))
	for i := range candidates.Items {
		n, err := c.nodeGPUs(ctx, &candidates.Items[i], own, now)
		if err != nil {
			return false, err
		}
		nodes = append(nodes, n)
	}
	return offersHealthyOnly(nodes), nil
}

// leaveForReservation leaves the check to its verdict at reservation: Pending. A
// waiting workload's check is Pending already, unless a Retry from before its last
// eviction is left on it, which Kueue would hold the workload on forever.
func (c *Controller) leaveForReservation(ctx context.Context, wl *kueue.Workload, check *kueue.AdmissionCheckState) error {
	if check == nil || check.State != kueue.CheckStateRetry {
		return nil
	}
	return c.setCheck(ctx, wl, kueue.CheckStatePending, "Back in the queue; the check decides when Kueue reserves quota")
}

// clusterQueueOf is the ClusterQueue of the workload's LocalQueue; nil when either is
// not there (yet).
func (c *Controller) clusterQueueOf(ctx context.Context, wl *kueue.Workload) (*kueue.ClusterQueue, error) {
	if wl.Spec.QueueName == "" {
		return nil, nil
	}
	var lq kueue.LocalQueue
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: wl.Namespace, Name: string(wl.Spec.QueueName)}, &lq, client.UnsafeDisableDeepCopy); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	var cq kueue.ClusterQueue
	if err := c.client.Get(ctx, client.ObjectKey{Name: string(lq.Spec.ClusterQueue)}, &cq, client.UnsafeDisableDeepCopy); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &cq, nil
}

// hasCheck: the ClusterQueue runs Chamber's check on its workloads.
func hasCheck(cq *kueue.ClusterQueue) bool {
	return cq.Spec.AdmissionChecksStrategy != nil && slices.ContainsFunc(cq.Spec.AdmissionChecksStrategy.AdmissionChecks,
		func(r kueue.AdmissionCheckStrategyRule) bool { return r.Name == chamber.AdmissionCheckName })
}

// specDemands are the GPU pod sets the workload asks for, on flavor.
func specDemands(wl *kueue.Workload, flavor kueue.ResourceFlavorReference) []podSetDemand {
	var out []podSetDemand
	for i := range wl.Spec.PodSets {
		ps := &wl.Spec.PodSets[i]
		if per := kube.PodGPUs(&ps.Template.Spec); per > 0 && ps.Count > 0 {
			out = append(out, podSetDemand{Name: ps.Name, Count: ps.Count, PerPod: per, Flavor: flavor})
		}
	}
	return out
}

// healthy: every node can take pods and offers no failing GPU.
func healthy(nodes []NodeGPUs) bool {
	for _, n := range nodes {
		if !n.Schedulable || n.OfferedFailing() > 0 {
			return false
		}
	}
	return true
}

// offersHealthyOnly: some node can take pods, and none that can offers a failing GPU.
// A cordoned or tainted node (an isolated one) is no obstacle: kube-scheduler and
// Kueue's topology-aware scheduling, which leaves unschedulable nodes out, give it no
// pod; nor are failing GPUs that the device plugin withholds or a GPU hold takes.
// One fault in the fleet must not put every admission back on the check's round trip.
func offersHealthyOnly(nodes []NodeGPUs) bool {
	schedulable := false
	for _, n := range nodes {
		if !n.Schedulable {
			continue
		}
		schedulable = true
		if n.OfferedFailing() > 0 {
			return false
		}
	}
	return schedulable
}

// preApproved reports whether the check was set Ready before the workload's quota was
// reserved and the reservation is recent enough to verify: within the placement
// timeout, and one recheck past it to act on the timeout.
func (c *Controller) preApproved(wl *kueue.Workload, check *kueue.AdmissionCheckState) bool {
	if check.State != kueue.CheckStateReady || !strings.HasPrefix(check.Message, preApprovedPrefix) {
		return false
	}
	reserved := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	return reserved != nil && c.opts.Clock.Since(reserved.LastTransitionTime.Time) < c.opts.PlacementTimeout+c.opts.Recheck
}

// podsPlaced reports whether every pod of the workload's admission is bound to a node.
func (c *Controller) podsPlaced(ctx context.Context, wl *kueue.Workload) (bool, error) {
	want := int32(0)
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		want += ptr.Deref(psa.Count, 1)
	}
	pods, err := c.podsOf(ctx, wl)
	if err != nil {
		return false, err
	}
	bound := int32(0)
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed {
			bound++
		}
	}
	return bound >= want, nil
}

// verifyAtReservation looks again at a pre-approved workload once Kueue has given it
// quota (and, pre-approved, admitted it in the same write). The GPUs it was given
// still healthy: nothing to write. GPUs failed meanwhile and its pods no longer fit
// on healthy ones: back to the queue (Retry) at once, before they start on failing
// GPUs. Its nodes only cordoned, tainted or full (kube-scheduler keeps its pods off
// them): it waits, as any workload does at reservation, up to the placement timeout.
// Once its pods are bound there is nothing left to verify: a node cordoned under
// running pods does not send them back.
func (c *Controller) verifyAtReservation(ctx context.Context, wl *kueue.Workload) (reconcile.Result, error) {
	if placed, err := c.podsPlaced(ctx, wl); placed || err != nil {
		return reconcile.Result{}, err // its pods have landed: nothing left to verify
	}
	now := c.opts.Clock.Now()
	own := ownedBy(ownerUIDs(wl))
	stillHealthy, failing := true, false
	for _, d := range demands(wl.Status.Admission) {
		var nodes []NodeGPUs
		if d.Topology != nil {
			placed, err := c.nodesOfAssignment(ctx, d.Topology, own, now)
			if err != nil {
				return reconcile.Result{}, err
			}
			hosts := 0
			for range utiltas.LowestLevelValues(d.Topology) {
				hosts++
			}
			if len(placed) < hosts {
				stillHealthy = false // a node it was given is gone
			}
			for _, n := range placed {
				nodes = append(nodes, n)
			}
		} else {
			var err error
			if nodes, err = c.nodesOfFlavor(ctx, d.Flavor, own, now); err != nil {
				return reconcile.Result{}, err
			}
		}
		stillHealthy = stillHealthy && healthy(nodes)
		failing = failing || slices.ContainsFunc(nodes, func(n NodeGPUs) bool { return n.OfferedFailing() > 0 })
	}
	if stillHealthy {
		return reconcile.Result{}, nil
	}
	verdict, err := c.verdict(ctx, wl, now)
	if err != nil || verdict.Ready {
		return reconcile.Result{}, err
	}
	waited := now.Sub(apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved).LastTransitionTime.Time)
	var msg string
	switch {
	case failing:
		msg = "GPUs failed between pre-approval and reservation; the workload goes back to the queue: " + verdict.Message
	case waited >= c.opts.PlacementTimeout:
		msg = fmt.Sprintf("No healthy GPUs for the workload after %s; its quota goes back to the queue: %s", waited.Round(time.Second), verdict.Message)
	default:
		return reconcile.Result{RequeueAfter: min(c.opts.Recheck, c.opts.PlacementTimeout-waited)}, nil
	}
	c.metrics.verdicts.WithLabelValues("retry").Inc()
	c.recorder.Eventf(wl, nil, corev1.EventTypeWarning, "NoHealthyGPUs", "Requeue", "%s", msg)
	return reconcile.Result{}, c.setCheck(ctx, wl, kueue.CheckStateRetry, msg)
}
