package sim

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Annotations and labels the simulator puts on its Jobs' pods.
const (
	annotationUtilization = "sim.chamber.dev/gpu-utilization"
	annotationGPUs        = "sim.chamber.dev/gpus-per-pod"
	labelJobName          = "batch.kubernetes.io/job-name"
)

// JobRecord is what the recorder saw of one Job, in wall-clock times (the simulator
// converts them to simulated time).
type JobRecord struct {
	Job       *Job
	Submitted time.Time
	// FirstRun is when a pod of the job was first seen running; zero if never.
	FirstRun time.Time
	// Waited is the clock time of the job's closed wait spells, WaitSpells how many
	// began: every spell it wanted its GPUs without all its pods running (before its
	// first run, after a preemption, an eviction, a fault, a pause), waitFrom when the
	// open one began (zero when none is). An interactive session paused while its user
	// is away is not waiting; from its user's resume, it is (waitingForGPUs).
	Waited     time.Duration
	WaitSpells int
	waitFrom   time.Time
	// Finished is when the Job was seen Complete or Failed; zero if not.
	Finished time.Time
	// Failed is true when the Job failed (its retries ran out): lost.
	Failed bool
	// Running counts its pods running now.
	Running int
	// FaultKills counts its pods killed by a GPU fault; Evictions its pods deleted by
	// something else while running (Kueue preemption or eviction).
	FaultKills, Evictions int
	// EvictionsBy splits Evictions by cause (EvictionCause) and LostBy the GPU-hours
	// of progress they threw away.
	EvictionsBy map[string]int
	LostBy      map[string]float64
	// APICreated is the Job's creationTimestamp, whole seconds: a cross-check.
	APICreated time.Time
	// Progress is its work done, saved and lost, in simulated time.
	Progress *Progress
	// Pods is how many pods it runs at once; it progresses only while all run.
	Pods int
	// lastEnd is when its last pod run ended.
	lastEnd time.Time
	// noticed is when Chamber's eviction request on its Workload was first seen;
	// zero when none is pending. noticeReason is the request's reason.
	noticed      time.Time
	noticeReason string
	// completing is set once the simulator has ended its pods as succeeded;
	// checkpointed once it has told Chamber (on its pods) that its checkpoint is
	// written after a notice.
	completing, checkpointed bool
	// idle is whether its GPUs were last set idle (a hang, an idle spell).
	idle bool
	// reserved: its Workload is admitted (neither finished nor evicted), so Kueue
	// counts its GPUs as taken whether or not its pods run.
	reserved bool

	// An interactive session paused by Chamber's idle reclaim (for a waiter, or at
	// the interactive idle time limit): Pauses counts them; Ended is set when its
	// user ended the session while it was paused, its span over (the Job deleted,
	// not complete). ResumeWaits are how long its user waited, each time they
	// resumed it, for its pods to run again (simulated time).
	Pauses      int
	Ended       bool
	ResumeWaits []time.Duration
	// paused is its Workload's name while paused there, pausedAt when it was seen
	// paused (simulated time); resumed is when its user resumed it (the clock), zero
	// when not waiting for its pods.
	paused   string
	pausedAt time.Duration
	resumed  time.Time
}

// EvictionByKueue is the cause of an eviction Chamber gave no notice of: Kueue's
// preemption, or its eviction of a workload for its own reasons. Chamber's evictions
// are counted by their request's reason (IdleReclaim, IdleTimeLimit, GPUFault,
// RoomForBigJob).
const EvictionByKueue = "Kueue"

// evicted counts one of the job's pods evicted for cause, which threw away lost
// GPU-hours of its progress.
func (j *JobRecord) evicted(cause string, lost float64) {
	if j.EvictionsBy == nil {
		j.EvictionsBy, j.LostBy = map[string]int{}, map[string]float64{}
	}
	j.Evictions++
	j.EvictionsBy[cause]++
	j.LostBy[cause] += lost
}

