package isolation

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// Preflight reasons (Events; the Isolated condition keeps the fault's reason).
const (
	ReasonPreflightStarted   = "PreflightStarted"
	ReasonPreflightFailed    = "PreflightFailed"
	ReasonPreflightSucceeded = "PreflightSucceeded"
)

// DefaultPreflightTimeout is a preflight's time limit when its policy sets none.
const DefaultPreflightTimeout = 30 * time.Minute

// preflightPoll is how often a running preflight Job is looked at: Chamber does not
// watch Jobs (its cache would hold every Job of the cluster for these few).
const preflightPoll = 2 * time.Second

// preflight handles an operator's clear of a node whose pool names a preflight: once
// the agent reports no GPU failing, the preflight Job runs on the node; the node
// returns to service if it succeeds, and stays isolated, the clear taken back, if it
// fails.
func (c *Controller) preflight(ctx context.Context, node *corev1.Node, pool *chamber.GPUPool, p *chamber.Preflight, rec record, rep report) (reconcile.Result, error) {
	if rec.Preflight == "" {
		if rep.health == chamber.GPUUnhealthy || rep.health == chamber.GPUUnknown {
			// The agent's own checks come first: a GPU it still reports failing, or no
			// word from it, is no node to prove. Its next report brings it back here.
			msg := fmt.Sprintf("%s; an operator cleared it: waiting for the node agent to report every GPU usable before the preflight (%s)", rec.Reason, describeHealth(rep))
			return reconcile.Result{RequeueAfter: rep.interval}, c.setCondition(ctx, node, corev1.ConditionTrue, primaryReason(node), msg, "")
		}
		job, err := c.startPreflight(ctx, node, p, rec)
		if err != nil {
			return reconcile.Result{}, err
		}
		next := rec
		next.Preflight = job
		if err := c.annotate(ctx, node, changes(rec, next)); err != nil {
			return reconcile.Result{}, err
		}
		c.recorder.Eventf(node, pool, corev1.EventTypeNormal, ReasonPreflightStarted, "Preflight", "preflight Job %s runs on the node before it returns to service", job)
		msg := fmt.Sprintf("%s; an operator cleared it: preflight Job %s runs before it returns to service", rec.Reason, job)
		return reconcile.Result{RequeueAfter: preflightPoll}, c.setCondition(ctx, node, corev1.ConditionTrue, primaryReason(node), msg, "")
	}

	ns, name, _ := strings.Cut(rec.Preflight, "/")
	var job batchv1.Job
	err := c.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &job)
	var failed string
	switch {
	case apierrors.IsNotFound(err):
		failed = "the Job was deleted"
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("get preflight Job %s: %w", rec.Preflight, err)
	case jobCondition(&job, batchv1.JobComplete) != nil:
		c.recorder.Eventf(node, pool, corev1.EventTypeNormal, ReasonPreflightSucceeded, "Preflight", "preflight Job %s succeeded", rec.Preflight)
		return reconcile.Result{}, c.release(ctx, node, pool, chamber.ReasonCleared,
			fmt.Sprintf("an operator cleared the isolation (%s) and preflight Job %s succeeded", chamber.AnnotationIsolationClear, rec.Preflight))
	case jobCondition(&job, batchv1.JobFailed) != nil:
		c := jobCondition(&job, batchv1.JobFailed)
		failed = strings.TrimSuffix(c.Reason+": "+c.Message, ": ")
	default:
		return reconcile.Result{RequeueAfter: preflightPoll}, nil
	}
	// Failed: the node stays isolated and the clear is taken back; the Job stays for
	// its logs (its TTL removes it).
	next := rec
	next.Preflight = ""
	patch := changes(rec, next)
	patch[chamber.AnnotationIsolationClear] = nil
	if err := c.annotate(ctx, node, patch); err != nil {
		return reconcile.Result{}, err
	}
	preflightFailures.WithLabelValues(pool.Name).Inc()
	msg := fmt.Sprintf("%s; preflight Job %s failed (%s): the node stays isolated; set %s=true to try again", rec.Reason, rec.Preflight, failed, chamber.AnnotationIsolationClear)
	c.recorder.Eventf(node, pool, corev1.EventTypeWarning, ReasonPreflightFailed, "Preflight", "%s", msg)
	return reconcile.Result{}, c.setCondition(ctx, node, corev1.ConditionTrue, primaryReason(node), msg, "")
}

