package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
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
	// HigherIsBetter: the figure is better higher (allocation); all others lower.
	HigherIsBetter bool
	// Difference: paired runs are compared by their difference, not their ratio: a
	// share or a count that is often 0, or a wait whose goal is in minutes.
	Difference bool
	value      func(r Result) float64
}

// Figures are the headline figures, in the summary's order.
var Figures = []Figure{
	{Name: "idle-but-allocated GPU-hours", value: func(r Result) float64 { return r.IdleGPUHours }},
	{Name: "idle GPU-hours while jobs queued", Decimals: 1, value: func(r Result) float64 { return r.IdleWhileQueued }},
	{Name: "idle GPU-hours of interactive sessions", Decimals: 1, value: func(r Result) float64 { return r.IdleByKind[KindInteractive] }},
	{Name: "idle GPU-hours of stuck jobs", Decimals: 1, value: func(r Result) float64 { return r.IdleByKind[KindStuck] }},
	{Name: "idle GPU-hours of training jobs", Decimals: 1, value: func(r Result) float64 { return r.IdleByKind[KindTraining] }},
	{Name: "allocated GPU-hours", value: func(r Result) float64 { return r.AllocatedGPUHours }},
	{Name: "production total wait p99", Unit: " min", value: func(r Result) float64 { return minutesAt(r.TotalWaits, TierProduction, 99) }},
	{Name: "standard total wait p50", Unit: " min", Decimals: 1, Difference: true, value: func(r Result) float64 { return minutesAt(r.TotalWaits, TierStandard, 50) }},
	{Name: "preemptible total wait p50", Unit: " min", Decimals: 1, Difference: true, value: func(r Result) float64 { return minutesAt(r.TotalWaits, TierPreemptible, 50) }},
	{Name: "all jobs total wait p99", Unit: " min", value: func(r Result) float64 { return minutesAt(r.TotalWaits, "", 99) }},
	{Name: "production time to first run p99", Unit: " min", value: func(r Result) float64 { return minutesAt(r.Waits, TierProduction, 99) }},
	{Name: "standard time to first run p50", Unit: " min", Decimals: 1, Difference: true, value: func(r Result) float64 { return minutesAt(r.Waits, TierStandard, 50) }},
	{Name: "preemptible time to first run p50", Unit: " min", Decimals: 1, Difference: true, value: func(r Result) float64 { return minutesAt(r.Waits, TierPreemptible, 50) }},
	{Name: "makespan", Unit: " h", Decimals: 2, value: func(r Result) float64 { return r.Makespan.Hours() }},
	{Name: "cost", Unit: " $", value: func(r Result) float64 { return r.Cost }},
	{Name: "work lost to evictions and faults, % of useful work", Unit: "%", Decimals: 2, Difference: true, value: func(r Result) float64 {
		return 100 * ratio(r.LostToEvictions+r.LostToFaults, r.UsefulWork)
	}},
	{Name: "work lost to evictions, % of useful work", Unit: "%", Decimals: 2, Difference: true, value: func(r Result) float64 { return 100 * ratio(r.LostToEvictions, r.UsefulWork) }},
	{Name: "work lost to faults, % of useful work", Unit: "%", Decimals: 2, Difference: true, value: func(r Result) float64 { return 100 * ratio(r.LostToFaults, r.UsefulWork) }},
	{Name: "jobs lost", Difference: true, value: func(r Result) float64 { return float64(r.Lost) }},
	{Name: "jobs unfinished", Difference: true, value: func(r Result) float64 { return float64(r.Unfinished) }},
	{Name: "GPU-time free while a queued job fit", Unit: "%", Decimals: 2, Difference: true, value: func(r Result) float64 { return 100 * r.FreeWhileFits }},
	{Name: "of it, held by Kueue for admitted jobs not running", Unit: "%", Decimals: 2, Difference: true, value: func(r Result) float64 { return 100 * r.FreeReserved }},
	{Name: "of it, on nodes that took no new pod", Unit: "%", Decimals: 2, Difference: true, value: func(r Result) float64 { return 100 * r.FreeOutOfService }},
	{Name: "GPU allocation while jobs are queued", Unit: "%", Decimals: 1, HigherIsBetter: true, value: func(r Result) float64 { return 100 * r.AllocWhileWaiting }},
	{Name: "pods evicted or preempted", value: func(r Result) float64 { return float64(r.Evictions) }},
	{Name: "pod start latency p50", Unit: " s", value: func(r Result) float64 { return r.StartLatency.Seconds() }},
	{Name: "notebooks paused", Difference: true, value: func(r Result) float64 { return float64(r.IdlePauses) }},
	{Name: "notebook users' resume wait p99", Unit: " min", Decimals: 1, value: func(r Result) float64 { return Percentile(r.ResumeWaits, 99) * 60 }},
}