// waitingForGPUs says whether the job wants GPUs it does not have: submitted, neither
// finished nor done, not all its pods running, and not a session paused while its
// user is away.
func (j *JobRecord) waitingForGPUs() bool {
	userAway := j.paused != "" && j.resumed.IsZero()
	done := j.Progress != nil && j.Progress.Finished()
	return !j.Submitted.IsZero() && j.Finished.IsZero() && !j.Ended && !done && j.Running < j.Pods && !userAway
}

// settleWait opens or closes the job's wait spell at now to match waitingForGPUs; the
// recorder calls it after every change to the job.
func (j *JobRecord) settleWait(now time.Time) {
	switch waiting := j.waitingForGPUs(); {
	case waiting && j.waitFrom.IsZero():
		j.waitFrom = now
		j.WaitSpells++
	case !waiting && !j.waitFrom.IsZero():
		j.Waited += max(now.Sub(j.waitFrom), 0)
		j.waitFrom = time.Time{}
	}
}

// TotalWait is the clock time the job waited for its GPUs up to end: its closed
// spells and the open one.
func (j *JobRecord) TotalWait(end time.Time) time.Duration {
	w := j.Waited
	if !j.waitFrom.IsZero() && end.After(j.waitFrom) {
		w += end.Sub(j.waitFrom)
	}
	return w
}

// waitingSince is when the job last started waiting: its submission or its last pod's end.
func (j *JobRecord) waitingSince() time.Time {
	if j.lastEnd.After(j.Submitted) {
		return j.lastEnd
	}
	return j.Submitted
}

// QueueGrace is how long a job may wait before it counts as queued: about the time
// kube-scheduler or Kueue, the Job controller and kwok take to start a pod on free
// GPUs, which is not contention.
const QueueGrace = 2 * time.Second

// PodRun is one pod's time on its GPUs.
type PodRun struct {
	Job        *JobRecord
	Node       string
	GPUs       []int
	Start, End time.Time // End zero while it runs
	// Grace is the pod's terminationGracePeriodSeconds.
	Grace int64
	// Latency is from the pod's creation to its running: the control plane's own
	// start latency once the pod exists (kube-scheduler, kwok), plus any wait for
	// room in plain Kubernetes, where pods are created at submission.
	Latency time.Duration
	// terminating: its deletion (SIGTERM) was seen, with notice; it holds its GPUs
	// until it exits. The notice is the grace as first seen: a force deletion at its
	// exit shortens the pod's to 0.
	terminating bool
	notice      time.Duration
}

// recorder watches Pods and Jobs and keeps, with wall-clock times taken when each
// change is seen, when every job was submitted, first ran and finished and which GPUs
// its pods held. API timestamps have whole-second precision, which at a speed-up of
// hundreds is many simulated minutes; the watch sees changes within milliseconds.
type recorder struct {
	nodes map[string]*simNode
	kill  func(pod string) // deletes a pod that took a broken GPU
	// complete ends a pod as succeeded: the simulator, not kwok, ends a pod when its
	// job's work is done.
	complete func(pod string)
	// checkpointed tells Chamber's admission check, on a pod, that the job has
	// written its checkpoint after an eviction notice, so it is evicted at once.
	checkpointed func(pod string)
	// exit ends a terminating pod after a wall-clock delay, as its process exits once
	// it has saved its checkpoint on SIGTERM.
	exit func(pod string, after time.Duration)
	// resume is an interactive session's user resuming its Workload (namespace/name)
	// that idle reclaim paused; end is the user ending the session (deleting its Job,
	// namespace/name).
	resume, end func(key string)
	// start is simulated time 0 (set by begin); speedup converts the clock to it;
	// sigterm is the notice of a pod deleted without a grace of its own: the pods'
	// grace (Scenario.PodGrace), where the speed-up makes it less than the whole
	// second Kubernetes counts.
	start   time.Time
	speedup float64
	sigterm time.Duration
	// clock is the time now (time.Now; a test's own clock).
	clock func() time.Time
	// scheduler is the cause of the evictions Chamber gave no notice of
	// (EvictionByKueue, or EvictionByVolcano under the Volcano policies).
	scheduler string

	mu   sync.Mutex
	jobs map[string]*JobRecord // by namespace/name
	pods map[string]*PodRun    // running pods by namespace/name
	// created is when each pod not yet running was first seen.
	created map[string]time.Time
	runs    []*PodRun // every pod run, ended or not
	// faulted marks pods the fault injector killed, so their deletion counts as a
	// fault and not an eviction.
	faulted map[string]bool
	// outOfService marks the nodes that take no new pod: cordoned, or tainted
	// NoSchedule or NoExecute (Chamber's fault isolation does both).
	outOfService map[string]bool
	done         int
}

