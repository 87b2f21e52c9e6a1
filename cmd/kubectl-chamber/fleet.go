package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
	"chamber.dev/chamber/fleet/prices"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// cluster is what the commands read: the fleet model Chamber's metrics come from,
// fed once from the API objects, and the objects themselves.
type cluster struct {
	model    *fleet.Model
	snap     *fleet.Snapshot
	nodes    map[string]*corev1.Node
	gpuNodes map[string]*chamber.GPUNode
	teams    []chamber.Team
	// workloads are Kueue's Workloads; none without Kueue.
	workloads []kueue.Workload
	// heartbeats says which agents are silent.
	heartbeats *chamber.Heartbeats
}

// load lists what the fleet model reads (the same objects chamber-controller's
// inventory watches) and takes one snapshot. A GPU's state is decided by the model's
// own rules with its defaults: idle when its agent's utilization mean stays below 5%
// for 5 minutes, as chamber_gpus says.
func (o *options) load(ctx context.Context, c client.Client, withKueue bool) (*cluster, error) {
	// One record of when each agent was heard, shared with the model: at first sight a
	// report already older than its silence is silent (chamber.Heartbeats), the rule
	// every controller applies.
	heartbeats := chamber.NewHeartbeats(clock.RealClock{}, 0)
	table, err := prices.Load(o.priceTable, o.factors)
	if err != nil {
		return nil, fmt.Errorf("price the nodes: %w", err)
	}
	m := fleet.New(fleet.Options{Clock: clock.RealClock{}, Heartbeats: heartbeats, Prices: table})
	out := &cluster{model: m, nodes: map[string]*corev1.Node{}, gpuNodes: map[string]*chamber.GPUNode{}, heartbeats: heartbeats}

	var pools chamber.GPUPoolList
	if err := c.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("list GPUPools (is Chamber installed?): %w", err)
	}
	for i := range pools.Items {
		m.SetPool(&pools.Items[i])
	}
	var teams chamber.TeamList
	if err := c.List(ctx, &teams); err != nil {
		return nil, fmt.Errorf("list Teams: %w", err)
	}
	out.teams = teams.Items
	for i := range teams.Items {
		m.SetTeam(&teams.Items[i])
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		out.nodes[nodes.Items[i].Name] = &nodes.Items[i]
		m.SetNode(&nodes.Items[i])
	}
	var gpuNodes chamber.GPUNodeList
	if err := c.List(ctx, &gpuNodes); err != nil {
		return nil, fmt.Errorf("list GPUNodes: %w", err)
	}
	for i := range gpuNodes.Items {
		out.gpuNodes[gpuNodes.Items[i].Name] = &gpuNodes.Items[i]
		m.SetGPUNode(&gpuNodes.Items[i])
	}
	// The model keeps only pods bound to a node and not finished: ask for no others.
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.AndSelectors(
		fields.OneTermNotEqualSelector("spec.nodeName", ""),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)))}); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		m.SetPod(&pods.Items[i])
	}
	if withKueue {
		wls, err := loadKueue(ctx, c, m)
		if err != nil {
			return nil, err
		}
		out.workloads = wls
	}
	m.SetSynced(true)
	out.snap = m.Snapshot()
	return out, nil
}

// loadKueue feeds Kueue's queues and workloads and returns the workloads; a cluster
// without Kueue (Chamber as monitoring only) has none to feed.
func loadKueue(ctx context.Context, c client.Client, m *fleet.Model) ([]kueue.Workload, error) {
	var cqs kueue.ClusterQueueList
	if err := c.List(ctx, &cqs); meta.IsNoMatchError(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("list ClusterQueues: %w", err)
	}
	for i := range cqs.Items {
		m.SetClusterQueue(&cqs.Items[i])
	}
	var lqs kueue.LocalQueueList
	if err := c.List(ctx, &lqs); err != nil {
		return nil, fmt.Errorf("list LocalQueues: %w", err)
	}
	for i := range lqs.Items {
		m.SetLocalQueue(&lqs.Items[i])
	}
	var wls kueue.WorkloadList
	if err := c.List(ctx, &wls); err != nil {
		return nil, fmt.Errorf("list Workloads: %w", err)
	}
	for i := range wls.Items {
		m.SetWorkload(&wls.Items[i])
	}
	return wls.Items, nil
}

