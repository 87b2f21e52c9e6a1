package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilclock "k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"chamber.dev/chamber/agent"
	"chamber.dev/chamber/healthcheck/nvmlsource"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/test/controlplane"
)

// simNode is one simulated GPU node: go-nvml fake GPUs, the real node agent reading
// them, and which pod holds each GPU. kwok runs no device plugin, so the simulator
// plays its part: it gives a running pod the lowest-numbered free healthy GPUs (the
// inventory's rule for nodes without a kubelet), makes them report the job's
// utilization, and tells the agent which pod holds them.
type simNode struct {
	name  string
	gpus  *nvmlsource.FakeGPUs
	agent *agent.Agent

	mu    sync.Mutex
	slots []gpuSlot
}

type gpuSlot struct {
	pod    string // namespace/name holding the GPU; empty when free
	broken bool   // a fault was injected and not yet repaired
}

// GPUPods is the node's PodMapper: device ids are NVML indices, which the agent accepts.
func (n *simNode) GPUPods(context.Context) (map[string]agent.PodRef, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]agent.PodRef{}
	for i, s := range n.slots {
		if s.pod == "" {
			continue
		}
		ns, name := splitKey(s.pod)
		out[strconv.Itoa(i)] = agent.PodRef{Namespace: ns, Name: name, Container: "train"}
	}
	return out, nil
}

// place gives pod count GPUs, healthy ones first, and sets their utilization. It
// returns the indices and false when the pod had to take a broken GPU (the scheduler
// saw room the hardware does not have): such a pod crashes at start.
func (n *simNode) place(pod string, count int, u Utilization) ([]int, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var got []int
	for pass := 0; pass < 2 && len(got) < count; pass++ {
		for i, s := range n.slots {
			if len(got) < count && s.pod == "" && s.broken == (pass == 1) {
				got = append(got, i)
			}
		}
	}
	ok := true
	for _, i := range got {
		n.slots[i].pod = pod
		ok = ok && !n.slots[i].broken
		_ = n.gpus.SetUtilization(i, u.GPUPercent, u.MemoryPercent)
	}
	return got, ok
}

// setUtilization sets what the pod's GPUs read.
func (n *simNode) setUtilization(pod string, u Utilization) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range n.slots {
		if n.slots[i].pod == pod {
			_ = n.gpus.SetUtilization(i, u.GPUPercent, u.MemoryPercent)
		}
	}
}

// release frees the pod's GPUs and sets them idle.
func (n *simNode) release(pod string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range n.slots {
		if n.slots[i].pod == pod {
			n.slots[i].pod = ""
			_ = n.gpus.SetUtilization(i, 0, 0)
		}
	}
}

// free counts the GPUs no pod holds and no unrepaired fault broke.
func (n *simNode) free() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, s := range n.slots {
		if s.pod == "" && !s.broken {
			c++
		}
	}
	return c
}

// healthy counts the GPUs without an unrepaired fault.
func (n *simNode) healthy() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, s := range n.slots {
		if !s.broken {
			c++
		}
	}
	return c
}

// reading is the agent's last NVML reading of GPU i, in percent; ok is false when
// there is no reading taken after since (the pod's start: an older one belongs to the
// GPU's previous use) or the reading failed (a lost GPU).
func (n *simNode) reading(i int, since time.Time) (uint32, bool) {
	g, ok := n.agent.Tracker().GPU(i)
	if !ok || g.LastPoll.Before(since) || g.Sample.Lost {
		return 0, false
	}
	return g.Sample.GPUUtilPercent, true
}

