package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// whyView says what holds a job, in words, from Kueue's and Chamber's marks on its
// Workload, its team and its recent Events.
type whyView struct {
	Job          string `json:"job"`
	Workload     string `json:"workload"`
	ClusterQueue string `json:"clusterQueue,omitempty"`
	Team         string `json:"team,omitempty"`
	// State is Running, Admitting, Waiting, Paused or Finished.
	State   string      `json:"state"`
	Reasons []string    `json:"reasons"`
	Events  []eventLine `json:"events,omitempty"`
}

type eventLine struct {
	Age     string `json:"age"`
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// maxEvents is how many of the workload's latest Events why shows.
const maxEvents = 10

func (o *options) whyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "why JOB",
		Short: "Why a job waits, is paused, or was evicted: quota, placement, budget, idle reclaim, room for a bigger job, faults",
		Long: "Why a job waits, is paused, or was evicted, in words: from its Kueue Workload's conditions, Chamber's marks\n" +
			"on it, its team's budget and its latest Events. JOB is the name of the job (a batch Job, a JobSet, any\n" +
			"kind Kueue queues) or of its Workload, in the namespace of -n.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			c, err := o.newClient()
			if err != nil {
				return err
			}
			ctx, cancel := o.context(cmd)
			defer cancel()
			v, err := why(ctx, c, ns, args[0], o.now())
			if err != nil {
				return err
			}
			if done, err := o.structured(v); done {
				return err
			}
			return o.printWhy(v)
		},
	}
}

// workloadOf finds the Workload of the job named name (its owner), or the Workload
// of that name.
func workloadOf(ctx context.Context, c client.Client, ns, name string) (*kueue.Workload, error) {
	var list kueue.WorkloadList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list workloads in %s: %w", ns, err)
	}
	var found *kueue.Workload
	for i := range list.Items {
		wl := &list.Items[i]
		if wl.Name == name {
			return wl, nil
		}
		for _, ref := range wl.OwnerReferences {
			if ref.Name == name && (found == nil || wl.CreationTimestamp.After(found.CreationTimestamp.Time)) {
				found = wl
			}
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no Kueue workload of a job %q in namespace %s: is the job queued by Kueue (label kueue.x-k8s.io/queue-name), and is -n right?", name, ns)
	}
	return found, nil
}

func why(ctx context.Context, c client.Client, ns, name string, now time.Time) (*whyView, error) {
	wl, err := workloadOf(ctx, c, ns, name)
	if err != nil {
		return nil, err
	}
	v := &whyView{Job: name, Workload: wl.Name}
	cq := ""
	if wl.Status.Admission != nil {
		cq = string(wl.Status.Admission.ClusterQueue)
	} else {
		var lq kueue.LocalQueue
		switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: string(wl.Spec.QueueName)}, &lq); {
		case apierrors.IsNotFound(err):
			v.Reasons = append(v.Reasons, fmt.Sprintf("its LocalQueue %q is not found in %s: Kueue queues it nowhere", wl.Spec.QueueName, ns))
		case err != nil:
			return nil, fmt.Errorf("get LocalQueue %s/%s: %w", ns, wl.Spec.QueueName, err)
		default:
			cq = string(lq.Spec.ClusterQueue)
		}
	}
	v.ClusterQueue = cq
	team, err := teamOf(ctx, c, cq)
	if err != nil {
		return nil, err
	}
	if team != nil {
		v.Team = team.Name
	}

	cond := func(t string) *metav1.Condition { return apimeta.FindStatusCondition(wl.Status.Conditions, t) }
	active := wl.Spec.Active == nil || *wl.Spec.Active
	a := wl.Annotations
	switch {
	case isTrue(wl, kueue.WorkloadFinished):
		v.State = "Finished"
		v.Reasons = append(v.Reasons, "it finished: "+cond(kueue.WorkloadFinished).Message)
	case !active:
		v.State = "Paused"
		v.Reasons = append(v.Reasons, pausedWhy(wl))
	case isTrue(wl, kueue.WorkloadAdmitted):
		v.State = "Running"
		v.Reasons = append(v.Reasons, fmt.Sprintf("admitted in ClusterQueue %s", cq))
		if e, ok := chamberkueue.RequestedEviction(wl); ok {
			v.Reasons = append(v.Reasons, fmt.Sprintf("Chamber is evicting it (%s), after its grace period or its checkpoint (annotation %s=true on a pod or the job): %s",
				e.Reason, chamber.AnnotationCheckpointReady, e.Message))
		}
	case isTrue(wl, kueue.WorkloadQuotaReserved):
		v.State = "Admitting"
		v.Reasons = append(v.Reasons, "quota is reserved in ClusterQueue "+cq+"; Kueue admits it once its admission checks are Ready")
		for _, ac := range wl.Status.AdmissionChecks {
			if ac.State != kueue.CheckStateReady {
				who := "admission check " + string(ac.Name)
				if ac.Name == chamber.AdmissionCheckName {
					who = "Chamber's placement check"
				}
				v.Reasons = append(v.Reasons, fmt.Sprintf("%s is %s: %s", who, ac.State, ac.Message))
			}
		}
	default:
		v.State = "Waiting"
		if c := cond(kueue.WorkloadQuotaReserved); c != nil && c.Message != "" {
			v.Reasons = append(v.Reasons, "Kueue: "+c.Message)
		} else {
			v.Reasons = append(v.Reasons, "Kueue has not looked at it yet")
		}
		if rs := wl.Status.RequeueState; rs != nil && rs.RequeueAt != nil && rs.RequeueAt.After(now) {
			v.Reasons = append(v.Reasons, fmt.Sprintf("Kueue requeues it in %s (its back-off after %d requeues)", age(rs.RequeueAt.Sub(now)), ptr.Deref(rs.Count, 0)))
		}
		if at := a[chamber.AnnotationRoomMadeAt]; at != "" {
			v.Reasons = append(v.Reasons, "Chamber made room for it on a node (moving lower-tier work) at "+at)
		}
	}
	if c := cond(kueue.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue && v.State != "Finished" {
		v.Reasons = append(v.Reasons, "evicted: "+c.Message)
	}
	if team != nil {
		for _, c := range team.Status.Conditions {
			if (c.Type == chamber.ConditionBudgetExceeded || c.Type == chamber.ConditionBudgetWarning) && c.Status == metav1.ConditionTrue {
				v.Reasons = append(v.Reasons, fmt.Sprintf("team %s: %s", team.Name, c.Message))
			}
		}
	}
	if cq != "" {
		var q kueue.ClusterQueue
		if err := c.Get(ctx, client.ObjectKey{Name: cq}, &q); err == nil && q.Spec.StopPolicy != nil && *q.Spec.StopPolicy != kueue.None {
			v.Reasons = append(v.Reasons, fmt.Sprintf("ClusterQueue %s is stopped (stopPolicy %s): it admits nothing new", cq, *q.Spec.StopPolicy))
		}
	}
	events, err := eventsOf(ctx, c, wl, now)
	if err != nil {
		return nil, err
	}
	v.Events = events
	return v, nil
}

