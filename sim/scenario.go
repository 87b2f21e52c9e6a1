// Package sim is Chamber's fleet simulator: it replays a GPU cluster trace as
// Kubernetes Jobs (or Volcano Jobs) on a local control plane (kwok GPU nodes, the real
// node agent on go-nvml fakes, the real Kueue or Volcano) under each policy — plain
// Kubernetes, Kueue alone, Kueue with Chamber, Volcano alone, Volcano with Chamber —
// and writes a report comparing them.
package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Policy is how jobs reach the GPUs.
type Policy string

// The policies compared, all on the same trace and cluster.
const (
	// PolicyKubernetes: Jobs go straight to kube-scheduler; no queueing, no quotas.
	PolicyKubernetes Policy = "kubernetes"
	// PolicyKueue: Kueue alone with the teams' quotas (the ClusterQueues Chamber would
	// compile, created directly), no Chamber controller.
	PolicyKueue Policy = "kueue"
	// PolicyChamber: Kueue with Chamber's controllers running (controllers.Names()).
	PolicyChamber Policy = "chamber"
	// PolicyVolcano: Volcano alone with the teams' quotas (the Queues Chamber would
	// compile, created directly), the trace's jobs as Volcano Jobs; no Kueue, no
	// kube-scheduler, no Chamber controller.
	PolicyVolcano Policy = "volcano"
	// PolicyVolcanoChamber: Volcano with Chamber's controllers running (the pool's
	// backend is Volcano; Chamber makes the Queues, isolates and idle-reclaims the
	// Volcano Jobs).
	PolicyVolcanoChamber Policy = "volcano-chamber"
)

// AllPolicies in the order they run.
var AllPolicies = []Policy{PolicyKubernetes, PolicyKueue, PolicyChamber, PolicyVolcano, PolicyVolcanoChamber}

// OnVolcano says whether the policy's jobs are Volcano Jobs placed by vc-scheduler.
func (p Policy) OnVolcano() bool { return p == PolicyVolcano || p == PolicyVolcanoChamber }

// WithChamber says whether Chamber's controllers run under the policy.
func (p Policy) WithChamber() bool { return p == PolicyChamber || p == PolicyVolcanoChamber }

// Scheduler is what places the policy's jobs, as the report names it.
func (p Policy) Scheduler() string {
	switch {
	case p.OnVolcano():
		return "Volcano"
	case p == PolicyKubernetes:
		return "kube-scheduler"
	}
	return "Kueue"
}

// Baseline is the policy whose figures the policy's are compared with, the same
// scheduler without Chamber (Kueue alone for Kueue + Chamber, Volcano alone for
// Volcano + Chamber); none for the others.
func (p Policy) Baseline() (Policy, bool) {
	switch p {
	case PolicyChamber:
		return PolicyKueue, true
	case PolicyVolcanoChamber:
		return PolicyVolcano, true
	}
	return "", false
}

// Title is the policy as the report names it.
func (p Policy) Title() string {
	switch p {
	case PolicyKubernetes:
		return "(a) Kubernetes"
	case PolicyKueue:
		return "(b) Kueue"
	case PolicyChamber:
		return "(c) Kueue + Chamber"
	case PolicyVolcano:
		return "(d) Volcano"
	case PolicyVolcanoChamber:
		return "(e) Volcano + Chamber"
	}
	return string(p)
}

// ParsePolicies parses "kubernetes,kueue,chamber,volcano,volcano-chamber".
func ParsePolicies(s string) ([]Policy, error) {
	var out []Policy
	for _, f := range strings.Split(s, ",") {
		p := Policy(strings.TrimSpace(f))
		if !slices.Contains(AllPolicies, p) {
			return nil, fmt.Errorf("unknown policy %q: want a comma-separated list of kubernetes, kueue, chamber, volcano, volcano-chamber", f)
		}
		out = append(out, p)
	}
	return out, nil
}

// NodeGroup is a set of identical simulated GPU nodes.
type NodeGroup struct {
	Count int
	// GPUs per node.
	GPUs int
	// Product is the GPU model label (nvidia.com/gpu.product).
	Product string
	// Fake is the go-nvml fake the node's agent reads: dgxh100, dgxa100, ...
	Fake string
}

