package sim

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/healthcheck/nvmlsource"
)

const minute = time.Minute

// step is one thing that happens to a job: it starts running, or stops (with a
// notice, or by a fault), at a simulated time.
type step struct {
	at     time.Duration
	start  bool
	notice time.Duration
	fault  bool
}

func TestProgress(t *testing.T) {
	training := Work{Kind: KindTraining, Work: 100 * minute, CheckpointEvery: 30 * minute, CheckpointWrite: 2 * minute}
	stuck := Work{Kind: KindStuck, Work: 100 * minute, CheckpointEvery: 30 * minute, CheckpointWrite: 2 * minute,
		HangAt: 40 * minute, HangFor: 60 * minute}
	type want struct {
		Done, Saved, LostToFaults, LostToEvictions time.Duration
		Finished, Idle                             bool
	}
	cases := map[string]struct {
		work  Work
		steps []step
		until time.Duration // Advance to it last
		want  want
	}{
		"training runs to its end": {
			work: training, steps: []step{{at: 0, start: true}}, until: 100 * minute,
			want: want{Done: 100 * minute, Saved: 90 * minute, Finished: true},
		},
		"periodic checkpoints only at their cadence": {
			work: training, steps: []step{{at: 0, start: true}}, until: 59 * minute,
			want: want{Done: 59 * minute, Saved: 30 * minute},
		},
		"a fault goes back to the last checkpoint": {
			work:  training,
			steps: []step{{at: 0, start: true}, {at: 50 * minute, fault: true, notice: time.Hour}},
			want:  want{Done: 30 * minute, Saved: 30 * minute, LostToFaults: 20 * minute},
		},
		"an eviction with notice long enough to checkpoint keeps everything": {
			work:  training,
			steps: []step{{at: 0, start: true}, {at: 50 * minute, notice: 2 * minute}},
			want:  want{Done: 50 * minute, Saved: 50 * minute},
		},
		"an eviction with a notice shorter than the checkpoint write loses since the last checkpoint": {
			work:  training,
			steps: []step{{at: 0, start: true}, {at: 50 * minute, notice: 30 * time.Second}},
			want:  want{Done: 30 * minute, Saved: 30 * minute, LostToEvictions: 20 * minute},
		},
		"no progress while stopped, then on from what was kept": {
			work:  training,
			steps: []step{{at: 0, start: true}, {at: 50 * minute, notice: 2 * minute}, {at: 200 * minute, start: true}},
			until: 250 * minute,
			want:  want{Done: 100 * minute, Saved: 90 * minute, Finished: true},
		},
		"a stuck job hangs at its point and sits idle": {
			work: stuck, steps: []step{{at: 0, start: true}}, until: 70 * minute,
			want: want{Done: 40 * minute, Saved: 30 * minute, Idle: true},
		},
		"a stuck job left alone hangs for its hang, then finishes at its trace duration": {
			work: stuck, steps: []step{{at: 0, start: true}}, until: 160 * minute,
			want: want{Done: 100 * minute, Saved: 90 * minute, Finished: true},
		},
		"a hung job cannot checkpoint on notice: back to its last checkpoint": {
			work:  stuck,
			steps: []step{{at: 0, start: true}, {at: 70 * minute, notice: 2 * minute}},
			want:  want{Done: 30 * minute, Saved: 30 * minute, LostToEvictions: 10 * minute},
		},
		"a restart ends the hang: from its last checkpoint the rest of the work runs at once": {
			work: stuck,
			steps: []step{{at: 0, start: true}, {at: 70 * minute, notice: 2 * minute},
				{at: 80 * minute, start: true}},
			until: 150 * minute,
			want:  want{Done: 100 * minute, Saved: 90 * minute, LostToEvictions: 10 * minute, Finished: true},
		},
		"an interactive session lasts its span from its first start, paused or not": {
			work:  Work{Kind: KindInteractive, Work: 60 * minute, ActiveSpell: 20 * minute, IdleSpell: 40 * minute},
			steps: []step{{at: 10 * minute, start: true}, {at: 20 * minute}, {at: 65 * minute, start: true}},
			until: 70 * minute,
			want:  want{Finished: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := NewProgress(tc.work)
			for _, s := range tc.steps {
				if s.start {
					p.Start(s.at)
				} else {
					p.Stop(s.at, s.notice, s.fault)
				}
			}
			p.Advance(tc.until)
			got := want{Done: p.Done, Saved: p.Saved, LostToFaults: p.LostToFaults, LostToEvictions: p.LostToEvictions,
				Finished: p.Finished()}
			if tc.work.Kind != KindInteractive { // a session's spells: TestInteractiveSpells
				got.Idle = p.Idle()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("progress (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInteractiveSpells(t *testing.T) {
	p := NewProgress(Work{Kind: KindInteractive, Work: 10 * time.Hour, ActiveSpell: 20 * minute, IdleSpell: 40 * minute, SpellSeed: 3})
	p.Start(0)
	var idle time.Duration
	for at := time.Duration(0); at < 10*time.Hour; at += minute {
		p.Advance(at)
		if p.Idle() {
			idle += minute
		}
	}
	// Spells of 20 minutes active and 40 idle on average: about two thirds idle over
	// ten hours; never all or nothing.
	if share := idle.Hours() / 10; share < 0.4 || share > 0.9 {
		t.Errorf("idle %.0f%% of a ten-hour session with spells of 20 min active and 40 idle, want about 67%%", 100*share)
	}
}

// A notebook's user comes back when the idle spell ends: Returns is the first moment
// of the next active spell, or the moment itself while the user is active.
func TestSessionReturns(t *testing.T) {
	w := Work{Kind: KindInteractive, Work: 10 * time.Hour, ActiveSpell: 20 * minute, IdleSpell: 40 * minute, SpellSeed: 7}
	follow := NewProgress(w) // the session as it runs, to read its spells
	follow.Start(5 * minute)
	idleAt := func(at time.Duration) bool { follow.Advance(at); return follow.Idle() }
	paused := NewProgress(w) // the same session, stopped at each idle moment
	paused.Start(5 * minute)
	checked := 0
	for at := 5 * minute; at < 8*time.Hour; at += minute {
		if !idleAt(at) {
			continue
		}
		back := paused.Returns(at)
		if back <= at {
			t.Fatalf("idle at %s, the user returns at %s: want later", at, back)
		}
		if !idleAt(back-time.Second) || idleAt(back) {
			t.Fatalf("idle at %s, returns at %s: want the first moment of the next active spell", at, back)
		}
		checked++
		at = back // walk on from the return
	}
	if checked == 0 {
		t.Fatal("no idle spell in eight hours")
	}
	active := NewProgress(w)
	active.Start(0)
	if got := active.Returns(0); got != 0 {
		t.Errorf("active at 0: returns at %s, want 0", got)
	}
	if got := active.SessionEnd(); got != 10*time.Hour {
		t.Errorf("SessionEnd = %s, want its start plus its span, 10h", got)
	}
	active.Stop(2*time.Hour, 0, false)
	active.EndSession(10 * time.Hour)
	if !active.Finished() {
		t.Error("a session ended by its user at the end of its span: not Finished")
	}
	if never := NewProgress(w); never.SessionEnd() >= 0 || never.Returns(time.Hour) != time.Hour {
		t.Errorf("a session that never ran: SessionEnd %s, Returns(1h) %s", never.SessionEnd(), never.Returns(time.Hour))
	}
}

func TestWorkModelDraws(t *testing.T) {
	m := DefaultWorkModel()
	kinds := map[Kind]int{}
	const n = 20000
	for i := 0; i < n; i++ {
		id := time.Duration(i).String()
		w := m.For(id, 1, time.Hour, 1)
		kinds[w.Kind]++
		if w.CheckpointEvery < m.CheckpointEvery[0] || w.CheckpointEvery > m.CheckpointEvery[1] ||
			w.CheckpointWrite < m.CheckpointWrite[0] || w.CheckpointWrite > m.CheckpointWrite[1] {
			t.Fatalf("job %s: checkpoint every %v taking %v, outside the model's ranges", id, w.CheckpointEvery, w.CheckpointWrite)
		}
		if w.Kind == KindStuck && (w.Work+w.HangFor != time.Hour || w.HangAt > w.Work) {
			t.Fatalf("stuck job %s: work %v + hang %v (at %v) should be its trace duration 1h", id, w.Work, w.HangFor, w.HangAt)
		}
		if again := m.For(id, 1, time.Hour, 1); again.Kind != w.Kind || again.Work != w.Work {
			t.Fatalf("job %s drawn twice: %+v then %+v; every policy must replay the same work", id, w, again)
		}
	}
	for kind, share := range map[Kind]float64{KindInteractive: m.InteractiveShare, KindStuck: m.StuckShare} {
		if got := float64(kinds[kind]) / n; got < share-0.01 || got > share+0.01 {
			t.Errorf("%s: %.3f of the jobs, want %.2f", kind, got, share)
		}
	}
	if w := m.For("big", 16, time.Hour, 1); w.Kind == KindInteractive {
		t.Errorf("a 16-GPU job drawn interactive; sessions are of at most %d GPUs", m.InteractiveMaxGPUs)
	}
	bad := m
	bad.InteractiveShare, bad.StuckShare = 0.8, 0.3
	if err := bad.Validate(); err == nil {
		t.Error("shares adding up to 1.1 validated")
	}
}

// A pod told to stop with notice (SIGTERM and its grace): what its job does, and the
// notice a deletion gave.
func TestExitOnSIGTERM(t *testing.T) {
	r := &recorder{speedup: 60, sigterm: 30 * time.Second}
	training := Work{Kind: KindTraining, Work: 100 * minute, CheckpointEvery: 30 * minute, CheckpointWrite: 90 * time.Second}
	stuck := Work{Kind: KindStuck, Work: 100 * minute, CheckpointEvery: 30 * minute, CheckpointWrite: 90 * time.Second, HangAt: 10 * minute, HangFor: time.Hour}
	job := func(w Work, done time.Duration, mutate func(*JobRecord)) *JobRecord {
		j := &JobRecord{Progress: NewProgress(w)}
		j.Progress.Start(0)
		j.Progress.Advance(done)
		if mutate != nil {
			mutate(j)
		}
		return j
	}
	cases := map[string]struct {
		job    *JobRecord
		notice time.Duration
		after  time.Duration
		exits  bool
	}{
		"a training job saves within the team's grace, then exits": {job(training, 20*minute, nil), 2 * minute, 1500 * time.Millisecond, true},
		"Kubernetes' default 30 s is too short for its write":      {job(training, 20*minute, nil), 30 * time.Second, 0, false},
		"an interactive session has nothing to save":               {job(Work{Kind: KindInteractive, Work: time.Hour}, 0, nil), 30 * time.Second, 0, true},
		"saved after Chamber's notice: exits at once":              {job(training, 20*minute, func(j *JobRecord) { j.checkpointed = true }), 2 * minute, 0, true},
		"a hung job answers nothing":                               {job(stuck, 20*minute, nil), time.Hour, 0, false},
		"a job the simulator is completing":                        {job(training, 20*minute, func(j *JobRecord) { j.completing = true }), 2 * minute, 0, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			after, exits := r.exitOnSIGTERM(tc.job, tc.notice)
			if after != tc.after || exits != tc.exits {
				t.Errorf("exitOnSIGTERM = %s, %v; want %s, %v", after, exits, tc.after, tc.exits)
			}
		})
	}

	pod := func(grace *int64) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: grace}}
	}
	for _, tc := range []struct {
		grace *int64
		want  time.Duration
	}{
		{nil, 30 * time.Second},              // not deleted gracefully: the model's default
		{ptr.To[int64](0), 30 * time.Second}, // the simulator's own pods
		{ptr.To[int64](2), 2 * minute},       // raised by Chamber: 2 s at 60x
	} {
		if got := r.sigtermOf(pod(tc.grace)); got != tc.want {
			t.Errorf("sigtermOf(grace %v) = %s, want %s", ptr.Deref(tc.grace, -1), got, tc.want)
		}
	}
}

// The users of notebooks paused at Chamber's idle time limit: each resumes its session
// when the idle spell it was paused in ends, or ends it when its span ran out first.
func TestReturnUsers(t *testing.T) {
	const speedup = 60
	w := Work{Kind: KindInteractive, Work: 3 * time.Hour, ActiveSpell: 20 * minute, IdleSpell: 40 * minute, SpellSeed: 11}
	start := time.Now()
	// pausedIn is a session first started at 0 and paused at the first idle moment
	// after from, and when its user comes back.
	pausedIn := func(from time.Duration) (*JobRecord, time.Duration, time.Duration) {
		j := &JobRecord{Job: &Job{Name: "nb", Team: "team-a", Work: w}, Progress: NewProgress(w)}
		j.Progress.Start(0)
		at := from
		for ; ; at += minute {
			j.Progress.Advance(at)
			if j.Progress.Idle() {
				break
			}
		}
		j.Progress.Stop(at, 0, false)
		j.paused, j.pausedAt, j.Pauses = "job-nb-1", at, 1
		return j, at, j.Progress.Returns(at)
	}
	var resumed, ended []string
	newRecorder := func(j *JobRecord) *recorder {
		resumed, ended = nil, nil
		return &recorder{speedup: speedup, start: start, jobs: map[string]*JobRecord{"team-a/nb": j},
			resume: func(k string) { resumed = append(resumed, k) }, end: func(k string) { ended = append(ended, k) }}
	}
	clock := func(sim time.Duration) time.Time { return start.Add(simToWall(sim, speedup)) }

	j, at, back := pausedIn(0)
	r := newRecorder(j)
	r.returnUsers(clock(back - time.Second))
	if resumed != nil || ended != nil {
		t.Fatalf("paused at %s, the user back at %s: a second before, resumed %v, ended %v", at, back, resumed, ended)
	}
	r.returnUsers(clock(back + time.Second))
	if !slices.Equal(resumed, []string{"team-a/job-nb-1"}) || ended != nil {
		t.Fatalf("the user back at %s: resumed %v, ended %v; want the Workload resumed", back, resumed, ended)
	}
	r.returnUsers(clock(back + time.Minute))
	if len(resumed) != 1 {
		t.Errorf("resumed %d times, want once", len(resumed))
	}
	// The resume landed (the Workload seen active) and the session was paused again
	// before its pods ran: a new absence, from which its user comes back too. (Its
	// user waiting on the first resume, it stayed paused to the end.)
	j.paused = ""
	r.workload(&kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "job-nb-1",
			Annotations:     map[string]string{chamber.AnnotationIdleReclaimedFor: "team-b/wl", chamber.AnnotationIdleReclaimHeld: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "nb", Controller: ptr.To(true)}}},
		Spec: kueue.WorkloadSpec{Active: ptr.To(false)},
	})
	if j.paused != "job-nb-1" || j.Pauses != 2 {
		t.Fatalf("paused again: the recorder has it paused as %q, %d pauses", j.paused, j.Pauses)
	}
	r.returnUsers(clock(j.Progress.Returns(j.pausedAt) + time.Second))
	if len(resumed) != 2 {
		t.Errorf("paused again before its pods ran: resumed %d times, want twice", len(resumed))
	}

	// Paused in an idle spell that outlasts the session's span: the user ends it.
	j, at, back = pausedIn(0)
	over := at + (back-at)/2
	j.Progress.W.Work = over // its span ends while its user is away
	r = newRecorder(j)
	r.returnUsers(clock(over - time.Second))
	if resumed != nil || ended != nil {
		t.Fatalf("span over at %s: a second before, resumed %v, ended %v", over, resumed, ended)
	}
	r.returnUsers(clock(over + time.Second))
	if resumed != nil || !slices.Equal(ended, []string{"team-a/nb"}) || !j.Ended || j.Finished.IsZero() || r.done != 1 || !j.Progress.Finished() {
		t.Fatalf("paused at %s, span over at %s before the user returns at %s: resumed %v, ended %v, Ended %v, done %d, Finished %v",
			at, over, back, resumed, ended, j.Ended, r.done, j.Progress.Finished())
	}
}

