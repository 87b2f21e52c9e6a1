package exporter_test

import (
	"bytes"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	clocktesting "k8s.io/utils/clock/testing"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/exporter"
	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden")

var start = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return start.Add(d) }

// fixtureFleet is a small fleet with every state, two teams borrowing and lending,
// pending and admitted workloads and a node of no pool, 30 minutes after it started.
//
//	h1 (8 H100): vision/train-0 4 GPUs at 90%; nlp/bert-0 2 GPUs at 0% (idle); GPU 7 unhealthy
//	h2 (8 H100): cordoned; nlp/llm-0 holds 2
//	t1 (4 H100): tainted chamber.dev/gpu-unhealthy
//	a1 (4 A100): nlp/eval-0 on GPUs 2 and 3 by the agent's mapping, at 40%
//	x1 (2 H100): in no pool; misc/notebook-0 holds 1, no agent; vision/nb-0 held the
//	    other until idle reclaim took it, and nlp/tune-0 holds it since
func fixtureFleet() *fleet.Model {
	clock := clocktesting.NewFakeClock(start)
	m := fleet.New(fleet.Options{IdleThresholdPercent: 5, IdleWindow: 5 * time.Minute, Clock: clock})
	h100 := chamberkueue.FlavorName("main", ft.H100)
	a100 := chamberkueue.FlavorName("main", ft.A100)
	m.SetPool(ft.MakePool("main", map[string]string{"pool": "main"}, map[string]string{ft.H100: "2.49", ft.A100: "1.10"}))
	m.SetTeam(ft.MakeTeam("vision", "main", start, "vision"))
	m.SetTeam(ft.MakeTeam("nlp", "main", start, "nlp"))
	m.SetClusterQueue(ft.MakeClusterQueue("vision", "main").Quota(h100, 8, -1).Quota(a100, 0, -1).Usage(h100, 4, 0).Obj())
	m.SetClusterQueue(ft.MakeClusterQueue("nlp", "main").Quota(a100, 4, -1).Quota(h100, 2, -1).Usage(h100, 4, 2).Usage(a100, 2, 0).Obj())
	m.SetLocalQueue(ft.MakeLocalQueue("vision", "default", "vision"))
	m.SetLocalQueue(ft.MakeLocalQueue("nlp", "default", "nlp"))

	m.SetNode(ft.MakeNode("h1", 8).Label("pool", "main").Obj())
	m.SetNode(ft.MakeNode("h2", 8).Label("pool", "main").Cordon().Obj())
	m.SetNode(ft.MakeNode("t1", 4).Label("pool", "main").Taint(chamber.TaintGPUUnhealthy).Obj())
	m.SetNode(ft.MakeNode("a1", 4).Label("pool", "main").Label(chamber.DefaultProductLabel, ft.A100).Obj())
	m.SetNode(ft.MakeNode("x1", 2).Obj())

	m.SetWorkload(ft.MakeWorkload("vision", "train", start).OwnedBy("job-train").Tier("production").Reserved("vision", at(45*time.Second)).Obj())
	m.SetWorkload(ft.MakeWorkload("nlp", "bert", start).Tier("standard").Reserved("nlp", at(20*time.Minute)).Obj())
	m.SetWorkload(ft.MakeWorkload("nlp", "llm", at(-time.Hour)).Tier("standard").Reserved("nlp", at(-30*time.Minute)).Obj())
	m.SetWorkload(ft.MakeWorkload("nlp", "eval", start).Tier("standard").Reserved("nlp", at(3*time.Second)).Obj())
	m.SetWorkload(ft.MakeWorkload("vision", "sweep", start).Tier("preemptible").Obj())
	m.SetWorkload(ft.MakeWorkload("nlp", "big", start).Tier("standard").Obj())
	m.SetWorkload(ft.MakeWorkload("nlp", "big2", start).Tier("standard").Obj())

	m.SetPod(ft.MakePod("vision", "train-0", 4).On("h1", start).OwnedBy("job-train").Obj())
	m.SetPod(ft.MakePod("nlp", "bert-0", 2).On("h1", start).Workload("bert").Obj())
	m.SetPod(ft.MakePod("nlp", "llm-0", 2).On("h2", start).Workload("llm").Obj())
	m.SetPod(ft.MakePod("nlp", "eval-0", 2).On("a1", start).Workload("eval").Obj())
	m.SetPod(ft.MakePod("misc", "notebook-0", 1).On("x1", start).Obj())
	nb := ft.MakeWorkload("vision", "nb", at(-2*time.Hour)).Tier("standard").Reserved("vision", at(-time.Hour)).Obj()
	m.SetWorkload(nb)
	m.SetPod(ft.MakePod("vision", "nb-0", 1).On("x1", start).Workload("nb").Obj())
	nb.Annotations = map[string]string{chamber.AnnotationIdleReclaimedAt: start.Format(time.RFC3339)}
	m.SetWorkload(nb)
	m.DeletePod("vision", "nb-0")
	m.SetWorkload(ft.MakeWorkload("nlp", "tune", at(-2*time.Hour)).Tier("standard").Reserved("nlp", at(-time.Minute)).Obj())
	m.SetPod(ft.MakePod("nlp", "tune-0", 1).On("x1", start).Workload("tune").Obj())

	m.SetGPUNode(ft.MakeGPUNode("h1", 8).UtilAll(0, 5*time.Minute).Util(0, 90, 5*time.Minute).Util(1, 90, 5*time.Minute).
		Util(2, 90, 5*time.Minute).Util(3, 90, 5*time.Minute).Health(7, chamber.GPUUnhealthy).Obj())
	m.SetGPUNode(ft.MakeGPUNode("a1", 4).UtilAll(40, 5*time.Minute).Pod(2, "nlp", "eval-0").Pod(3, "nlp", "eval-0").Obj())
	clock.Step(30 * time.Minute)
	m.SetSynced(true)
	return m
}

