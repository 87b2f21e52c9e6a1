package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/integrations/kube"
)

// teamRow is one team's quota and use of one GPU model.
type teamRow struct {
	Team  string `json:"team"`
	Pool  string `json:"pool"`
	Model string `json:"model"`
	// Quota is the team's nominal quota; Withheld the part of it Chamber holds back
	// while the pool's GPUs are short (quotasFollowHealth).
	Quota    int64 `json:"quota"`
	Withheld int64 `json:"withheld,omitempty"`
	InUse    int64 `json:"inUse"`
	Borrowed int64 `json:"borrowed"`
	Lent     int64 `json:"lent"`
	// Idle is how many of the GPUs the team's pods hold are idle.
	Idle    int   `json:"idle"`
	Pending int32 `json:"pendingWorkloads"`
	// Budget is the share of the period's budget spent, when the team has one.
	Budget string `json:"budgetUsed,omitempty"`

	// Over the team's budget period, from PeriodStart (status.spend); each absent
	// where there is nothing to show yet.
	PeriodStart string `json:"periodStart,omitempty"`
	// QuotaUsedPercent is the share of its quota of the model the team used:
	// (GPU-seconds - borrowed) / quota GPU-seconds.
	QuotaUsedPercent *float64 `json:"quotaUsedPercent,omitempty"`
	// EfficiencyPercent is the share of the GPU time the team held, every model
	// together, that was not idle; MeanUtilizationPercent its GPUs' utilization over
	// the time with a report.
	EfficiencyPercent      *float64 `json:"efficiencyPercent,omitempty"`
	MeanUtilizationPercent *float64 `json:"meanUtilizationPercent,omitempty"`
	// IdleGPUHours is the GPU time the team held idle, every model together, and
	// IdleCost what it cost at the pools' prices.
	IdleGPUHours *float64 `json:"idleGPUHours,omitempty"`
	IdleCost     string   `json:"idleCost,omitempty"`
}

func (o *options) teamsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "teams",
		Short: "Every team: quota, GPUs in use, borrowed and lent, idle, workloads waiting, budget spent; over the budget period, the share of its quota used, its efficiency and what it held idle",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.loadCluster(cmd)
			if err != nil {
				return err
			}
			rows := cl.teamRows()
			if done, err := o.structured(rows); done {
				return err
			}
			return printTeams(o.streams.Out, rows, o.wide())
		},
	}
}

// printTeams prints the rows as a table; wide adds the mean utilization and the
// period's start.
func printTeams(out io.Writer, rows []teamRow, wide bool) error {
	header := []string{"TEAM", "POOL", "MODEL", "QUOTA", "IN USE", "BORROWED", "LENT", "IDLE", "PENDING", "BUDGET",
		"QUOTA USED", "EFFICIENCY", "IDLE GPU-H", "IDLE COST"}
	if wide {
		header = append(header, "MEAN UTIL", "PERIOD FROM")
	}
	t := newTable(out, header...)
	for _, r := range rows {
		quota := fmt.Sprint(r.Quota)
		if r.Withheld > 0 {
			quota += fmt.Sprintf(" (-%d)", r.Withheld)
		}
		cells := []string{r.Team, r.Pool, r.Model, quota, fmt.Sprint(r.InUse), fmt.Sprint(r.Borrowed), fmt.Sprint(r.Lent), fmt.Sprint(r.Idle),
			fmt.Sprint(r.Pending), orNone(r.Budget),
			cell("%.0f%%", r.QuotaUsedPercent), cell("%.0f%%", r.EfficiencyPercent), cell("%.1f", r.IdleGPUHours), orNone(r.IdleCost)}
		if wide {
			cells = append(cells, cell("%.0f%%", r.MeanUtilizationPercent), orNone(r.PeriodStart))
		}
		t.row(cells...)
	}
	return t.flush()
}

func (cl *cluster) teamRows() []teamRow {
	idle := map[[2]string]int{}
	for _, ts := range cl.snap.Teams {
		for _, m := range ts.Models {
			idle[[2]string{ts.Team, m.Model}] = m.Idle
		}
	}
	var rows []teamRow
	for _, t := range cl.teams {
		team := teamRow{Team: t.Name, Pool: t.Spec.Pool, Pending: t.Status.PendingWorkloads, Budget: budgetUsed(&t)}
		periodFigures(&team, t.Status.Spend)
		for _, m := range t.Status.Models {
			r := team
			r.Model, r.Quota, r.Withheld, r.InUse, r.Borrowed, r.Lent = m.Model, m.Quota, m.Withheld, m.InUse, m.Borrowed, m.Lent
			r.Idle = idle[[2]string{t.Name, m.Model}]
			if s := t.Status.Spend; s != nil {
				if i := slices.IndexFunc(s.Flavors, func(f chamber.FlavorSpend) bool { return f.Flavor == m.Flavor }); i >= 0 {
					r.QuotaUsedPercent = percentOf(s.Flavors[i].QuotaUsed())
				}
			}
			rows = append(rows, r)
		}
		if len(t.Status.Models) == 0 {
			rows = append(rows, team)
		}
	}
	return rows
}

