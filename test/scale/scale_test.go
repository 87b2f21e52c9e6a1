// Package scale_test measures Chamber at fleet scale (make bench-scale): the real
// chamber-controller binary, every controller on, against a local control plane with
// 1,000 kwok GPU nodes whose agents heartbeat, 30 teams and 10,000 workloads, faults
// injected during the load.
package scale_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
	"chamber.dev/chamber/test/controlplane/controlplanetest"
)

const (
	h100          = "NVIDIA-H100-80GB-HBM3"
	gpusPerNode   = 8
	teams         = 30
	poolName      = "scale"
	poolLabel     = "chamber.dev/scale-pool"
	heartbeat     = 30 * time.Second
	sampleEvery   = 10 * time.Second
	settleFor     = 2 * time.Minute
	finishTimeout = 45 * time.Minute
)

// scale is what one run puts on the control plane; the CHAMBER_SCALE_* variables
// change it (a smaller run to try the harness: CHAMBER_SCALE_NODES=50
// CHAMBER_SCALE_WORKLOADS=300).
type scale struct {
	nodes, workloads int
	// rate is workloads created per second.
	rate float64
	// faults are injected one every faultEvery from the start of the load.
	faults     int
	faultEvery time.Duration
	check      bool
	out        string
}

func scaleFromEnv(b *testing.B) scale {
	s := scale{nodes: 1000, workloads: 10000, rate: 25, faults: 20, faultEvery: 15 * time.Second, check: true, out: "../../chamber-report-scale"}
	ints := map[string]*int{"CHAMBER_SCALE_NODES": &s.nodes, "CHAMBER_SCALE_WORKLOADS": &s.workloads, "CHAMBER_SCALE_FAULTS": &s.faults}
	for name, p := range ints {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				b.Fatalf("%s=%q: want a whole number", name, v)
			}
			*p = n
		}
	}
	if v := os.Getenv("CHAMBER_SCALE_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			b.Fatalf("CHAMBER_SCALE_RATE=%q: want workloads per second, above 0", v)
		}
		s.rate = r
	}
	if v := os.Getenv("CHAMBER_SCALE_CHECK"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			b.Fatalf("CHAMBER_SCALE_CHECK=%q: want true or false", v)
		}
		s.check = on
	}
	if v := os.Getenv("CHAMBER_SCALE_OUT"); v != "" {
		s.out = v
	}
	if s.faults > s.nodes/2 {
		b.Fatalf("%d faults on %d nodes: the pool's breaker stops isolation at half the nodes", s.faults, s.nodes)
	}
	return s
}

// BenchmarkScale runs Chamber at fleet scale and writes a report (a table over time
// of the controller's memory and CPU, and the figures of issue 14's goals) to
// chamber-report-scale/report.md:
//
//	make bench-scale
//
// The fleet: kwok nodes of 8 H100s in one GPUPool, each with a GPUNode written every
// 30 s as its agent would (the harness writes them), 30 Teams sharing the pool. The
// load: workloads without pods, as in Kueue's own scheduler-performance test (1, 4
// or 8 GPUs on one pod, or 2 pods of 8), created at a steady rate across the teams,
// each finished by the runner 30 to 90 s after its admission. The faults: an XID 79
// on one GPU of a different node every 15 s, from the start of the load; the time
// from the GPUNode write to the node's taint is polled every 20 ms. The controller
// is the real chamber-controller binary with the admission check on
// (CHAMBER_SCALE_CHECK=false for the default); its RSS and CPU are read from /proc,
// its heap, reconcile times and scrape time from its /metrics.
func BenchmarkScale(b *testing.B) {
	s := scaleFromEnv(b)
	for range b.N {
		runScale(b, s)
	}
}