// A notebook Chamber paused waits for its user, not for GPUs: while its user is away
// it is neither waiting nor a job that fits on the free GPUs; once its user resumes
// it, it is both.
func TestSampleLeavesPausedSessionsOut(t *testing.T) {
	j := &JobRecord{Job: &Job{Name: "nb", Team: "team-a", GPUs: 1, Work: Work{Kind: KindInteractive}}, Pods: 1,
		Submitted: time.Now().Add(-time.Minute), paused: "job-nb-1"}
	r := &recorder{nodes: map[string]*simNode{"n1": {name: "n1", slots: make([]gpuSlot, 8)}},
		pods: map[string]*PodRun{}, jobs: map[string]*JobRecord{"team-a/nb": j}}
	if s := r.sample(5); s.Waiting != 0 || s.Queued != 0 || s.FreeWhileFits != 0 || s.TeamDemand["team-a"] != 0 {
		t.Errorf("user away: waiting %d, queued %d, free while fits %d, demand %d; want none", s.Waiting, s.Queued, s.FreeWhileFits, s.TeamDemand["team-a"])
	}
	j.resumed = time.Now()
	if s := r.sample(5); s.Waiting != 1 || s.Queued != 1 || s.FreeWhileFits != 8 || s.TeamDemand["team-a"] != 1 {
		t.Errorf("user back: waiting %d, queued %d, free while fits %d, demand %d; want 1, 1, 8, 1", s.Waiting, s.Queued, s.FreeWhileFits, s.TeamDemand["team-a"])
	}
}

