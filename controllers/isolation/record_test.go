package isolation

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func nodeWith(annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: annotations}}
}

// What Chamber writes it reads back the same, and an isolation's end leaves only the
// time of an operator's clear.
func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	want := record{Isolated: true, At: at, Reason: "XID79 on GPU 3", Persistent: true, Level: chamber.IsolateNode,
		GPUs: []int{3, 5}, Tainted: true, Cordoned: true, Healthy: 2, HealthyAt: at.Add(1500 * time.Millisecond),
		ClearedAt: at.Add(-time.Hour)}
	n := nodeWith(map[string]string{"other": "kept", chamber.AnnotationIsolationClearedAt: want.ClearedAt.Format(time.RFC3339Nano)})
	want.write(n)
	got, err := readRecord(n)
	if err != nil {
		t.Fatalf("readRecord: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("read back (-written +read):\n%s", diff)
	}

	(record{}).write(n)
	if diff := cmp.Diff(map[string]string{"other": "kept", chamber.AnnotationIsolationClearedAt: want.ClearedAt.Format(time.RFC3339Nano)}, n.Annotations); diff != "" {
		t.Errorf("annotations after the end (-want +got):\n%s", diff)
	}
}

// An annotation Chamber cannot read is named in the error with what it should be; the
// others are read, and a change elsewhere leaves it as it is.
func TestRecordMalformed(t *testing.T) {
	n := nodeWith(map[string]string{
		chamber.AnnotationIsolatedAt:              "yesterday",
		chamber.AnnotationIsolationReason:         "XID48 on GPU 1",
		chamber.AnnotationIsolationPersistent:     "false",
		chamber.AnnotationIsolationLevel:          "Rack",
		chamber.AnnotationIsolatedGPUs:            "1,x",
		chamber.AnnotationIsolationHealthyReports: "2", // the count without its heartbeat
	})
	rec, err := readRecord(n)
	if err == nil {
		t.Fatal("readRecord: no error, want one per unreadable annotation")
	}
	for _, key := range []string{chamber.AnnotationIsolatedAt, chamber.AnnotationIsolationLevel, chamber.AnnotationIsolatedGPUs, chamber.AnnotationIsolationHealthyReports} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not name %s", err, key)
		}
	}
	if strings.Contains(err.Error(), chamber.AnnotationIsolationReason+"=") || strings.Contains(err.Error(), chamber.AnnotationIsolationPersistent+"=") {
		t.Errorf("error %q names an annotation that reads", err)
	}
	want := record{Isolated: true, Reason: "XID48 on GPU 1"}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}

	next := rec
	next.Healthy, next.HealthyAt = 1, time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if diff := cmp.Diff(map[string]any{chamber.AnnotationIsolationHealthyReports: "1@2026-12-03T10:00:00Z"}, changes(rec, next)); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}
