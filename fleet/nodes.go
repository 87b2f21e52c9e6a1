package fleet

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet/prices"
	"chamber.dev/chamber/integrations/kube"
)

// maxGPUIndex bounds the GPU indices taken from a GPUNode: the schema sets no maximum,
// and one bad index must not make the model allocate millions of GPUs.
const maxGPUIndex = 1024

// node is one Kubernetes node as the fleet knows it.
type node struct {
	name     string
	exists   bool // the Node object is known; only then does the node have GPUs
	labels   map[string]string
	capacity int // nvidia.com/gpu capacity
	cordoned bool
	tainted  bool // carries chamber.TaintGPUUnhealthy
	// takesWork: kube.Schedulable (not cordoned nor tainted out of service).
	takesWork bool
	// fault and isolatedAt are the record fault isolation keeps on a node it isolated
	// (chamber.AnnotationIsolationReason and AnnotationIsolatedAt); empty otherwise.
	fault      string
	isolatedAt time.Time

	// providerID is the Node's spec.providerID: aws://, gce://, azure://, or none.
	providerID string

	// Resolved from labels and the pools when either changes.
	pool, model string
	// price is a GPU-hour's; priceNote says why the price table did not price it.
	price     prices.Price
	priceNote string

	report []gpuReport // the agent's GPUNode, by GPU index
	// reportStale is when the report's utilization stops counting: the agent is silent
	// by then (Heartbeats). Zero when the report has no heartbeat time.
	reportStale time.Time
	gpus        []gpu
	pods        []*pod // active GPU pods bound here
}

// gpuReport is what the node agent published about one GPU.
type gpuReport struct {
	known   bool
	health  chamber.GPUHealth
	uuid    string
	model   string // NVML's product name
	hasUtil bool
	util    float64       // mean GPU utilization in percent
	window  time.Duration // the span the agent averaged
	pod     objKey        // zero when the agent could not tell (no kubelet pod-resources)
	faults  []string      // the reasons of its active faults; never changed once made
}

// gpu is one GPU's allocation and the times its state and counters hang on.
type gpu struct {
	holder *pod
	// since is when the holder got the GPU: the pod's start, or when the model first
	// saw it, whichever is later.
	since time.Time
	// lowSince is when the GPU's utilization went below the idle threshold while held;
	// zero while it is in use, free, or without a utilization report.
	lowSince time.Time
	// accounted is the time up to which the GPU's seconds are in the counters.
	accounted time.Time
	// handedFrom is the reclaimed workload that left this GPU, while it is away:
	// others' time on the GPU is what idle reclaim gave them (Handed).
	handedFrom *workload
}

func (m *Model) nodeEntry(name string) *node {
	n := m.nodes[name]
	if n == nil {
		n = &node{name: name}
		m.nodes[name] = n
	}
	return n
}

// dropIfEmpty forgets a node that no object refers to any more.
func (m *Model) dropIfEmpty(n *node) {
	if !n.exists && n.report == nil && len(n.pods) == 0 {
		delete(m.nodes, n.name)
	}
}

// SetNode records a Node's GPU capacity, labels (pool and model), cordon and taints.
// Nodes without GPUs, and without an agent report of any, have no GPUs in the fleet.
func (m *Model) SetNode(obj *corev1.Node) {
	capacity := obj.Status.Capacity[kube.ResourceGPU]
	tainted := slices.ContainsFunc(obj.Spec.Taints, func(t corev1.Taint) bool { return t.Key == chamber.TaintGPUUnhealthy })

	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	n := m.nodeEntry(obj.Name)
	m.accountNode(n, now)
	n.exists = true
	n.labels = obj.Labels
	n.providerID = obj.Spec.ProviderID
	n.capacity = int(capacity.Value())
	n.cordoned = obj.Spec.Unschedulable
	n.tainted = tainted
	n.takesWork = kube.Schedulable(obj)
	n.fault, n.isolatedAt = isolationRecord(obj.Annotations)
	m.resolveNode(n)
	m.assign(n, now)
}

// DeleteNode removes the node's GPUs. What they ran up stays in the counters; pods
// still bound to it hold nothing until it comes back.
func (m *Model) DeleteNode(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[name]
	if n == nil {
		return
	}
	now := m.clock.Now()
	m.accountNode(n, now)
	n.exists = false
	n.labels = nil
	n.providerID = ""
	n.capacity = 0
	n.fault, n.isolatedAt = "", time.Time{}
	m.assign(n, now)
	m.dropIfEmpty(n)
}