func newRecorder(nodes map[string]*simNode, sc *Scenario, p Policy) *recorder {
	r := &recorder{nodes: nodes, jobs: map[string]*JobRecord{}, pods: map[string]*PodRun{}, faulted: map[string]bool{}, outOfService: map[string]bool{},
		created: map[string]time.Time{}, speedup: sc.Speedup, sigterm: sc.PodGrace, scheduler: EvictionByKueue}
	if p.OnVolcano() {
		r.scheduler = EvictionByVolcano
	}
	for i := range sc.Jobs {
		j := &sc.Jobs[i]
		r.jobs[j.Team+"/"+j.Name] = &JobRecord{Job: j, Progress: NewProgress(j.Work), Pods: podsOf(j, sc)}
	}
	return r
}

// now is the recorder's clock: when it sees a change.
func (r *recorder) now() time.Time {
	if r.clock != nil {
		return r.clock()
	}
	return time.Now()
}

// begin sets simulated time 0.
func (r *recorder) begin(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.start = at
}

// simAt is the simulated time of a clock time.
func (r *recorder) simAt(t time.Time) time.Duration {
	return wallToSim(t.Sub(r.start), r.speedup)
}

// watch adds the handlers to the cache's Pod and Job informers (Kubernetes' Jobs and
// Kueue's Workloads, or Volcano's Jobs).
func (r *recorder) watch(ctx context.Context, c cache.Cache, p Policy) error {
	nodes, err := c.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return err
	}
	if _, err := nodes.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.node(o) },
		UpdateFunc: func(_, o any) { r.node(o) },
	}); err != nil {
		return err
	}
	pods, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	if _, err := pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.pod(o, false) },
		UpdateFunc: func(_, o any) { r.pod(o, false) },
		DeleteFunc: func(o any) { r.pod(o, true) },
	}); err != nil {
		return err
	}
	if p.OnVolcano() {
		vcjobs, err := c.GetInformer(ctx, &batch.Job{})
		if err != nil {
			return err
		}
		_, err = vcjobs.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { r.vcjob(o) },
			UpdateFunc: func(_, o any) { r.vcjob(o) },
		})
		return err
	}
	jobs, err := c.GetInformer(ctx, &batchv1.Job{})
	if err != nil {
		return err
	}
	if _, err = jobs.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.job(o) },
		UpdateFunc: func(_, o any) { r.job(o) },
	}); err != nil {
		return err
	}
	if p == PolicyKubernetes {
		return nil
	}
	workloads, err := c.GetInformer(ctx, &kueue.Workload{})
	if err != nil {
		return err
	}
	_, err = workloads.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.workload(o) },
		UpdateFunc: func(_, o any) { r.workload(o) },
	})
	return err
}

// node notes whether the node takes new pods.
func (r *recorder) node(o any) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	off := n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outOfService[n.Name] = off
}

// evicting reports whether Kueue is taking the workload's quota back: it is evicted,
// or no longer holds its quota.
func evicting(wl *kueue.Workload) bool {
	return apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) ||
		!apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
}

