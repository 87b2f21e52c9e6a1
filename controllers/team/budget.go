package team

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// Budget thresholds.
const (
	warnRatio     = 0.8
	exceededRatio = 1.0
)

// pricesByFlavor maps each of the pool's flavors to its price per GPU-hour.
func pricesByFlavor(pool *chamber.GPUPool) map[string]float64 {
	prices := map[string]float64{}
	for model, v := range pool.PricesPerGPUHour() {
		prices[chamberkueue.FlavorName(pool.Name, model)] = v
	}
	return prices
}

// periodStart is the start of the budget period holding now, in UTC.
func periodStart(period chamber.BudgetPeriod, now time.Time) time.Time {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	if period == chamber.BudgetWeekly {
		// Weeks start on Monday.
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	}
	return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// account adds the GPU-seconds held since the last accounting to the team's spend,
// and per flavor those of its nominal quota, of what it borrowed and of what it lent.
// The usage that held over that interval is the one the status recorded last time
// (the controller reconciles on every change of the ClusterQueue's usage). Time is
// counted in whole seconds, as the status stores it, so nothing is lost to rounding
// and a controller restart resumes where the status left off. It reports whether it
// started a new period.
func account(team *chamber.Team, prices map[string]float64, now time.Time) (newPeriod bool) {
	period := chamber.BudgetMonthly
	if team.Spec.Budget != nil && team.Spec.Budget.Period != "" {
		period = team.Spec.Budget.Period
	}
	start := periodStart(period, now)
	s := team.Status.Spend
	if s == nil || !s.PeriodStart.Time.Equal(start) {
		team.Status.Spend = &chamber.TeamSpend{
			PeriodStart:    metav1.NewTime(start),
			AccountedUntil: metav1.NewTime(now.Truncate(time.Second)),
			Cost:           "0.00",
		}
		return true
	}
	seconds := int64(now.Sub(s.AccountedUntil.Time) / time.Second)
	if seconds <= 0 {
		return false
	}
	s.AccountedUntil = metav1.NewTime(s.AccountedUntil.Add(time.Duration(seconds) * time.Second))
	for _, m := range team.Status.Models {
		if m.InUse == 0 && m.Quota == 0 && m.Lent == 0 {
			continue
		}
		i := slices.IndexFunc(s.Flavors, func(f chamber.FlavorSpend) bool { return f.Flavor == m.Flavor })
		if i < 0 {
			s.Flavors = append(s.Flavors, chamber.FlavorSpend{Flavor: m.Flavor})
			i = len(s.Flavors) - 1
		}
		f := &s.Flavors[i]
		f.GPUSeconds += m.InUse * seconds
		f.QuotaGPUSeconds += m.Quota * seconds
		f.BorrowedGPUSeconds += m.Borrowed * seconds
		f.LentGPUSeconds += m.Lent * seconds
		s.GPUSeconds += m.InUse * seconds
	}
	cost := 0.0
	for _, f := range s.Flavors {
		cost += float64(f.GPUSeconds) / 3600 * prices[f.Flavor]
	}
	s.Cost = fmt.Sprintf("%.2f", cost)
	return false
}

func budgetState(team *chamber.Team) (exceeded, warning bool) {
	used := team.BudgetUsed()
	return used >= exceededRatio, used >= warnRatio
}

// setBudgetConditions sets BudgetWarning and BudgetExceeded, with an Event on each
// change.
func (c *Controller) setBudgetConditions(team *chamber.Team, exceeded, warning bool) {
	if team.Spec.Budget == nil {
		apimeta.RemoveStatusCondition(&team.Status.Conditions, chamber.ConditionBudgetWarning)
		apimeta.RemoveStatusCondition(&team.Status.Conditions, chamber.ConditionBudgetExceeded)
		return
	}
	pct := int(team.BudgetUsed() * 100)
	action := "it no longer borrows beyond its quota; running work continues"
	if team.Spec.Budget.OnExceeded == chamber.BudgetHold {
		action = "its queue admits no new work (stopPolicy Hold); running work continues"
	}
	set := func(condType string, on bool, reason, msg string) {
		cond := metav1.Condition{Type: condType, Status: metav1.ConditionFalse, Reason: "WithinBudget",
			Message: fmt.Sprintf("%d%% of the budget used", pct), ObservedGeneration: team.Generation}
		if on {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, reason, msg
		}
		if apimeta.SetStatusCondition(&team.Status.Conditions, cond) && on {
			c.recorder.Eventf(team, nil, corev1.EventTypeWarning, reason, "Budget", "%s", msg)
		}
	}
	set(chamber.ConditionBudgetWarning, warning, "BudgetAt80Percent",
		fmt.Sprintf("%d%% of the %s budget used", pct, team.Spec.Budget.Period))
	set(chamber.ConditionBudgetExceeded, exceeded, "BudgetExceeded",
		fmt.Sprintf("%d%% of the %s budget used: %s", pct, team.Spec.Budget.Period, action))
}
