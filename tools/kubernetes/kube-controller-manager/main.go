// Command kube-controller-manager is upstream's kube-controller-manager (the same
// app package, command and flags) with three flags more, the Job controller's timers
// that upstream fixes: its retry back-off after a pod failure (10 s doubling to 10
// minutes) and the period over which it batches a Job's pod events before it syncs
// the Job (1 s).
//
// Chamber's fleet simulator runs the control plane at a speed-up (120 simulated
// seconds per second of clock): an unscaled 10 s back-off would be 20 simulated
// minutes before a preempted, reclaimed or crashed job's pods come back, 40 after the
// second, and would weigh on whichever policy evicts more; an unscaled 1 s batch
// would keep a finished job's GPUs in Kueue's quota 2 simulated minutes after its
// pods succeeded. The simulator passes each divided by its speed-up, as it scales
// Chamber's own timers. Without the flags the binary is upstream's.
package main

import (
	"os"
	_ "time/tzdata" // for CronJob Time Zone support

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugin
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/pkg/controller/job"
)

func main() {
	command := app.NewControllerManagerCommand()
	flags := command.Flags()
	flags.DurationVar(&job.DefaultJobPodFailureBackOff, "job-pod-failure-backoff", job.DefaultJobPodFailureBackOff,
		"the Job controller's delay before it replaces a Job's failed pod, doubled with each further failure (Chamber's build; upstream fixes it)")
	flags.DurationVar(&job.MaxJobPodFailureBackOff, "job-pod-failure-max-backoff", job.MaxJobPodFailureBackOff,
		"the longest that delay grows (Chamber's build; upstream fixes it)")
	flags.DurationVar(&job.SyncJobBatchPeriod, "job-sync-batch-period", job.SyncJobBatchPeriod,
		"how long the Job controller gathers a Job's pod events before it syncs the Job (Chamber's build; upstream fixes it)")
	os.Exit(cli.Run(command))
}
