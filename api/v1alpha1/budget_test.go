package v1alpha1

import "testing"

func TestBudgetUsed(t *testing.T) {
	hours := func(h int64) *int64 { return &h }
	cases := map[string]struct {
		budget *TeamBudget
		spend  *TeamSpend
		want   float64
	}{
		"no budget":                         {spend: &TeamSpend{GPUSeconds: 3600, Cost: "10"}},
		"no spend recorded yet":             {budget: &TeamBudget{Cost: "100"}},
		"half the GPU-hours":                {budget: &TeamBudget{GPUHours: hours(10)}, spend: &TeamSpend{GPUSeconds: 5 * 3600}, want: 0.5},
		"80% of the money":                  {budget: &TeamBudget{Cost: "100"}, spend: &TeamSpend{Cost: "80.00"}, want: 0.8},
		"the larger of the two shares":      {budget: &TeamBudget{Cost: "100", GPUHours: hours(10)}, spend: &TeamSpend{GPUSeconds: 9 * 3600, Cost: "20"}, want: 0.9},
		"a budget of no GPU-hours is spent": {budget: &TeamBudget{GPUHours: hours(0)}, spend: &TeamSpend{}, want: 1},
		"a budget of no money is spent":     {budget: &TeamBudget{Cost: "0"}, spend: &TeamSpend{}, want: 1},
		"over budget":                       {budget: &TeamBudget{Cost: "50"}, spend: &TeamSpend{Cost: "75"}, want: 1.5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			team := &Team{Spec: TeamSpec{Budget: tc.budget}, Status: TeamStatus{Spend: tc.spend}}
			if got := team.BudgetUsed(); got != tc.want {
				t.Errorf("BudgetUsed() = %g, want %g", got, tc.want)
			}
		})
	}
}