// workload notes when Chamber first asks for a job's eviction: the notice its pods
// get before Kueue evicts them.
func (r *recorder) workload(o any) {
	wl, ok := o.(*kueue.Workload)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(wl)
	if ref == nil || ref.Kind != "Job" {
		return
	}
	e, requested := chamberkueue.RequestedEviction(wl)
	paused := chamberkueue.IdleReclaimPaused(wl)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	job := r.jobs[wl.Namespace+"/"+ref.Name]
	if job == nil {
		return
	}
	job.reserved = chamberkueue.HoldsGPUs(wl)
	switch {
	case requested && job.noticed.IsZero() && job.Running > 0:
		job.noticed, job.noticeReason = now, e.Reason
	case !requested && !evicting(wl):
		// Chamber withdrew its request (the job became busy, the room was no longer
		// needed). Once Kueue evicts the workload, the request is cleared before its
		// pods are gone: their end is still that eviction's.
		job.noticed = time.Time{}
	}
	switch {
	case job.Job.Work.Kind != KindInteractive:
		// A batch job's pause ends by itself (idle reclaim resumes it).
	case paused && job.paused == "":
		// A pause starts its user's absence anew, even one that came before the pods
		// of the user's last resume ran: that resume is over.
		job.paused, job.pausedAt, job.resumed = wl.Name, r.simAt(now), time.Time{}
		job.Pauses++
	case !paused && job.paused != "":
		job.paused = "" // its user's resume landed, or Chamber resumed it first
	}
	job.settleWait(now)
}

// returnUsers is the users of interactive sessions Chamber paused (reclaimed for a
// waiter, or at the idle time limit): each comes back when the idle spell during
// which it was paused ends and resumes the session (sets the Workload active) unless
// Chamber already has; one whose session's span ran out meanwhile ends it instead
// (deletes the Job) and it counts as finished then.
func (r *recorder) returnUsers(now time.Time) {
	t := r.simAt(now)
	var resume, end []string
	r.mu.Lock()
	for key, j := range r.jobs {
		if j.paused == "" || !j.resumed.IsZero() || j.Ended || !j.Finished.IsZero() {
			continue
		}
		p := j.Progress
		back, over := p.Returns(j.pausedAt), p.SessionEnd()
		switch {
		case over <= back && t >= over:
			p.EndSession(over)
			j.Ended, j.Finished = true, now
			r.done++
			end = append(end, key)
		case back < over && t >= back:
			j.resumed = now
			resume = append(resume, j.Job.Team+"/"+j.paused)
		}
		j.settleWait(now)
	}
	r.mu.Unlock()
	for _, key := range resume {
		r.resume(key)
	}
	for _, key := range end {
		r.end(key)
	}
}

// submitted notes the moment the simulator created the Job.
func (r *recorder) submitted(key string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j := r.jobs[key]; j != nil {
		j.Submitted = at
		j.settleWait(at)
	}
}

func (r *recorder) job(o any) {
	job, ok := o.(*batchv1.Job)
	if !ok {
		return
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.jobs[job.Namespace+"/"+job.Name]
	if rec == nil {
		return
	}
	rec.APICreated = job.CreationTimestamp.Time
	if !rec.Finished.IsZero() {
		return
	}
	for _, c := range job.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			rec.Finished, rec.Failed = now, c.Type == batchv1.JobFailed
			r.done++
		}
	}
	rec.settleWait(now)
}