func (o *options) loadCluster(cmd *cobra.Command) (*cluster, error) {
	if err := o.checkOutput(); err != nil {
		return nil, err
	}
	c, err := o.newClient()
	if err != nil {
		return nil, err
	}
	ctx, cancel := o.context(cmd)
	defer cancel()
	return o.load(ctx, c, true)
}

// gpuRow is one GPU as gpus prints it.
type gpuRow struct {
	Node               string   `json:"node"`
	Index              int      `json:"index"`
	Model              string   `json:"model"`
	Pool               string   `json:"pool,omitempty"`
	State              string   `json:"state"`
	Health             string   `json:"health"`
	UtilizationPercent *float64 `json:"utilizationPercent,omitempty"`
	// Pod is namespace/name of the pod holding it.
	Pod      string   `json:"pod,omitempty"`
	Team     string   `json:"team,omitempty"`
	Tier     string   `json:"tier,omitempty"`
	Workload string   `json:"workload,omitempty"`
	Faults   []string `json:"faults,omitempty"`
	// IdleFor is how long it has been idle, when it is.
	IdleFor string `json:"idleFor,omitempty"`
	UUID    string `json:"uuid,omitempty"`
}

func (o *options) gpusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "gpus",
		Short: "Every GPU: its state (free, busy, idle, unhealthy, isolated), utilization, the pod holding it, its faults",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.loadCluster(cmd)
			if err != nil {
				return err
			}
			rows := cl.gpuRows()
			if done, err := o.structured(rows); done {
				return err
			}
			header := []string{"NODE", "GPU", "MODEL", "STATE", "UTIL", "POD", "TEAM", "FAULTS"}
			if o.wide() {
				header = append(header, "POOL", "TIER", "WORKLOAD", "IDLE FOR", "UUID")
			}
			t := newTable(o.streams.Out, header...)
			for _, r := range rows {
				cells := []string{r.Node, fmt.Sprint(r.Index), r.Model, r.State, percent(r.UtilizationPercent), orNone(r.Pod), orNone(r.Team), orNone(strings.Join(r.Faults, ","))}
				if o.wide() {
					cells = append(cells, orNone(r.Pool), orNone(r.Tier), orNone(r.Workload), orNone(r.IdleFor), r.UUID)
				}
				t.row(cells...)
			}
			return t.flush()
		},
	}
}

func (cl *cluster) gpuRows() []gpuRow {
	rows := make([]gpuRow, 0, len(cl.snap.GPUs))
	for _, g := range cl.snap.GPUs {
		r := gpuRow{Node: g.Node, Index: g.Index, Model: g.Model, Pool: g.Pool, State: g.State.String(), Health: string(g.Health),
			Team: g.Team, Tier: g.Tier, Workload: g.Workload, UUID: g.UUID}
		if g.HasUtilization {
			r.UtilizationPercent = &g.UtilizationPercent
		}
		if g.PodName != "" {
			r.Pod = g.PodNamespace + "/" + g.PodName
		}
		if !g.IdleSince.IsZero() {
			r.IdleFor = age(cl.snap.Time.Sub(g.IdleSince))
		}
		if gn := cl.gpuNodes[g.Node]; gn != nil {
			for _, s := range gn.Status.GPUs {
				if int(s.Index) == g.Index {
					for _, f := range s.Faults {
						r.Faults = append(r.Faults, f.Reason)
					}
				}
			}
		}
		rows = append(rows, r)
	}
	return rows
}

func percent(p *float64) string {
	if p == nil {
		return "<unknown>"
	}
	return fmt.Sprintf("%.0f%%", *p)
}

