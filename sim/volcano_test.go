package sim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

func TestParsePolicies(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []Policy
		wantErr bool
	}{
		"the Kueue three":   {in: "kubernetes,kueue,chamber", want: []Policy{PolicyKubernetes, PolicyKueue, PolicyChamber}},
		"Volcano, spaced":   {in: "volcano, volcano-chamber", want: []Policy{PolicyVolcano, PolicyVolcanoChamber}},
		"order is kept":     {in: "volcano-chamber,kueue", want: []Policy{PolicyVolcanoChamber, PolicyKueue}},
		"unknown":           {in: "kueue,slurm", wantErr: true},
		"empty":             {in: "", wantErr: true},
		"Volcano misspelt":  {in: "volcano_chamber", wantErr: true},
		"every one of them": {in: "kubernetes,kueue,chamber,volcano,volcano-chamber", want: AllPolicies},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePolicies(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParsePolicies(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParsePolicies(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestPolicyBaseline(t *testing.T) {
	tests := map[Policy]struct {
		wantBase            Policy
		wantVolcano, wantCh bool
		wantScheduler       string
	}{
		PolicyKubernetes:     {wantScheduler: "kube-scheduler"},
		PolicyKueue:          {wantScheduler: "Kueue"},
		PolicyChamber:        {wantBase: PolicyKueue, wantCh: true, wantScheduler: "Kueue"},
		PolicyVolcano:        {wantVolcano: true, wantScheduler: "Volcano"},
		PolicyVolcanoChamber: {wantBase: PolicyVolcano, wantVolcano: true, wantCh: true, wantScheduler: "Volcano"},
	}
	for p, tc := range tests {
		base, _ := p.Baseline()
		if base != tc.wantBase || p.OnVolcano() != tc.wantVolcano || p.WithChamber() != tc.wantCh || p.Scheduler() != tc.wantScheduler {
			t.Errorf("%s: baseline %q, on Volcano %v, with Chamber %v, scheduler %q; want %q, %v, %v, %q",
				p, base, p.OnVolcano(), p.WithChamber(), p.Scheduler(), tc.wantBase, tc.wantVolcano, tc.wantCh, tc.wantScheduler)
		}
	}
}

// TestVCJobObject: a trace job becomes a Volcano Job of one task whose pods are a gang
// (minAvailable = pods), in its team's Queue at its tier, restarted whole when a pod
// is evicted or fails, at most three times; its pods are the Kubernetes Job's.
func TestVCJobObject(t *testing.T) {
	sc := &Scenario{Nodes: []NodeGroup{{Count: 4, GPUs: 8, Product: "NVIDIA-H100-80GB-HBM3", Fake: "dgxh100"}}, BackoffLimit: 3}
	tests := map[string]struct {
		job                    Job
		wantPods, wantGPUsEach int
	}{
		"one GPU":           {job: Job{Name: "job-1", Team: "vc1", Tier: "standard", GPUs: 1, TraceID: "a"}, wantPods: 1, wantGPUsEach: 1},
		"one node":          {job: Job{Name: "job-2", Team: "vc2", Tier: "production", GPUs: 8, TraceID: "b"}, wantPods: 1, wantGPUsEach: 8},
		"two nodes, a gang": {job: Job{Name: "job-3", Team: "vc2", Tier: "production", GPUs: 16, TraceID: "c"}, wantPods: 2, wantGPUsEach: 8},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := vcjobObject(&tc.job, sc)
			pods := int32(tc.wantPods)
			want := batch.JobSpec{
				SchedulerName: "volcano", Queue: tc.job.Team, PriorityClassName: tc.job.Tier,
				MinAvailable: pods, MaxRetry: 3,
				Policies: []batch.LifecyclePolicy{
					{Event: bus.PodEvictedEvent, Action: bus.RestartJobAction},
					{Event: bus.PodFailedEvent, Action: bus.RestartJobAction},
				},
				Tasks: []batch.TaskSpec{{Name: "train", Replicas: pods, MinAvailable: &pods, Template: podTemplate(&tc.job, sc)}},
			}
			if diff := cmp.Diff(want, got.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if got.Name != tc.job.Name || got.Namespace != tc.job.Team {
				t.Errorf("Job %s/%s, want %s/%s", got.Namespace, got.Name, tc.job.Team, tc.job.Name)
			}
			// The pod template is the Kubernetes Job's, GPUs and all.
			if diff := cmp.Diff(jobObject(&tc.job, PolicyKueue, sc).Spec.Template, got.Spec.Tasks[0].Template); diff != "" {
				t.Errorf("pod template differs from the Kubernetes Job's (-Job +Volcano Job):\n%s", diff)
			}
			gpus := got.Spec.Tasks[0].Template.Spec.Containers[0].Resources.Limits[kube.ResourceGPU]
			if gpus.Value() != int64(tc.wantGPUsEach) {
				t.Errorf("%v GPUs a pod, want %d", gpus.Value(), tc.wantGPUsEach)
			}
		})
	}
}

// TestVolcanoTeams: Volcano alone gets the Queues and PriorityClasses Chamber would
// make; Volcano + Chamber a pool of backend Volcano and the PriorityClasses only.
func TestVolcanoTeams(t *testing.T) {
	teams := []*chamber.Team{
		{ObjectMeta: metav1.ObjectMeta{Name: "vc1"}, Spec: chamber.TeamSpec{Pool: PoolName, Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 20}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "vc2"}, Spec: chamber.TeamSpec{Pool: PoolName, Quotas: []chamber.TeamQuota{{Model: "NVIDIA-H100-80GB-HBM3", GPUs: 12}}}},
	}
	kinds := func(p Policy) (map[string]int, *chamber.GPUPool) {
		pool := &chamber.GPUPool{ObjectMeta: metav1.ObjectMeta{Name: PoolName}}
		got := map[string]int{}
		for _, o := range volcanoTeams(pool, teams, p) {
			switch o := o.(type) {
			case *scheduling.Queue:
				got["Queue"]++
				if d := o.Spec.Deserved[kube.ResourceGPU]; o.Name == "vc1" && d.Value() != 20 {
					t.Errorf("%s: Queue vc1 deserves %v GPUs, want its quota 20", p, d.Value())
				}
			case *schedulingv1.PriorityClass:
				got["PriorityClass"]++
			default:
				t.Errorf("%s: unexpected %T %s", p, o, o.GetName())
			}
		}
		return got, pool
	}
	got, pool := kinds(PolicyVolcano)
	if diff := cmp.Diff(map[string]int{"Queue": 2, "PriorityClass": len(kube.DefaultPriorityTiers)}, got); diff != "" {
		t.Errorf("Volcano alone (-want +got):\n%s", diff)
	}
	if pool.Spec.Backend != "" {
		t.Errorf("Volcano alone: the pool (never created) got backend %q", pool.Spec.Backend)
	}
	got, pool = kinds(PolicyVolcanoChamber)
	if diff := cmp.Diff(map[string]int{"PriorityClass": len(kube.DefaultPriorityTiers)}, got); diff != "" {
		t.Errorf("Volcano + Chamber (-want +got):\n%s", diff)
	}
	if pool.Spec.Backend != chamber.BackendVolcano {
		t.Errorf("Volcano + Chamber: pool backend %q, want Volcano", pool.Spec.Backend)
	}
}

// TestRecorderVolcanoJobs: the recorder finds a Volcano Job's pods by its label, ends
// the job when Volcano says Completed (Failed: lost), and takes Chamber's request on
// the Job as the notice its pods get, kept while idle reclaim holds it.
func TestRecorderVolcanoJobs(t *testing.T) {
	w := Work{Kind: KindTraining, Work: time.Hour}
	rec := func(name string) *JobRecord {
		return &JobRecord{Job: &Job{Name: name, Team: "vc1", GPUs: 8, Work: w}, Pods: 1, Progress: NewProgress(w)}
	}
	r := &recorder{speedup: 60, jobs: map[string]*JobRecord{"vc1/done": rec("done"), "vc1/lost": rec("lost"), "vc1/paused": rec("paused")}}
	vcjob := func(name string, phase batch.JobPhase, annotations map[string]string) *batch.Job {
		return &batch.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "vc1", Name: name, Annotations: annotations},
			Status: batch.JobStatus{State: batch.JobState{Phase: phase}}}
	}
	r.vcjob(vcjob("done", batch.Running, nil))
	r.vcjob(vcjob("done", batch.Completed, nil))
	r.vcjob(vcjob("lost", batch.Failed, nil))
	r.vcjob(vcjob("lost", batch.Failed, nil)) // seen again: counted once
	if d, l := r.jobs["vc1/done"], r.jobs["vc1/lost"]; d.Finished.IsZero() || d.Failed || l.Finished.IsZero() || !l.Failed || r.done != 2 {
		t.Errorf("done finished %v failed %v; lost finished %v failed %v; %d done, want 2", d.Finished, d.Failed, l.Finished, l.Failed, r.done)
	}

	p := r.jobs["vc1/paused"]
	p.Running = 1
	request := map[string]string{chamber.AnnotationEvictionReason: "IdleReclaim", chamber.AnnotationEvictionRequestedAt: time.Now().UTC().Format(time.RFC3339),
		chamber.AnnotationEvictionGracePeriod: "2s"}
	r.vcjob(vcjob("paused", batch.Running, request))
	if p.noticed.IsZero() || p.noticeReason != "IdleReclaim" {
		t.Fatalf("request on a running job: noticed %v for %q, want now for IdleReclaim", p.noticed, p.noticeReason)
	}
	// Idle reclaim ends the request in the patch that marks its hold, before Volcano
	// aborts the Job: the notice stands.
	r.vcjob(vcjob("paused", batch.Running, map[string]string{chamber.AnnotationIdleReclaimHeld: "true"}))
	if p.noticed.IsZero() {
		t.Errorf("request ended with the hold: notice forgotten")
	}
	// Withdrawn with no hold: no notice.
	r.vcjob(vcjob("paused", batch.Running, nil))
	if !p.noticed.IsZero() {
		t.Errorf("request withdrawn: notice kept")
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{batch.JobNameKey: "paused"}}}
	if got := jobNameOf(pod); got != "paused" {
		t.Errorf("jobNameOf(Volcano pod) = %q, want paused", got)
	}
	pod.Labels = map[string]string{labelJobName: "kube"}
	if got := jobNameOf(pod); got != "kube" {
		t.Errorf("jobNameOf(Job pod) = %q, want kube", got)
	}
}

// TestRunRegistererReset: a second Chamber run in one process registers the
// inventory's collectors again once the first run's are taken out.
func TestRunRegistererReset(t *testing.T) {
	var r runRegisterer
	for run := range 2 {
		r.reset()
		a := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sim_test_fleet_a"})
		b := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sim_test_fleet_b"})
		if err := r.Register(a); err != nil {
			t.Fatalf("run %d: register a: %v", run, err)
		}
		if err := r.Register(b); err != nil {
			t.Fatalf("run %d: register b: %v", run, err)
		}
	}
	r.reset()
}
