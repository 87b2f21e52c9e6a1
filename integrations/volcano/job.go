package volcano

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
)

// Chamber acts on a Volcano Job (batch.volcano.sh/v1alpha1) the way vcctl does: it
// creates a bus.volcano.sh Command naming the Job, which vc-controller-manager deletes
// as it reads it (so that it runs once) and carries out. RestartJob deletes every pod
// of the Job and its PodGroup, adds one to status.retryCount and status.version, and
// creates the pods again, a whole new gang for vc-scheduler to place: a gang never
// runs with a member missing. A restart counts against spec.maxRetry: the restart
// that reaches it fails the Job (Volcano's restarting state), so Chamber restarts only
// a Job with a retry left (RetriesLeft).

// IndexPodNode indexes the pods of Volcano Jobs by the node they are bound to.
const IndexPodNode = "chamber.volcano.pod.node"

// SetupIndexes registers the Volcano indexes with the manager's field indexer.
func SetupIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &corev1.Pod{}, IndexPodNode, PodNode); err != nil {
		return fmt.Errorf("index Volcano pods by node: %w", err)
	}
	return nil
}

// PodNode is IndexPodNode's key of a pod: its node, when a Volcano Job controls it.
func PodNode(obj client.Object) []string {
	pod := obj.(*corev1.Pod)
	if _, ok := JobOf(pod); !ok || pod.Spec.NodeName == "" {
		return nil
	}
	return []string{pod.Spec.NodeName}
}

// JobOf is the name of the Volcano Job that controls the pod.
func JobOf(pod *corev1.Pod) (string, bool) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batch.SchemeGroupVersion.String() {
		return "", false
	}
	return ref.Name, true
}

// PodsOnNode lists the pods of Volcano Jobs bound to the node, from a cache with
// SetupIndexes' indexes, as shared objects the caller must not change.
func PodsOnNode(ctx context.Context, c client.Reader, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingFields{IndexPodNode: node}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list Volcano pods on node %s: %w", node, err)
	}
	return pods.Items, nil
}

// PodsOf lists the job's pods (Volcano labels them with the job's name), all
// generations.
func PodsOf(ctx context.Context, c client.Reader, job *batch.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batch.JobNameKey: job.Name}); err != nil {
		return nil, fmt.Errorf("list pods of Volcano Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	out := pods.Items[:0]
	for _, p := range pods.Items {
		if metav1.IsControlledBy(&p, job) {
			out = append(out, p)
		}
	}
	return out, nil
}

// PodGroupOf is the job's PodGroup, nil when it has none. It is looked up as
// vc-controller-manager does: by the job's name and UID, then by its name alone (older
// releases' name), and only one the job controls counts.
func PodGroupOf(ctx context.Context, c client.Reader, job *batch.Job) (*scheduling.PodGroup, error) {
	for _, name := range []string{job.Name + "-" + string(job.UID), job.Name} {
		var pg scheduling.PodGroup
		err := c.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: name}, &pg)
		if err == nil && metav1.IsControlledBy(&pg, job) {
			return &pg, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get PodGroup %s/%s: %w", job.Namespace, name, err)
		}
	}
	return nil, nil
}

// CurrentPod reports whether the pod is of the job's current generation: Volcano
// stamps each pod with the job's status.version (annotation volcano.sh/job-version)
// and adds one to it when it kills the job's pods, so a pod of an older version is on
// its way out even before it shows a deletion.
func CurrentPod(job *batch.Job, pod *corev1.Pod) bool {
	v, err := strconv.ParseInt(pod.Annotations[batch.JobVersion], 10, 32)
	return err != nil || int32(v) >= job.Status.Version
}

// Active reports whether the job holds or waits for its pods (Pending or Running):
// the phases in which a restart or an abort is a change. The others are on their way
// to an end (Restarting, Aborting, Completing, Terminating) or there (Completed,
// Failed, Aborted, Terminated).
func Active(job *batch.Job) bool {
	p := job.Status.State.Phase
	return job.DeletionTimestamp == nil && (p == batch.Pending || p == batch.Running || p == "")
}

// RetriesLeft reports whether n more restarts leave the job running: Volcano fails a
// job whose retryCount reaches spec.maxRetry as it restarts.
func RetriesLeft(job *batch.Job, n int32) bool {
	return job.Status.RetryCount+n < job.Spec.MaxRetry
}

// CommandName is the name of Chamber's Command of action on the job, issued when the
// job's retryCount was retry: the same restart always has the same name, so that it
// is created at most once while Volcano has not read it.
func CommandName(job *batch.Job, action bus.Action, retry int32) string {
	return fmt.Sprintf("%s-chamber-%s-%d", job.Name, strings.ToLower(string(action)), retry)
}