// isolationRecord is the fault and the time of an isolation Chamber recorded on a
// node, as kubectl chamber reads it: a reason without its time is no record. A time
// that does not parse leaves the time zero; the fault still shows.
func isolationRecord(a map[string]string) (fault string, at time.Time) {
	raw := a[chamber.AnnotationIsolatedAt]
	if raw == "" {
		return "", time.Time{}
	}
	at, _ = time.Parse(time.RFC3339, raw)
	return a[chamber.AnnotationIsolationReason], at
}

// SetGPUNode records the node agent's report: per-GPU health, utilization and, where
// the kubelet told the agent, the pod holding each GPU.
func (m *Model) SetGPUNode(obj *chamber.GPUNode) {
	size := 0
	for _, g := range obj.Status.GPUs {
		if g.Index >= 0 && g.Index < maxGPUIndex {
			size = max(size, int(g.Index)+1)
		}
	}
	report := make([]gpuReport, size)
	for _, g := range obj.Status.GPUs {
		if g.Index < 0 || g.Index >= maxGPUIndex {
			continue
		}
		r := gpuReport{known: true, health: g.Health, uuid: g.UUID, model: g.Model}
		if u := g.Utilization; u != nil {
			r.hasUtil, r.util, r.window = true, float64(u.GPUPercent), time.Duration(u.WindowSeconds)*time.Second
		}
		if g.Pod != nil {
			r.pod = objKey{g.Pod.Namespace, g.Pod.Name}
		}
		for _, f := range g.Faults {
			r.faults = append(r.faults, f.Reason)
		}
		report[g.Index] = r
	}

	// The model sees every write, so the heartbeat is heard when it was written.
	stale := m.opts.Heartbeats.SilentAt(obj)

	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	n := m.nodeEntry(obj.Name)
	m.accountNode(n, now)
	n.report = report
	n.reportStale = stale
	m.resolveNode(n)
	m.assign(n, now)
	for i := range n.gpus {
		m.updateLow(n, i, now)
	}
}

// DeleteGPUNode forgets the agent's report: the node's GPUs count as healthy and in
// use while held, as on a node without an agent.
func (m *Model) DeleteGPUNode(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[name]
	if n == nil {
		return
	}
	now := m.clock.Now()
	m.accountNode(n, now)
	m.opts.Heartbeats.Forget(name)
	n.report = nil
	n.reportStale = time.Time{}
	m.resolveNode(n)
	m.assign(n, now)
	for i := range n.gpus {
		m.updateLow(n, i, now)
	}
	m.dropIfEmpty(n)
}

// resolveNode finds the node's pool, GPU model and price.
func (m *Model) resolveNode(n *node) {
	defer m.resolvePrice(n)
	n.pool, n.model = "", ""
	productLabel := chamber.DefaultProductLabel
	if p := m.poolOf(n.labels); p != nil && n.exists {
		n.pool = p.name
		productLabel = p.productLabel
	}
	n.model = n.labels[productLabel]
	if n.model == "" {
		// No GPU feature discovery label: the agent's NVML product name is the best
		// name there is.
		for _, r := range n.report {
			if r.known && r.model != "" {
				n.model = r.model
				break
			}
		}
	}
}

// resolvePrice prices a GPU-hour on the node (docs/concepts/prices.md), first of:
// its pool's price of its model when the pool marks it Reserved or Amortized (a
// contract or a purchase no price table knows of); the price table's row of its
// instance (the user's rows, then the shipped ones); its pool's price of its model.
// Without any, the node costs nothing.
func (m *Model) resolvePrice(n *node) {
	n.price, n.priceNote = prices.Price{}, ""
	p := m.pools[n.pool]
	poolPrice, pooled := prices.Price{}, false
	if p != nil {
		var v float64
		v, pooled = p.prices[n.model]
		poolPrice = prices.Price{PerGPUHour: v, Source: prices.SourcePool + p.name}
	}
	if pooled && p.committed[n.model] {
		n.price = poolPrice
		return
	}
	price, miss := m.opts.Prices.Find(prices.InstanceOf(n.providerID, n.labels))
	switch {
	case miss == "":
		n.price = price
	case pooled:
		n.price, n.priceNote = poolPrice, miss
	default:
		n.priceNote = miss
		if n.model != "" && p != nil {
			n.priceNote += "; pool " + p.name + " has no price of " + n.model
		}
	}
}

// poolOf is the pool a node with these labels belongs to (chamber.PoolOf's rule).
func (m *Model) poolOf(labels map[string]string) *pool {
	var best *pool
	for _, p := range m.pools {
		if chamber.Selects(p.nodeLabels, labels) &&
			(best == nil || chamber.TakesOver(p.name, p.nodeLabels, best.name, best.nodeLabels)) {
			best = p
		}
	}
	return best
}

func (n *node) isolated() bool { return n.cordoned || n.tainted }

// gpuCount is the node's GPUs: the device plugin's capacity, or the agent's count where
// it sees more (a node whose device plugin is not running yet).
func (n *node) gpuCount() int {
	if !n.exists {
		return 0
	}
	return max(n.capacity, len(n.report))
}