// Free GPUs while a job waits that Kueue holds for an admitted job whose pods do not
// run yet are the control plane's latency, told apart from the rest.
func TestSampleTellsReservedFromFree(t *testing.T) {
	waiting := &JobRecord{Job: &Job{Name: "w", Team: "team-a", GPUs: 1}, Pods: 1, Submitted: time.Now().Add(-time.Minute)}
	admitted := &JobRecord{Job: &Job{Name: "a", Team: "team-b", GPUs: 16}, Pods: 2, Submitted: time.Now().Add(-time.Minute), reserved: true}
	r := &recorder{nodes: map[string]*simNode{"n1": {name: "n1", slots: make([]gpuSlot, 8)}, "n2": {name: "n2", slots: make([]gpuSlot, 8)}},
		pods: map[string]*PodRun{}, jobs: map[string]*JobRecord{"team-a/w": waiting, "team-b/a": admitted}}
	if s := r.sample(5); s.FreeWhileFits != 16 || s.FreeReserved != 16 {
		t.Errorf("both pods of the admitted job not running: free while fits %d, reserved %d; want 16, 16", s.FreeWhileFits, s.FreeReserved)
	}
	admitted.Running = 1
	r.nodes["n2"].slots = make([]gpuSlot, 0) // its running pod's node, full
	if s := r.sample(5); s.FreeWhileFits != 8 || s.FreeReserved != 8 {
		t.Errorf("one pod running: free while fits %d, reserved %d; want 8, 8", s.FreeWhileFits, s.FreeReserved)
	}
	admitted.reserved = false
	if s := r.sample(5); s.FreeWhileFits != 8 || s.FreeReserved != 0 {
		t.Errorf("no quota held: free while fits %d, reserved %d; want 8, 0", s.FreeWhileFits, s.FreeReserved)
	}
}