// startNodes creates the kwok nodes and one agent per node, running until ctx ends.
// The returned wait blocks until every agent has stopped.
func startNodes(ctx context.Context, c client.Client, sc *Scenario) (map[string]*simNode, []string, func(), error) {
	var specs []controlplane.GPUNode
	fakes := map[string]string{}
	for gi, g := range sc.Nodes {
		for i := 1; i <= g.Count; i++ {
			name := fmt.Sprintf("gpu-%s-%d", g.Fake, i)
			if len(sc.Nodes) > 1 {
				name = fmt.Sprintf("gpu-%d-%s-%d", gi+1, g.Fake, i)
			}
			specs = append(specs, controlplane.GPUNode{Name: name, GPUs: g.GPUs, Product: g.Product, Labels: map[string]string{PoolLabel: PoolName}})
			fakes[name] = g.Fake
		}
	}
	if err := controlplane.CreateGPUNodes(ctx, c, specs...); err != nil {
		return nil, nil, nil, err
	}
	nodes := map[string]*simNode{}
	var names []string
	var wg sync.WaitGroup
	for _, s := range specs {
		fake, err := nvmlsource.NewFake(fakes[s.Name])
		if err != nil {
			return nil, nil, nil, err
		}
		if count, _ := fake.DeviceGetCount(); count < s.GPUs {
			return nil, nil, nil, fmt.Errorf("node group %s: the %s fake has %d GPUs, fewer than the %d asked for", s.Name, fakes[s.Name], count, s.GPUs)
		}
		n := &simNode{name: s.Name, gpus: fake, slots: make([]gpuSlot, s.GPUs)}
		cfg := agent.DefaultConfig()
		cfg.NodeName = s.Name
		cfg.NVML = "fake:" + fakes[s.Name]
		// Short intervals: simulated time runs sc.Speedup times faster than the clock.
		// The NVML poll is the agent's default (10 s) in simulated time, floored at
		// 100 ms of clock: at 500 ms (a simulated minute) a fault's node was tainted
		// only after the Job controller (10 s back-off) had replaced the pod it killed,
		// and Kueue failed the replacement on the tainted node against the Job's
		// backoffLimit (a job lost in start 102h, seed 1).
		cfg.PollInterval = max(simToWall(cfg.PollInterval, sc.Speedup), 100*time.Millisecond)
		cfg.HeartbeatInterval, cfg.UtilizationWindow = 2*time.Second, 2*time.Second
		cfg.MetricsBindAddress = "0"
		a, err := agent.New(agent.Options{Config: cfg, NVML: fake, Client: c, Clock: utilclock.RealClock{}, Pods: n})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("agent for %s: %w", s.Name, err)
		}
		n.agent = a
		nodes[s.Name] = n
		names = append(names, s.Name)
		wg.Go(func() {
			_ = a.Run(ctx)
			fake.Close()
		})
	}
	return nodes, names, wg.Wait, nil
}

// setAllocatable sets the node's nvidia.com/gpu allocatable to its healthy GPUs, as
// NVIDIA's device plugin does when a GPU raises a fatal XID: every policy has that
// much protection from the hardware's side.
func setAllocatable(ctx context.Context, c client.Client, node string, gpus int) error {
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		return err
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Status.Allocatable[kube.ResourceGPU] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	return c.Status().Patch(ctx, &n, patch)
}

// faultKind is a GPU fault the injector raises, with what the driver reports.
type faultKind struct {
	name  string
	raise func(f *nvmlsource.FakeGPUs, gpu int) error
	// reboot: its repair (NVIDIA's catalog action) reboots the node, killing every pod
	// still on it; otherwise the GPU alone is reset.
	reboot bool
}

// faultKinds are the injected faults, drawn with equal odds: the two most common fatal
// GPU faults in large fleets.
var faultKinds = []faultKind{
	{"XID 79 (GPU fallen off the bus)", (*nvmlsource.FakeGPUs).LoseGPU, true},
	{"XID 48 (double-bit ECC error)", (*nvmlsource.FakeGPUs).RaiseDoubleBitECC, false},
}

// breakGPU marks a random healthy GPU broken and raises a fault on it. It returns the
// node, the GPU, the pod that held it (empty if none) and the fault's name.
func breakGPU(nodes map[string]*simNode, names []string, r *rand.Rand) (*simNode, int, string, faultKind, bool) {
	type gpu struct {
		n *simNode
		i int
	}
	var healthy []gpu
	for _, name := range names {
		n := nodes[name]
		n.mu.Lock()
		for i, s := range n.slots {
			if !s.broken {
				healthy = append(healthy, gpu{n, i})
			}
		}
		n.mu.Unlock()
	}
	if len(healthy) == 0 {
		return nil, 0, "", faultKind{}, false
	}
	g := healthy[r.IntN(len(healthy))]
	k := faultKinds[r.IntN(len(faultKinds))]
	g.n.mu.Lock()
	g.n.slots[g.i].broken = true
	pod := g.n.slots[g.i].pod
	g.n.mu.Unlock()
	_ = k.raise(g.n.gpus, g.i)
	return g.n, g.i, pod, k, true
}

// pods lists the pods holding GPUs of the node.
func (n *simNode) pods() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, s := range n.slots {
		if s.pod != "" && !slices.Contains(out, s.pod) {
			out = append(out, s.pod)
		}
	}
	return out
}

// repairGPU is what an operator does after replacing or resetting the GPU: reset it and
// clear its faults in the agent.
func (n *simNode) repairGPU(i int) {
	_ = n.gpus.ResetGPU(i)
	if st, ok := n.agent.Tracker().GPU(i); ok {
		for _, r := range st.Reasons() {
			n.agent.Tracker().Clear(i, r)
		}
	}
	n.mu.Lock()
	n.slots[i].broken = false
	n.mu.Unlock()
}

func splitKey(key string) (string, string) {
	i := slices.Index([]byte(key), '/')
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}