// nodeRow is one GPU node as nodes prints it.
type nodeRow struct {
	Name      string `json:"name"`
	Pool      string `json:"pool,omitempty"`
	Model     string `json:"model"`
	GPUs      int    `json:"gpus"`
	Free      int    `json:"free"`
	Busy      int    `json:"busy"`
	Idle      int    `json:"idle"`
	Unhealthy int    `json:"unhealthy"`
	Isolated  int    `json:"isolated"`
	// Isolation is why Chamber (or an operator) took the node out of service:
	// Chamber's recorded fault, else tainted or cordoned.
	Isolation string `json:"isolation,omitempty"`
	// Source is who reports its GPUs (Agent or DCGM); Report is how long ago it last
	// wrote, or "none".
	Source string `json:"source,omitempty"`
	Report string `json:"lastReport"`
	Silent bool   `json:"silent,omitempty"`
	// PricePerGPUHour is what an hour of one of its GPUs costs, PriceSource where that
	// comes from (table:, override:, pool:; empty: no price), PriceNote why the price
	// table did not price it.
	PricePerGPUHour float64 `json:"pricePerGPUHour"`
	PriceSource     string  `json:"priceSource,omitempty"`
	PriceNote       string  `json:"priceNote,omitempty"`
}

func (o *options) nodesCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "Every GPU node: its GPUs by state, why it is isolated, when its agent last reported",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.loadCluster(cmd)
			if err != nil {
				return err
			}
			rows := cl.nodeRows(o.now())
			if done, err := o.structured(rows); done {
				return err
			}
			header := []string{"NODE", "MODEL", "GPUS", "FREE", "BUSY", "IDLE", "UNHEALTHY", "ISOLATED", "REPORT", "ISOLATION"}
			if o.wide() {
				header = append(header, "POOL", "SOURCE", "PRICE/GPU-H", "PRICE SOURCE")
			}
			t := newTable(o.streams.Out, header...)
			for _, r := range rows {
				report := r.Report
				if r.Silent {
					report += " (silent)"
				}
				cells := []string{r.Name, r.Model, fmt.Sprint(r.GPUs), fmt.Sprint(r.Free), fmt.Sprint(r.Busy), fmt.Sprint(r.Idle),
					fmt.Sprint(r.Unhealthy), fmt.Sprint(r.Isolated), report, orNone(r.Isolation)}
				if o.wide() {
					cells = append(cells, orNone(r.Pool), orNone(r.Source), priceCell(r.PricePerGPUHour, r.PriceSource), orNone(r.PriceSource))
				}
				t.row(cells...)
			}
			return t.flush()
		},
	}
}

