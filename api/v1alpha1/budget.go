package v1alpha1

import "strconv"

// BudgetUsed is the share of the team's budget spent in the current period: the
// larger of its GPU-hour and its money shares; 1 (spent) for a budget of zero, and 0
// without a budget or a record of spend. The Team controller's conditions and
// chamber_team_budget_used_ratio read it, and so does kubectl chamber.
func (t *Team) BudgetUsed() float64 {
	b, s := t.Spec.Budget, t.Status.Spend
	if b == nil || s == nil {
		return 0
	}
	used := 0.0
	if b.GPUHours != nil {
		if *b.GPUHours == 0 {
			used = 1
		} else {
			used = max(used, float64(s.GPUSeconds)/3600/float64(*b.GPUHours))
		}
	}
	if b.Cost != "" {
		limit, _ := strconv.ParseFloat(b.Cost, 64)
		spent, _ := strconv.ParseFloat(s.Cost, 64)
		if limit == 0 {
			used = max(used, 1)
		} else {
			used = max(used, spent/limit)
		}
	}
	return used
}
