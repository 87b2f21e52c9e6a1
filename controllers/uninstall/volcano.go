package uninstall

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	batch "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	bus "volcano.sh/apis/pkg/apis/bus/v1alpha1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/volcano"
)

// volcanoJobMarks are the annotations Chamber's eviction requests and idle reclaim's
// pause keep on a Volcano Job.
func volcanoJobMarks() []string {
	marks := []string{chamber.AnnotationIdleReclaimHeld, chamber.AnnotationIdleReclaimPausedAtRetry,
		chamber.AnnotationIdleReclaimedFor, chamber.AnnotationIdleReclaimedAt}
	return append(marks, slices.Sorted(maps.Keys(volcano.ClearRequest()))...)
}

// volcano resumes the Volcano Jobs idle reclaim paused (a ResumeJob Command, as
// idle reclaim itself resumes them) and removes Chamber's requests and marks from
// every Volcano Job. Fault isolation's restarts need nothing: Volcano carries them
// out itself.
func (h *handBack) volcano(ctx context.Context) error {
	var list batch.JobList
	if err := h.c.List(ctx, &list); apimeta.IsNoMatchError(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("list Volcano Jobs: %w", err)
	}
	marks := volcanoJobMarks()
	var errs []error
	for i := range list.Items {
		job := &list.Items[i]
		phase := job.Status.State.Phase
		if job.Annotations[chamber.AnnotationIdleReclaimHeld] == "true" && (phase == batch.Aborted || phase == batch.Aborting) && !h.opts.DryRun {
			// The Command first: the hold's mark says to resume it until the Command is in.
			cmd := volcano.JobCommand(job, bus.ResumeJobAction, volcano.CommandName(job, bus.ResumeJobAction, job.Status.RetryCount),
				chamber.ReasonIdleReclaimResumed, "resumed as Chamber is uninstalled")
			if err := h.c.Create(ctx, cmd); err != nil && !apierrors.IsAlreadyExists(err) {
				errs = append(errs, fmt.Errorf("resume Volcano Job %s/%s: %w", job.Namespace, job.Name, err))
				continue
			}
		}
		if _, err := h.write(ctx, StepVolcano, name("job.batch.volcano.sh", job), job, func() []string {
			var what []string
			if job.Annotations[chamber.AnnotationIdleReclaimHeld] == "true" && (phase == batch.Aborted || phase == batch.Aborting) {
				what = append(what, "resume (paused by idle reclaim): a ResumeJob Command")
			}
			if r, ok := volcano.RequestOf(job); ok {
				what = append(what, fmt.Sprintf("withdraw eviction request (%s)", r.Reason))
			}
			return append(what, removeMarks(job, marks...)...)
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pools takes the finalizer chamber.dev/worker-copies off the GPUPools (those with
// worker clusters): only Chamber's controller removes it, so a pool deleted after
// Chamber (the chart's, by helm uninstall) would stay Terminating for good.
func (h *handBack) pools(ctx context.Context) error {
	var list chamber.GPUPoolList
	if err := h.c.List(ctx, &list); apimeta.IsNoMatchError(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("list GPUPools: %w", err)
	}
	var errs []error
	for i := range list.Items {
		pool := &list.Items[i]
		if _, err := h.write(ctx, StepPools, name("gpupool", pool), pool, func() []string {
			if controllerutil.RemoveFinalizer(pool, chamber.FinalizerWorkerCopies) {
				return []string{"remove finalizer " + chamber.FinalizerWorkerCopies + " (what Chamber copied to the worker clusters stays there)"}
			}
			return nil
		}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
