package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"chamber.dev/chamber/controllers/uninstall"
)

func (o *options) uninstallCommand() *cobra.Command {
	var dryRun, keepFaulty bool
	var controllers []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Hand the cluster back as Kueue alone would have it, before Chamber is removed: stop chamber-controller, lift its taints and cordons, resume what it paused, keep the Kueue objects its Teams compiled",
		Long: "Hand the cluster back as Kueue alone would have it, before Chamber is removed (helm uninstall's pre-delete hook does the\n" +
			"same). It scales chamber-controller to 0 and waits for it to stop, then lifts Chamber's taints and the cordons it made\n" +
			"(never an operator's), deletes its GPU hold pods, MutatingAdmissionPolicies and admission check (taken off every\n" +
			"ClusterQueue first), resumes the workloads it paused, withdraws its eviction requests and notices, gives each team's\n" +
			"ClusterQueue the quota its Team declares, and drops the ownerReferences that would delete the ClusterQueues,\n" +
			"LocalQueues, Cohorts, ResourceFlavors and Topologies with their Teams and GPUPools. It deletes no Job and no\n" +
			"Workload, keeps Chamber's CRDs and objects, and can be run again. --dry-run lists what it would change.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			c, err := o.newClient()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(log.IntoContext(cmd.Context(), logr.Discard()), timeout)
			defer cancel()
			opts := uninstall.Options{DryRun: dryRun, KeepFaultyCordoned: keepFaulty, StopTimeout: timeout / 2}
			if len(controllers) == 0 {
				if opts.Controllers, err = uninstall.FindControllers(ctx, c); err != nil {
					return fmt.Errorf("%w (or name it: --controller NAMESPACE/NAME)", err)
				}
			}
			for _, s := range controllers {
				key, err := parseNamespacedName("--controller", s, "chamber-controller's Deployment")
				if err != nil {
					return err
				}
				opts.Controllers = append(opts.Controllers, key)
			}
			report, err := uninstall.HandBack(ctx, c, opts)
			if done, serr := o.structured(report); done {
				return errors.Join(err, serr)
			}
			return errors.Join(report.Print(o.streams.Out), err)
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "change nothing: list what uninstall would change")
	cmd.Flags().BoolVar(&keepFaulty, "keep-faulty-nodes-cordoned", false, "keep cordoned the nodes Chamber isolated for a hardware fault (the cordon becomes yours)")
	cmd.Flags().StringSliceVar(&controllers, "controller", nil, "chamber-controller's Deployment, NAMESPACE/NAME, scaled to 0 first (default: those the Helm chart installed, found by their labels)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long uninstall may take, half of it to wait for chamber-controller to stop")
	return cmd
}