// Free GPUs while a job waits on a node that takes no new pod (Chamber cordoned and
// tainted it for a fault) are told apart from the rest; a node back in service is not.
func TestSampleTellsOutOfServiceFromFree(t *testing.T) {
	waiting := &JobRecord{Job: &Job{Name: "w", Team: "team-a", GPUs: 1}, Pods: 1, Submitted: time.Now().Add(-time.Minute)}
	r := &recorder{nodes: map[string]*simNode{"n1": {name: "n1", slots: make([]gpuSlot, 8)}, "n2": {name: "n2", slots: make([]gpuSlot, 8)}},
		pods: map[string]*PodRun{}, jobs: map[string]*JobRecord{"team-a/w": waiting}, outOfService: map[string]bool{}}
	r.nodes["n2"].slots[0].broken = true // the fault's GPU, free of no use
	isolated := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{Unschedulable: true,
		Taints: []corev1.Taint{{Key: "chamber.dev/gpu-unhealthy", Effect: corev1.TaintEffectNoSchedule}}}}
	r.node(isolated)
	if s := r.sample(5); s.FreeWhileFits != 15 || s.FreeOutOfService != 7 {
		t.Errorf("n2 isolated: free while fits %d, out of service %d; want 15, 7", s.FreeWhileFits, s.FreeOutOfService)
	}
	isolated.Spec.Unschedulable = false
	if r.node(isolated); r.sample(5).FreeOutOfService != 7 {
		t.Errorf("n2 uncordoned, still tainted: out of service %d, want 7", r.sample(5).FreeOutOfService)
	}
	isolated.Spec.Taints = nil
	if r.node(isolated); r.sample(5).FreeOutOfService != 0 {
		t.Errorf("n2 back in service: out of service %d, want 0", r.sample(5).FreeOutOfService)
	}
}

