// Package uninstall hands a cluster back as Kueue alone would have it, before Chamber
// is removed. Chamber's own marks outlive its controller: a node it tainted and
// cordoned stays out of service, a GPU hold pod keeps GPUs from every job, a workload
// it paused stays deactivated, a ClusterQueue listing its admission check admits
// nothing, and the Kueue objects its Teams and GPUPools compiled into are garbage
// collected with them, stranding the jobs queued there. HandBack undoes each of those,
// and only those: it never deletes a Job or a Workload, never touches a cordon an
// operator made, and keeps Chamber's CRDs and its own objects (GPUPools, Teams,
// GPUNodes). It is idempotent: a second run finds nothing to do.
//
// Both `helm uninstall` (the chart's pre-delete hook runs `chamber-controller
// uninstall`) and `kubectl chamber uninstall` run it. The controller is stopped
// first (Options.Controllers): a running one would isolate, pause and compile again
// what HandBack undid.
package uninstall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Options say what HandBack does beyond the default.
type Options struct {
	// Controllers are chamber-controller Deployments to stop first: each is scaled
	// to 0 and its pods are waited for, so that nothing handed back is taken again.
	// None: the caller stopped Chamber's controller itself.
	Controllers []types.NamespacedName
	// StopTimeout bounds the wait for the controllers' pods to be gone
	// (DefaultStopTimeout when 0).
	StopTimeout time.Duration
	// KeepFaultyCordoned keeps cordoned the nodes Chamber isolated for a hardware
	// fault, which only a repair clears: their taint and Chamber's record go, and the
	// cordon is the operator's from then on. Off, every node Chamber cordoned takes
	// pods again, and the report names the faulty ones.
	KeepFaultyCordoned bool
	// DryRun writes nothing: the report lists what HandBack would change.
	DryRun bool
}

// DefaultStopTimeout is how long HandBack waits for a stopped controller's pods.
const DefaultStopTimeout = 2 * time.Minute

// Step is one part of the hand-back, in the order HandBack runs them.
type Step string

// The steps.
const (
	StepController      Step = "controller"
	StepClusterQueues   Step = "clusterqueues"
	StepAdmissionChecks Step = "admissionchecks"
	StepKueueObjects    Step = "kueue-objects"
	StepPolicies        Step = "admission-policies"
	StepNodes           Step = "nodes"
	StepGPUHolds        Step = "gpu-holds"
	StepWorkloads       Step = "workloads"
	StepNotices         Step = "eviction-notices"
	StepVolcano         Step = "volcano"
	StepPools           Step = "gpupools"
)

// handBack is one run of HandBack.
type handBack struct {
	c      client.Client
	opts   Options
	log    logr.Logger
	report *Report
}

// HandBack stops the controllers of opts, then hands the cluster back step by step
// (Step), each step's changes in the report and the log with their count. A step that
// fails does not stop the next ones; the error joins every step's. A stopped
// controller whose pods do not go in time stops it all: nothing would stay handed back.
func HandBack(ctx context.Context, c client.Client, opts Options) (*Report, error) {
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	h := &handBack{c: c, opts: opts, log: log.FromContext(ctx), report: &Report{DryRun: opts.DryRun}}
	if err := h.stopControllers(ctx); err != nil {
		return h.report, fmt.Errorf("%s: %w", StepController, err)
	}
	steps := []struct {
		step Step
		run  func(context.Context) error
	}{
		// The ClusterQueues let go of Chamber's admission check before it is deleted,
		// and before any paused workload is resumed into them.
		{StepClusterQueues, h.clusterQueues},
		{StepAdmissionChecks, h.admissionChecks},
		{StepKueueObjects, h.kueueObjects},
		{StepPolicies, h.policies},
		{StepNodes, h.nodes},
		{StepGPUHolds, h.gpuHolds},
		{StepWorkloads, h.workloads},
		{StepNotices, h.notices},
		{StepVolcano, h.volcano},
		{StepPools, h.pools},
	}
	var errs []error
	for _, s := range steps {
		err := s.run(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.step, err))
		}
		h.log.Info("uninstall step done", "step", s.step, "changes", h.report.Count(s.step), "dryRun", opts.DryRun, "error", err)
	}
	return h.report, errors.Join(errs...)
}