// ParseNodeGroups parses "16xdgxh100" or "8xdgxh100,4xdgxa100" (8 GPUs each).
func ParseNodeGroups(s string) ([]NodeGroup, error) {
	products := map[string]string{
		"dgxh100": "NVIDIA-H100-80GB-HBM3", "dgxh200": "NVIDIA-H200-141GB-HBM3",
		"dgxa100": "NVIDIA-A100-SXM4-40GB", "dgxb200": "NVIDIA-B200",
	}
	var out []NodeGroup
	for _, f := range strings.Split(s, ",") {
		count, model, ok := strings.Cut(strings.TrimSpace(f), "x")
		var n int
		if _, err := fmt.Sscanf(count, "%d", &n); !ok || err != nil || n <= 0 || products[model] == "" {
			return nil, fmt.Errorf("node group %q: want <count>x<model>, e.g. 16xdgxh100; models dgxh100, dgxh200, dgxa100, dgxb200", f)
		}
		out = append(out, NodeGroup{Count: n, GPUs: 8, Product: products[model], Fake: model})
	}
	return out, nil
}

// Pool the simulated nodes form under Kueue and Chamber.
const (
	PoolName  = "sim"
	PoolLabel = "pool"
)

// Scenario is one comparison: a prepared workload on a cluster, under the policies.
type Scenario struct {
	// Jobs to replay, submissions in trace time from 0.
	Jobs []Job
	// Nodes of the cluster.
	Nodes []NodeGroup
	// Work is the model that drew the jobs' work.
	Work WorkModel
	// PodGrace is the terminationGracePeriodSeconds every replayed pod carries under
	// every policy (simulated time): the SIGTERM notice of a pod Kueue, Volcano or the
	// Job controller deletes. A skilled user whose jobs checkpoint on SIGTERM sets it
	// long enough to write one; the bench's baseline is that user (DefaultPodGrace).
	// Under Chamber the team's eviction grace raises shorter ones.
	PodGrace time.Duration
	// Speedup: simulated time runs this many times faster than the clock.
	Speedup float64
	// FaultsPer1000GPUHours is the GPU fault rate, in simulated time.
	FaultsPer1000GPUHours float64
	// RepairTime is how long a broken GPU stays out (simulated time).
	RepairTime time.Duration
	// PricePerGPUHour prices every GPU-hour held, for cost and idle cost.
	PricePerGPUHour float64
	// IdleBelowPercent: an allocated GPU reading below it is idle.
	IdleBelowPercent uint32
	// BackoffLimit is each Job's retry limit: a job whose pods fail more often is lost.
	BackoffLimit int32
	// SampleEvery is the wall-clock sampling period.
	SampleEvery time.Duration
	// Timeout bounds each policy's replay (wall clock); jobs left then are reported
	// unfinished.
	Timeout time.Duration
	// Policies to run, in order.
	Policies []Policy
	// OutDir receives the report and plots.
	OutDir string
	// MetricsAddr is where Chamber's controller serves /metrics under PolicyChamber.
	MetricsAddr string
	// Seed drives the fault injector.
	Seed uint64
	// IsolationLevel is Chamber's fault isolation level under PolicyChamber: Auto
	// (Chamber's default: by each fault's catalog action), Node or GPU.
	IsolationLevel chamber.IsolationLevel
	// QuotasFollowHealth turns the pool's spec.quotasFollowHealth on under
	// PolicyChamber (--quotas-follow-health).
	QuotasFollowHealth bool
	// NoIdleReclaim leaves idle reclaim off under PolicyChamber, to tell what it does
	// from what the rest of Chamber does.
	NoIdleReclaim bool
	// AdmissionCheck puts Chamber's admission check on the teams' ClusterQueues under
	// PolicyChamber (--admission-check; off by default, as in chamber-controller):
	// without it Chamber evicts, isolates and reclaims all the same, without a write
	// on every admission.
	AdmissionCheck bool
	// InteractiveIdleLimit is the interactive idle time limit the teams opt in to
	// under PolicyChamber (simulated time): an interactive session idle this long is
	// paused, waiters or not, until its user comes back. 0: no limit.
	InteractiveIdleLimit time.Duration
	// KeepLogs keeps each control plane's component logs in OutDir/logs/<policy>.
	KeepLogs bool
	// Progress receives the progress lines; Log the component start-up lines.
	Progress, Log io.Writer
	// Describe is shown in the report: the trace, the slice, the command.
	Describe []Param
	// OnCluster is called once per policy when its cluster is up, with its kubeconfig
	// path and (PolicyChamber) metrics URL.
	OnCluster func(p Policy, kubeconfig, kubectl, metricsURL string)
}

