package team

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func TestAccount(t *testing.T) {
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(start.Add(d)) }
	prices := map[string]float64{"main-h100": 2.5}
	inUse := []chamber.TeamModelUsage{{Model: "H100", Flavor: "main-h100", InUse: 8}, {Model: "A100", Flavor: "main-a100", InUse: 4}}
	// 8 H100 of quota, 12 held of which 4 borrowed; 6 A100 of quota, 2 held, 3 of
	// the 4 unused lent.
	quota := []chamber.TeamModelUsage{
		{Model: "H100", Flavor: "main-h100", Quota: 8, InUse: 12, Borrowed: 4},
		{Model: "A100", Flavor: "main-a100", Quota: 6, InUse: 2, Lent: 3},
		{Model: "L4", Flavor: "main-l4"},
	}
	tests := map[string]struct {
		spend     *chamber.TeamSpend
		models    []chamber.TeamModelUsage
		period    chamber.BudgetPeriod
		now       time.Duration
		wantSpend *chamber.TeamSpend
	}{
		"first accounting starts the period": {
			now:       10*24*time.Hour + 1500*time.Millisecond,
			models:    inUse,
			wantSpend: &chamber.TeamSpend{PeriodStart: at(0), AccountedUntil: at(10*24*time.Hour + time.Second), Cost: "0.00"},
		},
		"usage since the last accounting, whole seconds, priced per flavor": {
			spend:  &chamber.TeamSpend{PeriodStart: at(0), AccountedUntil: at(time.Hour), GPUSeconds: 100, Cost: "0.00"},
			models: inUse,
			now:    2*time.Hour + 900*time.Millisecond,
			wantSpend: &chamber.TeamSpend{
				PeriodStart: at(0), AccountedUntil: at(2 * time.Hour), GPUSeconds: 100 + 12*3600,
				Flavors: []chamber.FlavorSpend{{Flavor: "main-h100", GPUSeconds: 8 * 3600}, {Flavor: "main-a100", GPUSeconds: 4 * 3600}},
				Cost:    "20.00", // 8 GPU-hours at 2.50; A100 has no price
			},
		},
		"quota, borrowed and lent over the interval": {
			spend:  &chamber.TeamSpend{PeriodStart: at(0), AccountedUntil: at(time.Hour), Cost: "0.00"},
			models: quota,
			now:    2 * time.Hour,
			wantSpend: &chamber.TeamSpend{
				PeriodStart: at(0), AccountedUntil: at(2 * time.Hour), GPUSeconds: 14 * 3600,
				Flavors: []chamber.FlavorSpend{
					{Flavor: "main-h100", GPUSeconds: 12 * 3600, QuotaGPUSeconds: 8 * 3600, BorrowedGPUSeconds: 4 * 3600},
					{Flavor: "main-a100", GPUSeconds: 2 * 3600, QuotaGPUSeconds: 6 * 3600, LentGPUSeconds: 3 * 3600},
				},
				Cost: "30.00", // 12 H100-hours at 2.50
			},
		},
		"a restart resumes from the status, with the usage it recorded": {
			spend: &chamber.TeamSpend{PeriodStart: at(0), AccountedUntil: at(time.Hour), GPUSeconds: 14 * 3600,
				Flavors: []chamber.FlavorSpend{
					{Flavor: "main-h100", GPUSeconds: 12 * 3600, QuotaGPUSeconds: 8 * 3600, BorrowedGPUSeconds: 4 * 3600},
					{Flavor: "main-a100", GPUSeconds: 2 * 3600, QuotaGPUSeconds: 6 * 3600, LentGPUSeconds: 3 * 3600},
				}, Cost: "30.00"},
			models: quota,
			// Down for 10 minutes and a half.
			now: time.Hour + 10*time.Minute + 30*time.Second + 400*time.Millisecond,
			wantSpend: &chamber.TeamSpend{
				PeriodStart: at(0), AccountedUntil: at(time.Hour + 630*time.Second), GPUSeconds: 14*3600 + 14*630,
				Flavors: []chamber.FlavorSpend{
					{Flavor: "main-h100", GPUSeconds: 12 * (3600 + 630), QuotaGPUSeconds: 8 * (3600 + 630), BorrowedGPUSeconds: 4 * (3600 + 630)},
					{Flavor: "main-a100", GPUSeconds: 2 * (3600 + 630), QuotaGPUSeconds: 6 * (3600 + 630), LentGPUSeconds: 3 * (3600 + 630)},
				},
				Cost: "35.25", // 12 x 4230 s = 14.1 H100-hours at 2.50
			},
		},
		"under a second: nothing yet": {
			spend:     &chamber.TeamSpend{PeriodStart: at(0), AccountedUntil: at(time.Hour), Cost: "0.00"},
			models:    inUse,
			now:       time.Hour + 999*time.Millisecond,
			wantSpend: &chamber.TeamSpend{PeriodStart: at(0), AccountedUntil: at(time.Hour), Cost: "0.00"},
		},
		"a new month resets the spend": {
			spend:     &chamber.TeamSpend{PeriodStart: at(0), AccountedUntil: at(29 * 24 * time.Hour), GPUSeconds: 5000, Cost: "99.00"},
			models:    inUse,
			now:       30*24*time.Hour + time.Minute,
			wantSpend: &chamber.TeamSpend{PeriodStart: at(30 * 24 * time.Hour), AccountedUntil: at(30*24*time.Hour + time.Minute), Cost: "0.00"},
		},
		"weekly periods start on Monday": {
			period:    chamber.BudgetWeekly,
			now:       4*24*time.Hour + time.Hour, // Thursday 5 November
			wantSpend: &chamber.TeamSpend{PeriodStart: at(24 * time.Hour), AccountedUntil: at(4*24*time.Hour + time.Hour), Cost: "0.00"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			team := &chamber.Team{Status: chamber.TeamStatus{Spend: tc.spend, Models: tc.models}}
			if tc.period != "" {
				team.Spec.Budget = &chamber.TeamBudget{Period: tc.period, GPUHours: ptr.To[int64](1)}
			}
			newPeriod := account(team, prices, start.Add(tc.now))
			if want := tc.spend == nil || !tc.spend.PeriodStart.Equal(&tc.wantSpend.PeriodStart); newPeriod != want {
				t.Errorf("new period: got %v, want %v", newPeriod, want)
			}
			if diff := cmp.Diff(tc.wantSpend, team.Status.Spend); diff != "" {
				t.Errorf("spend (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBudgetUsed(t *testing.T) {
	tests := map[string]struct {
		budget       *chamber.TeamBudget
		spend        chamber.TeamSpend
		wantUsed     float64
		wantExceeded bool
		wantWarning  bool
	}{
		"no budget":              {spend: chamber.TeamSpend{GPUSeconds: 1e9}, wantUsed: 0},
		"GPU-hours at 50%":       {budget: &chamber.TeamBudget{GPUHours: ptr.To[int64](10)}, spend: chamber.TeamSpend{GPUSeconds: 5 * 3600}, wantUsed: 0.5},
		"money at 80%":           {budget: &chamber.TeamBudget{Cost: "1000"}, spend: chamber.TeamSpend{Cost: "800.00"}, wantUsed: 0.8, wantWarning: true},
		"the larger share wins":  {budget: &chamber.TeamBudget{Cost: "1000", GPUHours: ptr.To[int64](10)}, spend: chamber.TeamSpend{Cost: "100.00", GPUSeconds: 10 * 3600}, wantUsed: 1, wantExceeded: true, wantWarning: true},
		"a zero budget is spent": {budget: &chamber.TeamBudget{GPUHours: ptr.To[int64](0)}, wantUsed: 1, wantExceeded: true, wantWarning: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spend := tc.spend
			team := &chamber.Team{Spec: chamber.TeamSpec{Budget: tc.budget}, Status: chamber.TeamStatus{Spend: &spend}}
			if got := team.BudgetUsed(); got != tc.wantUsed {
				t.Errorf("BudgetUsed = %v, want %v", got, tc.wantUsed)
			}
			exceeded, warning := budgetState(team)
			if exceeded != tc.wantExceeded || warning != tc.wantWarning {
				t.Errorf("budgetState = (%v, %v), want (%v, %v)", exceeded, warning, tc.wantExceeded, tc.wantWarning)
			}
		})
	}
}
