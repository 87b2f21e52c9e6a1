package sim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is what a job does with its GPUs, which decides how it makes progress and what
// an eviction costs it.
type Kind string

// The job kinds.
const (
	// KindTraining is a batch training run: busy, it makes progress while all its pods
	// run and writes a checkpoint every so often; it finishes when its work is done.
	KindTraining Kind = "training"
	// KindInteractive is a notebook or debug session: it lasts a span of wall-clock
	// time from its first start whether it holds GPUs or not, active in spells and
	// idle while its user is away; it makes no progress to lose.
	KindInteractive Kind = "interactive"
	// KindStuck is a training run that hangs part-way (a deadlock, a dead data
	// loader, a hung collective): its GPUs sit near 0% until it is restarted or its
	// hang runs out (its user notices). A restart resumes it from its checkpoint and
	// it progresses again.
	KindStuck Kind = "stuck"
)

// Work is how one job makes progress. Durations are simulated time.
type Work struct {
	Kind Kind
	// Work is the progress a training or stuck job needs to finish; an interactive
	// session lasts Work from its first start.
	Work time.Duration
	// CheckpointEvery is the progress between two periodic checkpoints.
	CheckpointEvery time.Duration
	// CheckpointWrite is how long writing a checkpoint takes: a job saves its progress
	// on an eviction only when the notice it gets is at least that long.
	CheckpointWrite time.Duration
	// HangAt is the progress at which a stuck job hangs; HangFor how long it stays
	// hung unless restarted. Work + HangFor is the trace's duration.
	HangAt, HangFor time.Duration
	// ActiveSpell and IdleSpell are the mean lengths of an interactive session's
	// active and idle spells (exponential); SpellSeed draws the spells.
	ActiveSpell, IdleSpell time.Duration
	SpellSeed              uint64
}

// WorkModel draws each job's kind and its parameters.
type WorkModel struct {
	// InteractiveShare of the jobs of at most InteractiveMaxGPUs GPUs are interactive
	// sessions; StuckShare of all jobs are stuck; the rest is training.
	InteractiveShare, StuckShare float64
	InteractiveMaxGPUs           int
	// CheckpointEvery and CheckpointWrite are drawn uniformly from these ranges.
	CheckpointEvery, CheckpointWrite [2]time.Duration
	// HangAt is drawn as a fraction of a stuck job's work, HangShare as the share of
	// its trace duration it spends hung.
	HangAt, HangShare [2]float64
	// ActiveSpell and IdleSpell are the mean spell lengths of interactive sessions.
	ActiveSpell, IdleSpell time.Duration
}

// DefaultWorkModel is the model the simulator uses unless told otherwise. The shares
// and ranges are our own choices, guided by published studies of shared GPU clusters
// (none publishes these distributions in this form):
//   - Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
//     Workloads", USENIX ATC 2019 (Philly, the trace replayed here): many short
//     single-GPU jobs are trial and debug runs; a large share of jobs end killed or
//     failed after holding GPUs for a long time.
//   - Hu et al., "Characterization and Prediction of Deep Learning Workloads in
//     Large-Scale GPU Datacenters", SC 2021 (SenseTime Helios): most jobs are short
//     debugging and interactive ones on few GPUs, a small share of the GPU time.
//   - Gao et al., "An Empirical Study on Low GPU Utilization of Deep Learning Jobs",
//     ICSE 2024 (Microsoft): interactive development and jobs blocked on something
//     other than the GPU (data loading, hangs) are leading causes of idle GPUs.
//   - Mohan et al., "CheckFreq: Frequent, Fine-Grained DNN Checkpointing", FAST 2021:
//     jobs checkpoint at epoch boundaries (tens of minutes to hours apart), and a
//     checkpoint takes seconds to minutes to write.
//
// Interactive: 10% of the jobs of up to 8 GPUs, active spells of 20 minutes on
// average, idle spells of 40. Stuck: 5% of the jobs, hanging at 20-80% of their work
// for 30-70% of their trace duration. Checkpoints every 15-60 minutes of progress,
// taking 30 s to 3 minutes to write. (The SIGTERM grace a pod gets is the scenario's
// PodGrace, not the work's.)
func DefaultWorkModel() WorkModel {
	return WorkModel{
		InteractiveShare: 0.10, StuckShare: 0.05, InteractiveMaxGPUs: 8,
		CheckpointEvery: [2]time.Duration{15 * time.Minute, 60 * time.Minute},
		CheckpointWrite: [2]time.Duration{30 * time.Second, 3 * time.Minute},
		HangAt:          [2]float64{0.2, 0.8}, HangShare: [2]float64{0.3, 0.7},
		ActiveSpell: 20 * time.Minute, IdleSpell: 40 * time.Minute,
	}
}

