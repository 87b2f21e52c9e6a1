// Package controllers wires Chamber's controllers: Setup is the one list of what runs
// (controllerList), each controller where the API it works through is served. One
// package each:
//   - pool counts a GPUPool's GPUs per model and compiles it into a Kueue
//     ResourceFlavor per model and a Cohort (or, under Volcano's queue hierarchy, a
//     Volcano Queue), and its worker clusters into MultiKueue's objects.
//   - team compiles a Team into a ClusterQueue and LocalQueues (or a Volcano Queue),
//     accounts its spend against its budget (with its quota's use, and its idle time
//     from the inventory's fleet model) and gives its pods their eviction grace; it
//     also makes the priority tiers Volcano's PriorityClasses.
//   - dispatch is the MultiKueue dispatcher: it nominates the worker cluster with
//     free healthy GPUs, the cheapest first.
//   - workload carries out Chamber's evictions of Kueue workloads, with notice and a
//     grace period, and runs the admission check (placement on healthy GPUs).
//   - inventory feeds the fleet model from the informers and serves its metrics and
//     the fleet page.
//   - isolation takes failing GPUs or nodes out of service and evicts or restarts the
//     workloads on them.
//   - idlereclaim takes GPUs held idle back for waiting workloads, and pauses and
//     resumes the workloads it reclaimed.
//   - room makes room on one node for a workload that needs whole nodes.
//   - volcanoresync resumes the Volcano Jobs that vc-controller-manager left stalled.
//   - history records each finished Kueue workload once in a bounded ring of
//     ConfigMaps, the cluster's own trace for the simulator's what-if replays.
//   - dcgm reads GPU health and utilization from dcgm-exporter's series, for nodes
//     without a Chamber agent.
//
// Beside them, options holds chamber-controller's flags, uninstall hands the cluster
// back before Chamber is removed, and controllertest runs the controllers in-process
// for integration tests. This package also holds the manager's readiness
// (CachesSynced) and liveness (StuckWorkers) checks.
package controllers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers/dcgm"
	"chamber.dev/chamber/controllers/dispatch"
	"chamber.dev/chamber/controllers/history"
	"chamber.dev/chamber/controllers/idlereclaim"
	"chamber.dev/chamber/controllers/inventory"
	"chamber.dev/chamber/controllers/isolation"
	"chamber.dev/chamber/controllers/pool"
	"chamber.dev/chamber/controllers/room"
	"chamber.dev/chamber/controllers/team"
	"chamber.dev/chamber/controllers/volcanoresync"
	"chamber.dev/chamber/controllers/workload"
	"chamber.dev/chamber/exporter/fleetpage"
	"chamber.dev/chamber/fleet"
	"chamber.dev/chamber/integrations/kube"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// CacheOptions are the manager cache's options for Chamber's controllers: objects are
// cached without their managedFields, which no controller reads (they write status by
// server-side apply, which needs none cached) and which are a large share of every
// Workload, Pod and Node.
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}