func runScale(b *testing.B, s scale) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl.SetLogger(logr.Discard())
	cp := controlplanetest.StartForTest(b, ctx, controlplane.Full())
	fast := rest.CopyConfig(cp.Config)
	fast.QPS, fast.Burst = -1, 0
	c, err := client.New(fast, client.Options{Scheme: controlplane.Scheme})
	if err != nil {
		b.Fatal(err)
	}

	// The fleet and its agents.
	began := time.Now()
	labels := map[string]string{poolLabel: poolName}
	var names []string
	for i := range s.nodes {
		names = append(names, fmt.Sprintf("gpu-%04d", i))
	}
	for batch := range slices.Chunk(names, 100) {
		var nodes []controlplane.GPUNode
		for _, n := range batch {
			nodes = append(nodes, controlplane.GPUNode{Name: n, GPUs: gpusPerNode, Product: h100, Labels: labels})
		}
		if err := controlplane.CreateGPUNodes(ctx, c, nodes...); err != nil {
			b.Fatal(err)
		}
	}
	agents := newAgents(c, names)
	if err := agents.reportAll(ctx); err != nil {
		b.Fatal(err)
	}
	go agents.heartbeat(ctx)
	b.Logf("%d nodes Ready with their GPUNodes in %s", s.nodes, time.Since(began).Round(time.Second))

	// Chamber.
	ctl := startController(b, ctx, cp, s.check)
	began = time.Now()
	if err := c.Create(ctx, &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: poolName}, Spec: chamber.GPUPoolSpec{NodeLabels: labels}}); err != nil {
		b.Fatal(err)
	}
	var namespaces []string
	perTeam := int32(s.nodes * gpusPerNode / teams)
	for i := range teams {
		name := fmt.Sprintf("team-%02d", i)
		namespaces = append(namespaces, name)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			b.Fatal(err)
		}
		if err := c.Create(ctx, &chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: chamber.TeamSpec{
			Pool: poolName, Namespaces: []string{name}, Quotas: []chamber.TeamQuota{{Model: h100, GPUs: perTeam}},
		}}); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, ctx, 5*time.Minute, "every team's ClusterQueue and LocalQueue", func() bool {
		for _, ns := range namespaces {
			var cq kueue.ClusterQueue
			if c.Get(ctx, client.ObjectKey{Name: ns}, &cq) != nil || !apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueue.ClusterQueueActive) {
				return false
			}
			if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: chamber.DefaultLocalQueueName}, &kueue.LocalQueue{}) != nil {
				return false
			}
		}
		return true
	})
	b.Logf("pool and %d teams compiled into Kueue in %s", teams, time.Since(began).Round(time.Second))

	// The load, the faults and the samples.
	runner, err := controllertest.NewRunner(cp.Config)
	if err != nil {
		b.Fatal(err)
	}
	stopRunner, err := runner.Watch(ctx, cp.Config, namespaces...)
	if err != nil {
		b.Fatal(err)
	}
	defer stopRunner()
	start := time.Now()
	sampler := newSampler(ctl, runner, start)
	samplerCtx, stopSampler := context.WithCancel(ctx)
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); sampler.run(samplerCtx) }()
	faultsDone := make(chan []time.Duration, 1)
	go func() { faultsDone <- injectFaults(ctx, b, c, agents, names, s) }()

	for i := range s.workloads {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / s.rate * float64(time.Second)))))
		wl, runFor := workload(namespaces[i%teams], i)
		if err := runner.Create(ctx, wl, runFor); err != nil {
			b.Fatal(err)
		}
	}
	created := time.Since(start)
	select {
	case <-runner.WaitFinished(s.workloads):
	case <-time.After(finishTimeout):
		b.Fatalf("%d of %d workloads finished within %s", runner.FinishedCount(), s.workloads, finishTimeout)
	}
	res := runner.Result(start)
	toTaint := <-faultsDone
	// The controller's CPU and memory after the burst.
	time.Sleep(settleFor)
	stopSampler()
	<-samplerDone

	families, scrape, err := ctl.scrape()
	if err != nil {
		b.Fatal(err)
	}
	r := report{scale: s, result: res, created: created, toTaint: toTaint, samples: sampler.samples,
		reconciles: reconcileTimes(families), verdicts: verdictTimes(families), lastScrape: scrape}
	text := r.markdown()
	if err := os.MkdirAll(s.out, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(s.out, "report.md")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("report in %s:\n%s", path, text)
	b.ReportMetric(float64(res.Workloads), "workloads-finished")
	b.ReportMetric(percentile(toTaint, 99).Seconds(), "taint-p99-s")
	b.ReportMetric(r.maxRSS(), "max-rss-MiB")
	b.ReportMetric(ms(r.p99(scrapeTime)), "scrape-p99-ms")
	b.ReportMetric(ms(r.p99(fleetScrapeTime)), "fleet-scrape-p99-ms")
}

