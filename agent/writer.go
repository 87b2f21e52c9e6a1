package agent

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
)

// countWrite records one API write for chamber_agent_api_writes_total.
func (a *Agent) countWrite(object string, err error) {
	result := "success"
	if err != nil {
		result = "error"
	} else {
		a.passWrites++
	}
	a.writes.WithLabelValues(object, result).Inc()
}

// loadGPUNode reads the node's GPUNode, creating it when absent. A GPUNode left by an
// earlier agent is kept: its conditions' transition times carry over.
func (a *Agent) loadGPUNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var gn chamberv1alpha1.GPUNode
	err := a.client.Get(ctx, client.ObjectKey{Name: a.cfg.NodeName}, &gn)
	if err == nil {
		a.gpuNode = &gn
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get GPUNode %s: %w", a.cfg.NodeName, err)
	}
	if !a.nodeLoaded {
		if err := a.loadNode(ctx); err != nil {
			return err
		}
	}
	gn = chamberv1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}
	if a.nodeUID != "" {
		// Owned by its Node, so deleting the Node garbage-collects the GPUNode.
		gn.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: a.cfg.NodeName, UID: types.UID(a.nodeUID)}}
	}
	err = a.client.Create(ctx, &gn)
	a.countWrite("GPUNode", err)
	if err != nil {
		return fmt.Errorf("create GPUNode %s: %w", a.cfg.NodeName, err)
	}
	a.log.Info("Created GPUNode", "name", gn.Name)
	a.gpuNode = &gn
	return nil
}

// writeGPUNode replaces the GPUNode's status. The agent is the status's only writer, so
// an update of the whole status is simplest; a conflict (someone edited the object) or
// a deleted GPUNode is read again and retried once.
func (a *Agent) writeGPUNode(ctx context.Context, status chamberv1alpha1.GPUNodeStatus) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		gn := a.gpuNode.DeepCopy()
		gn.Status = status
		err := a.client.Status().Update(ctx, gn)
		a.countWrite("GPUNode", err)
		if err == nil {
			a.gpuNode = gn
			return nil
		}
		if attempt > 0 || !(apierrors.IsConflict(err) || apierrors.IsNotFound(err)) {
			a.gpuNode = nil // read it again before the retry
			return fmt.Errorf("update GPUNode %s status: %w", a.cfg.NodeName, err)
		}
		if err := a.loadGPUNode(ctx); err != nil {
			return err
		}
	}
}

// loadNode reads the Node's UID and its GPUHealthy condition. A missing Node is not an
// error: it is logged once, and looked for again at heartbeats.
func (a *Agent) loadNode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var node corev1.Node
	err := a.client.Get(ctx, client.ObjectKey{Name: a.cfg.NodeName}, &node)
	switch {
	case apierrors.IsNotFound(err):
		if !a.nodeGone {
			a.log.Info("Node not found: the GPUHealthy node condition is not set until it exists", "node", a.cfg.NodeName)
		}
		a.nodeLoaded, a.nodeGone = true, true
		return nil
	case err != nil:
		return fmt.Errorf("get Node %s: %w", a.cfg.NodeName, err)
	}
	a.nodeLoaded, a.nodeGone, a.nodeUID, a.nodeCond = true, false, string(node.UID), nil
	for i, c := range node.Status.Conditions {
		if string(c.Type) == chamberv1alpha1.ConditionGPUHealthy {
			a.nodeCond = &node.Status.Conditions[i]
		}
	}
	return nil
}

// patchNodeCondition sets the Node's GPUHealthy condition with a strategic merge patch
// of the status, which merges conditions by type: the kubelet's own are left alone and
// the Node need not be read first.
func (a *Agent) patchNodeCondition(ctx context.Context, c corev1.NodeCondition) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}
	err = a.client.Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch))
	a.countWrite("Node", err)
	if apierrors.IsNotFound(err) {
		a.nodeGone = true
		a.log.Info("Node not found: the GPUHealthy node condition is not set until it exists", "node", a.cfg.NodeName)
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch Node %s condition %s: %w", a.cfg.NodeName, c.Type, err)
	}
	a.nodeCond = &c
	return nil
}