// Config configures the controllers.
type Config struct {
	// PriorityTiers become Kueue WorkloadPriorityClasses, and PriorityClasses where
	// Volcano is served.
	PriorityTiers []kube.PriorityTier
	// AccountingInterval is how often team spend is added up.
	AccountingInterval time.Duration
	// Inventory configures the fleet inventory and its metrics; its clock is Clock.
	Inventory inventory.Options
	// Admission configures Chamber's evictions and its admission check (placement on
	// healthy GPUs). AdmissionCheck (off by default) attaches the check to every
	// team's ClusterQueue, at one API write per admission; without it Chamber is off
	// Kueue's admission path and evicts, isolates and reclaims all the same.
	Admission      workload.Options
	AdmissionCheck bool
	// Isolation configures fault isolation (zero fields take their defaults); its
	// clock is Clock.
	Isolation isolation.Options
	// IdleReclaim configures idle reclaim (the policies are on pools and teams); its
	// clock is Clock.
	IdleReclaim idlereclaim.Options
	// Room configures room for big jobs (moving lower-tier workloads off a node for a
	// workload that waits for one); RoomForBigJobs off leaves it out. Its clock is
	// Clock.
	Room           room.Options
	RoomForBigJobs bool
	// Resync configures the resumption of Volcano Jobs that vc-controller-manager
	// left stalled; its clock is Clock.
	Resync volcanoresync.Options
	// PodGracePeriods: Kueue's preemptions (and Volcano's reclaim and preempt) give a
	// team's pods its eviction grace
	// period (Admission.GracePeriod where neither the team nor its pool sets one), as
	// their terminationGracePeriodSeconds.
	PodGracePeriods bool
	// PolicyAPI is the version the API server serves MutatingAdmissionPolicies in,
	// the grace policy's kind (team.ServedPolicyAPI; team.PolicyV1 when empty).
	PolicyAPI team.PolicyAPI
	// GracePolicy names the chart's grace policy, which reads each Team's
	// status.podGrace (DefaultGracePolicy: that of a release named chamber).
	GracePolicy string
	// DCGM reads GPU health from a Prometheus that scrapes dcgm-exporter, for nodes
	// without an agent; off without DCGM.PrometheusURL. Its clock is Clock.
	DCGM dcgm.Options
	// FleetPage serves the fleet page (exporter/fleetpage) from the inventory's model on the
	// metrics endpoint, behind the same authentication and authorization as /metrics.
	FleetPage bool
	// MonitoringOnly runs Chamber as monitoring alone, the way it runs on a cluster
	// with neither Kueue nor Volcano: the fleet inventory and its metrics, and the DCGM
	// source. Nothing is compiled into Kueue or Volcano, nothing evicted, tainted or
	// written but GPUNodes.
	MonitoringOnly bool
	// WithoutKueue: the API server does not serve Kueue's API, so the controllers that
	// work through Kueue do not run (chamber-controller asks at start-up).
	WithoutKueue bool
	// Volcano: the API server serves Volcano's API (integrations/volcano.Served), so
	// the controllers that work through Volcano run too.
	Volcano bool
	// VolcanoQueueHierarchy: vc-scheduler runs Volcano's queue hierarchy (its capacity
	// plugin's enableHierarchy), so each Volcano pool gets a Queue, the parent of its
	// teams' Queues and the child of its parent pool's; off, the Queues are flat.
	VolcanoQueueHierarchy bool
	// SilentAfterHeartbeats is how many of its heartbeats an agent may miss before
	// every controller takes it for silent (chamber.SilentAfterHeartbeats when 0).
	SilentAfterHeartbeats int
	// MultiKueueDispatcher runs Chamber's dispatcher for Kueue's MultiKueue
	// (controllers/dispatch): it nominates each waiting workload's worker cluster by
	// free healthy GPUs and price. Off by default: Kueue must name it in its
	// Configuration (multiKueue.dispatcherName: chamber.MultiKueueDispatcherName), else
	// Kueue's own dispatcher nominates and both would write the same field.
	MultiKueueDispatcher bool
	// History configures the job history's recorder (Jobs 0: off); its clock is Clock
	// and its utilization the fleet model's.
	History history.Options
	// KueueNamespace is the namespace Kueue runs in, where its MultiKueue reads the
	// worker clusters' kubeconfig Secrets (chamberkueue.DefaultNamespace when empty).
	KueueNamespace string
	// Clock is the time source; the real clock when nil.
	Clock clock.Clock

	// heartbeats is the one record of when each agent was heard, which every
	// controller reads (Setup makes it).
	heartbeats *chamber.Heartbeats
	// workers are the fleet models of the worker clusters, which the inventory keeps
	// and the MultiKueue dispatcher reads (Setup makes it).
	workers *fleet.Workers
	// model is the inventory's fleet model once its setup has run, which the Team
	// controller (the teams' idle and used GPU-seconds) and the history's recorder
	// (each workload's) read (Setup makes it; empty while the inventory does not run).
	model *fleet.ModelRef
}

// DefaultConfig is the controllers' configuration unless flags say otherwise.
func DefaultConfig() Config {
	return Config{PriorityTiers: kube.DefaultPriorityTiers, AccountingInterval: team.DefaultAccountingInterval, Inventory: inventory.DefaultOptions(),
		Admission: workload.DefaultOptions(), AdmissionCheck: false, IdleReclaim: idlereclaim.DefaultOptions(), Room: room.DefaultOptions(), RoomForBigJobs: true, PodGracePeriods: true,
		GracePolicy: DefaultGracePolicy, DCGM: dcgm.DefaultOptions(), History: history.DefaultOptions()}
}

// DefaultGracePolicy is the grace policy's name where the chart's release is named
// chamber (the chart passes --pod-grace-policy).
const DefaultGracePolicy = "chamber-pod-grace"

// What a controller needs to run.
type needs int

const (
	// monitoring: the controller runs in monitoring-only mode too (it needs neither
	// Kueue nor Volcano and changes nothing but Chamber's own reports).
	monitoring needs = iota
	// kueueAPI: the controller works through Kueue.
	kueueAPI
	// volcanoAPI: the controller works through Volcano.
	volcanoAPI
	// queueAPI: the controller works through Kueue or Volcano, whichever is served.
	queueAPI
)