// record adds a change to the report and the log.
func (h *handBack) record(step Step, object, change string) {
	h.report.Changes = append(h.report.Changes, Change{Step: step, Object: object, Change: change})
	h.log.Info("uninstall change", "step", step, "object", object, "change", change, "dryRun", h.opts.DryRun)
}

// note adds what the operator should know to the report and the log.
func (h *handBack) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.report.Notes = append(h.report.Notes, msg)
	h.log.Info("uninstall note", "note", msg)
}

// notServed says whether err is the API server not serving a kind (Kueue, Volcano or
// MutatingAdmissionPolicies not installed); then it notes it, naming what is skipped.
func (h *handBack) notServed(err error, what string) bool {
	if !apimeta.IsNoMatchError(err) {
		return false
	}
	h.note("%s: not served by the API server, nothing to hand back", what)
	return true
}

// write is patch, its changes recorded.
func (h *handBack) write(ctx context.Context, step Step, object string, obj client.Object, edit func() []string) ([]string, error) {
	what, err := h.patch(ctx, object, obj, edit)
	if len(what) > 0 {
		h.record(step, object, strings.Join(what, "; "))
	}
	return what, err
}

// patch applies edit to obj, as listed, and writes what it changed as a merge patch
// that fails on a stale read; on a conflict it reads obj again and edits it anew.
// edit says what it changed, in words; nothing: no write. A dry run writes nothing. An
// object gone meanwhile needs nothing. It returns what was changed.
func (h *handBack) patch(ctx context.Context, object string, obj client.Object, edit func() []string) ([]string, error) {
	var what []string
	read := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if read {
			if err := h.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
		}
		read = true
		orig := obj.DeepCopyObject().(client.Object)
		what = edit()
		if len(what) == 0 || h.opts.DryRun {
			return nil
		}
		return h.c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("update %s: %w", object, err)
	}
	return what, nil
}

// deleteObject deletes obj (a dry run only records it); one gone already is fine.
func (h *handBack) deleteObject(ctx context.Context, step Step, object string, obj client.Object, why string, opts ...client.DeleteOption) error {
	if !h.opts.DryRun {
		if err := h.c.Delete(ctx, obj, opts...); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("delete %s: %w", object, err)
		}
	}
	h.record(step, object, "delete: "+why)
	return nil
}

// dropChamberOwners removes obj's ownerReferences to Chamber's kinds (a Team, a
// GPUPool): deleting those then no longer deletes obj. It says what it dropped.
func dropChamberOwners(obj metav1.Object) []string {
	var what, kept = []string{}, []metav1.OwnerReference{}
	for _, ref := range obj.GetOwnerReferences() {
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group == chamber.GroupVersion.Group {
			what = append(what, fmt.Sprintf("drop ownerReference to %s %s (deleting it no longer deletes this)", ref.Kind, ref.Name))
			continue
		}
		kept = append(kept, ref)
	}
	if len(what) > 0 {
		if len(kept) == 0 {
			kept = nil
		}
		obj.SetOwnerReferences(kept)
	}
	return what
}

// removeMarks deletes the keys from obj's annotations and says how many it found.
func removeMarks(obj metav1.Object, keys ...string) []string {
	a := obj.GetAnnotations()
	found := 0
	for _, k := range keys {
		if _, ok := a[k]; ok {
			delete(a, k)
			found++
		}
	}
	if found == 0 {
		return nil
	}
	obj.SetAnnotations(a)
	return []string{fmt.Sprintf("remove %d annotations of Chamber's", found)}
}

// name is "kind/name" or "kind/namespace/name".
func name(kind string, obj metav1.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return kind + "/" + ns + "/" + obj.GetName()
	}
	return kind + "/" + obj.GetName()
}
