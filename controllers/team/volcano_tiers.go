package team

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"chamber.dev/chamber/integrations/kube"
	"chamber.dev/chamber/integrations/volcano"
)

// ReasonPriorityClassNotOwned is the reason of the Warning Event on a PriorityClass
// of a tier's name that Chamber did not make: Chamber never changes it, and Volcano
// orders the tier's jobs by its value.
const ReasonPriorityClassNotOwned = "PriorityClassNotOwned"

// RegisterVolcanoPriorityTiers makes the tiers Volcano's PriorityClasses
// (integrations/volcano.PriorityClass) when the manager starts (its leader).
func RegisterVolcanoPriorityTiers(mgr ctrl.Manager, tiers []kube.PriorityTier) error {
	return mgr.Add(&VolcanoPriorityTiers{client: mgr.GetClient(), reader: mgr.GetAPIReader(),
		recorder: mgr.GetEventRecorder("chamber-priority-tiers"), tiers: tiers})
}

// VolcanoPriorityTiers creates a PriorityClass per tier. One Chamber made whose value
// is no longer the tier's is made again (a PriorityClass's value cannot change; pods
// created meanwhile that name it are refused by the API server for that moment); one
// Chamber did not make is read, never written, and gets a PriorityClassNotOwned
// Warning Event where its value is not the tier's.
type VolcanoPriorityTiers struct {
	client client.Client
	// reader reads the PriorityClasses from the API server: they are read once, at
	// start, so the controller keeps no cache of them.
	reader   client.Reader
	recorder events.EventRecorder
	tiers    []kube.PriorityTier
}

var _ manager.LeaderElectionRunnable = &VolcanoPriorityTiers{}

// NeedLeaderElection: only the leader writes.
func (p *VolcanoPriorityTiers) NeedLeaderElection() bool { return true }

// Start applies the tiers' PriorityClasses.
func (p *VolcanoPriorityTiers) Start(ctx context.Context) error {
	for _, t := range p.tiers {
		if err := p.apply(ctx, volcano.PriorityClass(t)); err != nil {
			return fmt.Errorf("priority tier %s: %w", t.Name, err)
		}
	}
	return nil
}

func (p *VolcanoPriorityTiers) apply(ctx context.Context, want *schedulingv1.PriorityClass) error {
	var have schedulingv1.PriorityClass
	err := p.reader.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get PriorityClass %s: %w", want.Name, err)
	case have.Value == want.Value:
		return nil
	case !kube.Owned(&have):
		p.recorder.Eventf(&have, nil, corev1.EventTypeWarning, ReasonPriorityClassNotOwned, "ReadPriorityTier",
			"PriorityClass %s has value %d, Chamber's tier %s %d; Chamber did not make it and never changes it, so Volcano orders the tier's jobs by %d: delete it to have Chamber's, or change the tier's value (--priority-tiers)",
			have.Name, have.Value, want.Name, want.Value, have.Value)
		ctrl.LoggerFrom(ctx).Info("priority tier's PriorityClass is not Chamber's: left as it is", "priorityClass", have.Name, "value", have.Value, "tierValue", want.Value)
		return nil
	default:
		// Chamber's, of an older value: a PriorityClass's value cannot change.
		if err := p.client.Delete(ctx, &have); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete PriorityClass %s of value %d: %w", have.Name, have.Value, err)
		}
	}
	if err := p.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create PriorityClass %s: %w", want.Name, err)
	}
	return nil
}
