// Package schedulershape benchmarks admission with and without Chamber on the shape of
// Kueue's own scheduler performance test.
package schedulershape

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/perf"
)

// workloadClass is one kind of workload of Kueue's scheduler performance test
// (test/performance/scheduler/configs/baseline/generator.yaml): count workloads per
// ClusterQueue, one created every interval, each running for runtime once admitted.
type workloadClass struct {
	name     string
	count    int
	interval time.Duration
	runtime  time.Duration
	priority int32
	gpus     int64
}

// baseline is Kueue's baseline scenario, with GPUs for its CPU units: 5 cohorts of 6
// ClusterQueues (nominal 20, borrowing limit 100), 500 workloads per ClusterQueue,
// 15,000 in all.
var baseline = []workloadClass{
	{name: "small", count: 350, interval: 100 * time.Millisecond, runtime: 200 * time.Millisecond, priority: 50, gpus: 1},
	{name: "medium", count: 100, interval: 500 * time.Millisecond, runtime: 500 * time.Millisecond, priority: 100, gpus: 5},
	{name: "large", count: 50, interval: 1200 * time.Millisecond, runtime: time.Second, priority: 200, gpus: 20},
}

const (
	perfCohorts       = 5
	perfQueuesPerCoh  = 6
	perfNominalQuota  = 20
	perfBorrowLimit   = 100
	perfNodes         = 10
	perfGPUsPerNode   = 64
	perfFlavor        = "perf-gpu"
	perfRunTimeout    = 30 * time.Minute
	perfScaleVariable = "CHAMBER_PERF_SCALE"
	perfPairsVariable = "CHAMBER_PERF_PAIRS"
	// perfCheckArgsVariable adds flags to BenchmarkCheckSideBySide's
	// chamber-controller: a slower check on purpose (--kube-api-qps=5) shows what
	// make perf-check does with a regression.
	perfCheckArgsVariable = "CHAMBER_PERF_CHECK_ARGS"
)

const h100 = "NVIDIA-H100-80GB-HBM3"

var (
	cp  *controlplane.ControlPlane
	k8s client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	if !benchmarking() {
		// The package has benchmarks only: no control plane for make test.
		os.Exit(m.Run())
	}
	// The runner's informers log through controller-runtime.
	ctrl.SetLogger(logr.Discard())
	os.Exit(controllertest.MainForBinaries(m, &cp, &k8s))
}

// benchmarking says whether go test was asked to run benchmarks.
func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

// arm is one way of running the scenario: which chamber-controller, if any, runs.
type arm struct {
	name string
	// args are chamber-controller's flags; nil: no chamber-controller at all.
	args []string
	// check puts Chamber's admission check on every ClusterQueue.
	check bool
}

var arms = []arm{
	{name: "Kueue alone"},
	{name: "Kueue + Chamber", args: []string{"--leader-elect=false"}},
	{name: "Kueue + Chamber's check", args: []string{"--leader-elect=false", "--admission-check=true"}, check: true},
}

// shapeResult is what one run of the scenario measured.
type shapeResult struct {
	controllertest.RunResult
	// rssMiB is chamber-controller's peak resident memory over the run (0 without it).
	rssMiB float64
}

