package main

import (
	"flag"
	"fmt"
	"os"

	"chamber.dev/chamber/sim"
)

// runWhatIf is `chamber whatif`: two replays of one trace (the recorded fleet, then the
// changed one) side by side, each team's figures before and after.
func runWhatIf(args []string) error {
	fs := flag.NewFlagSet("whatif", flag.ExitOnError)
	before := fs.String("before", "", "report folder of the replay on the fleet as it is (chamber sim --trace ... --out)")
	after := fs.String("after", "", "report folder of the replay of the same trace on the changed fleet (another --nodes, the same other flags)")
	policy := fs.String("policy", string(sim.PolicyChamber), "the policy whose figures are compared (both replays must have run it)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: chamber whatif --before <report folder> --after <report folder> [--policy chamber]\n\n"+
			"Each team's wait (p50, p99), idle GPU-hours, GPU-hours and cost in two replays of one trace, as a Markdown table.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *before == "" || *after == "" {
		fs.Usage()
		return fmt.Errorf("give both --before and --after")
	}
	figures := make([]map[string]sim.TeamFigures, 2)
	for i, dir := range []string{*before, *after} {
		teams, err := sim.ReadTeams(dir)
		if err != nil {
			return err
		}
		f, ok := teams[sim.Policy(*policy)]
		if !ok {
			return fmt.Errorf("%s has no figures of policy %s: give --policy one its replay ran", dir, *policy)
		}
		figures[i] = f
	}
	fmt.Fprintf(os.Stdout, "Policy %s; before: %s, after: %s (simulated hours; cost at the replays' --price)\n\n", *policy, *before, *after)
	fmt.Fprint(os.Stdout, sim.WhatIfTable(figures[0], figures[1]))
	return nil
}
