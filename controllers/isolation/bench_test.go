package isolation_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// BenchmarkFaultIsolation injects 50 GPU faults, one after another, into a 100-node
// kwok fleet running 40 8-GPU jobs, each on a node that runs a job, and reports the
// time from the fault's GPUNode write to (a) the node's taint and (b) the evicted
// workload admitted again elsewhere, as p50 and p99. Run it alone:
//
//	go test ./controllers/isolation -run '^$' -bench FaultIsolation -benchtime 1x -timeout 30m
//
// The harness writes the GPUNodes as 100 agents would (with an hour's heartbeat, so
// they need not keep writing), and the pool's breaker allows 100%: the figures are
// of the isolation path, not of the breaker. The taint is timed from a watch of the
// Nodes; re-admission is polled every 100 ms. CHAMBER_BENCH_INJECTIONS changes the
// number of faults (at most the number of nodes without a job).
//
// With each fault the harness times an echo (startEcho), written at the same moment
// from another goroutine: the same GPUNode write on a node outside every pool,
// answered by a reconciler that does nothing but taint that node the way isolation
// does. The echo is the floor of the path on this machine at this moment: the same
// write, watch, cache, reconcile queue, Node patch and watch again, with none of
// isolation's decisions. taint-p99-ratio, fault to taint p99 over echo p99, is the
// machine-independent figure make perf-check gates: a slower or busier machine slows
// both alike (a stall lands on both, written together), while a slower isolation
// path (more reads before the taint, a requeue) moves the numerator only.
func BenchmarkFaultIsolation(b *testing.B) {
	nodeCount, jobs, injections := 100, 40, 50
	if os.Getenv("CHAMBER_BENCH_SMALL") != "" {
		nodeCount, jobs, injections = 10, 4, 3
	}
	if v := os.Getenv("CHAMBER_BENCH_INJECTIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > nodeCount-jobs {
			b.Fatalf("CHAMBER_BENCH_INJECTIONS=%q: want a whole number from 1 to %d", v, nodeCount-jobs)
		}
		injections = n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := "bench"
	create(b, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: chamber.GPUPoolSpec{NodeLabels: poolLabels(pool),
		Isolation: &chamber.IsolationPolicy{MaxIsolatedPercent: ptr.To[int32](100)}}})
	create(b, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pool}})
	create(b, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: chamber.TeamSpec{Pool: pool, Namespaces: []string{pool}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: int32(jobs * 8)}}}})
	var names []string
	for i := range nodeCount {
		names = append(names, fmt.Sprintf("bench-%03d", i))
	}
	nodes(b, pool, names...)
	for _, n := range names {
		writeReport(b, n, -1)
	}
	// The echo's node: a GPU node of no pool, which isolation leaves alone.
	nodes(b, "", echoNode)
	writeReport(b, echoNode, -1)
	watch := watchNodes(b, ctx)
	startEcho(b, ctx)
	for i := range jobs {
		submit(b, pool, fmt.Sprintf("job-%02d", i))
	}
	waitFor(b, 5*time.Minute, "all jobs running", func() bool { return len(runningJobs(b, pool)) == jobs })

	var toTaint, toReadmit, toEcho []time.Duration
	faulted := map[string]bool{}
	for i := range injections {
		running := runningJobs(b, pool)
		var job, node string
		for _, j := range slices.Sorted(maps.Keys(running)) {
			if !faulted[running[j]] {
				job, node = j, running[j]
				break
			}
		}
		if job == "" {
			b.Fatalf("injection %d: no running job on a healthy node", i)
		}
		faulted[node] = true
		seen := watch.when(node, tainted)
		echoSeen := watch.when(echoNode, echoed(i+1))
		echoWrote := make(chan echoWrite, 1)
		go func() { echoWrote <- writeEcho(ctx, i+1) }()
		injected := writeReport(b, node, i%8)
		toTaint = append(toTaint, watch.wait(b, seen, "taint on "+node, injected))
		e := <-echoWrote
		if e.err != nil {
			b.Fatalf("echo %d: %v", i+1, e.err)
		}
		toEcho = append(toEcho, watch.wait(b, echoSeen, fmt.Sprintf("echo %d", i+1), e.at))
		waitFor(b, 3*time.Minute, "job "+job+" admitted again", func() bool {
			wls := workloadsOf(b, pool, job)
			if len(wls) != 1 {
				return false
			}
			admitted := apimeta.FindStatusCondition(wls[0].Status.Conditions, kueue.WorkloadAdmitted)
			return admitted != nil && admitted.Status == metav1.ConditionTrue && !admitted.LastTransitionTime.Time.Before(injected.Truncate(time.Second))
		}, 100*time.Millisecond)
		toReadmit = append(toReadmit, time.Since(injected))
	}
	b.ReportMetric(percentile(toTaint, 50).Seconds(), "taint-p50-s")
	b.ReportMetric(percentile(toTaint, 99).Seconds(), "taint-p99-s")
	b.ReportMetric(percentile(toReadmit, 50).Seconds(), "readmit-p50-s")
	b.ReportMetric(percentile(toReadmit, 99).Seconds(), "readmit-p99-s")
	b.ReportMetric(percentile(toEcho, 50).Seconds(), "echo-p50-s")
	b.ReportMetric(percentile(toEcho, 99).Seconds(), "echo-p99-s")
	b.ReportMetric(ratio(percentile(toTaint, 50), percentile(toEcho, 50)), "taint-p50-ratio")
	b.ReportMetric(ratio(percentile(toTaint, 99), percentile(toEcho, 99)), "taint-p99-ratio")
	b.Logf("%d injections on %d nodes: fault to taint p50 %s p99 %s; fault to re-admission p50 %s p99 %s; echo p50 %s p99 %s",
		injections, nodeCount, percentile(toTaint, 50), percentile(toTaint, 99), percentile(toReadmit, 50), percentile(toReadmit, 99),
		percentile(toEcho, 50), percentile(toEcho, 99))
}