// BenchmarkSchedulerShape runs the shape of Kueue's scheduler performance test on one
// control plane (real kube-apiserver, the real Kueue binary) in three arms: Kueue
// alone, with no chamber-controller running; Kueue with chamber-controller (the binary
// the chart runs) at its defaults; and with chamber-controller's admission check on
// every ClusterQueue. The arms run in rounds, in an order that rotates from round to
// round, each run's objects deleted before the next. The workloads ask for GPUs on the
// flavor of 10 kwok nodes of 64 GPUs, so the check does its full work: it reads the
// flavor's nodes, their pods and agents before it says Ready. It reports each run's
// wall time, time from creation to admission (mean, p50, p99), API writes per
// workload and chamber-controller's peak RSS, and per Chamber arm the median and
// range of its ratios to Kueue alone in the same round. CHAMBER_PERF_SCALE (default
// 1) scales the number of workloads, CHAMBER_PERF_PAIRS (default 3) sets the number of
// rounds.
//
//	go test -run '^$' -bench SchedulerShape -benchtime 1x ./test/schedulershape/
func BenchmarkSchedulerShape(b *testing.B) {
	scale, rounds := perfSettings(b)
	perfNodesOnce(b)
	for i := range b.N {
		wallRatios := make([][]float64, len(arms))
		p99Ratios := make([][]float64, len(arms))
		var rssMiB float64
		for r := range rounds {
			results := make([]shapeResult, len(arms))
			for k := range arms {
				a := (k + r) % len(arms)
				results[a] = runArm(b, fmt.Sprintf("perf%d-%d-%d", i, r, a), arms[a], scale)
			}
			for a, res := range results {
				b.Logf("round %d, %-24s %5d workloads: wall %6.1fs, time to admission mean %6.0f ms, p50 %6.0f ms, p99 %6.0f ms, %.1f writes per workload, chamber-controller peak RSS %.0f MiB",
					r+1, arms[a].name, res.Workloads, res.Wall.Seconds(), ms(res.MeanAdmission), ms(res.P50), ms(res.P99), res.WritesPerWorkload, res.rssMiB)
				rssMiB = max(rssMiB, res.rssMiB)
				wallRatios[a] = append(wallRatios[a], res.Wall.Seconds()/results[0].Wall.Seconds())
				p99Ratios[a] = append(p99Ratios[a], ms(res.P99)/math.Max(ms(results[0].P99), 1e-3))
			}
		}
		for a := 1; a < len(arms); a++ {
			slices.Sort(wallRatios[a])
			slices.Sort(p99Ratios[a])
			w, p := wallRatios[a], p99Ratios[a]
			b.Logf("%s against Kueue alone, %d rounds: wall-time ratio median %.2f (range %.2f-%.2f); admission p99 ratio median %.2f (range %.2f-%.2f)",
				arms[a].name, rounds, perf.Median(w), w[0], w[len(w)-1], perf.Median(p), p[0], p[len(p)-1])
		}
		b.ReportMetric(perf.Median(wallRatios[1]), "chamber-wall-ratio")
		b.ReportMetric(perf.Median(p99Ratios[1]), "chamber-admit-p99-ratio")
		b.ReportMetric(perf.Median(wallRatios[2]), "check-wall-ratio")
		b.ReportMetric(perf.Median(p99Ratios[2]), "check-admit-p99-ratio")
		b.ReportMetric(rssMiB, "max-rss-MiB")
	}
}

// perfSettings reads CHAMBER_PERF_SCALE (default 1) and CHAMBER_PERF_PAIRS (default 3).
func perfSettings(b *testing.B) (scale float64, rounds int) {
	scale, rounds = 1.0, 3
	if s := os.Getenv(perfScaleVariable); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 || v > 1 {
			b.Fatalf("%s=%q: want a number in (0, 1]", perfScaleVariable, s)
		}
		scale = v
	}
	if s := os.Getenv(perfPairsVariable); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("%s=%q: want a whole number of at least 1", perfPairsVariable, s)
		}
		rounds = v
	}
	return scale, rounds
}

// BenchmarkCheckSideBySide runs Kueue's shape twice at once on one Kueue, in rounds:
// one copy's ClusterQueues with Chamber's admission check (chamber-controller with
// --admission-check=true, fresh each round), the other's without, each copy in
// cohorts of its own, their workloads created on the same schedule. Both copies meet
// the same machine at the same moment, so the ratios of their figures (check over
// plain) hold still where the machine does not: on a shared 2-core machine the
// sequential arms of BenchmarkSchedulerShape move by half from round to round with
// the neighbours' load. What the ratio measures is what the check adds to a
// workload's way to admission (its round trip, the quota held meanwhile); the
// chamber-controller's CPU, which both copies share, cancels out: that is
// BenchmarkSchedulerShape's "Kueue + Chamber" arm. It reports the median over the
// rounds of the ratios of mean and p99 time to admission, of wall time and of API
// writes per workload; make perf-check gates the mean's and the writes'. The writes
// ratio is what the time ratio cannot see: the API server's and Kueue's extra work
// for the check's copy, which slows both copies alike. CHAMBER_PERF_SCALE sizes each
// copy as in BenchmarkSchedulerShape, CHAMBER_PERF_PAIRS sets the number of rounds and
// CHAMBER_PERF_CHECK_ARGS adds flags to chamber-controller.
//
//	CHAMBER_PERF_SCALE=0.02 go test -run '^$' -bench CheckSideBySide -benchtime 1x ./test/schedulershape/
func BenchmarkCheckSideBySide(b *testing.B) {
	scale, rounds := perfSettings(b)
	perfNodesOnce(b)
	for i := range b.N {
		var mean, p99, wall, writes []float64
		for r := range rounds {
			ns := fmt.Sprintf("side%d-%d", i, r)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			args := append([]string{"--leader-elect=false", "--admission-check=true"}, strings.Fields(os.Getenv(perfCheckArgsVariable))...)
			ch, err := cp.StartChamber(ctx, "chamber-controller-"+ns, args...)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			res := runShapes(b, []shapeCopy{{ns: ns + "-plain"}, {ns: ns + "-check", check: true}}, scale, ch)
			ch.Kill()
			plain, check := res[0], res[1]
			for k, name := range []string{"plain", "check"} {
				b.Logf("round %d, %-5s %5d workloads: wall %6.1fs, time to admission mean %6.0f ms, p50 %6.0f ms, p99 %6.0f ms, %.1f writes per workload",
					r+1, name, res[k].Workloads, res[k].Wall.Seconds(), ms(res[k].MeanAdmission), ms(res[k].P50), ms(res[k].P99), res[k].WritesPerWorkload)
			}
			mean = append(mean, ms(check.MeanAdmission)/math.Max(ms(plain.MeanAdmission), 1e-3))
			p99 = append(p99, ms(check.P99)/math.Max(ms(plain.P99), 1e-3))
			wall = append(wall, check.Wall.Seconds()/plain.Wall.Seconds())
			writes = append(writes, check.WritesPerWorkload/plain.WritesPerWorkload)
			b.Logf("round %d, check over plain: admission mean %.2f, p99 %.2f, wall %.2f, writes per workload %.2f", r+1, mean[r], p99[r], wall[r], writes[r])
		}
		for _, v := range [][]float64{mean, p99, wall, writes} {
			slices.Sort(v)
		}
		b.Logf("check over plain, %d rounds: admission mean ratio median %.2f (range %.2f-%.2f), p99 %.2f (%.2f-%.2f), wall %.2f (%.2f-%.2f), writes per workload %.2f (%.2f-%.2f)",
			rounds, perf.Median(mean), mean[0], mean[len(mean)-1], perf.Median(p99), p99[0], p99[len(p99)-1], perf.Median(wall), wall[0], wall[len(wall)-1],
			perf.Median(writes), writes[0], writes[len(writes)-1])
		b.ReportMetric(perf.Median(mean), "check-side-admit-mean-ratio")
		b.ReportMetric(perf.Median(p99), "check-side-admit-p99-ratio")
		b.ReportMetric(perf.Median(wall), "check-side-wall-ratio")
		b.ReportMetric(perf.Median(writes), "check-side-writes-ratio")
	}
}

