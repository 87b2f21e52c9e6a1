package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"chamber.dev/chamber/controllers/uninstall"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// runUninstall is `chamber-controller uninstall`, which the Helm chart's pre-delete
// hook runs (templates/uninstall-hook.yaml): it stops the release's controller and
// hands the cluster back as Kueue alone would have it (controllers/uninstall).
func runUninstall(args []string) error {
	fs := flag.NewFlagSet("chamber-controller uninstall", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig; in a pod, its ServiceAccount when empty")
	namespace := fs.String("namespace", "", "namespace of the controller Deployment")
	deployment := fs.String("controller-deployment", "", "chamber-controller's Deployment, scaled to 0 before anything is handed back (none: it is stopped already)")
	keepFaulty := fs.Bool("keep-faulty-nodes-cordoned", false, "keep cordoned the nodes Chamber isolated for a hardware fault, as the operator's cordon")
	dryRun := fs.Bool("dry-run", false, "change nothing; print what would change")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long the whole uninstall may take")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)

	var cfg *rest.Config
	var err error
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = ctrl.GetConfig()
	}
	if err != nil {
		return fmt.Errorf("connect to the API server: %w", err)
	}
	cfg.UserAgent = "chamber-controller-uninstall"
	c, err := client.New(cfg, client.Options{Scheme: chamberkueue.NewScheme()})
	if err != nil {
		return err
	}
	opts := uninstall.Options{KeepFaultyCordoned: *keepFaulty, DryRun: *dryRun, StopTimeout: *timeout / 2}
	if *deployment != "" {
		if *namespace == "" {
			return fmt.Errorf("--controller-deployment %s: --namespace is required with it", *deployment)
		}
		opts.Controllers = []types.NamespacedName{{Namespace: *namespace, Name: *deployment}}
	}
	ctx, cancel := context.WithTimeout(log.IntoContext(context.Background(), logger.WithName("uninstall")), *timeout)
	defer cancel()
	report, err := uninstall.HandBack(ctx, c, opts)
	if perr := report.Print(os.Stdout); perr != nil && err == nil {
		err = perr
	}
	return err
}