func (r *recorder) pod(o any, deleted bool) {
	if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = tomb.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	running := !deleted && pod.DeletionTimestamp == nil && pod.Spec.NodeName != "" && pod.Status.Phase == corev1.PodRunning
	// A terminating pod keeps its GPUs until it is gone, for kube-scheduler and Kueue
	// as on a real node: it ends when deleted or when it succeeds or fails.
	ended := deleted || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	now := r.now()

	r.mu.Lock()
	run := r.pods[key]
	job := r.jobs[pod.Namespace+"/"+jobNameOf(pod)]
	if _, seen := r.created[key]; !seen && run == nil && !ended {
		r.created[key] = now
	}
	switch {
	case running && run == nil && job != nil:
		n := r.nodes[pod.Spec.NodeName]
		if n == nil {
			break
		}
		count, _ := strconv.Atoi(pod.Annotations[annotationGPUs])
		gpus, ok := n.place(key, count, job.Job.Util)
		run = &PodRun{Job: job, Node: n.name, GPUs: gpus, Start: now, Latency: now.Sub(r.created[key]),
			Grace: ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)}
		delete(r.created, key)
		r.pods[key] = run
		r.runs = append(r.runs, run)
		job.Running++
		if job.FirstRun.IsZero() {
			job.FirstRun = now
		}
		if job.Running >= job.Pods {
			job.Progress.Start(r.simAt(now))
			job.idle = false
			if !job.resumed.IsZero() {
				job.ResumeWaits = append(job.ResumeWaits, wallToSim(now.Sub(job.resumed), r.speedup))
				job.resumed, job.paused = time.Time{}, ""
			}
		}
		if !ok {
			// The pod landed on a GPU that a fault broke: the job crashes at start.
			r.faulted[key] = true
			job.settleWait(now)
			r.mu.Unlock()
			r.kill(key)
			return
		}
	case !ended && pod.DeletionTimestamp != nil && run != nil && !run.terminating && !r.faulted[key]:
		run.terminating, run.notice = true, r.sigtermOf(pod)
		if after, ok := r.exitOnSIGTERM(run.Job, run.notice); ok {
			r.mu.Unlock()
			r.exit(key, after)
			return
		}
	case ended && run == nil:
		delete(r.created, key)
	case ended && run != nil:
		run.End = now
		delete(r.pods, key)
		run.Job.Running--
		run.Job.lastEnd = now
		if r.nodes[run.Node] != nil {
			r.nodes[run.Node].release(key)
		}
		t := r.simAt(now)
		switch {
		case pod.Status.Phase == corev1.PodSucceeded:
			// The simulator ended it because its job's work was done. A fault or
			// eviction that reaches the pod after that (its deletion racing the
			// status patch) finds the Job complete: nothing is lost.
			delete(r.faulted, key)
			run.Job.Progress.Finish(t)
		case r.faulted[key]:
			run.Job.FaultKills++
			delete(r.faulted, key)
			run.Job.Progress.Stop(t, 0, true)
		default:
			notice := r.sigtermOf(pod)
			if run.terminating {
				notice = run.notice
			}
			cause := r.scheduler
			if !run.Job.noticed.IsZero() {
				notice = max(notice, wallToSim(now.Sub(run.Job.noticed), r.speedup))
				cause = run.Job.noticeReason
			}
			_, before := run.Job.Progress.Lost(run.Job.Job.GPUs)
			run.Job.Progress.Stop(t, notice, false)
			_, after := run.Job.Progress.Lost(run.Job.Job.GPUs)
			run.Job.evicted(cause, after-before)
		}
		if run.Job.Running == 0 {
			run.Job.noticed = time.Time{}
			run.Job.completing, run.Job.checkpointed = false, false
		} else if run.Job.Running >= run.Job.Pods {
			// Its Job controller had started the replacement before this pod was
			// gone (a terminating pod counts for no completion): the job goes on
			// from what the stop left it, on the pods that run. Without this, its
			// progress would stand still while its new pod holds GPUs, until something
			// else ends the pod.
			run.Job.Progress.Start(t)
		}
	}
	if run != nil {
		run.Job.settleWait(now)
	} else if job != nil {
		job.settleWait(now)
	}
	r.mu.Unlock()
}

// sigtermOf is the notice a deleted pod got: its deletion's grace period in simulated
// time, at least the pods' own (Scenario.PodGrace), which a pod carries as 0 where it
// is under a second of clock (podGraceSeconds). A pod whose grace Chamber raised to
// its team's eviction grace gets that.
func (r *recorder) sigtermOf(pod *corev1.Pod) time.Duration {
	if g := pod.DeletionGracePeriodSeconds; g != nil && *g > 0 {
		return max(r.sigterm, wallToSim(time.Duration(*g)*time.Second, r.speedup))
	}
	return r.sigterm
}

