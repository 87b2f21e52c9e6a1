package isolation

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

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

// A fault's reason becomes the value of Chamber's taint, which the API server takes
// only as a label value.
func TestTaintValue(t *testing.T) {
	long := "NVRM/Xid 79 GPU has fallen off the bus, then the PCIe link went down twice on slot 0000:1b:00"
	for name, tc := range map[string]struct {
		reason string
		want   string
	}{
		"an XID":                 {reason: "XID79", want: "XID79"},
		"spaces and slashes":     {reason: "GPU fell off/the bus", want: "GPU_fell_off_the_bus"},
		"ends that are no alnum": {reason: " (ECC) ", want: "ECC"},
		"nothing usable":         {reason: "  //  ", want: "GPUUnhealthy"},
		"not ASCII":              {reason: "Überhitzung", want: "berhitzung"},
		// Its head, and the first 10 hex digits of the sha256 of the whole, sanitized.
		"over 63 characters": {reason: long, want: "NVRM_Xid_79_GPU_has_fallen_off_the_bus__then_the_PCI-f0b9057cfd"},
	} {
		t.Run(name, func(t *testing.T) {
			got := fault{reason: tc.reason}.taintValue()
			if got != tc.want {
				t.Errorf("taintValue(%q) = %q, want %q", tc.reason, got, tc.want)
			}
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 || got == "" {
				t.Errorf("taintValue(%q) = %q, not a label value: %v", tc.reason, got, errs)
			}
		})
	}
}
