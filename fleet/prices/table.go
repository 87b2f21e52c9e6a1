package prices

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Factors of the on-demand price for capacity sold otherwise. The defaults are rough:
// spot prices move by the hour and reservations by contract; set your own.
const (
	DefaultSpotFactor     = 0.4
	DefaultReservedFactor = 0.6
)

// Factors scale the on-demand price of spot and reserved capacity.
type Factors struct {
	Spot, Reserved float64
}

// DefaultFactors are the rough defaults.
func DefaultFactors() Factors {
	return Factors{Spot: DefaultSpotFactor, Reserved: DefaultReservedFactor}
}

// Validate says which factor is not a share of the on-demand price.
func (f Factors) Validate() error {
	for _, c := range []struct {
		name  string
		value float64
	}{{"spot", f.Spot}, {"reserved", f.Reserved}} {
		if !(c.value > 0 && c.value <= 1) {
			return fmt.Errorf("the %s price factor must be above 0 and at most 1 (a share of the on-demand price), got %v", c.name, c.value)
		}
	}
	return nil
}

// Sources of a price, as a node's price source begins.
const (
	// SourceTable: a row of the shipped table, table:<provider>/<instance-type>[/spot].
	SourceTable = "table:"
	// SourceOverride: a row of the user's table, override:<provider>/<instance-type>[/spot].
	SourceOverride = "override:"
	// SourcePool: the GPUPool's spec.prices for the node's model, pool:<pool>.
	SourcePool = "pool:"
)

// Table prices instances: the user's rows over the shipped ones.
type Table struct {
	rows    map[key]entry
	factors Factors
}

type entry struct {
	Row
	source string // SourceTable or SourceOverride
}

// New is the shipped table with the user's rows over it, at the factors given.
func New(override []Row, f Factors) *Table {
	t := &Table{rows: map[key]entry{}, factors: f}
	for _, r := range shipped() {
		t.rows[keyOf(r.Provider, r.InstanceType, r.Region)] = entry{r, SourceTable}
	}
	for _, r := range override {
		t.rows[keyOf(r.Provider, r.InstanceType, r.Region)] = entry{r, SourceOverride}
	}
	return t
}

// Load is New with the user's rows read from a file; no file, the shipped table alone.
// The error names the file, the line and what to fix.
func Load(path string, f Factors) (*Table, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return New(nil, f), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the price table: %w", err)
	}
	rows, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	return New(rows, f), nil
}

var defaultTable = sync.OnceValue(func() *Table { return New(nil, DefaultFactors()) })

// Default is the shipped table at the default factors.
func Default() *Table { return defaultTable() }

// Factors are the table's factors.
func (t *Table) Factors() Factors { return t.factors }

// Price is a GPU-hour's price and where it comes from.
type Price struct {
	PerGPUHour float64
	// Source is SourceTable or SourceOverride followed by
	// <provider>/<instance-type>[/<capacity>]; the fleet model adds SourcePool.
	Source string
}

// Find prices a GPU-hour on the instance: the row of its region, else the provider's
// reference row (AnyRegion), user's rows first. miss says why there is no price: a
// label missing, or an instance type the table lacks.
func (t *Table) Find(in Instance) (p Price, miss string) {
	switch {
	case in.Provider == "":
		return Price{}, "no cloud provider (providerID aws://, gce:// or azure://, or the provider's labels)"
	case in.Type == "":
		return Price{}, "no " + LabelInstanceType + " label"
	}
	e, ok := t.rows[keyOf(in.Provider, in.Type, in.Region)]
	if !ok {
		e, ok = t.rows[keyOf(in.Provider, in.Type, AnyRegion)]
	}
	if !ok {
		return Price{}, fmt.Sprintf("%s/%s is not in the price table", in.Provider, in.Type)
	}
	p = Price{PerGPUHour: e.PerGPUHour(), Source: e.source + in.Provider + "/" + e.InstanceType}
	switch in.Capacity {
	case Spot:
		p.PerGPUHour *= t.factors.Spot
		p.Source += "/" + string(Spot)
	case Reserved:
		p.PerGPUHour *= t.factors.Reserved
		p.Source += "/" + string(Reserved)
	}
	return p, ""
}