// TestExposition checks the whole exposition over the fixture fleet against
// testdata/metrics.golden; go test ./exporter -update rewrites it.
func TestExposition(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	// A clock that stands still: the scrape's own duration is 0 in the golden file.
	reg.MustRegister(exporter.New(fixtureFleet(), exporter.Options{PerGPU: true, Clock: clocktesting.NewFakePassiveClock(start)}))
	if *update {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for _, mf := range families {
			if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile("testdata/metrics.golden", buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.Open("testdata/metrics.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer golden.Close()
	if err := testutil.GatherAndCompare(reg, golden); err != nil {
		t.Error(err)
	}
}

// slowSource is a fleet whose snapshots take a while: each advances the exporter's
// clock.
type slowSource struct {
	*fleet.Model
	clock *clocktesting.FakePassiveClock
	takes time.Duration
}

func (s slowSource) Summary() *fleet.Snapshot {
	s.clock.SetTime(s.clock.Now().Add(s.takes))
	return s.Model.Summary()
}

// chamber_scrape_duration_seconds is what the scrape took, the fleet model's snapshot
// included: an operator tells Chamber's cost from the HTTP round trip by it.
func TestScrapeDurationIsTheScrapes(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(start)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.New(slowSource{fixtureFleet(), clock, 40 * time.Millisecond}, exporter.Options{Clock: clock}))
	for range 2 { // each scrape reports its own time, not a sum
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var got []float64
		for _, mf := range families {
			if mf.GetName() == "chamber_scrape_duration_seconds" {
				for _, m := range mf.GetMetric() {
					got = append(got, m.GetGauge().GetValue())
				}
			}
		}
		if len(got) != 1 || got[0] != 0.04 {
			t.Fatalf("chamber_scrape_duration_seconds = %v, want one series of 0.04", got)
		}
	}
}

// Per-GPU series only when asked for.
func TestPerGPUBehindOption(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.New(fixtureFleet(), exporter.Options{}))
	n, err := testutil.GatherAndCount(reg, "chamber_gpu_state")
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("got %d chamber_gpu_state series without Options.PerGPU, want 0", n)
	}
}

// A model that has not synced shows nothing rather than a partial fleet.
func TestNothingBeforeSync(t *testing.T) {
	m := fixtureFleet()
	m.SetSynced(false)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.New(m, exporter.Options{PerGPU: true}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 0 {
		t.Errorf("got %d metric families before sync, want none", len(families))
	}
}