// exitOnSIGTERM is what a job's pod does when it is told to stop with notice: one with
// nothing to save (an interactive session, a job whose checkpoint is written after
// Chamber's notice) exits at once; one that can write its checkpoint within the notice
// writes it and exits; a hung one, or one whose write does not fit, runs until the
// grace ends and is killed (by kwok at its deletionTimestamp).
func (r *recorder) exitOnSIGTERM(j *JobRecord, notice time.Duration) (time.Duration, bool) {
	p := j.Progress
	switch {
	case j.completing:
		return 0, false
	case p.W.Kind == KindInteractive || j.checkpointed:
		return 0, true
	case p.CanCheckpoint() && p.W.CheckpointWrite <= notice:
		return simToWall(p.W.CheckpointWrite, r.speedup), true
	}
	return 0, false
}

// advance brings every running job's progress to now: it ends the pods of a job
// whose work is done (succeeded), and sets its GPUs idle or busy as it hangs or
// resumes, as an interactive session's user comes and goes.
func (r *recorder) advance(now time.Time) {
	t := r.simAt(now)
	var done, saved []string
	r.mu.Lock()
	finished, changed, checkpointed := map[*JobRecord]bool{}, map[*JobRecord]bool{}, map[*JobRecord]bool{}
	for _, j := range r.jobs {
		p := j.Progress
		if !p.Running || j.completing {
			continue
		}
		p.Advance(t)
		if p.Finished() {
			j.completing = true
			finished[j] = true
			continue
		}
		if !j.noticed.IsZero() && !j.checkpointed && p.CanCheckpoint() &&
			wallToSim(now.Sub(j.noticed), r.speedup) >= p.W.CheckpointWrite {
			j.checkpointed = true
			checkpointed[j] = true
		}
		if idle := p.Idle(); idle != j.idle {
			j.idle = idle
			changed[j] = true
		}
	}
	for key, run := range r.pods {
		switch {
		case finished[run.Job]:
			done = append(done, key)
		case changed[run.Job]:
			u := run.Job.Job.Util
			if run.Job.idle {
				u = idleUtilization
			}
			r.nodes[run.Node].setUtilization(key, u)
		}
		if checkpointed[run.Job] {
			saved = append(saved, key)
		}
	}
	r.mu.Unlock()
	for _, key := range done {
		r.complete(key)
	}
	for _, key := range saved {
		r.checkpointed(key)
	}
}

// idleUtilization is what a hung job's or an idle session's GPUs read.
var idleUtilization = Utilization{Class: "idle", GPUPercent: 0, MemoryPercent: 1}

// markFaulted notes that the pod is being killed by a GPU fault.
func (r *recorder) markFaulted(pod string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faulted[pod] = true
}

// progress is the recorder's counts now.
type progress struct {
	done, running, waiting, submitted int
	allocated                         int
}

func (r *recorder) progress() progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p progress
	p.done = r.done
	for _, j := range r.jobs {
		if j.Submitted.IsZero() || !j.Finished.IsZero() {
			continue
		}
		p.submitted++
		if j.Running > 0 {
			p.running++
		} else {
			p.waiting++
		}
	}
	p.submitted += r.done
	for _, run := range r.pods {
		p.allocated += len(run.GPUs)
	}
	return p
}