// minutesAt is the p-th percentile of the waits of a tier ("" for all), in minutes.
func minutesAt(waits map[string][]float64, tier string, p float64) float64 {
	return Percentile(waits[tier], p) * 60
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

// Goal is one of the goals of a policy with Chamber against the same scheduler alone
// (issue 49), judged on the paired runs: a ratio's or difference's whole 95% interval
// must clear the bar.
type Goal struct {
	Text string
	Met  func(c comparison) (bool, string)
}

// comparison is a sweep's runs of a policy and its baseline.
type comparison struct {
	runs         []SweepRun
	base, policy Policy
}

// values is a figure's value in each run under p (NaN where it has none).
func (c comparison) values(p Policy, name string) []float64 {
	out := make([]float64, len(c.runs))
	for i, r := range c.runs {
		v, ok := r.Figures[p][name]
		if !ok {
			v = math.NaN()
		}
		out[i] = v
	}
	return out
}

// paired compares the figure named over the runs.
func (c comparison) paired(name string) Paired {
	f := figureNamed(name)
	return PairRuns(c.values(c.base, name), c.values(c.policy, name), f.Difference, f.better, f.same)
}

func figureNamed(name string) Figure {
	for _, f := range Figures {
		if f.Name == name {
			return f
		}
	}
	panic("no figure " + name)
}

// better says whether a is a better value of the figure than b.
func (f Figure) better(a, b float64) bool {
	if f.HigherIsBetter {
		return a > b
	}
	return a < b
}

// same says whether a and b are the same at the figure's precision.
func (f Figure) same(a, b float64) bool { return num(a, f.Decimals) == num(b, f.Decimals) }

// interval is a paired comparison as the summary writes it: the geometric mean ratio
// (or mean difference) and its 95% interval.
func (p Paired) interval(f Figure) string {
	if p.Compared == 0 {
		return "-"
	}
	if p.Difference {
		d := max(f.Decimals, 1)
		return fmt.Sprintf("%+.*f%s [%+.*f, %+.*f]", d, p.Mean, f.Unit, d, p.Lo, d, p.Hi)
	}
	return fmt.Sprintf("%.3fx [%.3f, %.3f]", p.Mean, p.Lo, p.Hi)
}

// ratioAtMost is a goal that the figure's paired ratio be at most x, its whole interval.
func ratioAtMost(name string, x float64) func(c comparison) (bool, string) {
	return func(c comparison) (bool, string) {
		p := c.paired(name)
		return p.Compared > 0 && p.Hi <= x, p.interval(figureNamed(name))
	}
}

// Goals are checked in the summary when both Kueue and Chamber ran, and when both
// Volcano and Volcano + Chamber ran (against Volcano alone).
var Goals = []Goal{
	{"idle-but-allocated GPU-hours at most 0.5x", ratioAtMost("idle-but-allocated GPU-hours", 0.5)},
	{"production total wait p99 at most 0.5x", ratioAtMost("production total wait p99", 0.5)},
	{"standard and preemptible total wait p50 at most the baseline's + 1 min", func(c comparison) (bool, string) {
		s, p := c.paired("standard total wait p50"), c.paired("preemptible total wait p50")
		return s.Compared > 0 && p.Compared > 0 && s.Hi <= 1 && p.Hi <= 1,
			s.interval(figureNamed("standard total wait p50")) + " / " + p.interval(figureNamed("preemptible total wait p50"))
	}},
	{"makespan at most 0.95x", ratioAtMost("makespan", 0.95)},
	{"cost at most 0.95x", ratioAtMost("cost", 0.95)},
	{"jobs lost 0", func(c comparison) (bool, string) {
		lost := sum(slices.DeleteFunc(c.values(c.policy, "jobs lost"), math.IsNaN))
		return lost == 0, fmt.Sprintf("%.0f over %d runs", lost, len(c.runs))
	}},
	{"work lost to evictions and faults no more than the baseline's", func(c comparison) (bool, string) {
		const name = "work lost to evictions and faults, % of useful work"
		p := c.paired(name)
		return p.Compared > 0 && p.Hi <= 0, p.interval(figureNamed(name))
	}},
	{"a paused notebook's user gets its GPUs back within 10 min at p99", func(c comparison) (bool, string) {
		waits := slices.DeleteFunc(c.values(c.policy, "notebook users' resume wait p99"), math.IsNaN)
		if len(waits) == 0 {
			return true, "no notebook paused"
		}
		worst := slices.Max(waits)
		return worst <= 10, fmt.Sprintf("%.1f min in the worst run", worst)
	}},
	{"pod start latency p50 at most 1.2x", ratioAtMost("pod start latency p50", 1.2)},
}

// WriteSummary writes the sweep's summary into dir: each policy with Chamber against
// the same scheduler alone over the paired runs (the ratio's geometric mean with its
// 95% bootstrap interval, wins, losses and ties, and the verdict), the goals, each
// figure's mean and spread, and each run's values. It returns the summary's path.
func WriteSummary(dir string, policies []Policy, runs []SweepRun, describe []Param) (string, error) {
	var b strings.Builder
	t := table{&b}
	fmt.Fprintf(&b, "# Chamber fleet simulator: sweep of %d runs\n\n", len(runs))
	b.WriteString("Each run replays one slice of the trace with one seed (tiers, utilization, job kinds and faults " +
		"drawn from it) under each policy; each run's own report is in its folder. A policy with Chamber is compared " +
		"with the same scheduler alone run by run (the same slice and seed): the geometric mean of the ratios " +
		"Chamber / alone, or the mean difference for shares, counts and the tiers' median waits, with its 95% " +
		"bootstrap interval (" + fmt.Sprint(BootstrapResamples) + " resamples of the runs). It *beats* only where the whole interval is on " +
		"the better side of no change, *loses* where it is wholly on the worse side, and *ties* otherwise.\n\n")
	t.header("parameter", "value")
	for _, p := range describe {
		t.row(p.Name, p.Value)
	}
	var labels []string
	for _, r := range runs {
		labels = append(labels, fmt.Sprintf("[%s](%s/%s)", r.Label, filepath.Base(r.Dir), ReportFile))
	}
	t.row("runs", strings.Join(labels, ", "))

	// Each policy with Chamber against the same scheduler alone: Kueue + Chamber
	// against Kueue, Volcano + Chamber against Volcano.
	for _, p := range policies {
		base, ok := p.Baseline()
		if !ok || !slices.Contains(policies, base) {
			continue
		}
		c := comparison{runs: runs, base: base, policy: p}
		fmt.Fprintf(&b, "\n## %s against %s, paired\n\n", p.Title(), base.Title())
		t.header("figure", base.Title()+" mean", p.Title()+" mean", "ratio or difference [95% interval]", "better / worse / same", "verdict")
		for _, f := range Figures {
			pr := c.paired(f.Name)
			if pr.N == 0 {
				continue
			}
			bm, _ := meanSD(slices.DeleteFunc(c.values(base, f.Name), math.IsNaN))
			pm, _ := meanSD(slices.DeleteFunc(c.values(p, f.Name), math.IsNaN))
			t.row(f.Name, num(bm, f.Decimals)+f.Unit, num(pm, f.Decimals)+f.Unit, pr.interval(f),
				fmt.Sprintf("%d / %d / %d", pr.Wins, pr.Losses, pr.Ties), pr.Verdict(f.HigherIsBetter))
		}
		fmt.Fprintf(&b, "\n## Goals of %s against %s (the whole interval must clear the goal)\n\n", p.Title(), base.Title())
		t.header("goal", p.Title(), "met")
		for _, g := range Goals {
			ok, v := g.Met(c)
			t.row(g.Text, v, map[bool]string{true: "yes", false: "**no**"}[ok])
		}
	}

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
			cells = append(cells, fmt.Sprintf("%s ± %s%s", num(m, f.Decimals), num(sd, f.Decimals), f.Unit))
		}
		t.row(cells...)
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