// workload i of the load and its runtime: 1, 4 or 8 GPUs on one pod, or two pods of
// 8 (in 12 workloads: 7 of 1 GPU, 3 of 4, 1 of 8, 1 of 2x8), 30 to 90 s.
func workload(ns string, i int) (*kueue.Workload, time.Duration) {
	pods, gpus := int32(1), int64(1)
	switch i % 12 {
	case 7, 8, 9:
		gpus = 4
	case 10:
		gpus = 8
	case 11:
		pods, gpus = 2, 8
	}
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("wl-%05d", i), Namespace: ns},
		Spec: kueue.WorkloadSpec{
			QueueName: chamber.DefaultLocalQueueName,
			Priority:  ptr.To(int32(100 * (i % 3))),
			PodSets: []kueue.PodSet{{Name: "main", Count: pods, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{kube.ResourceGPU: q}, Limits: corev1.ResourceList{kube.ResourceGPU: q},
				}}},
			}}}},
		},
	}
	return wl, 30*time.Second + time.Duration(i*7919%61)*time.Second
}

// agents write the nodes' GPUNodes as chamber-agent does: every heartbeat, each node
// in turn, so the API server sees the fleet's steady rate of reports.
type agents struct {
	c     client.Client
	names []string
	mu    sync.Mutex
	// failing is the GPU each faulted node reports failing.
	failing map[string]int32
}

func newAgents(c client.Client, names []string) *agents {
	return &agents{c: c, names: names, failing: map[string]int32{}}
}

func (a *agents) reportAll(ctx context.Context) error {
	for _, n := range a.names {
		if err := a.c.Create(ctx, &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			return fmt.Errorf("create GPUNode %s: %w", n, err)
		}
		if _, err := a.report(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (a *agents) heartbeat(ctx context.Context) {
	tick := time.NewTicker(heartbeat / time.Duration(len(a.names)))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(a.names) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_, _ = a.report(ctx, a.names[i])
		}
	}
}

// fail makes the node's agent report an XID 79 on one GPU from now on; it returns
// when that report was written.
func (a *agents) fail(ctx context.Context, node string, gpu int32) (time.Time, error) {
	a.mu.Lock()
	a.failing[node] = gpu
	a.mu.Unlock()
	return a.report(ctx, node)
}

func (a *agents) report(ctx context.Context, node string) (time.Time, error) {
	a.mu.Lock()
	bad, failing := a.failing[node]
	a.mu.Unlock()
	now := time.Now()
	st := chamber.GPUNodeStatus{Health: chamber.GPUHealthy, LastHeartbeatTime: &metav1.Time{Time: now}, HeartbeatSeconds: int32(heartbeat / time.Second)}
	for i := range int32(gpusPerNode) {
		g := chamber.GPUStatus{Index: i, Model: h100, Health: chamber.GPUHealthy}
		if failing && i == bad {
			g.Health = chamber.GPUUnhealthy
			g.Faults = []chamber.GPUFault{{Reason: "XID79", Severity: chamber.GPUUnhealthy, Action: "RebootNode", Persistent: true,
				Message: "XID 79: GPU has fallen off the bus", FirstSeen: &metav1.Time{Time: now}, Count: 1}}
			st.Health = chamber.GPUUnhealthy
		}
		st.GPUs = append(st.GPUs, g)
	}
	gn := &chamber.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: st}
	if err := a.c.Status().Patch(ctx, gn, client.Merge); err != nil {
		return now, fmt.Errorf("report GPUNode %s: %w", node, err)
	}
	return now, nil
}