// PublishedFaultRate is the GPU fault rate of large published fleets, per 1000
// GPU-hours: Meta's Research SuperCluster (Kokolis et al., "Revisiting Reliability in
// Large-Scale Machine Learning Research Clusters", 2024) reports a mean time to
// failure near 8 hours for a 1,024-GPU job, all causes: 1 / (8 h x 1,024 GPUs) = 0.12
// per 1000 GPU-hours. The Llama 3 paper (2024) counts 268 GPU or HBM interruptions in
// 54 days on 16,384 H100s: 268 / (54 x 24 h x 16,384) = 0.013, 466 of all causes 0.022.
// The simulator takes the higher: every fault it injects fails a GPU.
const PublishedFaultRate = 0.12

// FaultRateText is a fault rate as the reports name it: the published rate, or a
// stress rate as a multiple of it.
func FaultRateText(rate float64) string {
	switch {
	case rate == 0:
		return "no faults"
	case rate == PublishedFaultRate:
		return fmt.Sprintf("%g per 1000 GPU-hours (the published fleets' rate)", rate)
	case rate > PublishedFaultRate:
		return fmt.Sprintf("%g per 1000 GPU-hours (stress: %.0fx the published fleets' %g)", rate, rate/PublishedFaultRate, PublishedFaultRate)
	}
	return fmt.Sprintf("%g per 1000 GPU-hours (%.2fx the published fleets' %g)", rate, rate/PublishedFaultRate, PublishedFaultRate)
}

// PodGraceText is the pods' grace as the reports name it.
func PodGraceText(grace time.Duration) string {
	switch grace {
	case DefaultPodGrace:
		return fmt.Sprintf("%v simulated, Chamber's team eviction grace: the strong baseline, a user whose jobs checkpoint on SIGTERM", grace)
	case KubernetesPodGrace:
		return fmt.Sprintf("%v simulated, Kubernetes' default: the weak baseline", grace)
	}
	return fmt.Sprintf("%v simulated (--baseline-grace)", grace)
}

// Param is a named scenario parameter for the report.
type Param struct{ Name, Value string }

// GPUs is the cluster's GPU count.
func (s *Scenario) GPUs() int {
	n := 0
	for _, g := range s.Nodes {
		n += g.Count * g.GPUs
	}
	return n
}

// MaxGPUsPerNode is the largest node's GPU count: the most one pod can hold.
func (s *Scenario) MaxGPUsPerNode() int {
	m := 0
	for _, g := range s.Nodes {
		m = max(m, g.GPUs)
	}
	return m
}

// Models lists the GPU models of the cluster.
func (s *Scenario) Models() []string {
	var out []string
	for _, g := range s.Nodes {
		if !slices.Contains(out, g.Product) {
			out = append(out, g.Product)
		}
	}
	return out
}

// Validate says what to fix in a scenario.
func (s *Scenario) Validate() error {
	switch {
	case len(s.Jobs) == 0:
		return fmt.Errorf("no jobs to replay")
	case len(s.Nodes) == 0:
		return fmt.Errorf("no GPU nodes: give --nodes, e.g. 16xdgxh100")
	case s.Speedup < 1:
		return fmt.Errorf("--speedup %g: want 1 or more", s.Speedup)
	case s.PodGrace < 0:
		return fmt.Errorf("--baseline-grace %v: want 0 or more", s.PodGrace)
	case s.FaultsPer1000GPUHours < 0:
		return fmt.Errorf("--fault-rate %g: want 0 or more", s.FaultsPer1000GPUHours)
	case len(s.Policies) == 0:
		return fmt.Errorf("no policy to run")
	case s.OutDir == "":
		return fmt.Errorf("no report folder: give --out")
	case s.IsolationLevel != "" && s.IsolationLevel != chamber.IsolateAuto && s.IsolationLevel != chamber.IsolateNode && s.IsolationLevel != chamber.IsolateGPU:
		return fmt.Errorf("--isolation-level %q: want Auto, Node or GPU", s.IsolationLevel)
	case s.InteractiveIdleLimit < 0:
		return fmt.Errorf("--interactive-idle-limit %v: want a positive duration, or 0 for no limit", s.InteractiveIdleLimit)
	}
	maxPod := s.MaxGPUsPerNode()
	for _, j := range s.Jobs {
		if j.GPUs > maxPod && j.GPUs%maxPod != 0 {
			return fmt.Errorf("job %s asks for %d GPUs, which does not split into pods of %d (one node)", j.TraceID, j.GPUs, maxPod)
		}
		if j.GPUs > s.GPUs() {
			return fmt.Errorf("job %s asks for %d GPUs, more than the cluster's %d", j.TraceID, j.GPUs, s.GPUs())
		}
	}
	return nil
}