// runs says whether a controller that needs n runs under cfg.
func (n needs) runs(cfg Config) bool {
	switch n {
	case kueueAPI:
		return !cfg.MonitoringOnly && !cfg.WithoutKueue
	case volcanoAPI:
		return !cfg.MonitoringOnly && cfg.Volcano
	case queueAPI:
		return !cfg.MonitoringOnly && (!cfg.WithoutKueue || cfg.Volcano)
	}
	return true
}

// controllerList is what runs, in start order.
var controllerList = []struct {
	name  string
	needs needs
	setup func(mgr ctrl.Manager, cfg Config) error
}{
	{"pool", queueAPI, func(mgr ctrl.Manager, cfg Config) error {
		return pool.Register(mgr, pool.Options{KueueNamespace: cfg.KueueNamespace, WithoutKueue: cfg.WithoutKueue,
			Volcano: cfg.Volcano, VolcanoQueueHierarchy: cfg.VolcanoQueueHierarchy})
	}},
	{"team", kueueAPI, func(mgr ctrl.Manager, cfg Config) error {
		opts := team.Options{AccountingInterval: cfg.AccountingInterval, Clock: cfg.Clock,
			PodGracePeriods: cfg.PodGracePeriods, EvictionGrace: cfg.Admission.GracePeriod, PolicyAPI: cfg.PolicyAPI, GracePolicy: cfg.GracePolicy}
		if cfg.AdmissionCheck {
			opts.AdmissionChecks = []string{chamber.AdmissionCheckName}
		}
		opts.VolcanoServed, opts.FleetUsage = cfg.Volcano, cfg.model
		return team.Register(mgr, opts)
	}},
	{"team-volcano", volcanoAPI, func(mgr ctrl.Manager, cfg Config) error {
		return team.RegisterVolcano(mgr, team.VolcanoOptions{WithoutKueue: cfg.WithoutKueue, QueueHierarchy: cfg.VolcanoQueueHierarchy,
			PodGracePeriods: cfg.PodGracePeriods, EvictionGrace: cfg.Admission.GracePeriod, PolicyAPI: cfg.PolicyAPI, GracePolicy: cfg.GracePolicy})
	}},
	{"dispatch", kueueAPI, func(mgr ctrl.Manager, cfg Config) error {
		if !cfg.MultiKueueDispatcher {
			return nil
		}
		return dispatch.Register(mgr, dispatch.Options{Workers: cfg.workers, Clock: cfg.Clock})
	}},
	{"admission", kueueAPI, func(mgr ctrl.Manager, cfg Config) error {
		opts := cfg.Admission
		opts.Check, opts.Clock, opts.Heartbeats = cfg.AdmissionCheck, cfg.Clock, cfg.heartbeats
		return workload.Register(mgr, opts)
	}},
	{"eviction-notice", queueAPI, func(mgr ctrl.Manager, cfg Config) error {
		return workload.RegisterNotice(mgr, cfg.Admission.AfterNotice)
	}},
	{"inventory", monitoring, func(mgr ctrl.Manager, cfg Config) error {
		inv := cfg.Inventory
		inv.Clock, inv.Fleet.Heartbeats, inv.WithoutKueue = cfg.Clock, cfg.heartbeats, cfg.MonitoringOnly || cfg.WithoutKueue
		inv.Volcano = cfg.Volcano && !cfg.MonitoringOnly
		inv.KueueNamespace, inv.WorkerCache, inv.Workers = cfg.KueueNamespace, CacheOptions(), cfg.workers
		model, err := inventory.Register(mgr, inv)
		if err != nil {
			return err
		}
		cfg.model.Set(model)
		if !cfg.FleetPage {
			return nil
		}
		return mgr.AddMetricsServerExtraHandler(fleetpage.Path, fleetpage.New(model, 0))
	}},
	{"isolation", kueueAPI, func(mgr ctrl.Manager, cfg Config) error {
		opts := cfg.Isolation
		opts.Clock, opts.Heartbeats = cfg.Clock, cfg.heartbeats
		return isolation.Register(mgr, opts)
	}},
	{"isolation-volcano", volcanoAPI, func(mgr ctrl.Manager, cfg Config) error {
		opts := cfg.Isolation
		opts.Clock, opts.Heartbeats, opts.WithoutKueue, opts.GracePeriod = cfg.Clock, cfg.heartbeats, cfg.WithoutKueue, cfg.Admission.GracePeriod
		return isolation.RegisterVolcano(mgr, opts)
	}},
	{"idlereclaim", kueueAPI, func(mgr ctrl.Manager, cfg Config) error {
		opts := cfg.IdleReclaim
		opts.Clock, opts.Heartbeats = cfg.Clock, cfg.heartbeats
		return idlereclaim.Register(mgr, opts)
	}},
	{"idlereclaim-volcano", volcanoAPI, func(mgr ctrl.Manager, cfg Config) error {
		opts := idlereclaim.VolcanoOptions{Options: cfg.IdleReclaim, GracePeriod: cfg.Admission.GracePeriod}
		opts.Clock, opts.Heartbeats = cfg.Clock, cfg.heartbeats
		return idlereclaim.RegisterVolcano(mgr, opts)
	}},
	{"resync-volcano", volcanoAPI, func(mgr ctrl.Manager, cfg Config) error {
		opts := cfg.Resync
		opts.Clock = cfg.Clock
		return volcanoresync.Register(mgr, opts)
	}},
	{"room", kueueAPI, func(mgr ctrl.Manager, cfg Config) error {
		if !cfg.RoomForBigJobs {
			return nil
		}
		opts := cfg.Room
		opts.Clock = cfg.Clock
		return room.Register(mgr, opts)
	}},
	{"history", kueueAPI, func(mgr ctrl.Manager, cfg Config) error {
		opts := cfg.History
		opts.Clock = cfg.Clock
		opts.Usage = cfg.model.Workload
		return history.Register(mgr, opts)
	}},
	{"dcgm", monitoring, func(mgr ctrl.Manager, cfg Config) error {
		opts := cfg.DCGM
		opts.Heartbeats = cfg.heartbeats
		if c, ok := cfg.Clock.(clock.WithTicker); ok {
			opts.Clock = c
		}
		return dcgm.Register(mgr, opts)
	}},
	{"priority-tiers", kueueAPI, func(mgr ctrl.Manager, cfg Config) error {
		return mgr.Add(priorityTiers{client: mgr.GetClient(), tiers: cfg.PriorityTiers})
	}},
	{"priority-tiers-volcano", volcanoAPI, func(mgr ctrl.Manager, cfg Config) error {
		return team.RegisterVolcanoPriorityTiers(mgr, cfg.PriorityTiers)
	}},
}

