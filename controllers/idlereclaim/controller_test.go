package idlereclaim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/test/controlplane"
)

// window is the pool's idle reclaim window in these tests. Their team, team-a, is
// theirs alone, so the metric deltas they read are their own.
const window = 10 * time.Minute

// world is the objects of one reconcile test: pool "pool" with idle reclaim on
// (window 10m), teams team-a and team-b, and team-a's Job "train": its Workload
// admitted with 8 H100s, its pod running on node n1, whose 8 GPUs are at 0%. A
// workload of team-b waits.
type world struct {
	pool    *chamber.GPUPool
	teams   []*chamber.Team
	job     *batchv1.Job
	wl      *kueue.Workload
	pod     *corev1.Pod
	node    *chamber.GPUNode
	waiting *kueue.Workload
	// others are more workloads, none at first.
	others []*kueue.Workload
	// flavor and nodes, none at first (room not measured): the ResourceFlavor of
	// the admission and its Nodes.
	flavor *kueue.ResourceFlavor
	nodes  []*corev1.Node
	// extraPods are pods of others, none at first.
	extraPods []*corev1.Pod
}

// withNodes gives the world flavor h100 and its nodes, each with gpus[i] GPUs; n1,
// where train runs, is the first.
func (w *world) withNodes(gpus ...int64) {
	w.flavor = &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: h100},
		Spec: kueue.ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "h100"}}}
	for i, n := range gpus {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		w.nodes = append(w.nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i+1), Labels: map[string]string{"gpu": "h100"}},
			Status:     corev1.NodeStatus{Capacity: corev1.ResourceList{kube.ResourceGPU: q}, Allocatable: corev1.ResourceList{kube.ResourceGPU: q}}})
	}
}

// waiterOf makes the world's waiting workload ask for pods x gpus GPUs.
func (w *world) waiterOf(pods int32, gpus string) {
	w.waiting.Spec.PodSets = []kueue.PodSet{*utiltesting.MakePodSet("main", int(pods)).Limit(kube.ResourceGPU, gpus).Obj()}
}

func newWorld() *world {
	jobUID := types.UID("uid-job-train")
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a", UID: jobUID}}
	pod := gpuPod("train-0", "n1", 8)
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: jobUID, Controller: ptr.To(true)}}
	wl := admittedWorkload("train", "team-a", "team-a").
		ControllerReference(batchv1.SchemeGroupVersion.WithKind("Job"), "train", string(jobUID)).Obj()
	team := func(name string) *chamber.Team {
		return &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{Pool: "pool"},
			Status: chamber.TeamStatus{ClusterQueue: name}}
	}
	return &world{
		pool: &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: chamber.GPUPoolSpec{
			IdleReclaim: &chamber.IdleReclaimPolicy{Enabled: ptr.To(true), Window: &metav1.Duration{Duration: window}}}},
		teams:   []*chamber.Team{team("team-a"), team("team-b")},
		job:     job,
		wl:      wl,
		pod:     pod,
		node:    report("n1", start, []int32{0, 0, 0, 0, 0, 0, 0, 0}, nil),
		waiting: waitingWorkload("wait", "team-b", start).Obj(),
	}
}

// run is a controller over the world's objects on a fake clock at start.
type run struct {
	t        *testing.T
	client   client.Client
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
	c        *Controller
}

func (w *world) start(t *testing.T, funcs interceptor.Funcs) *run {
	t.Helper()
	lqs, cqs := queues()
	objs := []client.Object{w.pool, w.job, w.wl, w.pod, w.node}
	for _, t := range w.teams {
		objs = append(objs, t)
	}
	if w.waiting != nil {
		objs = append(objs, w.waiting)
	}
	for _, o := range w.others {
		objs = append(objs, o)
	}
	if w.flavor != nil {
		objs = append(objs, w.flavor)
	}
	for _, n := range w.nodes {
		objs = append(objs, n)
	}
	for _, p := range w.extraPods {
		objs = append(objs, p)
	}
	for i := range lqs {
		objs = append(objs, &lqs[i])
	}
	for i := range cqs {
		objs = append(objs, &cqs[i])
	}
	c := fake.NewClientBuilder().WithScheme(controlplane.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, chamberkueue.IndexPodWorkload, chamberkueue.PodWorkloadKeys).
		WithIndex(&corev1.Pod{}, chamberkueue.IndexPodNode, chamberkueue.PodNode).
		WithIndex(&kueue.Workload{}, chamberkueue.IndexWorkloadPending, chamberkueue.PendingKeys).WithInterceptorFuncs(funcs).Build()
	r := &run{t: t, client: c, clock: clocktesting.NewFakeClock(start), recorder: events.NewFakeRecorder(100)}
	r.c = newController(c, c, r.recorder, Options{Interval: 30 * time.Second, Clock: r.clock})
	return r
}

