package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"chamber.dev/chamber/controllers/history"
)

// exportTraceCommand is `kubectl chamber export-trace`: the job history
// chamber-controller recorded, as the simulator's trace CSV.
func (o *options) exportTraceCommand() *cobra.Command {
	var file, since, until string
	var hashTeams bool
	var scale float64
	cmd := &cobra.Command{
		Use:   "export-trace",
		Short: "Write the finished jobs chamber-controller recorded as a trace for `chamber sim --trace`",
		Long: "Write the finished Kueue workloads chamber-controller recorded (its job history, ConfigMaps chamber-history-<n>\n" +
			"in its namespace, -n, chamber-system when not given) as the simulator's trace CSV:\n" +
			"job_id,submit_s,duration_s,gpus,gpu_type,user,gpu_util_pct, submissions from the first kept one, durations\n" +
			"the GPU time each job held over its GPUs (from its first quota reservation to its finish where that is unknown),\n" +
			"user its team. Needs list on ConfigMaps there.",
		Example: "  kubectl chamber export-trace -f trace.csv\n" +
			"  kubectl chamber export-trace --since 168h --hash-teams > last-week.csv\n" +
			"  chamber sim --trace trace.csv --start 0 --window 0 --keep 1 --max-duration 0 --nodes 16xdgxh100 --out before\n" +
			"  chamber sim --trace trace.csv --start 0 --window 0 --keep 1 --max-duration 0 --nodes 18xdgxh100 --out after\n" +
			"  chamber whatif --before before --after after",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := o.now()
			opts := history.TraceOptions{TimeScale: scale, HashTeams: hashTeams}
			var err error
			if opts.Since, err = parseWhen(since, now, "--since"); err != nil {
				return err
			}
			if opts.Until, err = parseWhen(until, now, "--until"); err != nil {
				return err
			}
			if scale <= 0 {
				return fmt.Errorf("--time-scale %g: want a positive number (1: the clock's own times)", scale)
			}
			ns := o.overrides.Context.Namespace
			if ns == "" {
				ns = history.DefaultNamespace
			}
			c, err := o.newClient()
			if err != nil {
				return err
			}
			ctx, cancel := o.context(cmd)
			defer cancel()
			jobs, err := history.Read(ctx, c, ns)
			if err != nil {
				return fmt.Errorf("%w (give chamber-controller's namespace with -n)", err)
			}
			if len(jobs) == 0 {
				return fmt.Errorf("no job history in namespace %s: give chamber-controller's namespace with -n, or wait for workloads to finish (chamber-controller --history-jobs must not be 0)", ns)
			}
			var out io.Writer = o.streams.Out
			if file != "" {
				f, err := os.Create(file)
				if err != nil {
					return fmt.Errorf("-f: %w", err)
				}
				defer f.Close()
				out = f
			}
			n, err := history.WriteTrace(out, jobs, opts)
			if err != nil {
				return err
			}
			if file != "" {
				fmt.Fprintf(o.streams.ErrOut, "wrote %d of %d recorded jobs to %s\n", n, len(jobs), file)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "write the trace to this file (default: standard output)")
	cmd.Flags().BoolVar(&hashTeams, "hash-teams", false, "write each team and job name as a stable hash of it (the same name, the same hash), to share a trace without them")
	cmd.Flags().StringVar(&since, "since", "", "keep jobs submitted at or after this: an RFC 3339 time, or a duration before now (e.g. 168h)")
	cmd.Flags().StringVar(&until, "until", "", "keep jobs submitted before this: an RFC 3339 time, or a duration before now")
	cmd.Flags().Float64Var(&scale, "time-scale", 1, "multiply every time by this: a run of the simulator at a speed-up recorded clock times, and --time-scale <speed-up> turns them back into trace time")
	return cmd
}

// parseWhen reads --since or --until: an RFC 3339 time, or a duration before now;
// empty is no bound.
func parseWhen(s string, now time.Time, flag string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time (2026-12-01T00:00:00Z) or a duration before now (168h)", flag, s)
}
