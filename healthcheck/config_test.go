package healthcheck

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := map[string]struct {
		change    func(*Config)
		wantField string // "" for a valid config
	}{
		"defaults":                   {change: func(*Config) {}},
		"ignored XID reason":         {change: func(c *Config) { c.IgnoredReasons = []Reason{"XID74", ReasonThermalThrottle} }},
		"zero poll interval":         {change: func(c *Config) { c.PollInterval = 0 }, wantField: "pollInterval"},
		"event wait too long":        {change: func(c *Config) { c.EventWaitTimeout = time.Hour }, wantField: "eventWaitTimeout"},
		"no recovery polls":          {change: func(c *Config) { c.RecoveryPolls = 0 }, wantField: "recoveryPolls"},
		"no throttle polls":          {change: func(c *Config) { c.ThrottlePolls = 0 }, wantField: "throttlePolls"},
		"no read error polls":        {change: func(c *Config) { c.ReadErrorPolls = -1 }, wantField: "readErrorPolls"},
		"zero ECC rate":              {change: func(c *Config) { c.CorrectableECCPerMinute = 0 }, wantField: "correctableECCPerMinute"},
		"zero PCIe rate":             {change: func(c *Config) { c.PCIeReplaysPerMinute = 0 }, wantField: "pcieReplaysPerMinute"},
		"zero NVLink rate":           {change: func(c *Config) { c.NVLinkErrorsPerMinute = -1 }, wantField: "nvlinkErrorsPerMinute"},
		"zero retired pages limit":   {change: func(c *Config) { c.RetiredPagesLimit = 0 }, wantField: "retiredPagesLimit"},
		"unknown reason in the list": {change: func(c *Config) { c.IgnoredReasons = []Reason{"Overheating"} }, wantField: "ignoredReasons"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			switch {
			case tc.wantField == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.wantField != "" && (err == nil || !strings.Contains(err.Error(), tc.wantField)):
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.wantField)
			}
		})
	}
}
