package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
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
}

func (o *options) teamsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "teams",
		Short: "Every team: quota, GPUs in use, borrowed and lent, idle, workloads waiting, budget spent",
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
			t := newTable(o.streams.Out, "TEAM", "POOL", "MODEL", "QUOTA", "IN USE", "BORROWED", "LENT", "IDLE", "PENDING", "BUDGET")
			for _, r := range rows {
				quota := fmt.Sprint(r.Quota)
				if r.Withheld > 0 {
					quota += fmt.Sprintf(" (-%d)", r.Withheld)
				}
				t.row(r.Team, r.Pool, r.Model, quota, fmt.Sprint(r.InUse), fmt.Sprint(r.Borrowed), fmt.Sprint(r.Lent), fmt.Sprint(r.Idle),
					fmt.Sprint(r.Pending), orNone(r.Budget))
			}
			return t.flush()
		},
	}
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
		budget := budgetUsed(&t)
		for _, m := range t.Status.Models {
			rows = append(rows, teamRow{Team: t.Name, Pool: t.Spec.Pool, Model: m.Model, Quota: m.Quota, Withheld: m.Withheld,
				InUse: m.InUse, Borrowed: m.Borrowed, Lent: m.Lent, Idle: idle[[2]string{t.Name, m.Model}],
				Pending: t.Status.PendingWorkloads, Budget: budget})
		}
		if len(t.Status.Models) == 0 {
			rows = append(rows, teamRow{Team: t.Name, Pool: t.Spec.Pool, Pending: t.Status.PendingWorkloads, Budget: budget})
		}
	}
	return rows
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