func ratio(a, b time.Duration) float64 { return a.Seconds() / max(b.Seconds(), 1e-6) }

// echoNode is the node the echo taints; echoTaint is its taint, whose value is the
// number of the echo it answers.
const (
	echoNode  = "bench-echo"
	echoTaint = "chamber.dev/bench-echo"
)

// startEcho runs the echo controller in a manager of its own, in this process beside
// Chamber's: on a write of echoNode's GPUNode it reads the report from its cache and
// taints the node with the report's first fault's count, through the same helper
// isolation taints with (kube.UpdateNode: a cached read and a merge patch).
func startEcho(b *testing.B, ctx context.Context) {
	mgr, err := ctrl.NewManager(controllertest.Config, ctrl.Options{Scheme: controlplane.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		b.Fatal(err)
	}
	c := mgr.GetClient()
	err = ctrl.NewControllerManagedBy(mgr).Named("bench-echo").
		For(&chamber.GPUNode{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == echoNode }))).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var gn chamber.GPUNode
			if err := c.Get(ctx, req.NamespacedName, &gn); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			i := slices.IndexFunc(gn.Status.GPUs, func(g chamber.GPUStatus) bool { return len(g.Faults) > 0 })
			if i < 0 {
				return reconcile.Result{}, nil
			}
			token := strconv.Itoa(int(gn.Status.GPUs[i].Faults[0].Count))
			return reconcile.Result{}, kube.UpdateNode(ctx, c, echoNode, func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: echoTaint, Value: token, Effect: corev1.TaintEffectNoSchedule}}
			})
		}))
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		b.Fatal("the echo controller's cache never synced")
	}
}

// echoed: the node carries the taint of echo n.
func echoed(n int) func(*corev1.Node) bool {
	return func(node *corev1.Node) bool {
		return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == echoTaint && t.Value == strconv.Itoa(n) })
	}
}

// echoWrite is when an echo's report was written, or why it was not.
type echoWrite struct {
	at  time.Time
	err error
}

