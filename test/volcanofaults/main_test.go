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
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if err == nil {
		err = grantVolcano(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Chamber's controllers as chamber-controller runs them where the API server
	// serves Volcano and not Kueue, as the chart's ServiceAccount.
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

// volcanoRules are the rules chamber-controller needs on Volcano's API, beyond those
// the chart grants today: it reads Volcano Jobs and writes their annotations (the
// restart's and the pause's requests and records), creates the Commands that restart,
// pause and resume them, and reads the PodGroups that wait.
var volcanoRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"batch.volcano.sh"}, Resources: []string{"jobs"}, Verbs: []string{"get", "list", "watch", "patch"}},
	{APIGroups: []string{"bus.volcano.sh"}, Resources: []string{"commands"}, Verbs: []string{"get", "create"}},
	{APIGroups: []string{"scheduling.volcano.sh"}, Resources: []string{"podgroups"}, Verbs: []string{"get", "list", "watch"}},
}

// grantVolcano binds volcanoRules to the chart's controller ServiceAccount, until the
// chart has them.
func grantVolcano(ctx context.Context) error {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "chamber-controller-volcano"}, Rules: volcanoRules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "chamber-controller-volcano"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: controlplane.ChartNamespace, Name: controlplane.ControllerAccount}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			return fmt.Errorf("grant chamber-controller Volcano's API: %w", err)
		}
	}
	return nil
}