// step moves the clock and has the agent write its report again, as it does at every
// heartbeat.
func (r *run) step(d time.Duration) {
	r.t.Helper()
	r.clock.Step(d)
	var gn chamber.GPUNode
	if err := r.client.Get(context.Background(), client.ObjectKey{Name: "n1"}, &gn); err != nil {
		r.t.Fatal(err)
	}
	gn.Status.LastHeartbeatTime = &metav1.Time{Time: r.clock.Now()}
	if err := r.client.Update(context.Background(), &gn); err != nil {
		r.t.Fatal(err)
	}
}

func (r *run) reconcile() (reconcile.Result, error) {
	return r.c.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "train"}})
}

func (r *run) mustReconcile() reconcile.Result {
	r.t.Helper()
	res, err := r.reconcile()
	if err != nil {
		r.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// warned counts the IdleGPUs warnings recorded so far.
func (r *run) warned() int {
	n := 0
	for {
		select {
		case e := <-r.recorder.Events:
			if strings.HasPrefix(e, "Warning "+ReasonIdleGPUs+" ") {
				n++
			}
		default:
			return n
		}
	}
}

// eviction is the eviction idle reclaim requested on the workload, if any.
func (r *run) eviction() (chamberkueue.Eviction, bool) {
	r.t.Helper()
	var wl kueue.Workload
	if err := r.client.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "train"}, &wl); err != nil {
		r.t.Fatal(err)
	}
	e, ok := chamberkueue.RequestedEviction(&wl)
	return e, ok && e.Reason == ReasonIdleReclaim
}

type counts struct{ warnings, evictions, gpuHours float64 }

func metricsOf(team string) counts {
	return counts{testutil.ToFloat64(warnings.WithLabelValues(team)), testutil.ToFloat64(evictions.WithLabelValues(team)),
		testutil.ToFloat64(idleAtReclaimGPUHours.WithLabelValues(team))}
}

func (c counts) minus(o counts) counts {
	return counts{c.warnings - o.warnings, c.evictions - o.evictions, c.gpuHours - o.gpuHours}
}

