package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	vcbatch "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"chamber.dev/chamber/integrations/volcano"
)

// describeUnfinished says, for each job a replay left unfinished at its timeout, what
// its Job, its pods and (under Kueue) its Workload or (under Volcano) its PodGroup
// looked like in the API server: the state a stuck job was left in is what tells why.
func describeUnfinished(ctx context.Context, c client.Client, p Policy, jobs []*JobRecord) []string {
	var lines []string
	for _, j := range jobs {
		ns, name := j.Job.Team, j.Job.Name
		var parts []string
		if p.OnVolcano() {
			parts = describeVolcanoJob(ctx, c, ns, name)
			lines = append(lines, fmt.Sprintf("%s/%s: %s", ns, name, strings.Join(parts, "; ")))
			continue
		}
		var job batchv1.Job
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job)
		if err != nil {
			parts = append(parts, fmt.Sprintf("Job: %v", err))
		} else {
			parts = append(parts, fmt.Sprintf("Job suspended=%t active=%d ready=%d failed=%d conditions %s",
				ptr.Deref(job.Spec.Suspend, false), job.Status.Active, ptr.Deref(job.Status.Ready, 0), job.Status.Failed, jobConditions(job.Status.Conditions)))
		}
		parts = append(parts, describePods(ctx, c, ns, batchv1.JobNameLabel, name))
		if err == nil && p != PolicyKubernetes {
			parts = append(parts, describeWorkload(ctx, c, &job))
		}
		lines = append(lines, fmt.Sprintf("%s/%s: %s", ns, name, strings.Join(parts, "; ")))
	}
	return lines
}

// describeVolcanoJob is a Volcano Job's phase and counts, its PodGroup and its pods.
func describeVolcanoJob(ctx context.Context, c client.Client, ns, name string) []string {
	var job vcbatch.Job
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job); err != nil {
		return []string{fmt.Sprintf("Volcano Job: %v", err)}
	}
	st := job.Status
	parts := []string{fmt.Sprintf("Volcano Job phase %s since %s, retryCount=%d version=%d pending=%d running=%d terminating=%d",
		st.State.Phase, st.State.LastTransitionTime.Format(time.RFC3339), st.RetryCount, st.Version, st.Pending, st.Running, st.Terminating)}
	pg := "no PodGroup"
	if got, err := volcano.PodGroupOf(ctx, c, &job); err != nil {
		pg = err.Error()
	} else if got != nil {
		pg = fmt.Sprintf("PodGroup %s phase %s", got.Name, got.Status.Phase)
	}
	return append(parts, pg, describePods(ctx, c, ns, vcbatch.JobNameKey, name))
}

// describePods is the phases of the pods labelled label=name.
func describePods(ctx context.Context, c client.Client, ns, label, name string) string {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{label: name}); err != nil {
		return fmt.Sprintf("pods: %v", err)
	}
	var phases []string
	for _, p := range pods.Items {
		phase := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			phase += " (terminating)"
		}
		if p.Spec.NodeName == "" {
			phase += " (unscheduled)"
		}
		phases = append(phases, p.Name+" "+phase)
	}
	return fmt.Sprintf("pods [%s]", strings.Join(phases, ", "))
}

func describeWorkload(ctx context.Context, c client.Client, job *batchv1.Job) string {
	var wls kueue.WorkloadList
	if err := c.List(ctx, &wls, client.InNamespace(job.Namespace)); err != nil {
		return fmt.Sprintf("Workloads: %v", err)
	}
	for _, wl := range wls.Items {
		if !metav1.IsControlledBy(&wl, job) {
			continue
		}
		var annotations []string
		for _, k := range slices.Sorted(maps.Keys(wl.Annotations)) {
			annotations = append(annotations, k+"="+wl.Annotations[k])
		}
		return fmt.Sprintf("Workload %s active=%t conditions %s annotations [%s]",
			wl.Name, ptr.Deref(wl.Spec.Active, true), conditions(wl.Status.Conditions), strings.Join(annotations, " "))
	}
	return "no Workload"
}

func conditions(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func jobConditions(cs []batchv1.JobCondition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return "[" + strings.Join(out, ", ") + "]"
}
