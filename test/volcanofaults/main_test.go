// Package volcanofaults tests Chamber's fault isolation for Volcano users on the local
// control plane: the real vc-scheduler and vc-controller-manager, kwok GPU nodes, node
// agents on go-nvml's fake GPUs, and Chamber's controllers in-process as they run on
// a cluster with Volcano and without Kueue.
package volcanofaults

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/controllers/controllertest"
	"chamber.dev/chamber/test/controlplane"
)

var (
	cp  *controlplane.ControlPlane
	k8s client.Client
)

// resyncAfter is how long Chamber leaves a stalled Volcano Job to Volcano.
const resyncAfter = 2 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipped: starts a control plane")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl.SetLogger(logr.Discard())
	if os.Getenv("CHAMBER_TEST_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	// kube-controller-manager removes the not-ready taint of new nodes; kwok runs the
	// pods; vc-scheduler places them (no kube-scheduler, no Kueue).
	var err error
	cp, err = controlplane.Start(ctx, controlplane.Options{ControllerManager: true, Kwok: true, Volcano: true, ChamberCRDs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	if k8s, err = cp.Client(); err == nil {
		err = cp.InstallChartRBAC(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Chamber's controllers as chamber-controller runs them where the API server
	// serves Volcano and not Kueue, as the chart's ServiceAccount: a rule missing
	// from the chart fails the tests.
	kube := controlplane.AsServiceAccount(cp.Config, controlplane.ChartNamespace, controlplane.ControllerAccount, "")
	kube.QPS, kube.Burst = 300, 500
	mgr, err := ctrl.NewManager(kube, ctrl.Options{Scheme: controlplane.Scheme, Cache: controllers.CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := controllers.DefaultConfig()
	cfg.WithoutKueue, cfg.Volcano = true, true
	// Idle reclaim looks every second and counts a PodGroup waiting for 2 s.
	cfg.IdleReclaim.Interval, cfg.IdleReclaim.MinWait = time.Second, 2*time.Second
	// A pod that lets its notice run out is stopped within a second or two.
	cfg.Admission.AfterNotice = time.Second
	// A Job stalled for 2 s is resumed.
	cfg.Resync.After = resyncAfter
	if name, err := controllers.Setup(mgr, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "set up controller %s: %v\n", name, err)
		return 1
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	controllertest.Config = cp.Config // for RunAgent
	return m.Run()
}