// runArm runs the scenario once in namespace ns with the arm's chamber-controller
// running, and stops that process afterwards.
func runArm(b *testing.B, ns string, a arm, scale float64) shapeResult {
	if a.args == nil {
		return runShapes(b, []shapeCopy{{ns: ns, check: a.check}}, scale, nil)[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ch, err := cp.StartChamber(ctx, "chamber-controller-"+ns, a.args...)
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Kill()
	return runShapes(b, []shapeCopy{{ns: ns, check: a.check}}, scale, ch)[0]
}

// peakRSSMiB is the process's peak resident memory (VmHWM), in MiB.
func peakRSSMiB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var perfSetup sync.Once

// perfNodesOnce makes the GPU nodes and the flavor every run uses.
func perfNodesOnce(b *testing.B) {
	perfSetup.Do(func() {
		labels := map[string]string{"chamber.dev/test-pool": perfFlavor}
		var nodes []controlplane.GPUNode
		for i := range perfNodes {
			nodes = append(nodes, controlplane.GPUNode{Name: fmt.Sprintf("perf-%d", i), GPUs: perfGPUsPerNode, Product: h100, Labels: labels})
		}
		ctx := context.Background()
		if err := controlplane.CreateGPUNodes(ctx, k8s, nodes...); err != nil {
			b.Fatal(err)
		}
		if err := k8s.Create(ctx, &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: perfFlavor}, Spec: kueue.ResourceFlavorSpec{NodeLabels: labels}}); err != nil {
			b.Fatal(err)
		}
	})
}

// shapeCopy is one copy of the scenario: its namespace (which names its queues and
// cohorts) and whether its ClusterQueues have Chamber's admission check.
type shapeCopy struct {
	ns    string
	check bool
}