// periodFigures fills the row's figures of the whole team over its budget period.
func periodFigures(r *teamRow, s *chamber.TeamSpend) {
	if s == nil {
		return
	}
	r.PeriodStart = s.PeriodStart.UTC().Format(time.DateOnly)
	r.EfficiencyPercent = percentOf(s.Efficiency())
	r.MeanUtilizationPercent = percentOf(s.MeanUtilization())
	if s.IdleGPUSeconds != nil {
		r.IdleGPUHours = ptr.To(float64(*s.IdleGPUSeconds) / 3600)
		r.IdleCost = s.IdleCost
	}
}

// percentOf is a share in percent; nil when there is none.
func percentOf(share float64, ok bool) *float64 {
	if !ok {
		return nil
	}
	return ptr.To(100 * share)
}

// cell prints a figure in format, "<none>" when there is none.
func cell(format string, v *float64) string {
	if v == nil {
		return orNone("")
	}
	return fmt.Sprintf(format, *v)
}

// budgetUsed is the share of the team's budget spent in the period ("" without one).
func budgetUsed(t *chamber.Team) string {
	if t.Spec.Budget == nil {
		return ""
	}
	out := fmt.Sprintf("%.0f%%", t.BudgetUsed()*100)
	if apimeta.IsStatusConditionTrue(t.Status.Conditions, chamber.ConditionBudgetExceeded) {
		out += " (exceeded)"
	}
	return out
}

func (o *options) clearCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "clear NODE",
		Short: "Return a repaired node to service: what annotating it chamber.dev/isolation-clear=true does (with the pool's preflight, if any)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.context(cmd)
			defer cancel()
			c, node, err := o.node(ctx, args[0])
			if err != nil {
				return err
			}
			if node.Annotations[chamber.AnnotationIsolatedAt] == "" {
				return fmt.Errorf("node %s is not isolated by Chamber (no %s annotation): nothing to clear", node.Name, chamber.AnnotationIsolatedAt)
			}
			if err := kube.PatchAnnotations(ctx, c, node, map[string]any{chamber.AnnotationIsolationClear: "true"}); err != nil {
				return fmt.Errorf("clear node %s: %w", node.Name, err)
			}
			fmt.Fprintf(o.streams.Out, "node/%s: clear asked (was isolated for %s); Chamber returns it to service", node.Name, orNone(node.Annotations[chamber.AnnotationIsolationReason]))
			if node.Annotations[chamber.AnnotationIsolationPreflight] == "" {
				fmt.Fprint(o.streams.Out, " once its pool's preflight passes, if the pool has one")
			}
			fmt.Fprintln(o.streams.Out, "; follow it with: kubectl chamber nodes")
			return nil
		},
	}
}

func (o *options) isolateCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "isolate NODE --reason TEXT",
		Short: "Take a node out of service through Chamber (annotation chamber.dev/isolate): tainted and cordoned, its workloads given notice and evicted, until `clear`",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return fmt.Errorf("--reason is required: say why the node goes out of service (it is the isolation's reason in Events and `kubectl chamber nodes`)")
			}
			ctx, cancel := o.context(cmd)
			defer cancel()
			c, node, err := o.node(ctx, args[0])
			if err != nil {
				return err
			}
			var pools chamber.GPUPoolList
			if err := c.List(ctx, &pools); err != nil {
				return fmt.Errorf("list GPUPools: %w", err)
			}
			if chamber.PoolOf(node.Labels, pools.Items) == nil {
				return fmt.Errorf("node %s is in no GPUPool: Chamber isolates only its pools' nodes (cordon it instead)", node.Name)
			}
			if err := kube.PatchAnnotations(ctx, c, node, map[string]any{chamber.AnnotationIsolate: reason, chamber.AnnotationIsolationClear: nil}); err != nil {
				return fmt.Errorf("isolate node %s: %w", node.Name, err)
			}
			fmt.Fprintf(o.streams.Out, "node/%s: isolation asked (%s); Chamber taints and cordons it and evicts its workloads with notice; end it with: kubectl chamber clear %s\n",
				node.Name, reason, node.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the node goes out of service (required)")
	return cmd
}

// node connects and reads the node an operator's command names.
func (o *options) node(ctx context.Context, name string) (client.Client, *corev1.Node, error) {
	c, err := o.newClient()
	if err != nil {
		return nil, nil, err
	}
	var node corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return nil, nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return c, &node, nil
}
