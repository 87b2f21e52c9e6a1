package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
)

// The figures over the budget period, from a team's spend worked out by hand: vision
// held 4 of its 8 H100s and 6 of its 4 A100s (2 borrowed), a quarter of the time
// idle; nlp has no spend recorded yet.
func TestTeamPeriodFigures(t *testing.T) {
	const hour = 3600
	vision := chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "vision"}, Spec: chamber.TeamSpec{Pool: "main"}}
	vision.Status.Models = []chamber.TeamModelUsage{
		{Model: "H100", Flavor: "main-h100", Quota: 8, InUse: 4},
		{Model: "A100", Flavor: "main-a100", Quota: 4, InUse: 6, Borrowed: 2},
	}
	vision.Status.Spend = &chamber.TeamSpend{
		PeriodStart: metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)),
		GPUSeconds:  10 * hour,
		Flavors: []chamber.FlavorSpend{
			{Flavor: "main-h100", GPUSeconds: 4 * hour, QuotaGPUSeconds: 8 * hour},
			{Flavor: "main-a100", GPUSeconds: 6 * hour, BorrowedGPUSeconds: 2 * hour, QuotaGPUSeconds: 4 * hour, LentGPUSeconds: hour},
		},
		Cost:               "30.00",
		IdleGPUSeconds:     ptr.To[int64](2*hour + hour/2),
		UsedGPUSeconds:     ptr.To[int64](3 * hour),
		MeasuredGPUSeconds: ptr.To[int64](6 * hour),
		IdleCost:           "7.50",
	}
	nlp := chamber.Team{ObjectMeta: metav1.ObjectMeta{Name: "nlp"}, Spec: chamber.TeamSpec{Pool: "main"}}
	cl := &cluster{snap: &fleet.Snapshot{}, teams: []chamber.Team{vision, nlp}}

	// H100: 4 of 8 GPU-hours of quota, 50%; A100: 6 - 2 of 4, 100%. The team held 10
	// GPU-hours, 2.5 idle: 75% efficient; 3 of 6 measured hours used, 50%.
	period := teamRow{Team: "vision", Pool: "main", PeriodStart: "2026-11-01",
		EfficiencyPercent: ptr.To(75.0), MeanUtilizationPercent: ptr.To(50.0), IdleGPUHours: ptr.To(2.5), IdleCost: "7.50"}
	h100, a100 := period, period
	h100.Model, h100.Quota, h100.InUse, h100.QuotaUsedPercent = "H100", 8, 4, ptr.To(50.0)
	a100.Model, a100.Quota, a100.InUse, a100.Borrowed, a100.QuotaUsedPercent = "A100", 4, 6, 2, ptr.To(100.0)
	want := []teamRow{h100, a100, {Team: "nlp", Pool: "main"}}
	rows := cl.teamRows()
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}

	var out bytes.Buffer
	if err := printTeams(&out, rows, true); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`^TEAM\s+POOL\s+MODEL\s+QUOTA\s+IN USE\s+BORROWED\s+LENT\s+IDLE\s+PENDING\s+BUDGET\s+QUOTA USED\s+EFFICIENCY\s+IDLE GPU-H\s+IDLE COST\s+MEAN UTIL\s+PERIOD FROM$`,
		`^vision\s+main\s+H100\s+8\s+4\s+0\s+0\s+0\s+0\s+<none>\s+50%\s+75%\s+2\.5\s+7\.50\s+50%\s+2026-11-01$`,
		`^vision\s+main\s+A100\s+4\s+6\s+2\s+0\s+0\s+0\s+<none>\s+100%\s+75%\s+2\.5\s+7\.50\s+50%\s+2026-11-01$`,
		`^nlp\s+main\s+0\s+0\s+0\s+0\s+0\s+0\s+<none>\s+<none>\s+<none>\s+<none>\s+<none>\s+<none>\s+<none>$`,
	} {
		if !regexp.MustCompile("(?m)" + line).MatchString(out.String()) {
			t.Errorf("no line matches %s in:\n%s", line, out.String())
		}
	}
}
