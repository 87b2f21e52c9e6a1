package kueue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestEvictsSooner(t *testing.T) {
	zero, hour := time.Duration(0), time.Hour
	cases := map[string]struct {
		next, have Eviction
		want       bool
	}{
		"a request without its own grace never replaces one": {next: Eviction{RequestedAt: now}, have: Eviction{RequestedAt: now, GracePeriod: &hour}},
		"an immediate one replaces a policy one":             {next: Eviction{RequestedAt: now, GracePeriod: &zero}, have: Eviction{RequestedAt: now}, want: true},
		"an earlier deadline replaces a later one":           {next: Eviction{RequestedAt: now, GracePeriod: &zero}, have: Eviction{RequestedAt: now, GracePeriod: &hour}, want: true},
		"a later deadline does not":                          {next: Eviction{RequestedAt: now.Add(2 * time.Hour), GracePeriod: &zero}, have: Eviction{RequestedAt: now, GracePeriod: &hour}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := evictsSooner(tc.next, tc.have); got != tc.want {
				t.Errorf("evictsSooner() = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestRequestedEvictionRoundTrip(t *testing.T) {
	grace := 90 * time.Second
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		chamber.AnnotationEvictionReason: "GPUFault", chamber.AnnotationEvictionMessage: "XID 79 on node-3",
		chamber.AnnotationEvictionRequestedAt: now.Format(time.RFC3339), chamber.AnnotationEvictionGracePeriod: grace.String(),
		chamber.AnnotationEvictionPause: "true",
	}}}
	got, ok := RequestedEviction(wl)
	want := Eviction{Reason: "GPUFault", Message: "XID 79 on node-3", RequestedAt: now, GracePeriod: &grace, Pause: true}
	if !ok {
		t.Fatal("RequestedEviction() found none")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RequestedEviction() (-want +got):\n%s", diff)
	}
	if _, ok := RequestedEviction(&kueue.Workload{}); ok {
		t.Error("RequestedEviction() of a workload without the annotations found one")
	}
}
