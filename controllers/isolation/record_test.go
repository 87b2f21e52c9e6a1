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

// FuzzReadRecord: whatever a person writes into the isolation annotations, reading them
// never fails the controller, and the record Chamber writes back from what it read
// reads back the same (what it could not read, it writes anew).
func FuzzReadRecord(f *testing.F) {
	f.Add("2026-12-03T10:00:00Z", "XID79 on GPU 3", "true", "Node", "3,5", "true", "2@2026-12-03T10:00:01.5Z")
	f.Add("yesterday", "", "maybe", "Rack", "1,x", "yes", "2")
	f.Add("", "", "", "", "", "", "")
	f.Add("2026-12-03T10:00:00.123+02:00", "r", "false", "GPU", "-1", "false", "-3@2026-12-03T10:00:00Z")
	f.Fuzz(func(t *testing.T, at, reason, persistent, level, gpus, tainted, healthy string) {
		n := nodeWith(map[string]string{
			chamber.AnnotationIsolatedAt: at, chamber.AnnotationIsolationReason: reason,
			chamber.AnnotationIsolationPersistent: persistent, chamber.AnnotationIsolationLevel: level,
			chamber.AnnotationIsolatedGPUs: gpus, chamber.AnnotationIsolationTainted: tainted,
			chamber.AnnotationIsolationHealthyReports: healthy,
		})
		first, _ := readRecord(n)
		first.write(n)
		second, err := readRecord(n)
		if err != nil {
			t.Fatalf("Chamber cannot read what it wrote from %+v: %v", first, err)
		}
		second.write(n)
		third, _ := readRecord(n)
		if diff := cmp.Diff(second, third); diff != "" {
			t.Errorf("the record changes as it is written and read again (-before +after):\n%s", diff)
		}
	})
}
