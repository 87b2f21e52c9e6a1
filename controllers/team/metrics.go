package team

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

var (
	budgetUsedRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chamber_team_budget_used_ratio",
		Help: "Share of the team's budget spent in the current period (1 = all of it).",
	}, []string{"team"})
	periodGPUSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chamber_team_period_gpu_seconds",
		Help: "GPU-seconds the team's admitted workloads held in the current budget period.",
	}, []string{"team"})
	periodCost = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chamber_team_period_cost",
		Help: "Cost of the team's GPU use in the current budget period, in the pool's currency.",
	}, []string{"team"})
	quotaUsedRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chamber_team_quota_used_ratio",
		Help: "Share of its nominal quota the team used in the current budget period: (GPU-seconds - borrowed) / quota GPU-seconds, every model together.",
	}, []string{"team"})
)

func init() {
	metrics.Registry.MustRegister(budgetUsedRatio, periodGPUSeconds, periodCost, quotaUsedRatio)
}

func recordBudget(team *chamber.Team) {
	budgetUsedRatio.WithLabelValues(team.Name).Set(team.BudgetUsed())
	if s := team.Status.Spend; s != nil {
		periodGPUSeconds.WithLabelValues(team.Name).Set(float64(s.GPUSeconds))
		cost, _ := strconv.ParseFloat(s.Cost, 64)
		periodCost.WithLabelValues(team.Name).Set(cost)
	}
	if share, ok := team.Status.Spend.QuotaUsed(); ok {
		quotaUsedRatio.WithLabelValues(team.Name).Set(share)
	} else {
		quotaUsedRatio.DeleteLabelValues(team.Name)
	}
}
