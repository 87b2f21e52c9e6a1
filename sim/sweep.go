package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// FiguresFile holds a run's headline figures per policy (JSON), beside its report, for
// a sweep to gather.
const FiguresFile = "figures.json"

// SummaryFile is a sweep's summary, in the sweep's folder.
const SummaryFile = "summary.md"

// Figure is one headline figure of a run: what the goals and the summary compare.
type Figure struct {
	Name string
	// Unit is shown after the value; Decimals how many are shown.
	Unit     string
	Decimals int
	value    func(r Result) float64
}

// Figures are the headline figures, in the summary's order.
var Figures = []Figure{
	{"idle-but-allocated GPU-hours", "", 0, func(r Result) float64 { return r.IdleGPUHours }},
	{"idle GPU-hours while jobs queued", "", 1, func(r Result) float64 { return r.IdleWhileQueued }},
	{"idle GPU-hours of interactive sessions", "", 1, func(r Result) float64 { return r.IdleByKind[KindInteractive] }},
	{"idle GPU-hours of stuck jobs", "", 1, func(r Result) float64 { return r.IdleByKind[KindStuck] }},
	{"idle GPU-hours of training jobs", "", 1, func(r Result) float64 { return r.IdleByKind[KindTraining] }},
	{"allocated GPU-hours", "", 0, func(r Result) float64 { return r.AllocatedGPUHours }},
	{"production wait p99", " min", 0, func(r Result) float64 { return waitMinutes(r, TierProduction, 99) }},
	{"standard wait p50", " min", 1, func(r Result) float64 { return waitMinutes(r, TierStandard, 50) }},
	{"preemptible wait p50", " min", 1, func(r Result) float64 { return waitMinutes(r, TierPreemptible, 50) }},
	{"all jobs wait p99", " min", 0, func(r Result) float64 { return waitMinutes(r, "", 99) }},
	{"makespan", " h", 2, func(r Result) float64 { return r.Makespan.Hours() }},
	{"cost", " $", 0, func(r Result) float64 { return r.Cost }},
	{"work lost to evictions, % of useful work", "%", 2, func(r Result) float64 { return 100 * ratio(r.LostToEvictions, r.UsefulWork) }},
	{"work lost to faults, % of useful work", "%", 2, func(r Result) float64 { return 100 * ratio(r.LostToFaults, r.UsefulWork) }},
	{"jobs lost", "", 0, func(r Result) float64 { return float64(r.Lost) }},
	{"jobs unfinished", "", 0, func(r Result) float64 { return float64(r.Unfinished) }},
	{"GPU-time free while a queued job fit", "%", 2, func(r Result) float64 { return 100 * r.FreeWhileFits }},
	{"of it, held by Kueue for admitted jobs not running", "%", 2, func(r Result) float64 { return 100 * r.FreeReserved }},
	{"of it, on nodes that took no new pod", "%", 2, func(r Result) float64 { return 100 * r.FreeOutOfService }},
	{"GPU allocation while jobs are queued", "%", 1, func(r Result) float64 { return 100 * r.AllocWhileWaiting }},
	{"pods evicted or preempted", "", 0, func(r Result) float64 { return float64(r.Evictions) }},
}

func waitMinutes(r Result, tier string, p float64) float64 {
	return Percentile(r.Waits[tier], p) * 60
}

// writeFigures writes each policy's figures as JSON (figures that are undefined,
// such as a tier's wait with no job of the tier, are left out).
func writeFigures(dir string, results []Result) error {
	out := map[Policy]map[string]float64{}
	for _, r := range results {
		m := map[string]float64{}
		for _, f := range Figures {
			if v := f.value(r); !math.IsNaN(v) && !math.IsInf(v, 0) {
				m[f.Name] = v
			}
		}
		out[r.Policy] = m
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, FiguresFile), data, 0o644)
}

// SweepRun is one run of a sweep: its label (slice and seed), the folder of its report,
// and its figures by policy.
type SweepRun struct {
	Label, Dir string
	Figures    map[Policy]map[string]float64
}

// ReadSweepRun reads the figures a run wrote into dir.
func ReadSweepRun(label, dir string) (SweepRun, error) {
	data, err := os.ReadFile(filepath.Join(dir, FiguresFile))
	if err != nil {
		return SweepRun{}, fmt.Errorf("read the figures of run %s: %w", label, err)
	}
	run := SweepRun{Label: label, Dir: dir}
	if err := json.Unmarshal(data, &run.Figures); err != nil {
		return SweepRun{}, fmt.Errorf("read the figures of run %s: %w", label, err)
	}
	return run, nil
}

// Goal is one of issue 13's goals for Kueue + Chamber against Kueue alone, on the
// sweep's means.
type Goal struct {
	Text string
	Met  func(kueue, chamber map[string]float64) (bool, string)
}

