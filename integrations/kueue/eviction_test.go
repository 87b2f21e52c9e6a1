package kueue

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
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
	want := Eviction{Reason: "GPUFault", Message: "XID 79 on node-3", RequestedAt: now, GracePeriod: &grace, Pause: true, Admission: -1}
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

// A request is for the admission it was asked in: once the workload has been evicted
// since (Kueue counts every eviction in its scheduling statistics, and so does
// Chamber's), it is done and does not evict the next admission. One written by hand,
// without the count, is for the current admission.
func TestRequestOutlivedByAnEviction(t *testing.T) {
	evicted := func(counts ...int32) *kueue.Workload {
		wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if counts != nil {
			wl.Status.SchedulingStats = &kueue.SchedulingStats{}
			for _, n := range counts {
				wl.Status.SchedulingStats.Evictions = append(wl.Status.SchedulingStats.Evictions,
					kueue.WorkloadSchedulingStatsEviction{Reason: kueue.WorkloadEvictedByPreemption, Count: n})
			}
		}
		return wl
	}
	cases := map[string]struct {
		askedAt, now *kueue.Workload
		byHand       bool
		want         bool
	}{
		"asked on the first admission, still on it":       {askedAt: evicted(), now: evicted()},
		"asked on the first admission, evicted since":     {askedAt: evicted(), now: evicted(1), want: true},
		"asked after two evictions, still on that one":    {askedAt: evicted(1, 1), now: evicted(1, 1)},
		"asked after two evictions, evicted by Kueue too": {askedAt: evicted(1, 1), now: evicted(2, 1), want: true},
		"written by hand, evicted since":                  {askedAt: evicted(), now: evicted(3), byHand: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := Eviction{Reason: "IdleReclaim", RequestedAt: now, Admission: Evictions(tc.askedAt)}
			for k, v := range e.annotations() {
				if v != nil && !(tc.byHand && k == chamber.AnnotationEvictionAdmission) {
					tc.now.Annotations[k] = v.(string)
				}
			}
			got, ok := RequestedEviction(tc.now)
			if !ok {
				t.Fatal("RequestedEviction() found none")
			}
			if out := got.Outlived(tc.now); out != tc.want {
				t.Errorf("Outlived() = %t, want %t (asked after %d evictions, now %d)", out, tc.want, Evictions(tc.askedAt), Evictions(tc.now))
			}
		})
	}
}

// A requester's marks land in the same write as its request: a controller reading
// its cache between two writes saw the marks without the request, took the request
// for dropped and removed them, and let the paused workload go at once.
func TestRequestEvictionWritesMarksWithTheRequest(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kueue.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	marks := map[string]string{chamber.AnnotationRoomPausedFor: "prod/train", chamber.AnnotationRoomPausedAt: now.Format(time.RFC3339)}
	hour := time.Hour
	cases := map[string]struct {
		have        map[string]string
		wantPatches int
		wantMarks   bool
	}{
		"no request there": {wantPatches: 1, wantMarks: true},
		"a sooner request stays, without the marks": {
			have:        map[string]string{chamber.AnnotationEvictionReason: chamber.ReasonGPUFault, chamber.AnnotationEvictionRequestedAt: now.Format(time.RFC3339), chamber.AnnotationEvictionGracePeriod: "0s"},
			wantPatches: 0,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "job-a", Annotations: tc.have}}
			patches := 0
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(wl).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					patches++
					return c.Patch(ctx, obj, patch, opts...)
				},
			}).Build()
			e := Eviction{Reason: "RoomForBigJob", Message: "room", RequestedAt: now, GracePeriod: &hour, Pause: true, Marks: marks}
			if err := RequestEviction(context.Background(), c, wl.DeepCopy(), e); err != nil {
				t.Fatal(err)
			}
			if patches != tc.wantPatches {
				t.Errorf("RequestEviction() wrote %d patches, want %d", patches, tc.wantPatches)
			}
			var got kueue.Workload
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(wl), &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range marks {
				if has := got.Annotations[k] == v; has != tc.wantMarks {
					t.Errorf("mark %s written: %t, want %t", k, has, tc.wantMarks)
				}
			}
			if tc.wantMarks {
				if r, ok := RequestedEviction(&got); !ok || r.Reason != e.Reason || !r.Pause {
					t.Errorf("RequestedEviction() after the request = %+v, %t; want a pause for %s", r, ok, e.Reason)
				}
			}
		})
	}
}

// Whatever the eviction annotations hold (written by hand, cut short, from another
// version), reading them never fails and never yields a negative grace period; what
// is read, written again as RequestEviction writes it, reads back the same (the time
// to the second: RFC 3339 as written).
func FuzzRequestedEviction(f *testing.F) {
	f.Add("GPUFault", "XID 79", "2026-11-29T12:00:00Z", "90s", "true")
	f.Add("IdleReclaim", "", "2026-11-29T12:00:00.5+05:00", "-1s", "false")
	f.Add("", "no reason", "yesterday", "1h", "")
	f.Add("RoomForBigJob", "m", "", "9999999999h", "TRUE")
	f.Fuzz(func(t *testing.T, reason, message, at, grace, pause string) {
		wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			chamber.AnnotationEvictionReason: reason, chamber.AnnotationEvictionMessage: message,
			chamber.AnnotationEvictionRequestedAt: at, chamber.AnnotationEvictionGracePeriod: grace,
			chamber.AnnotationEvictionPause: pause,
		}}}
		e, ok := RequestedEviction(wl)
		if ok != (reason != "") {
			t.Fatalf("RequestedEviction() found a request: %t, with reason %q", ok, reason)
		}
		if !ok {
			return
		}
		if e.GracePeriod != nil && *e.GracePeriod < 0 {
			t.Fatalf("grace period %q read as %s", grace, *e.GracePeriod)
		}
		if y := e.RequestedAt.UTC().Year(); y < 0 || y > 9999 {
			return // RFC 3339 has four-digit years: an offset pushed it out of them
		}
		again := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		for k, v := range e.annotations() {
			if v != nil {
				again.Annotations[k] = v.(string)
			}
		}
		back, ok := RequestedEviction(again)
		if !ok {
			t.Fatalf("the request %+v, written again, reads as none", e)
		}
		if !back.RequestedAt.Equal(e.RequestedAt.Truncate(time.Second)) {
			t.Fatalf("requested at %s read back as %s", e.RequestedAt, back.RequestedAt)
		}
		back.RequestedAt, e.RequestedAt = time.Time{}, time.Time{}
		if diff := cmp.Diff(e, back); diff != "" {
			t.Fatalf("written again and read back (-read +back):\n%s", diff)
		}
	})
}