func (n *node) reportOf(i int) gpuReport {
	if i < len(n.report) {
		return n.report[i]
	}
	return gpuReport{}
}

// assign decides which pod holds each of the node's GPUs. The agent's mapping (from
// the kubelet) comes first. Without it, a pod keeps the GPUs it was given while it
// runs, and pods still short of GPUs take the lowest free indices, healthy GPUs first
// (the device plugin hands out no unhealthy GPU), in order of start time, creation,
// namespace and name: a guess, but a stable and deterministic one.
func (m *Model) assign(n *node, now time.Time) {
	m.accountNode(n, now)
	count := n.gpuCount()
	if len(n.gpus) != count {
		gpus := make([]gpu, count)
		copy(gpus, n.gpus)
		for i := len(n.gpus); i < count; i++ {
			gpus[i].accounted = now
		}
		n.gpus = gpus
	}
	if count == 0 {
		return
	}

	holders := make([]*pod, count)
	held := make(map[*pod]int, len(n.pods))
	onNode := make(map[objKey]*pod, len(n.pods))
	for _, p := range n.pods {
		onNode[p.key] = p
	}
	for i := range holders {
		r := n.reportOf(i)
		if p := onNode[r.pod]; r.pod.name != "" && p != nil && held[p] < p.gpus {
			holders[i] = p
			held[p]++
		}
	}
	for i := range holders {
		if p := n.gpus[i].holder; holders[i] == nil && p != nil && onNode[p.key] == p && held[p] < p.gpus {
			holders[i] = p
			held[p]++
		}
	}
	waiting := make([]*pod, 0, len(n.pods))
	for _, p := range n.pods {
		if held[p] < p.gpus {
			waiting = append(waiting, p)
		}
	}
	slices.SortFunc(waiting, comparePods)
	for _, p := range waiting {
		for _, healthyOnly := range []bool{true, false} {
			for i := 0; i < count && held[p] < p.gpus; i++ {
				if holders[i] == nil && (!healthyOnly || n.reportOf(i).health != chamber.GPUUnhealthy) {
					holders[i] = p
					held[p]++
				}
			}
		}
	}

	for i := range n.gpus {
		g := &n.gpus[i]
		if g.holder == holders[i] {
			continue
		}
		m.handOver(n, g, g.holder, holders[i])
		g.holder = holders[i]
		g.lowSince = time.Time{}
		if g.holder != nil {
			g.since = now
			if s := g.holder.started; !s.IsZero() && s.Before(now) {
				g.since = s
			}
		}
		m.updateLow(n, i, now)
	}
}

func comparePods(a, b *pod) int {
	return cmp.Or(a.started.Compare(b.started), a.created.Compare(b.created),
		cmp.Compare(a.key.namespace, b.key.namespace), cmp.Compare(a.key.name, b.key.name))
}

// updateLow follows the GPU's utilization against the idle threshold. The agent's
// figure is a mean over its window, so a GPU reported low has been low since the
// window began, though never since before its holder got it.
func (m *Model) updateLow(n *node, i int, now time.Time) {
	g := &n.gpus[i]
	r := n.reportOf(i)
	if g.holder == nil || !r.hasUtil || r.util >= m.opts.IdleThresholdPercent {
		g.lowSince = time.Time{}
		return
	}
	if !g.lowSince.IsZero() {
		return
	}
	g.lowSince = now.Add(-r.window)
	if g.lowSince.Before(g.since) {
		g.lowSince = g.since
	}
}

// state is the GPU's state at now.
func (m *Model) state(n *node, i int, now time.Time) State {
	s := m.baseState(n, i)
	if from, until := m.idleSpan(n, &n.gpus[i]); s == Busy && !from.IsZero() && !from.After(now) &&
		(until.IsZero() || now.Before(until)) {
		return Idle
	}
	return s
}

// baseState is the state before time is looked at: Busy stands for Busy or Idle.
func (m *Model) baseState(n *node, i int) State {
	switch {
	case n.reportOf(i).health == chamber.GPUUnhealthy:
		return Unhealthy
	case n.isolated():
		return Isolated
	case n.gpus[i].holder == nil:
		return Free
	}
	return Busy
}

// idleSpan is when a held GPU turns (or turned) Idle, and when it stops being Idle
// because its agent stopped reporting: a stale report is silence, and silence is
// never taken for idleness. A zero from never comes; a zero until never ends it.
func (m *Model) idleSpan(n *node, g *gpu) (from, until time.Time) {
	if g.lowSince.IsZero() {
		return time.Time{}, time.Time{}
	}
	return g.lowSince.Add(m.opts.IdleWindow), n.reportStale
}