// A pod that ends while its Job's replacement already runs (the Job controller starts
// one for a terminating pod): the job loses what the stop costs it, then goes on, on
// the pod that runs.
func TestReplacementBeforeTheEnd(t *testing.T) {
	fake, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := Work{Kind: KindTraining, Work: time.Hour, CheckpointEvery: 30 * minute, CheckpointWrite: time.Minute}
	j := &JobRecord{Job: &Job{Name: "j", Team: "team-a", GPUs: 1, Work: w}, Pods: 1, Progress: NewProgress(w)}
	r := &recorder{speedup: 60, start: start, nodes: map[string]*simNode{"n1": {name: "n1", gpus: fake, slots: make([]gpuSlot, 8)}},
		pods: map[string]*PodRun{}, jobs: map[string]*JobRecord{"team-a/j": j}, faulted: map[string]bool{}, created: map[string]time.Time{}}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: map[string]string{labelJobName: "j"}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	r.pod(pod("j-a"), false)
	if !j.Progress.Running {
		t.Fatal("the job's one pod runs, its progress does not")
	}
	r.pod(pod("j-b"), false) // the replacement, while j-a is still there
	r.markFaulted("team-a/j-a")
	r.pod(pod("j-a"), true)
	if j.Running != 1 || !j.Progress.Running {
		t.Errorf("after the old pod ended: %d pods running, progress running %v; want 1 and true", j.Running, j.Progress.Running)
	}
	if j.FaultKills != 1 {
		t.Errorf("fault kills %d, want 1", j.FaultKills)
	}
}