// Capacity is how the cloud sells the instance.
type Capacity string

// Capacity types.
const (
	OnDemand Capacity = "on-demand"
	Spot     Capacity = "spot"
	Reserved Capacity = "reserved"
)

// The labels a node's instance is read from: Kubernetes' well-known labels, and the
// capacity labels of the providers and of Karpenter.
const (
	LabelInstanceType     = "node.kubernetes.io/instance-type"
	LabelInstanceTypeBeta = "beta.kubernetes.io/instance-type"
	LabelRegion           = "topology.kubernetes.io/region"
	LabelRegionBeta       = "failure-domain.beta.kubernetes.io/region"

	// LabelKarpenterCapacity: spot, on-demand or reserved.
	LabelKarpenterCapacity = "karpenter.sh/capacity-type"
	// LabelEKSCapacity (EKS managed node groups): ON_DEMAND, SPOT or CAPACITY_BLOCK.
	LabelEKSCapacity = "eks.amazonaws.com/capacityType"
	// LabelGKESpot and LabelGKEPreemptible: "true" on Spot and preemptible VMs.
	LabelGKESpot        = "cloud.google.com/gke-spot"
	LabelGKEPreemptible = "cloud.google.com/gke-preemptible"
	// LabelGKEProvisioning: standard, spot, or flex-start.
	LabelGKEProvisioning = "cloud.google.com/gke-provisioning"
	// LabelAKSPriority: spot on Spot node pools.
	LabelAKSPriority = "kubernetes.azure.com/scalesetpriority"
)

// Instance is what a node says of the machine under it.
type Instance struct {
	// Provider is AWS, GCP, Azure or empty (on-premises, or unknown).
	Provider string
	Type     string
	Region   string
	// Capacity is OnDemand when empty.
	Capacity Capacity
}

// providerIDs maps a providerID's scheme to its provider.
var providerIDs = map[string]string{"aws": AWS, "gce": GCP, "azure": Azure}

// providerLabels are label prefixes only one provider's nodes carry.
var providerLabels = []struct{ prefix, provider string }{
	{"eks.amazonaws.com/", AWS},
	{"karpenter.k8s.aws/", AWS},
	{"cloud.google.com/gke-", GCP},
	{"kubernetes.azure.com/", Azure},
}

// InstanceOf reads the node's instance from its spec.providerID and labels.
func InstanceOf(providerID string, labels map[string]string) Instance {
	in := Instance{
		Type:     labels[LabelInstanceType],
		Region:   labels[LabelRegion],
		Capacity: capacityOf(labels),
	}
	if in.Type == "" {
		in.Type = labels[LabelInstanceTypeBeta]
	}
	if in.Region == "" {
		in.Region = labels[LabelRegionBeta]
	}
	if scheme, _, ok := strings.Cut(providerID, "://"); ok {
		in.Provider = providerIDs[scheme]
	}
	for name := range labels {
		if in.Provider != "" {
			break
		}
		for _, p := range providerLabels {
			if strings.HasPrefix(name, p.prefix) {
				in.Provider = p.provider
				break
			}
		}
	}
	return in
}

func capacityOf(labels map[string]string) Capacity {
	switch strings.ToLower(labels[LabelKarpenterCapacity]) {
	case "spot":
		return Spot
	case "reserved":
		return Reserved
	}
	switch labels[LabelEKSCapacity] {
	case "SPOT":
		return Spot
	case "CAPACITY_BLOCK":
		return Reserved
	}
	if labels[LabelGKESpot] == "true" || labels[LabelGKEPreemptible] == "true" || labels[LabelGKEProvisioning] == "spot" {
		return Spot
	}
	if strings.EqualFold(labels[LabelAKSPriority], "spot") {
		return Spot
	}
	return OnDemand
}