// Validate says what is wrong with the model.
func (m WorkModel) Validate() error {
	switch {
	case m.InteractiveShare < 0 || m.StuckShare < 0 || m.InteractiveShare+m.StuckShare > 1:
		return fmt.Errorf("job kinds: interactive share %g and stuck share %g: want 0 or more, adding up to at most 1", m.InteractiveShare, m.StuckShare)
	case m.CheckpointEvery[0] <= 0 || m.CheckpointEvery[0] > m.CheckpointEvery[1]:
		return fmt.Errorf("checkpoint cadence %v-%v: want 0 < min <= max", m.CheckpointEvery[0], m.CheckpointEvery[1])
	case m.CheckpointWrite[0] < 0 || m.CheckpointWrite[0] > m.CheckpointWrite[1]:
		return fmt.Errorf("checkpoint write time %v-%v: want 0 <= min <= max", m.CheckpointWrite[0], m.CheckpointWrite[1])
	case m.HangAt[0] < 0 || m.HangAt[0] > m.HangAt[1] || m.HangAt[1] > 1:
		return fmt.Errorf("stuck jobs' hang point %g-%g: want fractions of the work, 0 <= min <= max <= 1", m.HangAt[0], m.HangAt[1])
	case m.HangShare[0] < 0 || m.HangShare[0] > m.HangShare[1] || m.HangShare[1] >= 1:
		return fmt.Errorf("stuck jobs' hang share %g-%g: want 0 <= min <= max < 1", m.HangShare[0], m.HangShare[1])
	case m.ActiveSpell <= 0 || m.IdleSpell <= 0:
		return fmt.Errorf("interactive spells %v active, %v idle: want both positive", m.ActiveSpell, m.IdleSpell)
	}
	return nil
}

// For draws the work of job id, of gpus GPUs and the trace's duration, from the seed
// and the id only, so every policy replays the same work.
func (m WorkModel) For(id string, gpus int, duration time.Duration, seed uint64) Work {
	r := rng(seed, "work", id)
	kindDraw, a, b, c := r.Float64(), r.Float64(), r.Float64(), r.Float64()
	w := Work{Kind: KindTraining, Work: duration,
		CheckpointEvery: between(m.CheckpointEvery, a), CheckpointWrite: between(m.CheckpointWrite, b),
		SpellSeed: r.Uint64()}
	switch {
	case gpus <= m.InteractiveMaxGPUs && kindDraw < m.InteractiveShare:
		w.Kind, w.ActiveSpell, w.IdleSpell = KindInteractive, m.ActiveSpell, m.IdleSpell
	case kindDraw >= 1-m.StuckShare:
		share := m.HangShare[0] + c*(m.HangShare[1]-m.HangShare[0])
		w.Kind = KindStuck
		w.HangFor = time.Duration(float64(duration) * share).Round(time.Second)
		w.Work = duration - w.HangFor
		w.HangAt = time.Duration(float64(w.Work) * (m.HangAt[0] + a*(m.HangAt[1]-m.HangAt[0]))).Round(time.Second)
	}
	return w
}

func between(r [2]time.Duration, u float64) time.Duration {
	return (r[0] + time.Duration(u*float64(r[1]-r[0]))).Round(time.Second)
}

// Progress follows one job's progress in simulated time (durations since the
// replay's start): it runs while all its pods run, loses what it had not
// checkpointed when stopped, and says when it is done. Not safe for concurrent use.
type Progress struct {
	W Work
	// Done is the progress made; Saved the progress of its last checkpoint.
	Done, Saved time.Duration
	// Hung is how long the current hang has lasted; HangOver once it has run out or a
	// restart ended it.
	Hung     time.Duration
	HangOver bool
	// Started is when the job first ran (interactive sessions end Work after it);
	// negative until then.
	Started time.Duration
	// Running since Last.
	Running bool
	Last    time.Duration
	// LostToFaults and LostToEvictions are the progress lost when the job was
	// stopped, by a fault (no notice) and by an eviction (a notice too short to
	// checkpoint in).
	LostToFaults, LostToEvictions time.Duration
	// spells are an interactive session's spell ends, alternating active and idle,
	// since its start; drawn as needed.
	spells []time.Duration
	spell  *rand.Rand
}

// NewProgress starts a job's progress at nothing.
func NewProgress(w Work) *Progress {
	return &Progress{W: w, Started: -1}
}

// Start notes that all the job's pods run from t.
func (p *Progress) Start(t time.Duration) {
	if p.Running {
		return
	}
	if p.Started < 0 {
		p.Started = t
	}
	p.Running, p.Last = true, t
}

// Advance brings the progress to t.
func (p *Progress) Advance(t time.Duration) {
	if !p.Running || t <= p.Last {
		return
	}
	dt := t - p.Last
	p.Last = t
	if p.W.Kind == KindInteractive {
		return
	}
	if p.W.Kind == KindStuck && !p.HangOver {
		if toHang := p.W.HangAt - p.Done; toHang > 0 {
			step := min(dt, toHang)
			p.progress(step)
			dt -= step
		}
		if dt > 0 && p.Done >= p.W.HangAt {
			step := min(dt, p.W.HangFor-p.Hung)
			p.Hung += step
			dt -= step
			if p.Hung >= p.W.HangFor {
				p.HangOver = true
			}
		}
	}
	p.progress(dt)
}