// Each eviction is counted by its cause: the reason of Chamber's request when the job
// had notice of it, Kueue otherwise; the work each cause threw away adds up to the
// job's work lost to evictions.
func TestEvictionCauses(t *testing.T) {
	fake, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := Work{Kind: KindTraining, Work: 10 * time.Hour, CheckpointEvery: 8 * time.Hour, CheckpointWrite: 3 * time.Minute}
	j := &JobRecord{Job: &Job{Name: "j", Team: "team-a", GPUs: 2, Work: w}, Pods: 1, Progress: NewProgress(w)}
	r := &recorder{speedup: 60, start: start, nodes: map[string]*simNode{"n1": {name: "n1", gpus: fake, slots: make([]gpuSlot, 8)}},
		pods: map[string]*PodRun{}, jobs: map[string]*JobRecord{"team-a/j": j}, faulted: map[string]bool{}, created: map[string]time.Time{}, scheduler: EvictionByKueue}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: map[string]string{labelJobName: "j"}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	workload := func(reason string) *kueue.Workload {
		wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "job-j",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "j", Controller: ptr.To(true)}}}}
		if reason != "" {
			wl.Annotations = map[string]string{chamber.AnnotationEvictionReason: reason,
				chamber.AnnotationEvictionRequestedAt: time.Now().UTC().Format(time.RFC3339)}
		}
		return wl
	}

	admitted := func(wl *kueue.Workload, evicted bool) *kueue.Workload {
		apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved"})
		if evicted {
			apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadEvicted, Status: metav1.ConditionTrue, Reason: "AdmissionCheck"})
		}
		return wl
	}

	// Chamber asks for the eviction; the pod goes before its checkpoint is written.
	r.pod(pod("j-a"), false)
	r.workload(admitted(workload("IdleReclaim"), false))
	r.pod(pod("j-a"), true)
	r.workload(workload(""))
	// Chamber asks again; Kueue evicts the workload and Chamber clears its request
	// before the pod is gone, as on a cluster: the eviction is still Chamber's.
	r.pod(pod("j-d"), false)
	r.workload(admitted(workload("GPUFault"), false))
	r.workload(admitted(workload(""), true))
	r.pod(pod("j-d"), true)
	// Chamber asks, then withdraws while the workload keeps its quota.
	r.pod(pod("j-e"), false)
	r.workload(admitted(workload("IdleReclaim"), false))
	r.workload(admitted(workload(""), false))
	time.Sleep(10 * time.Millisecond)
	r.pod(pod("j-e"), true) // then Kueue preempts it: Kueue's
	// Kueue preempts the next one without Chamber's notice, twice.
	for _, name := range []string{"j-b", "j-c"} {
		r.pod(pod(name), false)
		time.Sleep(10 * time.Millisecond) // some progress to lose
		r.pod(pod(name), true)
	}

	if want := map[string]int{"IdleReclaim": 1, "GPUFault": 1, EvictionByKueue: 3}; !maps.Equal(j.EvictionsBy, want) || j.Evictions != 5 {
		t.Errorf("evictions %d by cause %v, want 5 by %v", j.Evictions, j.EvictionsBy, want)
	}
	_, lost := j.Progress.Lost(j.Job.GPUs)
	var sum float64
	for _, l := range j.LostBy {
		sum += l
	}
	if lost == 0 || math.Abs(sum-lost) > 1e-9 {
		t.Errorf("work lost by cause %v (sum %g), want the job's work lost to evictions, %g, and more than none", j.LostBy, sum, lost)
	}
	if got := evictionsByCause(j); !strings.HasPrefix(got, "GPUFault:1:") || !strings.Contains(got, ";IdleReclaim:1:") || !strings.Contains(got, ";Kueue:3:") {
		t.Errorf("jobs.csv's evictions_by_cause %q, want GPUFault:1:<lost>;IdleReclaim:1:<lost>;Kueue:3:<lost>", got)
	}
}