// startPreflight starts the preflight Job of this proof run on the node, from the
// policy's PodTemplate, in the PodTemplate's namespace, and returns its
// namespace/name. Its name is the same for every try of one proof run, so that a
// try whose write of the node failed finds the Job the last one created instead of
// starting a second: the node, when its isolation began, and the attempt, one more
// than the failed preflights of this isolation (their Jobs stay a day, for their logs).
func (c *Controller) startPreflight(ctx context.Context, node *corev1.Node, p *chamber.Preflight, rec record) (string, error) {
	ref := p.PodTemplate
	for attempt := 1; ; attempt++ {
		name := preflightJobName(node.Name, rec.At, attempt)
		var have batchv1.Job
		err := c.reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: name}, &have)
		switch {
		case apierrors.IsNotFound(err):
			return c.createPreflight(ctx, node, p, name)
		case err != nil:
			return "", fmt.Errorf("get preflight Job %s/%s: %w", ref.Namespace, name, err)
		case have.Labels[chamber.LabelPreflightNode] != preflightNodeLabel(node.Name):
			return "", fmt.Errorf("a Job %s/%s that is not Chamber's preflight of node %s has its name: rename or delete it", ref.Namespace, name, node.Name)
		case jobCondition(&have, batchv1.JobFailed) == nil:
			return ref.Namespace + "/" + name, nil
		}
	}
}

// preflightJobName is the name of the node's preflight Job of one proof run (see
// startPreflight): a DNS-1123 label, so also a label value, shortened with a hash of
// the whole where the node's name makes it longer than 63 characters.
func preflightJobName(node string, isolatedAt time.Time, attempt int) string {
	name := fmt.Sprintf("preflight-%s-%d-%d", strings.ReplaceAll(node, ".", "-"), isolatedAt.Unix(), attempt)
	return kube.ShortName(name, validation.DNS1123LabelMaxLength)
}

// preflightNodeLabel is the node's name as the value of chamber.LabelPreflightNode: a
// node's name may be longer than a label value.
func preflightNodeLabel(node string) string {
	return kube.ShortName(node, validation.LabelValueMaxLength)
}

// createPreflight creates the preflight Job of the given name on the node.
func (c *Controller) createPreflight(ctx context.Context, node *corev1.Node, p *chamber.Preflight, name string) (string, error) {
	ref := p.PodTemplate
	var tmpl corev1.PodTemplate
	if err := c.reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &tmpl); err != nil {
		return "", fmt.Errorf("preflight PodTemplate %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	timeout := DefaultPreflightTimeout
	if p.Timeout != nil {
		timeout = p.Timeout.Duration
	}
	spec := *tmpl.Template.Spec.DeepCopy()
	spec.NodeName = node.Name
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.Tolerations = append(spec.Tolerations,
		corev1.Toleration{Key: chamber.TaintGPUUnhealthy, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	nodeLabel := preflightNodeLabel(node.Name)
	labels := map[string]string{chamber.LabelPreflightNode: nodeLabel}
	for k, v := range tmpl.Template.Labels {
		labels[k] = v
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ref.Namespace,
			Name:      name,
			Labels:    map[string]string{chamber.LabelPreflightNode: nodeLabel},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   ptr.To(int64(max(timeout/time.Second, 1))),
			TTLSecondsAfterFinished: ptr.To[int32](int32((24 * time.Hour) / time.Second)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: tmpl.Template.Annotations},
				Spec:       spec,
			},
		},
	}
	// AlreadyExists: another try created it since startPreflight looked.
	if err := c.client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create preflight Job for node %s: %w", node.Name, err)
	}
	return job.Namespace + "/" + job.Name, nil
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return &job.Status.Conditions[i]
		}
	}
	return nil
}

// primaryReason is the reason the node's Isolated condition carries now (the fault's).
func primaryReason(node *corev1.Node) string {
	for _, c := range node.Status.Conditions {
		if c.Type == chamber.ConditionNodeIsolated {
			return c.Reason
		}
	}
	return "Isolated"
}

// describeHealth says what the agent reports, for a condition's message.
func describeHealth(rep report) string {
	if rep.health == chamber.GPUUnknown {
		return "the agent is silent"
	}
	return "it reports " + rep.describe()
}