func (cl *cluster) nodeRows(now time.Time) []nodeRow {
	rows := make([]nodeRow, 0, len(cl.snap.Nodes))
	for _, n := range cl.snap.Nodes {
		r := nodeRow{Name: n.Name, Pool: n.Pool, Model: n.Model, GPUs: n.GPUs.Total(),
			Free: n.GPUs[fleet.Free], Busy: n.GPUs[fleet.Busy], Idle: n.GPUs[fleet.Idle],
			Unhealthy: n.GPUs[fleet.Unhealthy], Isolated: n.GPUs[fleet.Isolated], Report: "none",
			PricePerGPUHour: n.PricePerGPUHour, PriceSource: n.PriceSource, PriceNote: n.PriceNote}
		r.Isolation = isolation(cl.nodes[n.Name], n.IsolationReason)
		if gn := cl.gpuNodes[n.Name]; gn != nil {
			r.Source = string(gn.Status.Source)
			if r.Source == "" && gn.Status.LastHeartbeatTime != nil {
				r.Source = string(chamber.SourceAgent)
			}
			if hb := gn.Status.LastHeartbeatTime; hb != nil {
				r.Report = age(now.Sub(hb.Time)) + " ago"
				r.Silent = cl.heartbeats.Silent(gn, now)
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// priceCell is a price per GPU-hour in the table's currency, or none without one.
func priceCell(price float64, source string) string {
	if source == "" {
		return "<none>"
	}
	return fmt.Sprintf("%.2f", price)
}

// isolation says why a node is out of service: the fault Chamber recorded, else how.
func isolation(node *corev1.Node, how string) string {
	if node == nil {
		return how
	}
	a := node.Annotations
	if reason := a[chamber.AnnotationIsolationReason]; reason != "" && a[chamber.AnnotationIsolatedAt] != "" {
		out := reason
		if level := a[chamber.AnnotationIsolationLevel]; level == string(chamber.IsolateGPU) {
			out += " (GPUs " + a[chamber.AnnotationIsolatedGPUs] + ")"
		}
		if a[chamber.AnnotationIsolationPreflight] != "" {
			out += ", preflight running"
		}
		return out
	}
	return how
}

// statusView is the fleet in one screen.
type statusView struct {
	GPUs       int         `json:"gpus"`
	Nodes      int         `json:"nodes"`
	Counts     stateCounts `json:"counts"`
	Efficiency *float64    `json:"efficiency,omitempty"`
	// IdleCost is what the idle GPUs cost an hour at their nodes' prices.
	IdleCost float64       `json:"idleCostPerHour"`
	Pools    []poolRow     `json:"pools"`
	Isolated []nodeRow     `json:"isolatedNodes,omitempty"`
	Teams    []teamWarning `json:"teamWarnings,omitempty"`
	Pending  int           `json:"pendingWorkloads"`
	// PendingGPUs are the GPUs the waiting workloads ask for.
	PendingGPUs int64 `json:"pendingGPUs"`
	// Paused are the workloads Chamber keeps paused (idle reclaim, its interactive
	// idle time limit, room for big jobs) and the GPUs they would hold.
	Paused     int   `json:"pausedWorkloads"`
	PausedGPUs int64 `json:"pausedGPUs"`
	// IdleReclaims counts idle reclaim's evictions of the workloads there are now
	// (each Workload keeps its count), and ReclaimedGPUHours the idle GPU-hours they
	// had held when reclaimed.
	IdleReclaims      int     `json:"idleReclaims"`
	ReclaimedGPUHours float64 `json:"reclaimedGPUHours"`
}

type stateCounts struct {
	Free      int `json:"free"`
	Busy      int `json:"busy"`
	Idle      int `json:"idle"`
	Unhealthy int `json:"unhealthy"`
	Isolated  int `json:"isolated"`
}

func countsOf(c fleet.Counts) stateCounts {
	return stateCounts{Free: c[fleet.Free], Busy: c[fleet.Busy], Idle: c[fleet.Idle], Unhealthy: c[fleet.Unhealthy], Isolated: c[fleet.Isolated]}
}

type poolRow struct {
	Pool        string      `json:"pool"`
	Model       string      `json:"model"`
	GPUs        int         `json:"gpus"`
	Counts      stateCounts `json:"counts"`
	Utilization *float64    `json:"utilization,omitempty"`
}

// teamWarning is a team over its budget (or near it), from the Team's conditions.
type teamWarning struct {
	Team    string `json:"team"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (o *options) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "The fleet in one screen: GPUs by state per pool and model, efficiency, what idle GPUs cost, isolated nodes, teams over budget",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := o.loadCluster(cmd)
			if err != nil {
				return err
			}
			v := cl.status(o.now())
			if done, err := o.structured(v); done {
				return err
			}
			return o.printStatus(v)
		},
	}
}

func (cl *cluster) status(now time.Time) statusView {
	v := statusView{Nodes: len(cl.snap.Nodes)}
	var all fleet.Counts
	for _, pm := range cl.snap.PoolModels {
		if pm.GPUs.Total() == 0 {
			continue
		}
		r := poolRow{Pool: pm.Pool, Model: pm.Model, GPUs: pm.GPUs.Total(), Counts: countsOf(pm.GPUs)}
		if u, ok := pm.Utilization(); ok {
			r.Utilization = &u
		}
		v.Pools = append(v.Pools, r)
		for _, s := range fleet.States {
			all[s] += pm.GPUs[s]
		}
	}
	v.GPUs, v.Counts = all.Total(), countsOf(all)
	if e, ok := cl.snap.Efficiency(); ok {
		v.Efficiency = &e
	}
	price := make(map[string]float64, len(cl.snap.Nodes))
	for _, n := range cl.snap.Nodes {
		price[n.Name] = n.PricePerGPUHour
	}
	for _, g := range cl.snap.GPUs {
		if g.State == fleet.Idle {
			v.IdleCost += price[g.Node]
		}
	}
	for _, r := range cl.nodeRows(now) {
		if r.Isolation != "" || r.Isolated > 0 {
			v.Isolated = append(v.Isolated, r)
		}
	}
	for _, t := range cl.teams {
		for _, c := range t.Status.Conditions {
			if (c.Type == chamber.ConditionBudgetExceeded || c.Type == chamber.ConditionBudgetWarning) && c.Status == "True" {
				v.Teams = append(v.Teams, teamWarning{Team: t.Name, Reason: c.Type, Message: c.Message})
			}
		}
	}
	for _, p := range cl.snap.Pending {
		v.Pending += p.Count
		v.PendingGPUs += p.GPUs
	}
	for i := range cl.workloads {
		wl := &cl.workloads[i]
		if pausedByChamber(wl) {
			v.Paused++
			v.PausedGPUs += chamberkueue.WorkloadGPUs(wl)
		}
		n, _ := strconv.Atoi(wl.Annotations[chamber.AnnotationIdleReclaims])
		v.IdleReclaims += n
		h, _ := strconv.ParseFloat(wl.Annotations[chamber.AnnotationIdleReclaimedGPUHours], 64)
		v.ReclaimedGPUHours += max(h, 0)
	}
	return v
}

// count says n things: "1 GPU", "2 GPUs".
func count[N int | int64](n N, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func (o *options) printStatus(v statusView) error {
	out := o.streams.Out
	eff := "unknown"
	if v.Efficiency != nil {
		eff = fmt.Sprintf("%.0f%%", *v.Efficiency*100)
	}
	c := v.Counts
	fmt.Fprintf(out, "%s on %s: %d busy, %d idle, %d free, %d unhealthy, %d isolated. Efficiency %s. %s waiting for %s.\n",
		count(v.GPUs, "GPU"), count(v.Nodes, "node"), c.Busy, c.Idle, c.Free, c.Unhealthy, c.Isolated, eff, count(v.Pending, "workload"), count(v.PendingGPUs, "GPU"))
	if v.IdleCost > 0 {
		fmt.Fprintf(out, "Idle GPUs cost %.2f an hour at their pools' prices.\n", v.IdleCost)
	}
	if v.Paused > 0 || v.IdleReclaims > 0 {
		fmt.Fprintf(out, "Chamber keeps %s paused (%s given to waiting work or kept free for it); idle reclaim has evicted the workloads there are now %s, after they had held GPUs idle for %.1f GPU-hours.\n",
			count(v.Paused, "workload"), count(v.PausedGPUs, "GPU"), count(v.IdleReclaims, "time"), v.ReclaimedGPUHours)
	}
	fmt.Fprintln(out)
	t := newTable(out, "POOL", "MODEL", "GPUS", "FREE", "BUSY", "IDLE", "UNHEALTHY", "ISOLATED", "UTIL")
	for _, p := range v.Pools {
		util := "<unknown>"
		if p.Utilization != nil {
			util = fmt.Sprintf("%.0f%%", *p.Utilization*100)
		}
		t.row(orNone(p.Pool), p.Model, fmt.Sprint(p.GPUs), fmt.Sprint(p.Counts.Free), fmt.Sprint(p.Counts.Busy), fmt.Sprint(p.Counts.Idle),
			fmt.Sprint(p.Counts.Unhealthy), fmt.Sprint(p.Counts.Isolated), util)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(v.Isolated) > 0 {
		fmt.Fprintln(out, "\nOut of service:")
		t := newTable(out, "NODE", "POOL", "UNHEALTHY", "ISOLATED", "WHY")
		for _, r := range v.Isolated {
			t.row(r.Name, orNone(r.Pool), fmt.Sprint(r.Unhealthy), fmt.Sprint(r.Isolated), orNone(r.Isolation))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(v.Teams) > 0 {
		fmt.Fprintln(out, "\nBudgets:")
		slices.SortFunc(v.Teams, func(a, b teamWarning) int { return strings.Compare(a.Team, b.Team) })
		t := newTable(out, "TEAM", "CONDITION", "MESSAGE")
		for _, w := range v.Teams {
			t.row(w.Team, w.Reason, w.Message)
		}
		return t.flush()
	}
	return nil
}
