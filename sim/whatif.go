package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// TeamsFile is the report folder's file of each policy's per-team figures (teams.json).
const TeamsFile = "teams.json"

// AllTeams is the row of TeamFigures that adds up every team.
const AllTeams = "(all)"

// TeamFigures are one team's figures in one run, in simulated time; NaN waits (no job
// ran) are written as null.
type TeamFigures struct {
	Jobs int `json:"jobs"`
	// WaitP50Hours and WaitP99Hours are percentiles of the time to first run.
	WaitP50Hours *float64 `json:"waitP50Hours"`
	WaitP99Hours *float64 `json:"waitP99Hours"`
	GPUHours     float64  `json:"gpuHours"`
	IdleGPUHours float64  `json:"idleGPUHours"`
	Cost         float64  `json:"cost"`
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// teamFigures are the result's per-team figures, with the AllTeams row.
func teamFigures(r Result) map[string]TeamFigures {
	out := map[string]TeamFigures{AllTeams: {Jobs: r.Jobs, WaitP50Hours: finite(Percentile(r.Waits[""], 50)),
		WaitP99Hours: finite(Percentile(r.Waits[""], 99)), GPUHours: r.AllocatedGPUHours, IdleGPUHours: r.IdleGPUHours, Cost: r.Cost}}
	for name, t := range r.Teams {
		out[name] = TeamFigures{Jobs: t.Jobs, WaitP50Hours: finite(Percentile(t.Waits, 50)), WaitP99Hours: finite(Percentile(t.Waits, 99)),
			GPUHours: t.AllocatedGPUHours, IdleGPUHours: t.IdleGPUHours, Cost: t.Cost}
	}
	return out
}

func writeTeams(dir string, results []Result) error {
	out := map[Policy]map[string]TeamFigures{}
	for _, r := range results {
		out[r.Policy] = teamFigures(r)
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, TeamsFile), data, 0o644)
}

// ReadTeams reads the per-team figures a run wrote into its report folder.
func ReadTeams(dir string) (map[Policy]map[string]TeamFigures, error) {
	data, err := os.ReadFile(filepath.Join(dir, TeamsFile))
	if err != nil {
		return nil, fmt.Errorf("read the per-team figures: %w (give a report folder of chamber sim)", err)
	}
	var out map[Policy]map[string]TeamFigures
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, TeamsFile), err)
	}
	return out, nil
}

// WhatIfTable is the what-if question's answer as a Markdown table: each team's
// wait (p50, p99), idle GPU-hours, GPU-hours and cost before and after, the teams
// first by name and the sum of all last.
func WhatIfTable(before, after map[string]TeamFigures) string {
	var b strings.Builder
	t := table{&b}
	t.header("team", "jobs", "wait p50 (h)", "wait p99 (h)", "idle GPU-h", "GPU-h", "cost")
	hours := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f", *v)
	}
	change := func(a, b string) string {
		if a == b {
			return a
		}
		return a + " → " + b
	}
	var teams []string
	for name := range before {
		if name != AllTeams {
			teams = append(teams, name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok && name != AllTeams {
			teams = append(teams, name)
		}
	}
	teams = append(sortedKeys(setOf(teams)), AllTeams)
	for _, name := range teams {
		x, y := before[name], after[name]
		t.row(name, change(fmt.Sprint(x.Jobs), fmt.Sprint(y.Jobs)),
			change(hours(x.WaitP50Hours), hours(y.WaitP50Hours)), change(hours(x.WaitP99Hours), hours(y.WaitP99Hours)),
			change(fmt.Sprintf("%.1f", x.IdleGPUHours), fmt.Sprintf("%.1f", y.IdleGPUHours)),
			change(fmt.Sprintf("%.1f", x.GPUHours), fmt.Sprintf("%.1f", y.GPUHours)),
			change(fmt.Sprintf("%.2f", x.Cost), fmt.Sprintf("%.2f", y.Cost)))
	}
	return b.String()
}

func setOf(names []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}
