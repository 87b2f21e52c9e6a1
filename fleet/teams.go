package fleet

import (
	"time"

	chamber "chamber.dev/chamber/api/v1alpha1"
	chamberkueue "chamber.dev/chamber/integrations/kueue"
)

// pool is what the fleet needs of a GPUPool.
type pool struct {
	name         string
	nodeLabels   map[string]string
	productLabel string
	prices       map[string]float64 // per GPU-hour, by model
	// committed are the models priced Reserved or Amortized: the pool's price wins
	// over the price table's.
	committed map[string]bool
	flavors   map[string]string // ResourceFlavor -> model
	volcano   bool              // its teams are Volcano Queues, not ClusterQueues
}

// SetPool records a GPUPool: which nodes it selects, their model label, and its
// prices. Counters up to now are kept at the old prices.
func (m *Model) SetPool(obj *chamber.GPUPool) {
	p := &pool{
		name:         obj.Name,
		nodeLabels:   obj.Spec.NodeLabels,
		productLabel: obj.Spec.ProductLabel,
		prices:       obj.PricesPerGPUHour(),
		committed:    map[string]bool{},
		flavors:      map[string]string{},
		volcano:      obj.UsesVolcano(),
	}
	if p.productLabel == "" {
		p.productLabel = chamber.DefaultProductLabel
	}
	for _, price := range obj.Spec.Prices {
		p.flavors[chamberkueue.FlavorName(obj.Name, price.Model)] = price.Model
		p.committed[price.Model] = price.Kind == chamber.PriceReserved || price.Kind == chamber.PriceAmortized
	}
	for _, model := range obj.Status.Models {
		p.flavors[model.Flavor] = model.Model
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.accountAll(now)
	m.pools[obj.Name] = p
	m.poolsChanged()
}

// DeletePool forgets a GPUPool; its nodes belong to no pool (or another) from now.
func (m *Model) DeletePool(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accountAll(m.clock.Now())
	delete(m.pools, name)
	m.poolsChanged()
}

func (m *Model) poolsChanged() {
	for _, n := range m.nodes {
		m.resolveNode(n)
	}
	m.rebuildFlavors()
}

// team is what the fleet needs of a Team.
type team struct {
	name         string
	pool         string
	namespaces   []string
	clusterQueue string
	created      time.Time
	quotas       map[string]float64 // by model, from the spec
	lending      map[string]float64 // lending limits by model, from the spec (none: no limit)
}

// SetTeam records a Team: its namespaces and ClusterQueue say whose the GPUs are.
func (m *Model) SetTeam(obj *chamber.Team) {
	t := &team{
		name:         obj.Name,
		pool:         obj.Spec.Pool,
		namespaces:   obj.Spec.Namespaces,
		clusterQueue: obj.Name,
		created:      obj.CreationTimestamp.Time,
		quotas:       map[string]float64{},
		lending:      map[string]float64{},
	}
	if obj.Spec.ClusterQueue != "" {
		t.clusterQueue = obj.Spec.ClusterQueue
	}
	for _, q := range obj.Spec.Quotas {
		t.quotas[q.Model] = float64(q.GPUs)
		if q.LendingLimit != nil {
			t.lending[q.Model] = float64(*q.LendingLimit)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	m.accountAll(m.clock.Now())
	m.teams[obj.Name] = t
	m.teamsChanged()
}

// DeleteTeam forgets a Team; its GPUs belong to no team from now.
func (m *Model) DeleteTeam(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accountAll(m.clock.Now())
	delete(m.teams, name)
	m.teamsChanged()
}

// teamsChanged rebuilds the namespace and ClusterQueue maps. A namespace claimed by
// two teams is the older team's, as the Team controller decides.
func (m *Model) teamsChanged() {
	m.teamGen++
	clear(m.namespaceTeam)
	clear(m.queueTeam)
	owner := map[string]*team{}
	for _, t := range m.teams {
		m.queueTeam[t.clusterQueue] = t.name
		for _, ns := range t.namespaces {
			if o := owner[ns]; o == nil || t.created.Before(o.created) || (t.created.Equal(o.created) && t.name < o.name) {
				owner[ns] = t
			}
		}
	}
	for ns, t := range owner {
		m.namespaceTeam[ns] = t.name
	}
	m.rebuildFlavors()
}

// rebuildFlavors maps ResourceFlavors to GPU models: the pools' own, and the flavor
// Chamber would make for each model a team has quota of.
func (m *Model) rebuildFlavors() {
	clear(m.flavorModel)
	for _, t := range m.teams {
		for model := range t.quotas {
			m.flavorModel[chamberkueue.FlavorName(t.pool, model)] = model
		}
	}
	for _, p := range m.pools {
		for flavor, model := range p.flavors {
			m.flavorModel[flavor] = model
		}
	}
}

// modelOfFlavor names the GPU model of a flavor; a flavor Chamber did not make (an
// adopted ClusterQueue's) is shown by its own name.
func (m *Model) modelOfFlavor(flavor string) string {
	if model, ok := m.flavorModel[flavor]; ok {
		return model
	}
	return flavor
}
