package sim

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// policyColors keeps each policy's colour the same in every plot.
var policyColors = map[Policy]color.Color{
	PolicyKubernetes:     color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	PolicyKueue:          color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	PolicyChamber:        color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	PolicyVolcano:        color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	PolicyVolcanoChamber: color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
}

// series is one line of a plot.
type series struct {
	name   string
	policy Policy
	dashed bool
	xy     plotter.XYs
}

// Plot files the report embeds.
const (
	plotAllocation = "allocation-utilization.png"
	plotQueue      = "queue-depth.png"
	plotWaitCDF    = "wait-cdf.png"
)

// writePlots draws the report's plots into dir.
func writePlots(dir string, sc *Scenario, recs []*Recording, results []Result) error {
	var alloc, queue, cdf []series
	for i, rec := range recs {
		var a, u, q plotter.XYs
		for _, s := range rec.Samples {
			h := wallToSim(s.At.Sub(rec.Start), sc.Speedup).Hours()
			a = append(a, plotter.XY{X: h, Y: 100 * float64(s.Allocated) / float64(sc.GPUs())})
			u = append(u, plotter.XY{X: h, Y: 100 * s.Used / float64(sc.GPUs())})
			q = append(q, plotter.XY{X: h, Y: float64(s.Waiting)})
		}
		alloc = append(alloc, series{rec.Policy.Title() + " allocated", rec.Policy, false, a},
			series{rec.Policy.Title() + " used", rec.Policy, true, u})
		queue = append(queue, series{rec.Policy.Title(), rec.Policy, false, q})
		waits := slices.Clone(results[i].TotalWaits[""])
		slices.Sort(waits)
		var c plotter.XYs
		for k, w := range waits {
			c = append(c, plotter.XY{X: w, Y: float64(k+1) / float64(len(waits))})
		}
		cdf = append(cdf, series{rec.Policy.Title(), rec.Policy, false, c})
	}
	for _, p := range []struct {
		file, title, x, y string
		lines             []series
	}{
		{plotAllocation, "GPUs allocated (solid) and used (dashed)", "simulated hours", "% of the cluster's GPUs", alloc},
		{plotQueue, "Queue depth", "simulated hours", "jobs waiting", queue},
		{plotWaitCDF, "Total wait, CDF (all jobs, every spell without their GPUs)", "total wait (simulated hours)", "share of jobs", cdf},
	} {
		if err := linePlot(filepath.Join(dir, p.file), p.title, p.x, p.y, p.lines); err != nil {
			return fmt.Errorf("plot %s: %w", p.file, err)
		}
	}
	return nil
}

func linePlot(path, title, x, y string, lines []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	for _, s := range lines {
		if len(s.xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return err
		}
		l.Color = policyColors[s.policy]
		l.Width = vg.Points(1.2)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Legend.ThumbnailWidth = vg.Points(20)
	p.Legend.YPosition = draw.PosTop
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}
