package inventory

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// Informer events reach the model's Set and Delete, tombstones included; objects of
// another type are dropped.
func TestHandle(t *testing.T) {
	var got []string
	h := handle(func(n *corev1.Node) { got = append(got, "set "+n.Name) }, func(n *corev1.Node) { got = append(got, "delete "+n.Name) })
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

	h.OnAdd(node("a"), true)
	h.OnUpdate(node("a"), node("b"))
	h.OnDelete(node("c"))
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "d", Obj: node("d")})
	h.OnAdd(&corev1.Pod{}, false)
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "e", Obj: &corev1.Pod{}})

	want := []string{"set a", "set b", "delete c", "delete d"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}