// Every spell a job wants its GPUs without them counts in its wait: before its first
// run, after a preemption, after a fault; a notebook paused while its user is away is
// not waiting, and is again from its user's resume to its pods running.
func TestWaitSpells(t *testing.T) {
	fake, err := nvmlsource.NewFake("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	const speedup = 60
	start := time.Now()
	at := start
	clock := func(sim time.Duration) { at = start.Add(simToWall(sim, speedup)) }
	training := Work{Kind: KindTraining, Work: 40 * minute, CheckpointEvery: 30 * minute, CheckpointWrite: minute}
	notebook := Work{Kind: KindInteractive, Work: 3 * time.Hour, ActiveSpell: 20 * minute, IdleSpell: 40 * minute, SpellSeed: 11}
	train := &JobRecord{Job: &Job{Name: "train", Team: "team-a", GPUs: 1, Work: training}, Pods: 1, Progress: NewProgress(training)}
	nb := &JobRecord{Job: &Job{Name: "nb", Team: "team-a", GPUs: 1, Work: notebook}, Pods: 1, Progress: NewProgress(notebook)}
	r := &recorder{speedup: speedup, start: start, sigterm: 5 * minute, scheduler: EvictionByKueue,
		clock: func() time.Time { return at },
		nodes: map[string]*simNode{"n1": {name: "n1", gpus: fake, slots: make([]gpuSlot, 8)}},
		pods:  map[string]*PodRun{}, jobs: map[string]*JobRecord{"team-a/train": train, "team-a/nb": nb},
		faulted: map[string]bool{}, created: map[string]time.Time{},
		exit: func(string, time.Duration) {}, resume: func(string) {}, end: func(string) {}}
	pod := func(job, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: map[string]string{labelJobName: job}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	preempted := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: at}, ptr.To[int64](5)
		return p
	}
	wait := func(j *JobRecord) (time.Duration, int) {
		return wallToSim(j.TotalWait(at), speedup).Round(time.Second), j.WaitSpells
	}

	// The training job: submitted at 0, runs at 10; Kueue preempts it at 30 (its pod
	// gone at 31), it runs again at 50; a fault kills its pod at 60, its replacement
	// runs at 65 and completes at 80.
	r.submitted("team-a/train", at)
	clock(10 * minute)
	r.pod(pod("train", "train-a"), false)
	clock(30 * minute)
	r.pod(preempted(pod("train", "train-a")), false)
	if w, n := wait(train); w != 10*minute || n != 1 {
		t.Errorf("terminating at 30: waited %s in %d spells; want 10m0s in 1 (it holds its GPUs until its pod is gone)", w, n)
	}
	clock(31 * minute)
	r.pod(preempted(pod("train", "train-a")), true)
	clock(50 * minute)
	r.pod(pod("train", "train-b"), false)
	clock(60 * minute)
	r.markFaulted("team-a/train-b")
	r.pod(pod("train", "train-b"), true)
	clock(62 * minute)
	if w, n := wait(train); w != 31*minute || n != 3 {
		t.Errorf("2 minutes after the fault: waited %s in %d spells; want 31m0s (10 + 19 + 2) in 3", w, n)
	}
	clock(65 * minute)
	r.pod(pod("train", "train-c"), false)
	clock(80 * minute)
	done := pod("train", "train-c")
	done.Status.Phase = corev1.PodSucceeded
	r.pod(done, false)
	clock(81 * minute)
	if w, n := wait(train); w != 34*minute || n != 3 {
		t.Errorf("complete: waited %s in %d spells; want 34m0s (10 + 19 + 5) in 3, and nothing after its work was done", w, n)
	}
	if train.Progress.LostToEvictions != 0 {
		t.Errorf("preempted with 5 minutes of grace and a 1-minute checkpoint write, it lost %s", train.Progress.LostToEvictions)
	}

	// The notebook: submitted at 0, runs at 1, paused at 20 with its user away; its
	// user resumes it when the idle spell ends, and its pod runs 5 minutes later.
	clock(0)
	r.submitted("team-a/nb", at)
	clock(minute)
	r.pod(pod("nb", "nb-a"), false)
	clock(20 * minute)
	r.workload(&kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "job-nb-1",
			Annotations:     map[string]string{chamber.AnnotationIdleReclaimedFor: "team-b/wl", chamber.AnnotationIdleReclaimHeld: "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "nb", Controller: ptr.To(true)}}},
		Spec: kueue.WorkloadSpec{Active: ptr.To(false)},
	})
	r.pod(pod("nb", "nb-a"), true)
	back := nb.Progress.Returns(nb.pausedAt)
	clock(back - minute)
	if w, n := wait(nb); w != minute || n != 1 {
		t.Errorf("paused, its user away until %s: waited %s in %d spells; want 1m0s in 1", back, w, n)
	}
	clock(back + time.Second)
	r.returnUsers(at)
	clock(back + time.Second + 5*minute)
	r.pod(pod("nb", "nb-b"), false)
	if w, n := wait(nb); w != 6*minute || n != 2 || len(nb.ResumeWaits) != 1 {
		t.Errorf("resumed by its user at %s, running 5 minutes later: waited %s in %d spells; want 6m0s in 2", back, w, n)
	}
}

