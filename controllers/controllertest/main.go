// Package controllertest runs Chamber's controllers in-process on the local control
// plane, for the integration tests of the controller packages.
package controllertest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"chamber.dev/chamber/controllers"
	"chamber.dev/chamber/test/controlplane"
)

// Config is the control plane's rest config once Main has started it, for tests
// that need their own informers or watches.
var Config *rest.Config

// Main starts a full control plane (Kueue, kube-scheduler, kwok, Chamber's CRDs),
// installs the Helm chart's RBAC and admission policies, runs every controller of
// controllers.Setup with cfg as the chart's controller ServiceAccount (a rule missing
// from the chart fails the tests), runs the package's tests with an admin client of
// the control plane in *k8s, and returns their exit code. Controller logs are
// discarded unless CHAMBER_TEST_LOGS is set.
func Main(m *testing.M, cfg controllers.Config, k8s *client.Client) int {
	return MainWith(m, controlplane.Full(), cfg, k8s)
}

// MainWith is Main on a control plane of the given components (one without Kueue, for
// monitoring only).
func MainWith(m *testing.M, plane controlplane.Options, cfg controllers.Config, k8s *client.Client) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl.SetLogger(logr.Discard())
	if os.Getenv("CHAMBER_TEST_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	}
	cp, c, err := StartWithChartRBAC(ctx, plane)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	// The API rates chamber-controller runs with (its --kube-api-qps and -burst).
	kube := controlplane.AsServiceAccount(cp.Config, controlplane.ChartNamespace, controlplane.ControllerAccount, "")
	kube.QPS, kube.Burst = 300, 500
	mgr, err := ctrl.NewManager(kube, ctrl.Options{Scheme: controlplane.Scheme, Cache: controllers.CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if name, err := controllers.Setup(mgr, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "set up controller %s: %v\n", name, err)
		return 1
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	*k8s = c
	Config = cp.Config
	return m.Run()
}

// MainForBinaries is Main for tests that run chamber-controller as a binary
// (cp.StartChamber) rather than in-process: it starts a full control plane with the
// Helm chart's RBAC and admission policies, sets Config for RunAgent, and runs the
// package's tests with the control plane in *cp and an admin client in *k8s.
func MainForBinaries(m *testing.M, cp **controlplane.ControlPlane, k8s *client.Client) int {
	return MainForBinariesWith(m, controlplane.Full(), cp, k8s)
}

// MainForBinariesWith is MainForBinaries on a control plane of the given options
// (another Kubernetes release, kube-apiserver flags).
func MainForBinariesWith(m *testing.M, plane controlplane.Options, cp **controlplane.ControlPlane, k8s *client.Client) int {
	started, c, err := StartWithChartRBAC(context.Background(), plane)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer started.Stop()
	*cp, *k8s, Config = started, c, started.Config
	return m.Run()
}

// StartWithChartRBAC starts a control plane of the given components and installs
// the chart's RBAC and admission policies; it returns an admin client. Nothing is
// left running on error; the caller stops the control plane.
func StartWithChartRBAC(ctx context.Context, plane controlplane.Options) (*controlplane.ControlPlane, client.Client, error) {
	cp, err := controlplane.Start(ctx, plane)
	if err != nil {
		return nil, nil, err
	}
	c, err := cp.Client()
	if err == nil {
		err = cp.InstallChartRBAC(ctx)
	}
	if err != nil {
		_ = cp.Stop()
		return nil, nil, err
	}
	return cp, c, nil
}
