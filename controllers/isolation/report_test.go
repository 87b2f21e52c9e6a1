package isolation

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// An operator's isolation is a fault of the whole node that only a clear ends, and it
// is the operator's (no dry run, limit or breaker); a node being cleared has none.
func TestOperatorFault(t *testing.T) {
	healthy := report{health: chamber.GPUHealthy, hasAgent: true}
	node := func(annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: annotations}}
	}
	rep := healthy.withOperator(node(map[string]string{chamber.AnnotationIsolate: "fan replacement"}))
	if rep.health != chamber.GPUUnhealthy || !rep.byOperator() {
		t.Fatalf("isolate annotation: health %s, byOperator %t; want Unhealthy by the operator", rep.health, rep.byOperator())
	}
	if f := rep.primary(); f.gpu != nodeWide || !f.persistent || f.reason != ReasonOperator {
		t.Errorf("primary fault %+v, want the operator's, node-wide and persistent", f)
	}
	if level, _ := rep.level(chamber.IsolateGPU); level != chamber.IsolateNode {
		t.Errorf("level under a pool's GPU level: %s, want Node (the fault names no GPU)", level)
	}
	if got, want := rep.describe(), "Operator on the node (isolated by an operator: fan replacement)"; got != want {
		t.Errorf("describe() = %q, want %q", got, want)
	}
	for name, a := range map[string]map[string]string{
		"no annotation": nil,
		"empty reason":  {chamber.AnnotationIsolate: ""},
		"being cleared": {chamber.AnnotationIsolate: "fan replacement", chamber.AnnotationIsolationClear: "true"},
	} {
		if rep := healthy.withOperator(node(a)); rep.health != chamber.GPUHealthy || rep.byOperator() {
			t.Errorf("%s: health %s, byOperator %t; want the agent's report alone", name, rep.health, rep.byOperator())
		}
	}
	withXID := report{health: chamber.GPUUnhealthy, faults: []fault{{gpu: 3, reason: "XID79"}}}
	if withXID.byOperator() {
		t.Error("an XID is taken for an operator's isolation")
	}
}