// The pods' grace under every policy: at the default, exactly what Chamber's grace
// policy gives its teams' pods (the pool's grace rounded up to whole seconds); a grace
// under a second of clock is 0 on the pod, and its notice counts as the grace itself.
func TestPodGrace(t *testing.T) {
	job := &Job{Name: "j", Team: "team-a", GPUs: 8}
	for _, tc := range []struct {
		grace   time.Duration
		speedup float64
		want    int64
	}{
		{DefaultPodGrace, 120, 3}, // 5 minutes at 120x: 2.5 s, Chamber's 3 s
		{DefaultPodGrace, 60, 5},
		{DefaultPodGrace, 600, 1}, // 0.5 s, Chamber's floor, rounded up
		{KubernetesPodGrace, 120, 0},
		{KubernetesPodGrace, 20, 2}, // 1.5 s, rounded up
	} {
		sc := &Scenario{PodGrace: tc.grace, Speedup: tc.speedup, Nodes: []NodeGroup{{Count: 1, GPUs: 8}}}
		got := podTemplate(job, sc).Spec.TerminationGracePeriodSeconds
		if got == nil || *got != tc.want {
			t.Errorf("grace %s at %gx: the pods carry %v s, want %d", tc.grace, tc.speedup, ptr.Deref(got, -1), tc.want)
		}
		if tc.grace == DefaultPodGrace {
			if chamber := int64((chamberGrace(tc.speedup) + time.Second - 1) / time.Second); chamber != tc.want {
				t.Errorf("grace %s at %gx: the baseline's pods carry %d s, Chamber gives its teams' pods %d", tc.grace, tc.speedup, tc.want, chamber)
			}
		}
	}
	r := &recorder{speedup: 120, sigterm: KubernetesPodGrace}
	if got := r.sigtermOf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: ptr.To[int64](0)}}); got != KubernetesPodGrace {
		t.Errorf("Kubernetes' 30 s at 120x, 0 on the pod: notice %s, want 30s", got)
	}
}