func (p *Progress) progress(dt time.Duration) {
	p.Done = min(p.Done+dt, p.W.Work)
	if every := p.W.CheckpointEvery; every > 0 {
		p.Saved = max(p.Saved, p.Done/every*every)
	}
}

// Stop notes that the job stopped at t: a pod was deleted or failed. A fault gives
// no notice; an eviction gives notice (Chamber's notice, or the pod's SIGTERM grace),
// and a job whose checkpoint fits in it keeps its progress, unless it is hung. Anything else goes back
// to the last checkpoint. A restart ends a hang.
func (p *Progress) Stop(t time.Duration, notice time.Duration, fault bool) {
	if !p.Running {
		return
	}
	p.Advance(t)
	p.Running = false
	if p.W.Kind == KindInteractive {
		return
	}
	keep := p.Saved
	if !fault && notice >= p.W.CheckpointWrite && p.CanCheckpoint() {
		keep = p.Done
	}
	if fault {
		p.LostToFaults += p.Done - keep
	} else {
		p.LostToEvictions += p.Done - keep
	}
	p.Done, p.Saved = keep, keep
	if p.Hung > 0 {
		p.HangOver = true
	}
}

// CanCheckpoint says whether the job can write a checkpoint when told to: not an
// interactive session (nothing to save) nor a hung job (it answers nothing).
func (p *Progress) CanCheckpoint() bool {
	return p.W.Kind != KindInteractive && !p.hung()
}

func (p *Progress) hung() bool {
	return p.W.Kind == KindStuck && p.Done >= p.W.HangAt && !p.HangOver
}

// Finish notes that the job ended by completing: nothing is lost.
func (p *Progress) Finish(t time.Duration) {
	p.Advance(t)
	p.Running = false
}

// Finished says whether the job's work is done (an interactive session: its span has
// passed) at the last Advance.
func (p *Progress) Finished() bool {
	if p.W.Kind == KindInteractive {
		return p.Started >= 0 && p.Last-p.Started >= p.W.Work
	}
	return p.Done >= p.W.Work
}

// Idle says whether the job's GPUs sit idle at the last Advance: a hung stuck job, an
// interactive session in an idle spell.
func (p *Progress) Idle() bool {
	switch p.W.Kind {
	case KindStuck:
		return p.hung()
	case KindInteractive:
		if p.Started < 0 {
			return false
		}
		return p.spellAt(p.Last-p.Started)%2 == 1
	}
	return false
}

// spellAt is the index of the spell of an interactive session at since its first
// start: even while its user is active, odd while away. Spells are drawn as needed.
func (p *Progress) spellAt(since time.Duration) int {
	if p.spell == nil {
		p.spell = rand.New(rand.NewPCG(p.W.SpellSeed, 0x5e55))
	}
	for len(p.spells) == 0 || p.spells[len(p.spells)-1] <= since {
		var end time.Duration
		if len(p.spells) > 0 {
			end = p.spells[len(p.spells)-1]
		}
		mean := p.W.ActiveSpell
		if len(p.spells)%2 == 1 {
			mean = p.W.IdleSpell
		}
		end += max(time.Minute, time.Duration(p.spell.ExpFloat64()*float64(mean)))
		p.spells = append(p.spells, end)
	}
	i, _ := slices.BinarySearchFunc(p.spells, since, func(end, t time.Duration) int { return cmp.Compare(end, t+1) })
	return i
}

// Returns is when the user of an interactive session, paused at t (simulated time),
// comes back: at t if active then, else when the idle spell ends. A session that never
// ran returns t.
func (p *Progress) Returns(t time.Duration) time.Duration {
	if p.W.Kind != KindInteractive || p.Started < 0 {
		return t
	}
	i := p.spellAt(t - p.Started)
	if i%2 == 0 {
		return t
	}
	return p.Started + p.spells[i]
}

// SessionEnd is when an interactive session's span ends (its first start plus its
// work); negative before it first ran.
func (p *Progress) SessionEnd() time.Duration {
	if p.Started < 0 {
		return -1
	}
	return p.Started + p.W.Work
}

// EndSession notes that an interactive session not running was ended at t by its
// user, its span over: it is Finished.
func (p *Progress) EndSession(t time.Duration) {
	if p.W.Kind == KindInteractive && !p.Running {
		p.Last = max(p.Last, t)
	}
}

// Lost is the job's lost progress in GPU-hours, of gpus GPUs.
func (p *Progress) Lost(gpus int) (faults, evictions float64) {
	return p.LostToFaults.Hours() * float64(gpus), p.LostToEvictions.Hours() * float64(gpus)
}
