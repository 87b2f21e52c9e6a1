// Command chamber-controller runs Chamber's controllers (the list is
// controllers.Setup): GPU pools and teams compiled into Kueue or Volcano objects,
// budgets, the fleet inventory with its metrics and fleet page, the admission check
// and MultiKueue dispatcher, fault isolation, idle reclaim, room for big jobs, the
// resumption of stalled Volcano Jobs and the DCGM source. Its flags are in
// controllers/options. `chamber-controller uninstall` hands the cluster back as Kueue
// alone would have it, before Chamber is removed (the chart's pre-delete hook).
package main

import (
	"flag"
	"fmt"
	"os"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/options"
	"chamber.dev/chamber/controllers/team"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
	"chamber.dev/chamber/integrations/volcano"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "uninstall" {
		// The Helm chart's pre-delete hook (uninstall.go).
		if err := runUninstall(os.Args[2:]); err != nil {
			fail("uninstall: %v", err)
		}
		return
	}
	o := options.New()
	o.AddFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	if err := o.Parse(flag.CommandLine, os.Args[1:]); err != nil {
		fail("%v", err)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	cfg := o.Controllers

	scheme := chamberkueue.NewScheme()

	kube := ctrl.GetConfigOrDie()
	kube.QPS, kube.Burst = float32(o.APIQPS), o.APIBurst
	if !cfg.MonitoringOnly {
		// Without Kueue or Volcano, Chamber is monitoring: the first step, before
		// anyone changes how jobs are queued.
		dc, err := discovery.NewDiscoveryClientForConfig(kube)
		if err != nil {
			fail("discovery client: %v", err)
		}
		kueueServed, err := chamberkueue.Served(dc)
		if err != nil {
			fail("ask the API server whether it serves Kueue's API: %v", err)
		}
		if cfg.Volcano, err = volcano.Served(dc); err != nil {
			fail("ask the API server whether it serves Volcano's API: %v", err)
		}
		cfg.WithoutKueue = !kueueServed
		switch {
		case !kueueServed && !cfg.Volcano:
			log.Info("The API server serves neither Kueue's API (kueue.x-k8s.io/v1beta2) nor Volcano's (scheduling.volcano.sh/v1beta1, batch.volcano.sh/v1alpha1, bus.volcano.sh/v1alpha1): running as monitoring only; install Kueue or Volcano and restart for teams, pools, placement and fault isolation")
			cfg.MonitoringOnly = true
		case !kueueServed:
			log.Info("The API server does not serve Kueue's API (kueue.x-k8s.io/v1beta2): Chamber works through Volcano alone")
		}
		if cfg.PolicyAPI, err = team.ServedPolicyAPI(dc); err != nil {
			fail("ask the API server whether it serves MutatingAdmissionPolicies: %v", err)
		}
		if cfg.PodGracePeriods && cfg.PolicyAPI == team.PolicyNotServed {
			log.Info("The API server serves MutatingAdmissionPolicies neither in admissionregistration.k8s.io/v1 (Kubernetes 1.36+) nor v1beta1 (1.34-1.35 with the feature gate and API turned on): " +
				"pods keep their own terminationGracePeriodSeconds when Kueue or Volcano preempts them; each team's PodGrace condition says so")
		}
	}
	mgr, err := ctrl.NewManager(kube, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   controllers.CacheOptions(),
		Metrics:                 o.MetricsServer(),
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "chamber-controller.chamber.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
	})
	if err != nil {
		fail("create manager: %v", err)
	}
	if name, err := controllers.Setup(mgr, cfg); err != nil {
		fail("set up controller %s: %v", name, err)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddHealthzCheck("workers", controllers.NewStuckWorkers(metrics.Registry, o.StuckAfter, clock.RealClock{}).Check))
	synced := controllers.NewCachesSynced(mgr.GetCache())
	utilruntime.Must(mgr.Add(synced))
	utilruntime.Must(mgr.AddReadyzCheck("caches-synced", synced.Check))
	log.Info("starting", "priorityTiers", cfg.PriorityTiers, "accountingInterval", cfg.AccountingInterval,
		"idleThresholdPercent", cfg.Inventory.Fleet.IdleThresholdPercent, "idleWindow", cfg.Inventory.Fleet.IdleWindow,
		"perGPUMetrics", cfg.Inventory.PerGPUMetrics, "admissionCheck", cfg.AdmissionCheck,
		"placementTimeout", cfg.Admission.PlacementTimeout, "evictionGracePeriod", cfg.Admission.GracePeriod,
		"monitoringOnly", cfg.MonitoringOnly, "mutatingAdmissionPolicies", cfg.PolicyAPI, "kueue", !cfg.WithoutKueue, "volcano", cfg.Volcano, "dcgmPrometheus", cfg.DCGM.PrometheusURL)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fail("run manager: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chamber-controller: "+format+"\n", args...)
	os.Exit(1)
}
