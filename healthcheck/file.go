package healthcheck

import (
	"fmt"
	"time"

	"sigs.k8s.io/yaml"
)

// File is the health rules' configuration file, YAML or JSON (the agent's
// --health-config; the chart's agent.health, mounted from a ConfigMap). Each field
// sets the Config field of the same name; a field left out keeps its default.
//
//	throttlePolls: 12            # a site whose GPUs run hot under load
//	correctableECCPerMinute: 50
//	ignoredXIDs: [109]
//	ignoredReasons: [NVLinkErrors]  # NVLink unused here
type File struct {
	EventWaitTimeout        string   `json:"eventWaitTimeout,omitempty"`
	RecoveryPolls           *int     `json:"recoveryPolls,omitempty"`
	ThrottlePolls           *int     `json:"throttlePolls,omitempty"`
	ReadErrorPolls          *int     `json:"readErrorPolls,omitempty"`
	CorrectableECCPerMinute *float64 `json:"correctableECCPerMinute,omitempty"`
	PCIeReplaysPerMinute    *float64 `json:"pcieReplaysPerMinute,omitempty"`
	NVLinkErrorsPerMinute   *float64 `json:"nvlinkErrorsPerMinute,omitempty"`
	RetiredPagesLimit       *int     `json:"retiredPagesLimit,omitempty"`
	IgnoredXIDs             []uint64 `json:"ignoredXIDs,omitempty"`
	IgnoredReasons          []Reason `json:"ignoredReasons,omitempty"`
}

// WithFile is c with the configuration file's fields applied, checked (Validate).
// A field the file does not know, a value of the wrong type or out of range is an
// error that names the field as the file spells it.
func (c Config) WithFile(data []byte) (Config, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return c, err
	}
	if f.EventWaitTimeout != "" {
		d, err := time.ParseDuration(f.EventWaitTimeout)
		if err != nil {
			return c, fmt.Errorf("eventWaitTimeout: %q is not a duration such as 5s", f.EventWaitTimeout)
		}
		c.EventWaitTimeout = d
	}
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	setRate := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&c.RecoveryPolls, f.RecoveryPolls)
	set(&c.ThrottlePolls, f.ThrottlePolls)
	set(&c.ReadErrorPolls, f.ReadErrorPolls)
	set(&c.RetiredPagesLimit, f.RetiredPagesLimit)
	setRate(&c.CorrectableECCPerMinute, f.CorrectableECCPerMinute)
	setRate(&c.PCIeReplaysPerMinute, f.PCIeReplaysPerMinute)
	setRate(&c.NVLinkErrorsPerMinute, f.NVLinkErrorsPerMinute)
	if f.IgnoredXIDs != nil {
		c.IgnoredXIDs = f.IgnoredXIDs
	}
	if f.IgnoredReasons != nil {
		c.IgnoredReasons = f.IgnoredReasons
	}
	return c, c.Validate()
}