// Names lists Chamber's controllers in the order Setup starts them.
func Names() []string {
	names := make([]string, len(controllerList))
	for i, c := range controllerList {
		names[i] = c.name
	}
	return names
}

// Setup registers every controller with the manager: controllerList is what runs,
// each where what it needs is there (in monitoring-only mode, the monitoring ones).
// It returns the name of the one that failed.
func Setup(mgr ctrl.Manager, cfg Config) (string, error) {
	cfg.heartbeats = chamber.NewHeartbeats(cfg.Clock, cfg.SilentAfterHeartbeats)
	cfg.workers = &fleet.Workers{}
	cfg.model = &fleet.ModelRef{}
	if kueueAPI.runs(cfg) {
		if err := chamberkueue.SetupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
			return "indexes", err
		}
	}
	for _, c := range controllerList {
		if !c.needs.runs(cfg) {
			continue
		}
		if err := c.setup(mgr, cfg); err != nil {
			return c.name, err
		}
	}
	return "", nil
}

// priorityTiers creates the WorkloadPriorityClasses of the tiers at start-up, and
// updates the value of the ones Chamber created.
type priorityTiers struct {
	client client.Client
	tiers  []kube.PriorityTier
}

var _ manager.LeaderElectionRunnable = priorityTiers{}

func (p priorityTiers) NeedLeaderElection() bool { return true }

func (p priorityTiers) Start(ctx context.Context) error {
	for _, t := range p.tiers {
		want := chamberkueue.WorkloadPriorityClass(t)
		have := want.DeepCopy()
		err := p.client.Get(ctx, client.ObjectKeyFromObject(want), have)
		switch {
		case apierrors.IsNotFound(err):
			if err := p.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create priority tier %s: %w", t.Name, err)
			}
		case err != nil:
			return fmt.Errorf("get priority tier %s: %w", t.Name, err)
		case kube.Owned(have) && have.Value != want.Value:
			have.Value = want.Value
			if err := p.client.Update(ctx, have); err != nil {
				return fmt.Errorf("update priority tier %s: %w", t.Name, err)
			}
		}
	}
	return nil
}
