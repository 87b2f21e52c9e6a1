package isolation_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
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
// of the isolation path, not of the breaker. Times are polled: every 20 ms for (a),
// 100 ms for (b).
func BenchmarkFaultIsolation(b *testing.B) {
	nodeCount, jobs, injections := 100, 40, 50
	if os.Getenv("CHAMBER_BENCH_SMALL") != "" {
		nodeCount, jobs, injections = 10, 4, 3
	}
	ctx := context.Background()
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
	for i := range jobs {
		submit(b, pool, fmt.Sprintf("job-%02d", i))
	}
	waitFor(b, 5*time.Minute, "all jobs running", func() bool { return len(runningJobs(b, pool)) == jobs })

	var toTaint, toReadmit []time.Duration
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
		injected := writeReport(b, node, i%8)
		waitFor(b, time.Minute, "taint on "+node, func() bool {
			var n corev1.Node
			return k8s.Get(ctx, client.ObjectKey{Name: node}, &n) == nil && tainted(&n)
		}, 20*time.Millisecond)
		toTaint = append(toTaint, time.Since(injected))
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
	b.Logf("%d injections on %d nodes: fault to taint p50 %s p99 %s; fault to re-admission p50 %s p99 %s",
		injections, nodeCount, percentile(toTaint, 50), percentile(toTaint, 99), percentile(toReadmit, 50), percentile(toReadmit, 99))
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