// pausedWhy says who deactivated the workload and how it comes back.
// pausedByChamber: the workload is deactivated, and Chamber did it (idle reclaim, its
// interactive idle time limit, room for a bigger job).
func pausedByChamber(wl *kueue.Workload) bool {
	if ptr.Deref(wl.Spec.Active, true) {
		return false
	}
	a := wl.Annotations
	return chamberkueue.IdleReclaimPaused(wl) || a[chamber.AnnotationRoomPausedFor] != "" || chamberkueue.Paused(wl) != ""
}

func pausedWhy(wl *kueue.Workload) string {
	a := wl.Annotations
	resume := chamberkueue.ResumeCommand(wl)
	switch {
	case chamberkueue.PausedAtIdleLimit(wl):
		return "paused by Chamber: its GPUs stayed idle for its team's interactive idle time limit; it waits for its user: " + resume
	case a[chamber.AnnotationIdleReclaimedFor] != "":
		return fmt.Sprintf("paused by Chamber's idle reclaim: its idle GPUs went to %s; it resumes by itself once nobody waits for GPUs it could use (or now: %s)",
			a[chamber.AnnotationIdleReclaimedFor], resume)
	case a[chamber.AnnotationRoomPausedFor] != "":
		return fmt.Sprintf("paused by Chamber to make room for %s, a higher tier waiting for whole nodes; it resumes by itself once that workload is admitted",
			a[chamber.AnnotationRoomPausedFor])
	case chamberkueue.Paused(wl) != "":
		return fmt.Sprintf("paused by Chamber (%s)", chamberkueue.Paused(wl))
	}
	return "deactivated (spec.active false) by a user or by Kueue, not by Chamber: " + resume
}

func teamOf(ctx context.Context, c client.Client, cq string) (*chamber.Team, error) {
	if cq == "" {
		return nil, nil
	}
	var teams chamber.TeamList
	if err := c.List(ctx, &teams); err != nil {
		return nil, fmt.Errorf("list Teams: %w", err)
	}
	return chamber.TeamOfClusterQueue(teams.Items, cq), nil
}

// eventsOf are the workload's latest Events, oldest first.
func eventsOf(ctx context.Context, c client.Client, wl *kueue.Workload, now time.Time) ([]eventLine, error) {
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(wl.Namespace)); err != nil {
		return nil, fmt.Errorf("list events in %s: %w", wl.Namespace, err)
	}
	var mine []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Workload" && e.Regarding.Name == wl.Name && (e.Regarding.UID == "" || e.Regarding.UID == wl.UID) {
			mine = append(mine, e)
		}
	}
	slices.SortFunc(mine, func(a, b eventsv1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	if len(mine) > maxEvents {
		mine = mine[len(mine)-maxEvents:]
	}
	out := make([]eventLine, 0, len(mine))
	for _, e := range mine {
		msg := e.Note
		if msg == "" {
			msg = e.DeprecatedSource.Component
		}
		out = append(out, eventLine{Age: age(now.Sub(eventTime(e))), Type: e.Type, Reason: e.Reason, Message: msg})
	}
	return out, nil
}

// eventTime is when the event last happened.
func eventTime(e eventsv1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func (o *options) printWhy(v *whyView) error {
	out := o.streams.Out
	fmt.Fprintf(out, "%s (workload %s", v.Job, v.Workload)
	if v.ClusterQueue != "" {
		fmt.Fprintf(out, ", ClusterQueue %s", v.ClusterQueue)
	}
	if v.Team != "" {
		fmt.Fprintf(out, ", team %s", v.Team)
	}
	fmt.Fprintf(out, "): %s\n", v.State)
	for _, r := range v.Reasons {
		fmt.Fprintf(out, "  - %s\n", r)
	}
	if len(v.Events) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nEvents:")
	t := newTable(out, "AGE", "TYPE", "REASON", "MESSAGE")
	for _, e := range v.Events {
		t.row(e.Age, e.Type, e.Reason, strings.ReplaceAll(e.Message, "\n", " "))
	}
	return t.flush()
}

func isTrue(wl *kueue.Workload, t string) bool {
	return apimeta.IsStatusConditionTrue(wl.Status.Conditions, t)
}
