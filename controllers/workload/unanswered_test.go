package workload_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// TestUnansweredNoticeEndsWithAShortGrace: two jobs whose pods have the 5-minute
// terminationGracePeriodSeconds Chamber's policy gives them get a 4-second notice and
// answer neither. The one marked chamber.dev/checkpoint-on-notice (its job reads the
// notice: it had its chance, and is hung) is stopped with the short grace, and its
// GPUs free within seconds; the other, which may only handle SIGTERM, keeps its 5
// minutes to checkpoint.
func TestUnansweredNoticeEndsWithAShortGrace(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx := context.Background()
	const notice = 4 * time.Second
	teamFixture(t, "unanswered", 8, []string{"unanswered-1"}, nil, func(tm *chamber.Team) {
		tm.Spec.Eviction = &chamber.EvictionPolicy{GracePeriod: &metav1.Duration{Duration: notice}}
	})
	const sigterm = int64(300)
	for name, marked := range map[string]bool{"hung": true, "sigterm-only": false} {
		j := job("unanswered", name, 4, "standard").
			// kwok removes a terminating pod at its deletionTimestamp, as the kubelet
			// kills a process still running at the end of its grace.
			PodAnnotation("pod-delete.stage.kwok.x-k8s.io/delay", "1h").
			PodAnnotation("pod-delete.stage.kwok.x-k8s.io/jitter-delay", "1h")
		if marked {
			j = j.PodAnnotation(chamber.AnnotationCheckpointOnNotice, "true")
		}
		obj := j.Obj()
		obj.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To(sigterm)
		create(t, obj)
		t.Cleanup(func() {
			for _, p := range podsOf(newG(t), "unanswered", name) {
				_ = k8s.Delete(context.Background(), &p, client.GracePeriodSeconds(0))
			}
		})
	}
	stopped := func(g gomega.Gomega) float64 {
		return controllertest.MetricValue(g, "chamber_eviction_notices_ran_out_total", "reason", "TestEviction")
	}
	before := stopped(g)
	for _, j := range []string{"hung", "sigterm-only"} {
		g.Eventually(func(g gomega.Gomega) { runningOn(g, "unanswered", j) }).Should(gomega.Succeed())
		if err := chamberkueue.RequestEviction(ctx, k8s, workloadOf(g, "unanswered", j), chamberkueue.Eviction{
			Reason: "TestEviction", Message: "the test asks", RequestedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}

	// Both are evicted at their deadline; the Job controller deletes their pods with
	// their 300 s; the marked one's is cut to afterNotice and kwok removes it then.
	// (Kueue may admit the requeued job again meanwhile, and it gets a new pod.)
	deleting := func(g gomega.Gomega, j string) corev1.Pod {
		var out []corev1.Pod
		for _, p := range podsOf(g, "unanswered", j) {
			if p.DeletionTimestamp != nil {
				out = append(out, p)
			}
		}
		g.Expect(out).To(gomega.HaveLen(1), "%s's pod is being deleted", j)
		return out[0]
	}
	var hung corev1.Pod
	g.Eventually(func(g gomega.Gomega) { hung = deleting(g, "hung") }).Should(gomega.Succeed())
	g.Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(&hung), &corev1.Pod{}) }).
		WithTimeout(time.Minute).Should(gomega.Satisfy(apierrors.IsNotFound), "the hung job's pod is gone, its GPUs free, well before its 300 s")
	g.Expect(stopped(g)-before).To(gomega.Equal(1.0), "the hung pod is counted, once")
	p := deleting(g, "sigterm-only")
	g.Expect(p.DeletionGracePeriodSeconds).To(gomega.HaveValue(gomega.Equal(sigterm)), "a pod not marked keeps its SIGTERM grace")

	g.Eventually(func(g gomega.Gomega) {
		var events eventsv1.EventList
		g.Expect(k8s.List(ctx, &events, client.InNamespace("unanswered"))).To(gomega.Succeed())
		var ranOut []string
		for _, e := range events.Items {
			if e.Reason == "EvictionNoticeRanOut" {
				ranOut = append(ranOut, e.Regarding.Name+": "+e.Note)
			}
		}
		g.Expect(ranOut).To(gomega.HaveExactElements(gomega.And(gomega.HavePrefix("hung-"),
			gomega.ContainSubstring(fmt.Sprintf("it gets %ds of SIGTERM grace, not 300s", int(afterNotice.Seconds()))))))
	}).Should(gomega.Succeed())
}
