package sim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"
	scheduling "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/integrations/volcano"
	"chamber.dev/chamber/test/controlplane"
)

// The Volcano policies replay each trace job as a Volcano Job (batch.volcano.sh
// v1alpha1) of one task, its pods a gang (minAvailable = pods) that vc-scheduler
// places whole, in the team's Queue, at the tier's PriorityClass. Its policies are a
// Volcano user's: a pod evicted (deleted while running: a fault, vc-scheduler's
// reclaim or preemption) or failed restarts the whole Job, at most VolcanoMaxRetry
// times (Volcano's webhook default; the control plane runs no webhook, so the Job
// says it), then the Job fails: lost, as a Kubernetes Job whose retries ran out.

// VolcanoMaxRetry is the Volcano Jobs' spec.maxRetry.
const VolcanoMaxRetry = 3

// EvictionByVolcano is the cause of an eviction under the Volcano policies that
// Chamber gave no notice of: vc-scheduler's reclaim or preemption.
const EvictionByVolcano = "Volcano"

// vcjobObject is the Volcano Job replaying j: the pods of jobObject's Job, in one task
// of podsOf(j) replicas that all run together, in the team's Queue.
func vcjobObject(j *Job, sc *Scenario) *batch.Job {
	pods := int32(podsOf(j, sc))
	return &batch.Job{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.Team,
			Labels:      map[string]string{"sim.chamber.dev/tier": j.Tier},
			Annotations: map[string]string{"sim.chamber.dev/trace-job": j.TraceID}},
		Spec: batch.JobSpec{
			SchedulerName:     controlplane.VolcanoSchedulerName,
			Queue:             j.Team,
			PriorityClassName: j.Tier,
			MinAvailable:      pods,
			MaxRetry:          VolcanoMaxRetry,
			Policies: []batch.LifecyclePolicy{
				{Event: bus.PodEvictedEvent, Action: bus.RestartJobAction},
				{Event: bus.PodFailedEvent, Action: bus.RestartJobAction},
			},
			Tasks: []batch.TaskSpec{{Name: "train", Replicas: pods, MinAvailable: &pods, Template: podTemplate(j, sc)}},
		},
	}
}

// volcanoTeams is what the Volcano policies create for the teams: under Volcano
// alone, the Queues and PriorityClasses Chamber would make from the same GPUPool and
// Teams; under Volcano + Chamber, the GPUPool (backend Volcano) and Teams themselves,
// and Chamber makes the Queues. The tiers' PriorityClasses are created under both:
// chamber-controller creates the same ones at start-up, and a Job's pods naming one
// not there yet would be refused.
func volcanoTeams(pool *chamber.GPUPool, teams []*chamber.Team, p Policy) []client.Object {
	var objs []client.Object
	if p == PolicyVolcano {
		for _, t := range teams {
			objs = append(objs, volcano.TeamQueue(t, pool, false))
		}
	} else {
		pool.Spec.Backend = chamber.BackendVolcano
	}
	for _, tier := range kube.DefaultPriorityTiers {
		objs = append(objs, volcano.PriorityClass(tier))
	}
	return objs
}

// waitVolcanoQueuesOpen waits until every team's Queue is Open (vc-controller-manager
// opens it; under Volcano + Chamber, Chamber's team controller makes it first).
func waitVolcanoQueuesOpen(ctx context.Context, c client.Client, teams []*chamber.Team) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, t := range teams {
		for {
			var q scheduling.Queue
			err := c.Get(ctx, client.ObjectKey{Name: t.Name}, &q)
			if err == nil && q.Status.State == scheduling.QueueStateOpen {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("volcano Queue %s not Open after 2 minutes (last error: %v; state %q)", t.Name, err, q.Status.State)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// vcjob notes a Volcano Job's end (Completed; Failed or Terminated: lost) and
// Chamber's requests on it: the notice its pods get before Chamber's AbortJob (idle
// reclaim) or RestartJob (fault isolation) ends them.
func (r *recorder) vcjob(o any) {
	job, ok := o.(*batch.Job)
	if !ok {
		return
	}
	req, requested := volcano.RequestOf(job)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.jobs[job.Namespace+"/"+job.Name]
	if rec == nil {
		return
	}
	rec.APICreated = job.CreationTimestamp.Time
	switch {
	case requested && rec.noticed.IsZero() && rec.Running > 0:
		rec.noticed, rec.noticeReason = now, req.Reason
	case !requested && job.Annotations[chamber.AnnotationIdleReclaimHeld] == "" && !volcano.Restarting(job):
		// Chamber withdrew its request. Idle reclaim ends it in the patch that marks
		// the hold, before Volcano aborts the Job: the pods' end is still the pause's.
		rec.noticed = time.Time{}
	}
	if !rec.Finished.IsZero() {
		return
	}
	switch job.Status.State.Phase {
	case batch.Completed:
		rec.Finished = now
		r.done++
	case batch.Failed, batch.Terminated:
		rec.Finished, rec.Failed = now, true
		r.done++
	}
	rec.settleWait(now)
}

// countVolcanoJobs counts the Volcano Jobs in the API server by outcome.
func countVolcanoJobs(ctx context.Context, c client.Client, rec *Recording) error {
	var jobs batch.JobList
	if err := c.List(ctx, &jobs); err != nil {
		return fmt.Errorf("list Volcano Jobs: %w", err)
	}
	for _, j := range jobs.Items {
		switch j.Status.State.Phase {
		case batch.Completed:
			rec.APIComplete++
		case batch.Failed, batch.Terminated:
			rec.APIFailed++
		default:
			rec.APIOther++
		}
	}
	return nil
}

// ensureCreated creates the object unless one of its name exists (a PriorityClass
// chamber-controller made first).
func ensureCreated(ctx context.Context, c client.Client, o client.Object) error {
	if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
	}
	return nil
}

// jobNameOf is the name of the Job (Kubernetes' or Volcano's) whose pod this is.
func jobNameOf(pod *corev1.Pod) string {
	if n := pod.Labels[labelJobName]; n != "" {
		return n
	}
	return pod.Labels[batch.JobNameKey]
}