// JobCommand is a Command of action on the job, as vcctl makes one: its target and
// owner is the job (so that it goes with the job), reason and message say why.
func JobCommand(job *batch.Job, action bus.Action, name, reason, message string) *bus.Command {
	ref := metav1.NewControllerRef(job, batch.SchemeGroupVersion.WithKind("Job"))
	return &bus.Command{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: job.Namespace, OwnerReferences: []metav1.OwnerReference{*ref},
			Labels: map[string]string{"app.kubernetes.io/managed-by": "chamber"}},
		TargetObject: ref,
		Action:       string(action),
		Reason:       reason,
		Message:      message,
	}
}

// Request is a request to stop a Volcano Job's pods, written with the eviction
// protocol's annotations: its pods get notice (chamber.AnnotationEvictionDeadline),
// and the job may answer before its grace period ends (chamber.AnnotationCheckpointReady).
type Request struct {
	// Reason is CamelCase, e.g. GPUFault or IdleReclaim.
	Reason string
	// Message says what happened, for users.
	Message string
	// RequestedAt starts the grace period.
	RequestedAt time.Time
	// GracePeriod is how long the pods have to checkpoint.
	GracePeriod time.Duration
}

// Annotations are the request as a merge patch of the job's annotations.
func (r Request) Annotations() map[string]any {
	return map[string]any{
		chamber.AnnotationEvictionReason:      r.Reason,
		chamber.AnnotationEvictionMessage:     r.Message,
		chamber.AnnotationEvictionRequestedAt: r.RequestedAt.UTC().Format(time.RFC3339),
		chamber.AnnotationEvictionGracePeriod: r.GracePeriod.String(),
	}
}

// Deadline is when the grace period ends.
func (r Request) Deadline() time.Time { return r.RequestedAt.Add(r.GracePeriod) }

// ClearRequest is the merge patch that removes a request.
func ClearRequest() map[string]any {
	return map[string]any{
		chamber.AnnotationEvictionReason: nil, chamber.AnnotationEvictionMessage: nil,
		chamber.AnnotationEvictionRequestedAt: nil, chamber.AnnotationEvictionGracePeriod: nil,
	}
}

// RequestOf is the request on the job, if any. A request whose time or grace period
// cannot be read has a zero time or no grace: DatedRequestOf gives the first a time.
func RequestOf(job *batch.Job) (Request, bool) {
	a := job.Annotations
	if a[chamber.AnnotationEvictionReason] == "" {
		return Request{}, false
	}
	r := Request{Reason: a[chamber.AnnotationEvictionReason], Message: a[chamber.AnnotationEvictionMessage]}
	if t, err := time.Parse(time.RFC3339, a[chamber.AnnotationEvictionRequestedAt]); err == nil {
		r.RequestedAt = t
	}
	if d, err := time.ParseDuration(a[chamber.AnnotationEvictionGracePeriod]); err == nil && d > 0 {
		r.GracePeriod = d
	}
	return r, true
}

// DatedRequestOf is the request on the job (RequestOf), with a time its grace period
// runs from: where its own cannot be read, now, written on the job
// (kube.DateEvictionRequest, as for a Kueue Workload).
func DatedRequestOf(ctx context.Context, c client.Client, job *batch.Job, now time.Time) (Request, bool, error) {
	r, ok := RequestOf(job)
	if !ok || !r.RequestedAt.IsZero() {
		return r, ok, nil
	}
	if err := kube.DateEvictionRequest(ctx, c, job, now); err != nil {
		return Request{}, false, err
	}
	r.RequestedAt = now
	return r, true, nil
}

// Restart is Chamber's record of the restart it issued on a job.
type Restart struct {
	// From is the job's retryCount when the Command was issued.
	From int32
	// At is when.
	At time.Time
}

// RestartOf is the restart Chamber recorded on the job, if any.
func RestartOf(job *batch.Job) (Restart, bool) {
	s, ok := job.Annotations[chamber.AnnotationVolcanoRestartFrom]
	if !ok {
		return Restart{}, false
	}
	from, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return Restart{}, false
	}
	r := Restart{From: int32(from)}
	if t, err := time.Parse(time.RFC3339, job.Annotations[chamber.AnnotationVolcanoRestartedAt]); err == nil {
		r.At = t
	}
	return r, true
}

// Annotations are the record as a merge patch of the job's annotations, which also
// removes the request it carries out.
func (r Restart) Annotations() map[string]any {
	out := ClearRequest()
	out[chamber.AnnotationVolcanoRestartFrom] = strconv.Itoa(int(r.From))
	out[chamber.AnnotationVolcanoRestartedAt] = r.At.UTC().Format(time.RFC3339)
	return out
}

// Restarting reports whether Chamber's last restart of the job is under way: issued,
// and Volcano has not yet counted it.
func Restarting(job *batch.Job) bool {
	r, ok := RestartOf(job)
	return ok && job.Status.RetryCount <= r.From
}

// Templates are the pod templates of the job's tasks.
func Templates(job *batch.Job) []*corev1.PodTemplateSpec {
	templates := make([]*corev1.PodTemplateSpec, len(job.Spec.Tasks))
	for i := range job.Spec.Tasks {
		templates[i] = &job.Spec.Tasks[i].Template
	}
	return templates
}
