// Command chamber-controller runs Chamber's controllers: GPU pools and teams compiled
// into Kueue objects, budgets, the fleet inventory and its metrics, and (in later
// changes) admission and isolation.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/admission"
	"chamber.dev/chamber/controllers/idlereclaim"
	"chamber.dev/chamber/controllers/isolation"
	"chamber.dev/chamber/controllers/room"
	"chamber.dev/chamber/fleet"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

func main() {
	var (
		metricsAddr        = flag.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 turns it off")
		probeAddr          = flag.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
		leaderElect        = flag.Bool("leader-elect", false, "elect a leader, for more than one replica")
		leaderElectionNS   = flag.String("leader-election-namespace", "", "namespace of the leader election Lease (default: the pod's own; required out of cluster)")
		priorityTiers      = flag.String("priority-tiers", "production=1000,standard=500,preemptible=100", "Kueue WorkloadPriorityClasses to create, name=value,...")
		accountingInterval = flag.Duration("accounting-interval", controllers.DefaultConfig().AccountingInterval, "how often team spend is added up when nothing changes")
		idleThreshold      = flag.Float64("idle-utilization-threshold", fleet.DefaultIdleThresholdPercent, "GPU utilization (percent, mean over the node agent's window) below which a held GPU counts as idle")
		idleWindow         = flag.Duration("idle-window", fleet.DefaultIdleWindow, "how long a held GPU's utilization must stay below the threshold to count as idle")
		perGPUMetrics      = flag.Bool("per-gpu-metrics", false, "export chamber_gpu_state, one series per GPU (the node agent already exports per-GPU metrics)")
		reclaimInterval    = flag.Duration("idle-reclaim-interval", idlereclaim.DefaultInterval, "how often idle reclaim looks again at each workload holding GPUs (the policies are on pools and teams)")
		reclaimMinWait     = flag.Duration("idle-reclaim-min-wait", idlereclaim.DefaultMinWait, "how long a workload must have been without quota before idle reclaim counts it as waiting for GPUs (a requeued workload Kueue readmits at once is not)")
		reclaimMaxHold     = flag.Duration("idle-reclaim-max-hold", idlereclaim.DefaultMaxHold, "the longest a workload reclaimed for idling stays paused while others wait for its GPUs, at its first reclaim; doubles with each further one (up to 8x)")
		roomForBigJobs     = flag.Bool("room-for-big-jobs", true, "move lower-tier workloads off a node (with notice, only when they fit on other nodes' free GPUs) for a workload whose ClusterQueue has the quota but that finds no node with room (needs --admission-check)")
		roomMinWait        = flag.Duration("room-min-wait", room.DefaultMinWait, "how long a workload must have waited for a node before room is made for it")
		apiQPS             = flag.Float64("kube-api-qps", 300, "queries per second to the API server (Kueue's own default: its check round trips are on Kueue's admission path)")
		apiBurst           = flag.Int("kube-api-burst", 500, "burst of queries to the API server")
		admissionCheck     = flag.Bool("admission-check", true, "attach Chamber's admission check (placement on healthy GPUs, evictions) to every team's ClusterQueue")
		placementTimeout   = flag.Duration("placement-timeout", admission.DefaultPlacementTimeout, "how long a workload with reserved quota waits for healthy GPUs before its quota goes back to the queue")
		gracePeriod        = flag.Duration("eviction-grace-period", admission.DefaultGracePeriod, "how long the pods of a workload Chamber evicts have to checkpoint, unless its pool or team says otherwise")
		podGrace           = flag.Bool("pod-grace-from-eviction-policy", true, "give pods created in a team's namespaces at least the team's eviction grace period as terminationGracePeriodSeconds (a MutatingAdmissionPolicy per team), so that Kueue's preemptions leave them time to checkpoint")
		isolationRate      = flag.Float64("isolation-rate-limit", isolation.DefaultRateLimit, "how many nodes per second fault isolation may isolate, fleet-wide, once its burst is spent")
		isolationBurst     = flag.Int("isolation-rate-burst", isolation.DefaultRateBurst, "how many nodes fault isolation may isolate at once before the rate limit applies")
		silentAfter        = flag.Int("silent-after-heartbeats", chamber.SilentAfterHeartbeats, "missed node agent heartbeats (counted on the controller's clock) after which every controller takes the agent for silent: its GPUs' health is Unknown (never a reason to isolate) and their utilization unread (never a reason to reclaim)")
		isolationGrace     = flag.Duration("isolation-eviction-grace-period", 0, "checkpoint grace period of workloads on failed GPUs (0: at once; a failed GPU cannot checkpoint); workloads on the healthy GPUs of an isolated node keep their team's")
		isolationDrain     = flag.Duration("isolation-drain-timeout", isolation.DefaultDrainTimeout, "how long workloads on the healthy GPUs of a node isolated at node level run on (the node drains) before they are evicted with their team's grace, so the node can be rebooted for its repair; negative: never")
		isolationHoldNS    = flag.String("isolation-hold-namespace", isolation.DefaultHoldNamespace, "namespace of the pods that hold failing GPUs under GPU-level isolation")
	)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	cfg := controllers.DefaultConfig()
	tiers, err := chamberkueue.ParsePriorityTiers(*priorityTiers)
	if err != nil {
		fail("--priority-tiers: %v", err)
	}
	cfg.PriorityTiers = tiers
	if *accountingInterval < time.Second {
		fail("--accounting-interval must be at least 1s, got %s", *accountingInterval)
	}
	cfg.AccountingInterval = *accountingInterval
	if *idleThreshold <= 0 || *idleThreshold > 100 {
		fail("--idle-utilization-threshold must be above 0 and at most 100 (percent), got %v", *idleThreshold)
	}
	if *idleWindow < time.Second {
		fail("--idle-window must be at least 1s, got %s", *idleWindow)
	}
	cfg.Inventory.Fleet.IdleThresholdPercent = *idleThreshold
	cfg.Inventory.Fleet.IdleWindow = *idleWindow
	cfg.Inventory.PerGPUMetrics = *perGPUMetrics
	if *reclaimInterval < time.Second {
		fail("--idle-reclaim-interval must be at least 1s, got %s", *reclaimInterval)
	}
	cfg.IdleReclaim.Interval = *reclaimInterval
	if *reclaimMaxHold < time.Second {
		fail("--idle-reclaim-max-hold must be at least 1s, got %s", *reclaimMaxHold)
	}
	cfg.IdleReclaim.MaxHold = *reclaimMaxHold
	if *reclaimMinWait < 0 {
		fail("--idle-reclaim-min-wait must not be negative, got %s", *reclaimMinWait)
	}
	cfg.IdleReclaim.MinWait = *reclaimMinWait
	if *placementTimeout < time.Second {
		fail("--placement-timeout must be at least 1s, got %s", *placementTimeout)
	}
	if *gracePeriod < 0 {
		fail("--eviction-grace-period must not be negative, got %s", *gracePeriod)
	}
	cfg.AdmissionCheck = *admissionCheck
	if *roomMinWait < 0 {
		fail("--room-min-wait must not be negative, got %s", *roomMinWait)
	}
	cfg.RoomForBigJobs, cfg.Room.MinWait = *roomForBigJobs, *roomMinWait
	if *silentAfter < 1 {
		fail("--silent-after-heartbeats must be at least 1, got %d", *silentAfter)
	}
	cfg.SilentAfterHeartbeats = *silentAfter
	if *isolationRate <= 0 || *isolationBurst < 1 || *isolationGrace < 0 {
		fail("--isolation-rate-limit must be positive, --isolation-rate-burst at least 1, --isolation-eviction-grace-period not negative")
	}
	cfg.Isolation = isolation.Options{RateLimit: *isolationRate, RateBurst: *isolationBurst,
		EvictionGracePeriod: *isolationGrace, HoldNamespace: *isolationHoldNS, DrainTimeout: *isolationDrain}
	cfg.Admission.PlacementTimeout = *placementTimeout
	cfg.Admission.GracePeriod = *gracePeriod
	cfg.PodGracePeriods = *podGrace

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kueue.AddToScheme(scheme))
	utilruntime.Must(chamber.AddToScheme(scheme))

	if *apiQPS <= 0 || *apiBurst < 1 {
		fail("--kube-api-qps must be positive and --kube-api-burst at least 1, got %v and %d", *apiQPS, *apiBurst)
	}
	kube := ctrl.GetConfigOrDie()
	kube.QPS, kube.Burst = float32(*apiQPS), *apiBurst
	mgr, err := ctrl.NewManager(kube, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   controllers.CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "chamber-controller.chamber.dev",
		LeaderElectionNamespace: *leaderElectionNS,
	})
	if err != nil {
		fail("create manager: %v", err)
	}
	if name, err := controllers.Setup(mgr, cfg); err != nil {
		fail("set up controller %s: %v", name, err)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	synced := controllers.NewCachesSynced(mgr.GetCache())
	utilruntime.Must(mgr.Add(synced))
	utilruntime.Must(mgr.AddReadyzCheck("caches-synced", synced.Check))
	log.Info("starting", "priorityTiers", *priorityTiers, "accountingInterval", cfg.AccountingInterval,
		"idleThresholdPercent", *idleThreshold, "idleWindow", *idleWindow, "perGPUMetrics", *perGPUMetrics,
		"admissionCheck", *admissionCheck, "placementTimeout", *placementTimeout, "evictionGracePeriod", *gracePeriod)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fail("run manager: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chamber-controller: "+format+"\n", args...)
	os.Exit(1)
}