// injectFaults fails one GPU on a different node every s.faultEvery and returns the
// times from each report to the node's taint.
func injectFaults(ctx context.Context, b *testing.B, c client.Client, a *agents, names []string, s scale) []time.Duration {
	var out []time.Duration
	for i := range s.faults {
		select {
		case <-ctx.Done():
			return out
		case <-time.After(s.faultEvery):
		}
		// The faults spread evenly over the fleet, each on a node of its own.
		stride := len(names) / s.faults
		node := names[i*stride+stride/2]
		at, err := a.fail(ctx, node, int32(i%gpusPerNode))
		if err != nil {
			b.Error(err)
			return out
		}
		for {
			var n corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err == nil &&
				slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy }) {
				out = append(out, time.Since(at))
				break
			}
			if time.Since(at) > 2*time.Minute {
				b.Errorf("node %s not tainted 2 minutes after its XID 79", node)
				return out
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out
}

// controller is the running chamber-controller.
type controller struct {
	*controlplane.Chamber
	http *http.Client
}

// startController runs the chamber-controller binary as the chart's ServiceAccount,
// without leader election, every controller on (the admission check if check).
func startController(b *testing.B, ctx context.Context, cp *controlplane.ControlPlane, check bool) *controller {
	if err := cp.InstallChartRBAC(ctx); err != nil {
		b.Fatal(err)
	}
	ch, err := cp.StartChamber(ctx, "chamber-controller", "--leader-elect=false", fmt.Sprintf("--admission-check=%t", check))
	if err != nil {
		b.Fatal(err)
	}
	return &controller{Chamber: ch, http: &http.Client{Timeout: 30 * time.Second}}
}

// scrape reads the controller's /metrics and how long the whole response took.
func (c *controller) scrape() (map[string]*dto.MetricFamily, time.Duration, error) {
	began := time.Now()
	resp, err := c.http.Get(c.MetricsURL)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(began)
	if err != nil {
		return nil, 0, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	return families, took, err
}

// probe times a GET of the controller's /healthz, which does no work of its own.
func (c *controller) probe() (time.Duration, error) {
	began := time.Now()
	resp, err := c.http.Get(c.ProbeURL + "/healthz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return time.Since(began), err
}

// usage is the process's resident memory (MiB) and CPU time so far, from /proc.
func (c *controller) usage() (rssMiB float64, cpu time.Duration, err error) {
	pid := c.Pid()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			rssMiB = kb / 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command name, which is in parentheses: utime and stime
	// are the 12th and 13th of them, in clock ticks (100 a second on Linux).
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return rssMiB, time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// sample is one row of the table over time.
type sample struct {
	at                 time.Duration
	admitted, finished int
	rssMiB, heapMiB    float64
	cpuCores           float64
	scrape             time.Duration
	// fleet is the scrape's chamber_scrape_duration_seconds: Chamber's own part of it.
	fleet time.Duration
	// probe is a GET of the controller's /healthz just before the scrape: what any
	// answer of the process takes on the machine then.
	probe  time.Duration
	series int
}

type sampler struct {
	ctl     *controller
	runner  *controllertest.Runner
	start   time.Time
	samples []sample
}

func newSampler(ctl *controller, runner *controllertest.Runner, start time.Time) *sampler {
	return &sampler{ctl: ctl, runner: runner, start: start}
}

func (s *sampler) run(ctx context.Context) {
	_, lastCPU, _ := s.ctl.usage()
	last := time.Now()
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rss, cpu, err := s.ctl.usage()
		if err != nil {
			continue
		}
		now := time.Now()
		row := sample{at: now.Sub(s.start), admitted: s.runner.AdmittedCount(), finished: s.runner.FinishedCount(), rssMiB: rss,
			cpuCores: (cpu - lastCPU).Seconds() / now.Sub(last).Seconds()}
		lastCPU, last = cpu, now
		if took, err := s.ctl.probe(); err == nil {
			row.probe = took
		}
		if families, took, err := s.ctl.scrape(); err == nil {
			row.scrape = took
			if f := families["chamber_scrape_duration_seconds"]; f != nil && len(f.GetMetric()) > 0 {
				row.fleet = time.Duration(f.GetMetric()[0].GetGauge().GetValue() * float64(time.Second))
			}
			for _, f := range families {
				row.series += len(f.GetMetric())
			}
			if f := families["go_memstats_heap_inuse_bytes"]; f != nil && len(f.GetMetric()) > 0 {
				row.heapMiB = f.GetMetric()[0].GetGauge().GetValue() / (1 << 20)
			}
		}
		s.samples = append(s.samples, row)
	}
}

// reconcileTime is one controller's reconcile count and time percentiles, from
// controller-runtime's histogram (each percentile is its bucket's upper bound).
type reconcileTime struct {
	controller string
	count      uint64
	p50, p99   float64
}

func reconcileTimes(families map[string]*dto.MetricFamily) []reconcileTime {
	var out []reconcileTime
	f := families["controller_runtime_reconcile_time_seconds"]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		name := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "controller" {
				name = l.GetValue()
			}
		}
		h := m.GetHistogram()
		rt := reconcileTime{controller: name, count: h.GetSampleCount()}
		rt.p50, rt.p99 = bucketQuantile(h, 0.5), bucketQuantile(h, 0.99)
		out = append(out, rt)
	}
	slices.SortFunc(out, func(a, b reconcileTime) int { return strings.Compare(a.controller, b.controller) })
	return out
}

// verdictTimes reads the admission check's histogram of verdict times.
func verdictTimes(families map[string]*dto.MetricFamily) reconcileTime {
	f := families["chamber_admission_check_verdict_duration_seconds"]
	if f == nil || len(f.GetMetric()) == 0 {
		return reconcileTime{}
	}
	h := f.GetMetric()[0].GetHistogram()
	return reconcileTime{controller: "admission", count: h.GetSampleCount(), p50: bucketQuantile(h, 0.5), p99: bucketQuantile(h, 0.99)}
}

func bucketQuantile(h *dto.Histogram, q float64) float64 {
	want := uint64(math.Ceil(q * float64(h.GetSampleCount())))
	for _, bk := range h.GetBucket() {
		if bk.GetCumulativeCount() >= want {
			return bk.GetUpperBound()
		}
	}
	return math.Inf(1)
}

type report struct {
	scale      scale
	result     controllertest.RunResult
	created    time.Duration
	toTaint    []time.Duration
	samples    []sample
	reconciles []reconcileTime
	verdicts   reconcileTime
	lastScrape time.Duration
}

func (r report) maxRSS() float64 {
	m := 0.0
	for _, s := range r.samples {
		m = max(m, s.rssMiB)
	}
	return m
}

// The timed columns of a sample, for p99.
func scrapeTime(s sample) time.Duration      { return s.scrape }
func fleetScrapeTime(s sample) time.Duration { return s.fleet }
func probeTime(s sample) time.Duration       { return s.probe }

// p99 is the 99th percentile of one column of the samples, over the samples that
// have it.
func (r report) p99(column func(sample) time.Duration) time.Duration {
	var ds []time.Duration
	for _, s := range r.samples {
		if d := column(s); d > 0 {
			ds = append(ds, d)
		}
	}
	return percentile(ds, 99)
}

func (r report) markdown() string {
	var w strings.Builder
	s := r.scale
	fmt.Fprintf(&w, "# Chamber at fleet scale\n\n")
	fmt.Fprintf(&w, "`make bench-scale` (`go test ./test/scale -run '^$' -bench Scale -benchtime 1x`), %s, on this machine's %d cores.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU())
	fmt.Fprintf(&w, "| parameter | value |\n| --- | --- |\n")
	fmt.Fprintf(&w, "| fleet | %d kwok nodes x %d GPUs (%d GPUs) in one GPUPool; a GPUNode per node written every %s, as its agent would |\n", s.nodes, gpusPerNode, s.nodes*gpusPerNode, heartbeat)
	fmt.Fprintf(&w, "| teams | %d Teams of %d GPUs each, one Cohort |\n", teams, s.nodes*gpusPerNode/teams)
	fmt.Fprintf(&w, "| load | %d workloads without pods (7 in 12 of 1 GPU, 3 of 4, 1 of 8, 1 of 2 pods x 8), one after another at up to %.0f a second: all created in %s (%.1f a second; each create waits for the API server's answer), each finished 30 to 90 s after admission |\n",
		s.workloads, s.rate, r.created.Round(time.Second), float64(s.workloads)/r.created.Seconds())
	fmt.Fprintf(&w, "| faults | an XID 79 on one GPU of a different node every %s from the start of the load, %d in all |\n", s.faultEvery, s.faults)
	fmt.Fprintf(&w, "| Chamber | the chamber-controller binary as the chart's ServiceAccount, every controller on, admission check %s |\n\n", map[bool]string{true: "on (`--admission-check`)", false: "off (the default)"}[s.check])

	fmt.Fprintf(&w, "| figure | value | goal |\n| --- | --- | --- |\n")
	fmt.Fprintf(&w, "| workloads admitted and finished | %d of %d, the last %s after the first was created | all |\n", r.result.Workloads, s.workloads, r.result.Wall.Round(time.Second))
	fmt.Fprintf(&w, "| time from creation to admission | mean %s, p50 %s, p99 %s | |\n", r.result.MeanAdmission.Round(time.Millisecond), r.result.P50.Round(time.Millisecond), r.result.P99.Round(time.Millisecond))
	fmt.Fprintf(&w, "| writes per workload | %.1f | |\n", r.result.WritesPerWorkload)
	if v := r.verdicts; s.check && v.count > 0 {
		fmt.Fprintf(&w, "| the check's verdicts, decided from the cache (without their write) | %d, p50 at most %s, p99 at most %s | p99 at most 50 ms |\n", v.count, seconds(v.p50), seconds(v.p99))
	}
	for _, rt := range r.reconciles {
		if rt.controller == "admission" && s.check {
			fmt.Fprintf(&w, "| admission reconcile (verdicts with their writes, evictions) | %d, p50 at most %s, p99 at most %s | |\n", rt.count, seconds(rt.p50), seconds(rt.p99))
		}
	}
	fmt.Fprintf(&w, "| controller RSS | at most %.0f MiB | at most 500 MiB |\n", r.maxRSS())
	fmt.Fprintf(&w, "| `/metrics` scrape | p99 %s over %d scrapes, the last %s; of it Chamber's fleet series (`chamber_scrape_duration_seconds`) p99 %s; the controller's `/healthz` just before each, p99 %s | at most 50 ms |\n",
		r.p99(scrapeTime).Round(time.Millisecond), len(r.samples), r.lastScrape.Round(time.Millisecond),
		r.p99(fleetScrapeTime).Round(time.Millisecond), r.p99(probeTime).Round(time.Millisecond))
	fmt.Fprintf(&w, "| fault to taint | %d faults: p50 %s, p99 %s | p99 at most 2 s |\n\n", len(r.toTaint), percentile(r.toTaint, 50).Round(time.Millisecond), percentile(r.toTaint, 99).Round(time.Millisecond))

	fmt.Fprintf(&w, "Reconcile time per controller (controller-runtime's histogram; each percentile is its bucket's upper bound):\n\n")
	fmt.Fprintf(&w, "| controller | reconciles | p50 at most | p99 at most |\n| --- | --- | --- | --- |\n")
	for _, rt := range r.reconciles {
		fmt.Fprintf(&w, "| %s | %d | %s | %s |\n", rt.controller, rt.count, seconds(rt.p50), seconds(rt.p99))
	}
	fmt.Fprintf(&w, "\nThe controller over time (every %s from the first workload's creation; CPU in cores over the interval before; the load ends when the last workload finished, then %s of settling):\n\n", sampleEvery, settleFor)
	fmt.Fprintf(&w, "| time | admitted | finished | RSS MiB | heap MiB | CPU cores | scrape ms | of it Chamber's ms | /healthz ms | series |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, x := range r.samples {
		fmt.Fprintf(&w, "| %s | %d | %d | %.0f | %.0f | %.2f | %.0f | %.1f | %.0f | %d |\n", x.at.Round(time.Second), x.admitted, x.finished, x.rssMiB, x.heapMiB, x.cpuCores, ms(x.scrape), ms(x.fleet), ms(x.probe), x.series)
	}
	return w.String()
}

func seconds(v float64) string {
	if math.IsInf(v, 1) {
		return "above the last bucket"
	}
	return (time.Duration(v * float64(time.Second))).String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func waitFor(b *testing.B, ctx context.Context, timeout time.Duration, what string, done func() bool) {
	b.Helper()
	for deadline := time.Now().Add(timeout); !done(); {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