// TestReclaim: a workload idle while another waits is warned at once and its eviction
// is asked for when the window has passed, not a second earlier; busy, exempt and
// opted-out workloads are left alone.
func TestReclaim(t *testing.T) {
	cases := map[string]struct {
		change func(w *world)
		// wantWarned and wantEvicted: the IdleGPUs warning, and the eviction request
		// once the window has passed.
		wantWarned, wantEvicted bool
		// windows is how many windows the reclaim waits for (1 when 0).
		windows time.Duration
		// wantGrace is the request's own grace period; nil for the team's.
		wantGrace *time.Duration
	}{
		"idle while another team waits": {wantWarned: true, wantEvicted: true},
		"an interactive session: evicted without the checkpoint notice": {
			change:     func(w *world) { w.pod.Labels = map[string]string{chamber.LabelInteractive: "true"} },
			wantWarned: true, wantEvicted: true, wantGrace: ptr.To(time.Duration(0)),
		},
		"nobody waits": {
			change: func(w *world) { w.waiting = nil },
		},
		"busy": {
			change: func(w *world) { w.node.Status.GPUs[3].Utilization.GPUPercent = 40 },
		},
		"opted out on the Job": {
			change: func(w *world) { w.job.Annotations = map[string]string{chamber.AnnotationIdleReclaim: "false"} },
		},
		"opted out on the Workload": {
			change: func(w *world) { w.wl.Annotations = map[string]string{chamber.AnnotationIdleReclaim: "false"} },
		},
		"opted out on the pod": {
			change: func(w *world) { w.pod.Annotations = map[string]string{chamber.AnnotationIdleReclaim: "false"} },
		},
		"opted out on the Job, Workload and pod, in a pool that ignores opt-outs": {
			change: func(w *world) {
				for _, obj := range []metav1.Object{w.job, w.wl, w.pod} {
					obj.SetAnnotations(map[string]string{chamber.AnnotationIdleReclaim: "false"})
				}
				w.pool.Spec.IdleReclaim.WorkloadOptOut = chamber.OptOutIgnored
			},
			wantWarned: true, wantEvicted: true,
		},
		"an annotation that opts out of nothing": {
			change:     func(w *world) { w.job.Annotations = map[string]string{chamber.AnnotationIdleReclaim: "yes please"} },
			wantWarned: true, wantEvicted: true,
		},
		"production tier exempt by default": {
			change: func(w *world) { w.wl.Spec.PriorityClassRef = kueue.NewWorkloadPriorityClassRef("production") },
		},
		"standard tier reclaimed": {
			change:     func(w *world) { w.wl.Spec.PriorityClassRef = kueue.NewWorkloadPriorityClassRef("standard") },
			wantWarned: true, wantEvicted: true,
		},
		"team exempts another tier": {
			change: func(w *world) {
				w.wl.Spec.PriorityClassRef = kueue.NewWorkloadPriorityClassRef("production")
				w.teams[0].Spec.IdleReclaim = &chamber.IdleReclaimPolicy{ExemptTiers: []string{"preemptible"}}
			},
			wantWarned: true, wantEvicted: true,
		},
		"team turns idle reclaim off": {
			change: func(w *world) { w.teams[0].Spec.IdleReclaim = &chamber.IdleReclaimPolicy{Enabled: ptr.To(false)} },
		},
		"pool without a policy": {
			change: func(w *world) { w.pool.Spec.IdleReclaim = nil },
		},
		"team's own threshold": {
			change: func(w *world) {
				w.node.Status.GPUs[3].Utilization.GPUPercent = 40
				w.teams[0].Spec.IdleReclaim = &chamber.IdleReclaimPolicy{UtilizationPercent: ptr.To[int32](50)}
			},
			wantWarned: true, wantEvicted: true,
		},
		"a ClusterQueue of no team": {
			change: func(w *world) { w.teams = w.teams[1:] },
		},
		"eviction already asked for by isolation": {
			change: func(w *world) {
				w.wl.Annotations = map[string]string{chamber.AnnotationEvictionReason: "GPUFault"}
			},
		},
		"without Chamber's admission check: reclaimed all the same": {
			change:     func(w *world) { w.wl.Status.AdmissionChecks = nil },
			wantWarned: true, wantEvicted: true,
		},
		"not admitted": {
			change: func(w *world) { w.wl.Status.Conditions = w.wl.Status.Conditions[:1] },
		},
		"reclaimed once before: twice the window": {
			change:     func(w *world) { w.wl.Annotations = map[string]string{chamber.AnnotationIdleReclaims: "1"} },
			wantWarned: true, wantEvicted: true, windows: 2,
		},
		"reclaimed five times before: eight windows at most": {
			change:     func(w *world) { w.wl.Annotations = map[string]string{chamber.AnnotationIdleReclaims: "5"} },
			wantWarned: true, wantEvicted: true, windows: 8,
		},
		"the waiter fits on the GPUs freed": {
			change:     func(w *world) { w.withNodes(8, 2) },
			wantWarned: true, wantEvicted: true,
		},
		"the waiter fits on the GPUs freed and another node's": {
			change:     func(w *world) { w.withNodes(8, 8); w.waiterOf(2, "8") },
			wantWarned: true, wantEvicted: true,
		},
		"the waiter's pod needs more GPUs than any node would have free": {
			change: func(w *world) { w.withNodes(8, 8); w.waiterOf(1, "12") },
		},
		"the waiter's second pod finds no room": {
			change: func(w *world) { w.withNodes(8, 4); w.waiterOf(2, "8") },
		},
		"the free node is cordoned": {
			change: func(w *world) {
				w.withNodes(8, 8)
				w.nodes[1].Spec.Unschedulable = true
				w.waiterOf(2, "8")
			},
		},
		"another pod holds GPUs of the node": {
			change: func(w *world) {
				w.withNodes(8, 8)
				w.waiterOf(2, "8")
				w.extraPods = append(w.extraPods, gpuPod("other-0", "n2", 1))
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := newWorld()
			if tc.change != nil {
				tc.change(w)
			}
			r := w.start(t, interceptor.Funcs{})
			before := metricsOf("team-a")

			res := r.mustReconcile()
			warned := r.warned()
			if got := warned == 1; got != tc.wantWarned {
				t.Fatalf("warned %d times at the start, want a warning: %v", warned, tc.wantWarned)
			}
			if tc.wantWarned && res.RequeueAfter != 30*time.Second {
				t.Errorf("requeue after %v, want the 30s interval", res.RequeueAfter)
			}
			wait := window * max(tc.windows, 1)
			r.step(wait - time.Second)
			r.mustReconcile()
			if _, ok := r.eviction(); ok {
				t.Fatalf("eviction asked for before the window passed")
			}
			r.step(time.Second)
			r.mustReconcile()
			e, evicted := r.eviction()
			if evicted != tc.wantEvicted {
				t.Fatalf("eviction asked for: %v, want %v", evicted, tc.wantEvicted)
			}
			if got := r.warned(); got != 0 {
				t.Errorf("%d more warnings, want none", got)
			}
			want := counts{}
			if tc.wantWarned {
				want.warnings = 1
			}
			if tc.wantEvicted {
				if e.Reason != ReasonIdleReclaim || !e.RequestedAt.Equal(start.Add(wait)) || !cmp.Equal(e.GracePeriod, tc.wantGrace) {
					t.Errorf("eviction %+v: want reason IdleReclaim at the window's end, grace period %v (nil: the team's)", e, tc.wantGrace)
				}
				// 8 GPUs idle for the window.
				want.evictions, want.gpuHours = 1, 8*wait.Hours()
			}
			if diff := cmp.Diff(want, metricsOf("team-a").minus(before), cmp.AllowUnexported(counts{}), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWindowCountsFromTheAgentsWindow: the agent's first report of GPUs at 0% is a
// mean over its 5-minute window, so they have been idle for those 5 minutes already:
// the workload is reclaimed 5 minutes after Chamber first sees it idle, a window after
// its GPUs went idle, and the reclaimed GPU-hours count the whole window.
func TestWindowCountsFromTheAgentsWindow(t *testing.T) {
	const agentWindow = 5 * time.Minute // report()'s
	w := newWorld()
	w.pod.Status.StartTime = &metav1.Time{Time: start.Add(-time.Hour)}
	r := w.start(t, interceptor.Funcs{})
	before := metricsOf("team-a")
	r.mustReconcile()
	r.step(window - agentWindow - time.Second)
	r.mustReconcile()
	if _, ok := r.eviction(); ok {
		t.Fatal("evicted before its GPUs had been idle for the window")
	}
	r.step(time.Second)
	r.mustReconcile()
	e, ok := r.eviction()
	if !ok {
		t.Fatal("not evicted a window after its GPUs went idle")
	}
	if !strings.Contains(e.Message, "for 10m0s") {
		t.Errorf("eviction message %q: want the 10 minutes its GPUs were idle", e.Message)
	}
	if got := metricsOf("team-a").minus(before).gpuHours; math.Abs(got-8*window.Hours()) > 1e-9 {
		t.Errorf("reclaimed %.4f GPU-hours, want 8 GPUs for the window: %.4f", got, 8*window.Hours())
	}
}

// TestWindowRestarts: the window counts time idle; GPUs used again start it anew at
// the next idle spell. Nobody waiting puts the reclaim off, and a workload that has
// been idle for the window by the time someone waits again is reclaimed at once.
func TestWindowRestarts(t *testing.T) {
	t.Run("the GPUs are used for a while", func(t *testing.T) {
		r := newWorld().start(t, interceptor.Funcs{})
		r.mustReconcile()
		r.step(window / 2)
		r.setUtilization(60)
		r.mustReconcile()
		r.step(window / 2)
		r.setUtilization(0)
		r.mustReconcile()
		if _, ok := r.eviction(); ok {
			t.Fatal("evicted at the first window's end though its GPUs were used in it")
		}
		if got := r.warned(); got != 2 {
			t.Errorf("%d warnings, want one at the start and one when it turned idle under contention again", got)
		}
		r.step(window - time.Second)
		r.mustReconcile()
		if _, ok := r.eviction(); ok {
			t.Fatal("evicted before a whole window idle since its GPUs were last used")
		}
		r.step(time.Second)
		r.mustReconcile()
		if _, ok := r.eviction(); !ok {
			t.Fatal("not evicted a window after it went idle again")
		}
	})
	t.Run("nobody waits for a while", func(t *testing.T) {
		r := newWorld().start(t, interceptor.Funcs{})
		r.mustReconcile()
		r.step(window / 2)
		r.setActive("wait", false)
		r.mustReconcile()
		r.step(window)
		r.mustReconcile()
		if _, ok := r.eviction(); ok {
			t.Fatal("evicted while nobody waits")
		}
		r.setActive("wait", true)
		r.mustReconcile()
		if _, ok := r.eviction(); !ok {
			t.Fatal("idle for longer than the window, and someone waits again: not evicted at once")
		}
		if got := r.warned(); got != 2 {
			t.Errorf("%d warnings, want one at each time someone waited", got)
		}
	})
}

// TestRequestFails: an API error on the eviction request is returned, counted
// nowhere, and the next attempt asks again without a second warning.
func TestRequestFails(t *testing.T) {
	fail := true
	r := newWorld().start(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if fail {
				return errors.New("etcdserver: request timed out")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	before := metricsOf("team-a")
	r.mustReconcile()
	r.step(window)
	if _, err := r.reconcile(); err == nil || !strings.Contains(err.Error(), "workload team-a/train") {
		t.Fatalf("reconcile error %v, want the failed request with its workload", err)
	}
	if got := metricsOf("team-a").minus(before).evictions; got != 0 {
		t.Errorf("%v evictions counted for a failed request", got)
	}
	fail = false
	r.mustReconcile()
	if _, ok := r.eviction(); !ok {
		t.Fatal("not asked for again")
	}
	if got := r.warned(); got != 1 {
		t.Errorf("%d warnings, want 1", got)
	}
}

// TestMalformed: objects the controller cannot make sense of leave the workload alone
// rather than fail: an owner with a broken API version, a GPUNode with no heartbeat.
func TestMalformed(t *testing.T) {
	w := newWorld()
	w.wl.OwnerReferences = append(w.wl.OwnerReferences, metav1.OwnerReference{APIVersion: "a/b/c", Kind: "Job", Name: "x", UID: "x"})
	w.node.Status.LastHeartbeatTime = nil
	r := w.start(t, interceptor.Funcs{})
	r.mustReconcile()
	if got := r.warned(); got != 0 {
		t.Errorf("%d warnings for a workload with no fresh report", got)
	}
}

// TestDeletedWorkload: the record of a deleted Workload goes with it.
func TestDeletedWorkload(t *testing.T) {
	r := newWorld().start(t, interceptor.Funcs{})
	r.mustReconcile()
	if len(r.c.idle) != 1 {
		t.Fatalf("%d records, want the idle workload's", len(r.c.idle))
	}
	if err := r.client.Delete(context.Background(), &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train"}}); err != nil {
		t.Fatal(err)
	}
	r.mustReconcile()
	if len(r.c.idle) != 0 {
		t.Errorf("%d records left after the workload was deleted", len(r.c.idle))
	}
}

func (r *run) setActive(name string, active bool) {
	r.t.Helper()
	var wl kueue.Workload
	if err := r.client.Get(context.Background(), types.NamespacedName{Namespace: "team-b", Name: name}, &wl); err != nil {
		r.t.Fatal(err)
	}
	wl.Spec.Active = ptr.To(active)
	if err := r.client.Update(context.Background(), &wl); err != nil {
		r.t.Fatal(err)
	}
}

func (r *run) setUtilization(percent int32) {
	r.t.Helper()
	var gn chamber.GPUNode
	if err := r.client.Get(context.Background(), client.ObjectKey{Name: "n1"}, &gn); err != nil {
		r.t.Fatal(err)
	}
	for i := range gn.Status.GPUs {
		gn.Status.GPUs[i].Utilization.GPUPercent = percent
	}
	if err := r.client.Update(context.Background(), &gn); err != nil {
		r.t.Fatal(err)
	}
}

// TestHold: a reclaimed workload is deactivated once Kueue evicts it, and activated
// again when the workload it was reclaimed for has quota, stops waiting, or MaxHold
// (10m by default) has passed; workloads others deactivate or evict are theirs.
func TestHold(t *testing.T) {
	reclaimed := func(w *world) {
		w.wl.Annotations = map[string]string{chamber.AnnotationIdleReclaimedFor: "team-b/wait", chamber.AnnotationIdleReclaimedAt: start.Format(time.RFC3339),
			chamber.AnnotationEvictionReason: ReasonIdleReclaim}
	}
	evicted := func(w *world) {
		reclaimed(w)
		delete(w.wl.Annotations, chamber.AnnotationEvictionReason)
		w.wl.Status.Conditions = append(w.wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue,
			Reason: kueue.WorkloadEvictedByAdmissionCheck, LastTransitionTime: metav1.NewTime(start)})
	}
	held := func(w *world) {
		evicted(w)
		w.wl.Annotations[chamber.AnnotationIdleReclaimHeld] = "true"
		w.wl.Spec.Active = ptr.To(false)
	}
	// notebook marks the workload's pod template interactive: a paused workload has no
	// pods to read it from.
	notebook := func(w *world) {
		w.wl.Spec.PodSets[0].Template.Labels = map[string]string{chamber.LabelInteractive: "true"}
	}
	cases := map[string]struct {
		change     func(w *world)
		after      time.Duration
		wantActive bool
		// wantMarks: the reclaimed-for annotation is still there; wantHeld: the held one.
		wantMarks, wantHeld bool
		wantEvent           string
	}{
		"eviction still under notice": {change: reclaimed, wantActive: true, wantMarks: true},
		"evicted by Kueue: held": {
			change: evicted, wantMarks: true, wantHeld: true, wantEvent: chamber.ReasonIdleReclaimPaused,
		},
		"already back in the queue: held": {
			change: func(w *world) {
				reclaimed(w)
				delete(w.wl.Annotations, chamber.AnnotationEvictionReason)
				w.wl.Status.Admission, w.wl.Status.Conditions = nil, nil
			},
			wantMarks: true, wantHeld: true, wantEvent: chamber.ReasonIdleReclaimPaused,
		},
		"a GPU fault's eviction took over": {
			change: func(w *world) {
				reclaimed(w)
				w.wl.Annotations[chamber.AnnotationEvictionReason] = "GPUFault"
			},
			wantActive: true,
		},
		"the request dropped by the admission controller (asked in an earlier admission)": {
			change: func(w *world) {
				reclaimed(w)
				delete(w.wl.Annotations, chamber.AnnotationEvictionReason)
			},
			// Its marks gone, this admission is measured anew: idle while the other
			// waits, it is warned.
			wantActive: true, wantEvent: ReasonIdleGPUs,
		},
		"deactivated by someone else": {
			change: func(w *world) { evicted(w); w.wl.Spec.Active = ptr.To(false) },
		},
		"held while the other waits": {change: held, after: 9 * time.Minute, wantMarks: true, wantHeld: true},
		"the other has quota: released": {
			change: func(w *world) {
				held(w)
				w.waiting = waitingWorkload("wait", "team-b", start).SimpleReserveQuota("team-b", h100, start).Obj()
			},
			wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed,
		},
		"the other has quota, but another still waits: paused": {
			change: func(w *world) {
				held(w)
				w.waiting = waitingWorkload("wait", "team-b", start).SimpleReserveQuota("team-b", h100, start).Obj()
				w.others = []*kueue.Workload{waitingWorkload("next", "team-a", start).Obj()}
			},
			wantMarks: true, wantHeld: true,
		},
		"a workload of another pool waits: released": {
			change: func(w *world) {
				held(w)
				w.waiting = waitingWorkload("wait", "team-c", start).Obj()
			},
			wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed,
		},
		"reclaimed a second time: paused past the first limit": {
			change: func(w *world) { held(w); w.wl.Annotations[chamber.AnnotationIdleReclaims] = "2" },
			after:  15 * time.Minute, wantMarks: true, wantHeld: true,
		},
		"reclaimed a second time: resumed at twice the limit": {
			change:     func(w *world) { held(w); w.wl.Annotations[chamber.AnnotationIdleReclaims] = "2" },
			after:      20 * time.Minute,
			wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed,
		},
		"the other is gone: released": {
			change:     func(w *world) { held(w); w.waiting = nil },
			wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed,
		},
		"held for MaxHold: released": {change: held, after: 10 * time.Minute, wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed},
		"an unreadable time: released": {
			change:     func(w *world) { held(w); w.wl.Annotations[chamber.AnnotationIdleReclaimedAt] = "yesterday" },
			wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed,
		},
		"activated by someone else (its user)": {
			change:     func(w *world) { held(w); w.wl.Spec.Active = ptr.To(true) },
			wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed,
		},
		"a notebook while the other waits: held past MaxHold, for its user to resume": {
			change: func(w *world) { held(w); notebook(w) },
			after:  24 * time.Hour, wantMarks: true, wantHeld: true,
		},
		"a notebook, the other is gone: released": {
			change:     func(w *world) { held(w); notebook(w); w.waiting = nil },
			wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed,
		},
		"held for another that needs more GPUs than are free now (room for it)": {
			change: func(w *world) { held(w); w.withNodes(8, 4); w.waiterOf(2, "8") },
			after:  9 * time.Minute, wantMarks: true, wantHeld: true,
		},
		"a notebook resumed by its user": {
			change:     func(w *world) { held(w); notebook(w); w.wl.Spec.Active = ptr.To(true) },
			wantActive: true, wantEvent: chamber.ReasonIdleReclaimResumed,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := newWorld()
			tc.change(w)
			r := w.start(t, interceptor.Funcs{})
			r.clock.Step(tc.after)
			r.mustReconcile()
			var wl kueue.Workload
			if err := r.client.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "train"}, &wl); err != nil {
				t.Fatal(err)
			}
			_, marks := wl.Annotations[chamber.AnnotationIdleReclaimedFor]
			got := []any{ptr.Deref(wl.Spec.Active, true), marks, wl.Annotations[chamber.AnnotationIdleReclaimHeld] == "true"}
			if diff := cmp.Diff([]any{tc.wantActive, tc.wantMarks, tc.wantHeld}, got); diff != "" {
				t.Errorf("[active, reclaimed-for, held] (-want +got):\n%s", diff)
			}
			if got, want := chamberkueue.IdleReclaimPaused(&wl), tc.wantHeld && !tc.wantActive; got != want {
				t.Errorf("IdleReclaimPaused = %v, want %v", got, want)
			}
			if chamberkueue.PausedAtIdleLimit(&wl) {
				t.Errorf("a workload reclaimed for a waiter reads as paused at the idle time limit (its user would be asked to resume what resumes by itself)")
			}
			var events []string
			for len(r.recorder.Events) > 0 {
				e := <-r.recorder.Events
				events = append(events, strings.Fields(e)[1])
			}
			var want []string
			if tc.wantEvent != "" {
				want = []string{tc.wantEvent}
			}
			if diff := cmp.Diff(want, events); diff != "" {
				t.Errorf("event reasons (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStaleCache: a reconcile of an object older than the controller's own last write
// (the manager's cache lags) warns, asks and holds nothing a second time.
func TestStaleCache(t *testing.T) {
	w := newWorld()
	r := w.start(t, interceptor.Funcs{})
	before := metricsOf("team-a")
	r.mustReconcile()
	r.step(window)
	r.mustReconcile()
	stale := w.wl.DeepCopy() // as created: no eviction request
	if _, err := r.c.reconcile(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(counts{1, 1, 8 * window.Hours()}, metricsOf("team-a").minus(before),
		cmp.AllowUnexported(counts{}), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}

	// Kueue evicts it; the controller holds it; a stale copy from before the hold comes.
	var wl kueue.Workload
	if err := r.client.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "train"}, &wl); err != nil {
		t.Fatal(err)
	}
	delete(wl.Annotations, chamber.AnnotationEvictionReason)
	wl.Status.Conditions = append(wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue,
		Reason: kueue.WorkloadEvictedByAdmissionCheck, LastTransitionTime: metav1.NewTime(r.clock.Now())})
	if err := r.client.Update(context.Background(), &wl); err != nil {
		t.Fatal(err)
	}
	r.mustReconcile()
	if _, err := r.c.reconcile(context.Background(), &wl); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for len(r.recorder.Events) > 0 {
		reasons = append(reasons, strings.Fields(<-r.recorder.Events)[1])
	}
	if diff := cmp.Diff([]string{ReasonIdleGPUs, chamber.ReasonIdleReclaimPaused}, reasons); diff != "" {
		t.Errorf("event reasons (-want +got):\n%s", diff)
	}
}

// TestReclaimWritesItsMarksWithTheRequest: the reclaim's marks and its eviction
// request are one patch, so no state of a cache (or a leader killed between two
// writes) shows a paused workload without what it was paused for. When that patch
// fails, the next reconcile asks again, and nothing is asked or counted twice.
func TestReclaimWritesItsMarksWithTheRequest(t *testing.T) {
	failed := false
	var patches []string
	r := newWorld().start(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, _ := patch.Data(obj)
			if !strings.Contains(string(data), chamber.AnnotationEvictionReason) && !strings.Contains(string(data), chamber.AnnotationIdleReclaimedFor) {
				return c.Patch(ctx, obj, patch, opts...)
			}
			patches = append(patches, string(data))
			if !failed {
				failed = true
				return errors.New("etcdserver: leader changed")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	before := metricsOf("team-a")
	r.mustReconcile()
	r.step(window)
	if _, err := r.reconcile(); err == nil {
		t.Fatal("no error from a failed mark")
	}
	r.mustReconcile()
	var wl kueue.Workload
	if err := r.client.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "train"}, &wl); err != nil {
		t.Fatal(err)
	}
	if got := wl.Annotations[chamber.AnnotationIdleReclaimedFor]; got != "team-b/wait" {
		t.Errorf("reclaimed-for %q, want team-b/wait", got)
	}
	if got := wl.Annotations[chamber.AnnotationIdleReclaims]; got != "1" {
		t.Errorf("reclaims %q, want 1 (one reclaim, marked once though the first request failed)", got)
	}
	if got, want := wl.Annotations[chamber.AnnotationIdleReclaimedGPUHours], strconv.FormatFloat(8*window.Hours(), 'f', 3, 64); got != want {
		t.Errorf("reclaimed GPU-hours %q, want %s (8 GPUs idle for the window)", got, want)
	}
	for i, p := range patches {
		if !strings.Contains(p, chamber.AnnotationEvictionReason) || !strings.Contains(p, chamber.AnnotationIdleReclaimedFor) {
			t.Errorf("patch %d has the request or the marks without the other: %s", i, p)
		}
	}
	if len(patches) != 2 {
		t.Errorf("%d patches with the request or the marks, want 2 (the failed one, then one)", len(patches))
	}
	if diff := cmp.Diff(counts{1, 1, 8 * window.Hours()}, metricsOf("team-a").minus(before),
		cmp.AllowUnexported(counts{}), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestInteractiveIdleLimit: with the team's interactive idle time limit, an interactive
// workload idle that long is paused though nobody waits, not a second earlier; it
// stays paused however long, until its user activates it; others are left alone.
func TestInteractiveIdleLimit(t *testing.T) {
	const limit = 20 * time.Minute
	interactivePod := func(w *world) { w.pod.Labels = map[string]string{chamber.LabelInteractive: "true"} }
	cases := map[string]struct {
		change    func(w *world)
		wantPause bool
	}{
		"an interactive notebook, idle, nobody waiting": {change: interactivePod, wantPause: true},
		"marked on the Workload": {
			change:    func(w *world) { w.wl.Annotations = map[string]string{chamber.LabelInteractive: "true"} },
			wantPause: true,
		},
		"not interactive": {},
		"interactive but opted out": {
			change: func(w *world) {
				interactivePod(w)
				w.job.Annotations = map[string]string{chamber.AnnotationIdleReclaim: "false"}
			},
		},
		"interactive and opted out, in a pool that ignores opt-outs": {
			change: func(w *world) {
				interactivePod(w)
				w.job.Annotations = map[string]string{chamber.AnnotationIdleReclaim: "false"}
				w.pool.Spec.IdleReclaim.WorkloadOptOut = chamber.OptOutIgnored
			},
			wantPause: true,
		},
		"interactive but busy": {
			change: func(w *world) { interactivePod(w); w.node.Status.GPUs[3].Utilization.GPUPercent = 40 },
		},
		"interactive, production tier": {
			change: func(w *world) {
				interactivePod(w)
				w.wl.Spec.PriorityClassRef = kueue.NewWorkloadPriorityClassRef("production")
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := newWorld()
			w.waiting = nil
			w.teams[0].Spec.IdleReclaim = &chamber.IdleReclaimPolicy{InteractiveIdleLimit: &metav1.Duration{Duration: limit}}
			if tc.change != nil {
				tc.change(w)
			}
			r := w.start(t, interceptor.Funcs{})
			r.mustReconcile()
			r.step(limit - time.Second)
			r.mustReconcile()
			if e, ok := r.limitEviction(); ok {
				t.Fatalf("paused a second before the limit: %+v", e)
			}
			r.step(time.Second)
			r.mustReconcile()
			e, ok := r.limitEviction()
			if ok != tc.wantPause {
				t.Fatalf("paused at the limit = %v, want %v", ok, tc.wantPause)
			}
			if !tc.wantPause {
				return
			}
			if e.GracePeriod == nil || *e.GracePeriod != 0 {
				t.Errorf("paused with grace period %v, want 0: its user is away, nobody answers a checkpoint notice", e.GracePeriod)
			}
			// Kueue evicts it; idle reclaim keeps it deactivated for as long as its user
			// leaves it, with nobody waiting.
			r.kueueEvicts()
			r.mustReconcile()
			r.clock.Step(24 * time.Hour)
			r.mustReconcile()
			if wl := r.workload(); ptr.Deref(wl.Spec.Active, true) || wl.Annotations[chamber.AnnotationIdleReclaimHeld] != "true" || !chamberkueue.PausedAtIdleLimit(wl) {
				t.Fatalf("a day later: active %v, held %q, PausedAtIdleLimit %v; want it paused until its user resumes it",
					ptr.Deref(wl.Spec.Active, true), wl.Annotations[chamber.AnnotationIdleReclaimHeld], chamberkueue.PausedAtIdleLimit(wl))
			}
			// Its user resumes it.
			wl := r.workload()
			wl.Spec.Active = ptr.To(true)
			if err := r.client.Update(context.Background(), wl); err != nil {
				t.Fatal(err)
			}
			r.mustReconcile()
			if wl := r.workload(); wl.Annotations[chamber.AnnotationIdleReclaimHeld] != "" || wl.Annotations[chamber.AnnotationIdleReclaimedFor] != "" || chamberkueue.PausedAtIdleLimit(wl) {
				t.Errorf("after its user resumed it: annotations %v, want the pause cleared", wl.Annotations)
			}
		})
	}
}

func (r *run) workload() *kueue.Workload {
	r.t.Helper()
	var wl kueue.Workload
	if err := r.client.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "train"}, &wl); err != nil {
		r.t.Fatal(err)
	}
	return &wl
}

// limitEviction is the eviction requested at the interactive idle time limit, if any.
func (r *run) limitEviction() (chamberkueue.Eviction, bool) {
	e, ok := chamberkueue.RequestedEviction(r.workload())
	return e, ok && e.Reason == ReasonIdleTimeLimit
}

// kueueEvicts does what Kueue does when Chamber's check turns Retry: the workload is
// evicted and loses its admission; the admission controller has cleared its request.
func (r *run) kueueEvicts() {
	r.t.Helper()
	wl := r.workload()
	delete(wl.Annotations, chamber.AnnotationEvictionReason)
	wl.Status.Admission = nil
	wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue,
		Reason: kueue.WorkloadEvictedByAdmissionCheck, LastTransitionTime: metav1.NewTime(r.clock.Now())}}
	// The world's fake client has no status subresource: Update writes the status too.
	if err := r.client.Update(context.Background(), wl); err != nil {
		r.t.Fatal(err)
	}
}