// writeEcho writes echo n: echoNode's GPUNode as writeReport writes a fault (a read
// and a status update of the same report), its fault counted n.
func writeEcho(ctx context.Context, n int) echoWrite {
	now := time.Now()
	var gn chamber.GPUNode
	if err := k8s.Get(ctx, client.ObjectKey{Name: echoNode}, &gn); err != nil {
		return echoWrite{now, err}
	}
	gn.Status = chamber.GPUNodeStatus{Health: chamber.GPUUnhealthy, LastHeartbeatTime: &metav1.Time{Time: now}, HeartbeatSeconds: int32(time.Hour / time.Second)}
	for i := range int32(8) {
		gn.Status.GPUs = append(gn.Status.GPUs, chamber.GPUStatus{Index: i, Model: h100, Health: chamber.GPUHealthy})
	}
	gn.Status.GPUs[0] = chamber.GPUStatus{Index: 0, Model: h100, Health: chamber.GPUUnhealthy,
		Faults: []chamber.GPUFault{{Reason: "XID79", Severity: chamber.GPUUnhealthy, Action: "RebootNode", Persistent: true,
			Message: "XID 79: GPU has fallen off the bus", FirstSeen: &metav1.Time{Time: now}, Count: int32(n)}}}
	return echoWrite{now, k8s.Status().Update(ctx, &gn)}
}

// nodeWatch times changes of Nodes as a watch delivers them, so that a figure is not
// rounded up to a polling interval.
type nodeWatch struct {
	mu      sync.Mutex
	waiters map[string]nodeWaiter
}

type nodeWaiter struct {
	done func(*corev1.Node) bool
	seen chan time.Time
}

func watchNodes(b *testing.B, ctx context.Context) *nodeWatch {
	c, err := client.NewWithWatch(controllertest.Config, client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	wi, err := c.Watch(ctx, &corev1.NodeList{})
	if err != nil {
		b.Fatal(err)
	}
	w := &nodeWatch{waiters: map[string]nodeWaiter{}}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			at := time.Now()
			w.mu.Lock()
			if wt, ok := w.waiters[n.Name]; ok && wt.done(n) {
				wt.seen <- at
				delete(w.waiters, n.Name)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// when returns the channel that receives the time the watch first delivers node in
// a state where done holds; call it before the write that leads there.
func (w *nodeWatch) when(node string, done func(*corev1.Node) bool) <-chan time.Time {
	seen := make(chan time.Time, 1)
	w.mu.Lock()
	w.waiters[node] = nodeWaiter{done: done, seen: seen}
	w.mu.Unlock()
	return seen
}

// wait is the time from since to what seen receives, failing after a minute.
func (w *nodeWatch) wait(b *testing.B, seen <-chan time.Time, what string, since time.Time) time.Duration {
	b.Helper()
	select {
	case at := <-seen:
		return at.Sub(since)
	case <-time.After(time.Minute):
		b.Fatalf("%s: not within a minute (or the Node watch ended)", what)
		return 0
	}
}

// writeReport writes the node's GPUNode as an agent would: 8 healthy GPUs, or GPU
// bad fallen off the bus (XID 79) when bad >= 0. It returns when it wrote.
func writeReport(b *testing.B, node string, bad int) time.Time {
	b.Helper()
	now := time.Now()
	g := chamber.GPUStatus{Index: 0, Model: h100, Health: chamber.GPUHealthy}
	if bad >= 0 {
		g = chamber.GPUStatus{Index: int32(bad), Model: h100, Health: chamber.GPUUnhealthy,
			Faults: []chamber.GPUFault{{Reason: "XID79", Severity: chamber.GPUUnhealthy, Action: "RebootNode", Persistent: true,
				Message: "XID 79: GPU has fallen off the bus", FirstSeen: &metav1.Time{Time: now}, Count: 1}}}
	}
	reportEvery(b, node, now, time.Hour, g)
	return now
}

// runningJobs maps each job with a Running pod to its node.
func runningJobs(b *testing.B, ns string) map[string]string {
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out[p.Labels["job-name"]] = p.Spec.NodeName
		}
	}
	return out
}

func workloadsOf(b *testing.B, ns, job string) []kueue.Workload {
	var list kueue.WorkloadList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(wl kueue.Workload) bool {
		return !slices.ContainsFunc(wl.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Name == job })
	})
}

// waitFor polls done (every second, or every the interval given) until it holds.
func waitFor(b *testing.B, timeout time.Duration, what string, done func() bool, every ...time.Duration) {
	b.Helper()
	interval := time.Second
	if len(every) > 0 {
		interval = every[0]
	}
	for deadline := time.Now().Add(timeout); !done(); time.Sleep(interval) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %s", what, timeout)
		}
	}
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}
