package fleet_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	chamber "chamber.dev/chamber/api/v1alpha1"
	"chamber.dev/chamber/fleet"
	ft "chamber.dev/chamber/fleet/fleettest"
	"chamber.dev/chamber/fleet/prices"
)

// Each node is costed at its own price: two nodes of one pool, one on-demand and one
// spot, cost what their instances do; a node the table does not price costs the
// pool's price and says why; a pool's Reserved price wins over the table.
func TestNodePrices(t *testing.T) {
	override, err := prices.Parse("prices.csv", []byte(
		"provider,instance_type,gpus,gpu_model,region,price_per_instance_hour,currency,source,date\n"+
			"aws,p5.48xlarge,8,H100-80GB,*,57.6,USD,,\n")) // 7.2 a GPU-hour
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakeClock(start)
	m := fleet.New(fleet.Options{Clock: clock, Prices: prices.New(override, prices.Factors{Spot: 0.5, Reserved: 0.75})})
	m.SetPool(ft.MakePool("main", nil, map[string]string{ft.H100: "1.8"}))
	reserved := ft.MakePool("owned", map[string]string{"rack": "a"}, map[string]string{ft.H100: "0.9"})
	reserved.Spec.Prices[0].Kind = chamber.PriceReserved
	m.SetPool(reserved)
	m.SetTeam(ft.MakeTeam("vision", "main", start, "vision"))
	m.SetTeam(ft.MakeTeam("owners", "owned", start, "owners"))
	p5 := func(name string) *ft.NodeWrapper {
		return ft.MakeNode(name, 1).ProviderID("aws:///us-east-1a/i-"+name).
			Label(prices.LabelInstanceType, "p5.48xlarge").Label(prices.LabelRegion, "us-east-1")
	}
	m.SetNode(p5("on-demand").Obj())
	m.SetNode(p5("spot").Label(prices.LabelKarpenterCapacity, "spot").Obj())
	m.SetNode(ft.MakeNode("unknown", 1).ProviderID("aws:///us-east-1a/i-3").Label(prices.LabelInstanceType, "p9.large").Obj())
	m.SetNode(p5("rack").Label("rack", "a").Obj())
	m.SetPod(ft.MakePod("vision", "a", 1).On("on-demand", start).Obj())
	m.SetPod(ft.MakePod("vision", "b", 1).On("spot", start).Obj())
	m.SetPod(ft.MakePod("vision", "c", 1).On("unknown", start).Obj())
	m.SetPod(ft.MakePod("owners", "d", 1).On("rack", start).Obj())
	clock.Step(time.Hour)
	snap := m.Snapshot()

	type price struct {
		Node, Pool, Source, Note string
		PerGPUHour               float64
	}
	var got []price
	for _, n := range snap.Nodes {
		got = append(got, price{n.Name, n.Pool, n.PriceSource, n.PriceNote, n.PricePerGPUHour})
	}
	want := []price{
		{"on-demand", "main", "override:aws/p5.48xlarge", "", 7.2},
		{"rack", "owned", "pool:owned", "", 0.9},
		{"spot", "main", "override:aws/p5.48xlarge/spot", "", 3.6},
		{"unknown", "main", "pool:main", "aws/p9.large is not in the price table", 1.8},
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("node prices (-want +got):\n%s", diff)
	}
	wantUsage := []fleet.Usage{
		{Team: "owners", Model: ft.H100, GPUSeconds: 3600, Cost: 0.9},
		{Team: "vision", Model: ft.H100, GPUSeconds: 3 * 3600, Cost: 7.2 + 3.6 + 1.8},
	}
	if diff := cmp.Diff(wantUsage, snap.Usage, approx); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}

	// The node's labels change (Karpenter's spot node replaced by an on-demand one of
	// the same name): its price changes from then on.
	m.SetNode(p5("spot").Obj())
	clock.Step(time.Hour)
	wantUsage[0].GPUSeconds, wantUsage[0].Cost = 2*3600, 2*0.9
	wantUsage[1].GPUSeconds, wantUsage[1].Cost = 6*3600, 2*(7.2+1.8)+3.6+7.2
	if diff := cmp.Diff(wantUsage, m.Snapshot().Usage, approx); diff != "" {
		t.Errorf("usage after the relabel (-want +got):\n%s", diff)
	}
}

// Without a table of its own the model prices nodes from the shipped table; a node
// without a price anywhere costs nothing and says why.
func TestShippedPrices(t *testing.T) {
	m := fleet.New(fleet.Options{Clock: clocktesting.NewFakeClock(start)})
	m.SetNode(ft.MakeNode("gke", 8).ProviderID("gce://project/us-central1-a/gke").Label(prices.LabelInstanceType, "a3-highgpu-8g").Obj())
	m.SetNode(ft.MakeNode("rack", 8).Obj())
	snap := m.Summary()
	type price struct {
		Node, Source, Note string
		PerGPUHour         float64
	}
	var got []price
	for _, n := range snap.Nodes {
		got = append(got, price{n.Name, n.PriceSource, n.PriceNote, n.PricePerGPUHour})
	}
	want := []price{
		{"gke", "table:gcp/a3-highgpu-8g", "", 88.49 / 8},
		{"rack", "", "no cloud provider (providerID aws://, gce:// or azure://, or the provider's labels)", 0},
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("node prices (-want +got):\n%s", diff)
	}
}