// Goals are checked in the summary when both Kueue and Chamber ran, and when both
// Volcano and Volcano + Chamber ran (against Volcano alone).
var Goals = []Goal{
	{"idle-but-allocated GPU-hours at most 0.5x Kueue's", func(k, c map[string]float64) (bool, string) {
		x := c["idle-but-allocated GPU-hours"] / k["idle-but-allocated GPU-hours"]
		return x <= 0.5, fmt.Sprintf("%.2fx", x)
	}},
	{"production wait p99 at most 1/3 of Kueue's", func(k, c map[string]float64) (bool, string) {
		x := c["production wait p99"] / k["production wait p99"]
		return x <= 1.0/3, fmt.Sprintf("%.2fx", x)
	}},
	{"standard and preemptible wait p50 no worse than Kueue's + 1 min", func(k, c map[string]float64) (bool, string) {
		ds := c["standard wait p50"] - k["standard wait p50"]
		dp := c["preemptible wait p50"] - k["preemptible wait p50"]
		return ds <= 1 && dp <= 1, fmt.Sprintf("%+.1f min / %+.1f min", ds, dp)
	}},
	{"makespan no higher", func(k, c map[string]float64) (bool, string) {
		x := c["makespan"] / k["makespan"]
		return x <= 1, fmt.Sprintf("%.3fx", x)
	}},
	{"cost no higher", func(k, c map[string]float64) (bool, string) {
		x := c["cost"] / k["cost"]
		return x <= 1, fmt.Sprintf("%.3fx", x)
	}},
	{"jobs lost 0", func(_, c map[string]float64) (bool, string) {
		return c["jobs lost"] == 0, fmt.Sprintf("%.1f", c["jobs lost"])
	}},
	{"work lost to evictions at most 2% of useful work", func(_, c map[string]float64) (bool, string) {
		v := c["work lost to evictions, % of useful work"]
		return v <= 2, fmt.Sprintf("%.2f%%", v)
	}},
	{"GPU-time free while a queued job fit at most 3%", func(_, c map[string]float64) (bool, string) {
		v := c["GPU-time free while a queued job fit"]
		return v <= 3, fmt.Sprintf("%.2f%% (%.2f%% held by Kueue for admitted jobs not running)", v, c["of it, held by Kueue for admitted jobs not running"])
	}},
}

// WriteSummary writes the sweep's summary into dir: each figure's mean and spread
// (sample standard deviation) per policy over the runs, each run's values, and the
// goals against Kueue alone. It returns the summary's path.
func WriteSummary(dir string, policies []Policy, runs []SweepRun, describe []Param) (string, error) {
	var b strings.Builder
	t := table{&b}
	fmt.Fprintf(&b, "# Chamber fleet simulator: sweep of %d runs\n\n", len(runs))
	b.WriteString("Each run replays one slice of the trace with one seed (tiers, utilization, job kinds and faults " +
		"drawn from it) under each policy; each run's own report is in its folder. Mean ± sample standard deviation over the runs.\n\n")
	t.header("parameter", "value")
	for _, p := range describe {
		t.row(p.Name, p.Value)
	}
	var labels []string
	for _, r := range runs {
		labels = append(labels, fmt.Sprintf("[%s](%s/%s)", r.Label, filepath.Base(r.Dir), ReportFile))
	}
	t.row("runs", strings.Join(labels, ", "))

	means := map[Policy]map[string]float64{}
	b.WriteString("\n## Mean and spread\n\n")
	head := []string{"figure"}
	for _, p := range policies {
		head = append(head, p.Title())
	}
	t.header(head...)
	for _, f := range Figures {
		cells := []string{f.Name}
		for _, p := range policies {
			var vs []float64
			for _, r := range runs {
				if v, ok := r.Figures[p][f.Name]; ok {
					vs = append(vs, v)
				}
			}
			m, sd := meanSD(vs)
			if means[p] == nil {
				means[p] = map[string]float64{}
			}
			means[p][f.Name] = m
			cells = append(cells, fmt.Sprintf("%s ± %s%s", num(m, f.Decimals), num(sd, f.Decimals), f.Unit))
		}
		t.row(cells...)
	}

	// Each policy with Chamber against the same scheduler alone: Kueue + Chamber
	// against Kueue, Volcano + Chamber against Volcano.
	for _, p := range policies {
		base, ok := p.Baseline()
		if !ok || means[base] == nil || means[p] == nil {
			continue
		}
		fmt.Fprintf(&b, "\n## Goals of %s against %s alone (on the means)\n\n", p.Title(), base.Title())
		t.header("goal", p.Title(), "met")
		for _, g := range Goals {
			ok, v := g.Met(means[base], means[p])
			// The goals are issue 13's, against Kueue alone; the same bars against Volcano alone.
			text := strings.ReplaceAll(g.Text, "Kueue's", base.Scheduler()+"'s")
			t.row(text, v, map[bool]string{true: "yes", false: "**no**"}[ok])
		}
	}

	b.WriteString("\n## Each run\n\n")
	head = []string{"figure", "policy"}
	for _, r := range runs {
		head = append(head, r.Label)
	}
	t.header(head...)
	for _, f := range Figures {
		for _, p := range policies {
			cells := []string{f.Name, p.Title()}
			for _, r := range runs {
				v, ok := r.Figures[p][f.Name]
				cells = append(cells, map[bool]string{true: num(v, f.Decimals) + f.Unit, false: "-"}[ok])
			}
			t.row(cells...)
		}
	}
	path := filepath.Join(dir, SummaryFile)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("write the sweep's summary: %w", err)
	}
	return path, nil
}

// meanSD is the mean and sample standard deviation of vs; NaN where undefined.
func meanSD(vs []float64) (float64, float64) {
	if len(vs) == 0 {
		return math.NaN(), math.NaN()
	}
	var sum float64
	for _, v := range vs {
		sum += v
	}
	m := sum / float64(len(vs))
	if len(vs) < 2 {
		return m, math.NaN()
	}
	var sq float64
	for _, v := range vs {
		sq += (v - m) * (v - m)
	}
	return m, math.Sqrt(sq / float64(len(vs)-1))
}
