package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// describeUnfinished says, for each job a replay left unfinished at its timeout, what
// its Job, its pods and (under Kueue) its Workload looked like in the API server: the
// state a stuck job was left in is what tells why.
func describeUnfinished(ctx context.Context, c client.Client, rec *Recording) []string {
	var lines []string
	for _, j := range rec.Jobs {
		if !j.Finished.IsZero() {
			continue
		}
		ns, name := j.Job.Team, j.Job.Name
		var parts []string
		var job batchv1.Job
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job)
		if err != nil {
			parts = append(parts, fmt.Sprintf("Job: %v", err))
		} else {
			parts = append(parts, fmt.Sprintf("Job suspended=%t active=%d ready=%d failed=%d conditions %s",
				ptr.Deref(job.Spec.Suspend, false), job.Status.Active, ptr.Deref(job.Status.Ready, 0), job.Status.Failed, jobConditions(job.Status.Conditions)))
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: name}); err == nil {
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
			parts = append(parts, fmt.Sprintf("pods [%s]", strings.Join(phases, ", ")))
		}
		if err == nil && !rec.Policy.OnVolcano() && rec.Policy != PolicyKubernetes {
			parts = append(parts, describeWorkload(ctx, c, &job))
		}
		lines = append(lines, fmt.Sprintf("%s/%s: %s", ns, name, strings.Join(parts, "; ")))
	}
	return lines
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
