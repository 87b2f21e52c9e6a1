package workload

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// TestAfterNotice: which pods being deleted get the short grace, and which keep
// theirs.
func TestAfterNotice(t *testing.T) {
	deadline := now
	// pod is being deleted with grace seconds, asked for at deletedAt.
	pod := func(deletedAt time.Time, grace int64, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Annotations:                annotations,
			DeletionTimestamp:          ptr.To(metav1.NewTime(deletedAt.Add(time.Duration(grace) * time.Second))),
			DeletionGracePeriodSeconds: ptr.To(grace),
		}}
	}
	noticed := func(extra ...string) map[string]string {
		a := map[string]string{chamber.AnnotationEvictionDeadline: deadline.Format(time.RFC3339)}
		for i := 0; i+1 < len(extra); i += 2 {
			a[extra[i]] = extra[i+1]
		}
		return a
	}
	reader := []string{chamber.AnnotationCheckpointOnNotice, "true"}
	tests := map[string]struct {
		pod  *corev1.Pod
		want int64 // 0: keeps its grace
	}{
		"checkpoints on notice, stopped when the notice ran out": {
			pod: pod(deadline.Add(2*time.Second), 300, noticed(reader...)), want: 30,
		},
		"stopped at the deadline's second": {
			pod: pod(deadline, 300, noticed(reader...)), want: 30,
		},
		"not marked: a job that only handles SIGTERM needs its grace": {
			pod: pod(deadline.Add(2*time.Second), 300, noticed()),
		},
		"marked with another value": {
			pod: pod(deadline.Add(2*time.Second), 300, noticed(chamber.AnnotationCheckpointOnNotice, "yes")),
		},
		"stopped during its notice (it answered, or Kueue preempted it first)": {
			pod: pod(deadline.Add(-time.Minute), 300, noticed(reader...)),
		},
		"stopped long after a notice that led nowhere": {
			pod: pod(deadline.Add(time.Hour), 300, noticed(reader...)),
		},
		"its grace is no longer than the short one": {
			pod: pod(deadline.Add(2*time.Second), 30, noticed(reader...)),
		},
		"no notice": {
			pod: pod(deadline.Add(2*time.Second), 300, map[string]string{chamber.AnnotationCheckpointOnNotice: "true"}),
		},
		"a deadline that is no time": {
			pod: pod(deadline.Add(2*time.Second), 300, map[string]string{chamber.AnnotationCheckpointOnNotice: "true", chamber.AnnotationEvictionDeadline: "soon"}),
		},
		"not being deleted": {
			pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: noticed(reader...)}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := afterNotice(tc.pod, 30)
			if ok != (tc.want != 0) || got != tc.want {
				t.Errorf("afterNotice = %d, %v; want %d, %v", got, ok, tc.want, tc.want != 0)
			}
		})
	}
}

func TestWholeSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{30 * time.Second: 30, 1500 * time.Millisecond: 2, 250 * time.Millisecond: 1, 0: 1} {
		if got := wholeSeconds(d); got != want {
			t.Errorf("wholeSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