// runShapes creates the ClusterQueues and workloads of each copy, the copies side by
// side on the same schedule, plays the workloads (each finishes its runtime after
// admission, as Kueue's runner does) and measures each copy with a runner of its
// own; ch is the chamber-controller running, if any.
func runShapes(b *testing.B, copies []shapeCopy, scale float64, ch *controlplane.Chamber) []shapeResult {
	ctx, cancel := context.WithTimeout(context.Background(), perfRunTimeout)
	defer cancel()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	queues := make([][]string, len(copies))
	for k, c := range copies {
		must(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}))
		for co := range perfCohorts {
			for q := range perfQueuesPerCoh {
				name := fmt.Sprintf("%s-c%d-q%d", c.ns, co, q)
				must(k8s.Create(ctx, perfClusterQueue(name, fmt.Sprintf("%s-c%d", c.ns, co), c.check)))
				must(k8s.Create(ctx, &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns}, Spec: kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(name)}}))
				queues[k] = append(queues[k], name)
			}
		}
	}
	for _, qs := range queues {
		for _, name := range qs {
			waitActive(b, ctx, name)
		}
	}

	runners := make([]*controllertest.Runner, len(copies))
	for k, c := range copies {
		rec, err := controllertest.NewRunner(controllertest.Config)
		must(err)
		stop, err := rec.Watch(ctx, controllertest.Config, c.ns)
		must(err)
		defer stop()
		runners[k] = rec
	}

	totals := make([]int, len(copies))
	var wg sync.WaitGroup
	start := time.Now()
	for k, c := range copies {
		for _, q := range queues[k] {
			for _, class := range baseline {
				count := max(1, int(float64(class.count)*scale))
				totals[k] += count
				wg.Go(func() {
					for i := range count {
						at := start.Add(time.Duration(i) * class.interval)
						time.Sleep(time.Until(at))
						wl := perfWorkload(c.ns, fmt.Sprintf("%s-%s-%d", q, class.name, i), q, class)
						if err := runners[k].Create(ctx, wl, class.runtime); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
		}
	}
	wg.Wait()
	results := make([]shapeResult, len(copies))
	for k, c := range copies {
		defer cleanShape(b, runners[k].Client(), c.ns, queues[k])
	}
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	for k, c := range copies {
		done := runners[k].WaitFinished(totals[k])
	wait:
		for {
			select {
			case <-done:
				results[k] = shapeResult{RunResult: runners[k].Result(start)}
				break wait
			case <-progress.C:
				fmt.Fprintf(os.Stderr, "%s: %d of %d workloads admitted, %d finished, %s\n", c.ns, runners[k].AdmittedCount(), totals[k], runners[k].FinishedCount(), time.Since(start).Round(time.Second))
			case <-ctx.Done():
				b.Fatalf("%s: %d of %d workloads finished within %s", c.ns, runners[k].FinishedCount(), totals[k], perfRunTimeout)
			}
		}
	}
	if ch != nil {
		rss := peakRSSMiB(ch.Pid())
		for k := range results {
			results[k].rssMiB = rss
		}
	}
	return results
}

// perfClusterQueue is one ClusterQueue of the scenario in the cohort, with Chamber's
// admission check if check.
func perfClusterQueue(name, cohort string, check bool) *kueue.ClusterQueue {
	cq := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.ClusterQueueSpec{
		CohortName:        kueue.CohortReference(cohort),
		NamespaceSelector: &metav1.LabelSelector{},
		Preemption:        &kueue.ClusterQueuePreemption{ReclaimWithinCohort: kueue.PreemptionPolicyAny, WithinClusterQueue: kueue.PreemptionPolicyLowerPriority},
		ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{kube.ResourceGPU}, Flavors: []kueue.FlavorQuotas{{
			Name: perfFlavor, Resources: []kueue.ResourceQuota{{Name: kube.ResourceGPU,
				NominalQuota: *resource.NewQuantity(perfNominalQuota, resource.DecimalSI), BorrowingLimit: resource.NewQuantity(perfBorrowLimit, resource.DecimalSI)}},
		}}}},
	}}
	if check {
		cq.Spec.AdmissionChecksStrategy = &kueue.AdmissionChecksStrategy{AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: chamber.AdmissionCheckName}}}
	}
	return cq
}

// cleanShape deletes a run's workloads, queues and namespace, and waits until the
// workloads are gone, so that the next run starts from the same state.
func cleanShape(b *testing.B, runner client.Client, ns string, queues []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := runner.DeleteAllOf(ctx, &kueue.Workload{}, client.InNamespace(ns)); err != nil {
		b.Fatalf("delete the workloads of %s: %v", ns, err)
	}
	for _, q := range queues {
		_ = runner.Delete(ctx, &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: q, Namespace: ns}})
		_ = runner.Delete(ctx, &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: q}})
	}
	_ = runner.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for {
		var left kueue.WorkloadList
		if err := runner.List(ctx, &left, client.InNamespace(ns), client.Limit(1)); err == nil && len(left.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			b.Logf("%s: workloads still there after 5 minutes; the next run starts anyway", ns)
			return
		case <-time.After(time.Second):
		}
	}
}

func waitActive(b *testing.B, ctx context.Context, name string) {
	for {
		var cq kueue.ClusterQueue
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &cq); err == nil && apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueue.ClusterQueueActive) {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("ClusterQueue %s never became active", name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func perfWorkload(ns, name, queue string, class workloadClass) *kueue.Workload {
	gpus := *resource.NewQuantity(class.gpus, resource.DecimalSI)
	return &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kueue.WorkloadSpec{
			QueueName: kueue.LocalQueueName(queue),
			Priority:  ptr.To(class.priority),
			PodSets: []kueue.PodSet{{Name: "main", Count: 1, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{kube.ResourceGPU: gpus}, Limits: corev1.ResourceList{kube.ResourceGPU: gpus},
				}}},
			}}}},
		},
	}
}
