package sim

import (
	"fmt"
	"math"
)

// Utilization is what a job's GPUs report through NVML while it runs.
type Utilization struct {
	// Class is the utilization class the job was drawn in ("idle", "low", ...), or
	// "trace" when the trace gave the job's utilization.
	Class string
	// GPUPercent is NVML's GPU utilization, MemoryPercent its memory-controller one.
	GPUPercent, MemoryPercent uint32
}

// UtilizationClass is a kind of job with its share of the jobs and the range its mean
// GPU utilization is drawn from, uniformly.
type UtilizationClass struct {
	Name       string
	Share      float64
	MinPercent int
	MaxPercent int
}

// UtilizationModel gives each job a mean GPU utilization. Traces such as Philly carry
// none, so the model stands in for it; see DefaultUtilizationModel for its sources.
type UtilizationModel struct {
	Classes []UtilizationClass
	// MultiNodeFactor scales the utilization of jobs larger than one node (8 GPUs),
	// which wait on communication.
	MultiNodeFactor float64
}

// DefaultUtilizationModel is the model the simulator uses unless told otherwise. It
// follows what published studies of shared GPU clusters report, with parameters of our
// own choosing (none of the studies publishes a per-job distribution in this form):
//   - Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
//     Workloads", USENIX ATC 2019 (Microsoft Philly, the trace replayed here): mean GPU
//     utilization of jobs about half, lower for distributed jobs that wait on
//     communication.
//   - Weng et al., "MLaaS in the Wild: Workload Analysis and Scheduling in Large-Scale
//     Heterogeneous GPU Clusters", NSDI 2022 (Alibaba PAI): most GPU instances use their
//     GPUs far below capacity, and a share of allocated GPUs sit near zero.
//   - Gao et al., "An Empirical Study on Low GPU Utilization of Deep Learning Jobs",
//     ICSE 2024 (Microsoft): low utilization is common and comes from data loading,
//     interactive use and jobs that wait on something other than the GPU.
//
// Classes: idle 3% (jobs that progress with their GPUs at 0-2%: input-starved,
// CPU-bound), low 32% (5-35%), medium 40% (35-75%), high 25% (75-98%). Jobs of more
// than 8 GPUs are scaled by 0.8. The class is what a job's GPUs do while it works;
// notebooks and hung jobs, which hold GPUs idle without working, are job kinds of
// their own (WorkModel): interactive sessions idle in spells, stuck jobs at 0% while
// hung. The mean while working is near 50%; with notebooks' idle spells and hangs,
// about 12% of the jobs leave their GPUs mostly idle.
func DefaultUtilizationModel() UtilizationModel {
	return UtilizationModel{
		Classes: []UtilizationClass{
			{Name: "idle", Share: 0.03, MinPercent: 0, MaxPercent: 2},
			{Name: "low", Share: 0.32, MinPercent: 5, MaxPercent: 35},
			{Name: "medium", Share: 0.40, MinPercent: 35, MaxPercent: 75},
			{Name: "high", Share: 0.25, MinPercent: 75, MaxPercent: 98},
		},
		MultiNodeFactor: 0.8,
	}
}

// Validate checks that the shares add up to 1 and the ranges are percentages.
func (m UtilizationModel) Validate() error {
	var sum float64
	for _, c := range m.Classes {
		if c.Share < 0 || c.MinPercent < 0 || c.MaxPercent > 100 || c.MinPercent > c.MaxPercent {
			return fmt.Errorf("utilization class %s: share %g, range %d-%d%%: want a share of 0 or more and 0 <= min <= max <= 100",
				c.Name, c.Share, c.MinPercent, c.MaxPercent)
		}
		sum += c.Share
	}
	if math.Abs(sum-1) > 1e-9 {
		return fmt.Errorf("utilization class shares add up to %g, want 1", sum)
	}
	if m.MultiNodeFactor <= 0 || m.MultiNodeFactor > 1 {
		return fmt.Errorf("multi-node utilization factor %g: want (0, 1]", m.MultiNodeFactor)
	}
	return nil
}

// For draws the utilization of job id asking for gpus GPUs. A trace utilization
// (tracePercent >= 0) wins over the model. The draw depends on the seed and the job id
// only, so every policy replays the same utilization.
func (m UtilizationModel) For(id string, gpus, tracePercent int, seed uint64) Utilization {
	if tracePercent >= 0 {
		return withMemory("trace", tracePercent)
	}
	r := rng(seed, "utilization", id)
	u, v := r.Float64(), r.Float64()
	c := m.Classes[len(m.Classes)-1]
	for _, k := range m.Classes {
		if u < k.Share {
			c = k
			break
		}
		u -= k.Share
	}
	p := float64(c.MinPercent) + v*float64(c.MaxPercent-c.MinPercent)
	if gpus > 8 {
		p *= m.MultiNodeFactor
	}
	return withMemory(c.Name, int(math.Round(p)))
}

// withMemory pairs a GPU utilization with a memory-controller utilization of about
// two thirds of it, a rough ratio for training jobs; nothing here reads it but the
// agent's metrics.
func withMemory(class string, gpu int) Utilization {
	return Utilization{Class: class, GPUPercent: uint32(gpu), MemoryPercent: uint32(gpu * 2 / 3)}
}