// Sample is the cluster at one moment.
type Sample struct {
	At time.Time
	// Allocated GPUs are held by running pods. Used (in GPUs) and Idle (GPUs below the
	// idle threshold) are estimated from the allocated GPUs whose agent has read them
	// since their pod started: Allocated times the mean reading, and times the idle
	// share, of those. A GPU not yet read, or lost, says nothing either way.
	Allocated  int
	Used, Idle float64
	// Waiting counts submitted jobs with no running pod, but for interactive sessions
	// Chamber paused while their users are away; Running those with one.
	// Queued counts the waiting jobs that have waited longer than the control plane's
	// own start latency (QueueGrace of clock): only they show contention.
	Waiting, Running, Queued int
	// Teams: each team's allocated GPUs and demand (GPUs of its running and waiting
	// jobs).
	TeamAllocated, TeamDemand map[string]int
	// FreeWhileFits counts the free GPUs (no pod, no unrepaired fault) while a queued
	// job fits on them (see fits); 0 when none does.
	FreeWhileFits int
	// FreeReserved is the part of FreeWhileFits that Kueue held for admitted jobs
	// whose pods were not running (being created or ungated, or finished with their
	// Workload not yet): the control plane's latency, multiplied by the speed-up.
	FreeReserved int
	// FreeOutOfService is the part of FreeWhileFits on nodes that take no new pod
	// (cordoned or tainted: under Chamber, a node isolated for a fault that needs a
	// reboot, its healthy GPUs left free until the repair).
	FreeOutOfService int
	// IdleByKind splits Idle by the job kind holding the GPUs, IdleByTeam by the
	// team.
	IdleByKind map[Kind]float64
	IdleByTeam map[string]float64
}

// sample reads the cluster's state now: allocation from the pods, utilization from the
// agents' last NVML readings.
func (r *recorder) sample(idleBelow uint32) Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Sample{At: r.now(), TeamAllocated: map[string]int{}, TeamDemand: map[string]int{}, IdleByKind: map[Kind]float64{}, IdleByTeam: map[string]float64{}}
	var read, used, idle float64
	for _, run := range r.pods {
		n := r.nodes[run.Node]
		for _, i := range run.GPUs {
			s.Allocated++
			s.TeamAllocated[run.Job.Job.Team]++
			u, ok := n.reading(i, run.Start)
			if !ok {
				continue
			}
			read++
			used += float64(u) / 100
			if u < idleBelow {
				idle++
				s.IdleByKind[run.Job.Job.Work.Kind]++
				s.IdleByTeam[run.Job.Job.Team]++
			}
		}
	}
	if read > 0 {
		s.Used = float64(s.Allocated) * used / read
		s.Idle = float64(s.Allocated) * idle / read
		for k, n := range s.IdleByKind {
			s.IdleByKind[k] = float64(s.Allocated) * n / read
		}
		for t, n := range s.IdleByTeam {
			s.IdleByTeam[t] = float64(s.Allocated) * n / read
		}
	}
	free := make([]int, 0, len(r.nodes))
	totalFree, offFree := 0, 0
	for _, n := range r.nodes {
		f := n.free()
		free = append(free, f)
		totalFree += f
		if r.outOfService[n.name] {
			offFree += f
		}
	}
	fitting, reserved := false, 0
	for _, j := range r.jobs {
		if j.Submitted.IsZero() || !j.Finished.IsZero() {
			continue
		}
		if j.Running == 0 && j.paused != "" && j.resumed.IsZero() {
			// An interactive session Chamber paused, its user away: it waits for its
			// user, not for GPUs (its user's return resumes it); counting it would
			// take every free GPU for capacity left unused while work waited.
			continue
		}
		s.TeamDemand[j.Job.Team] += j.Job.GPUs
		if j.reserved && j.Running < j.Pods {
			reserved += (j.Pods - j.Running) * (j.Job.GPUs / j.Pods)
		}
		if j.Running > 0 {
			s.Running++
			continue
		}
		s.Waiting++
		if s.At.Sub(j.waitingSince()) > QueueGrace {
			s.Queued++
			fitting = fitting || fits(j.Job.GPUs, j.Pods, free)
		}
	}
	if fitting {
		s.FreeWhileFits = totalFree
		s.FreeReserved = min(totalFree, reserved)
		s.FreeOutOfService = offFree
	}
	return s
}

// fits says whether a job of gpus GPUs in pods equal pods fits on nodes with the
// given free GPUs: each pod on one node, every node taking at most one pod of it (a
// 16-GPU job needs two nodes with 8 free). Quotas are not considered: a job that fits
// and waits is capacity some policy left unused.
func fits(gpus, pods int, free []int) bool {
	per := gpus / pods
	n := 0
	for _, f := range free {
		if f >= per {
			n++
		}
	}
	return n >= pods
}
