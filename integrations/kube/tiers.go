package kube

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// PriorityTier is a named workload priority.
type PriorityTier struct {
	Name  string
	Value int32
}

// DefaultPriorityTiers are the tiers Chamber ships: jobs pick one with the
// kueue.x-k8s.io/priority-class label.
var DefaultPriorityTiers = []PriorityTier{
	{Name: "production", Value: 1000},
	{Name: "standard", Value: 500},
	{Name: "preemptible", Value: 100},
}

// ParsePriorityTiers parses "production=1000,standard=500,preemptible=100": each
// name a WorkloadPriorityClass name (a DNS subdomain), once; each value a whole number
// that fits Kueue's int32.
func ParsePriorityTiers(s string) ([]PriorityTier, error) {
	var tiers []PriorityTier
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 32)
		switch {
		case !ok || err != nil || name == "":
			return nil, fmt.Errorf("priority tier %q: want name=value, the value a whole number (at most %d), e.g. production=1000", part, math.MaxInt32)
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			return nil, fmt.Errorf("priority tier %q: %q is not a WorkloadPriorityClass name: %s", part, name, strings.Join(validation.IsDNS1123Subdomain(name), "; "))
		case seen[name]:
			return nil, fmt.Errorf("priority tier %q: %s is given twice", part, name)
		}
		seen[name] = true
		tiers = append(tiers, PriorityTier{Name: name, Value: int32(v)})
	}
	return tiers, nil
}
