package healthcheck

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config holds the thresholds of the health rules. The zero value is not usable; start
// from DefaultConfig.
type Config struct {
	// PollInterval is how often every GPU is read. Default 10s.
	PollInterval time.Duration
	// EventWaitTimeout bounds one NVML event wait, so the event loop notices shutdown
	// within it. Default 5s, as NVIDIA's k8s-device-plugin.
	EventWaitTimeout time.Duration
	// RecoveryPolls is how many clean polls in a row clear a transient fault. Default 6
	// (a minute at the default interval), so one bad poll between good ones does not flap.
	RecoveryPolls int
	// ThrottlePolls is how many polls in a row must show thermal or power slowdown before
	// ThermalThrottle or PowerThrottle is raised. Default 6: short slowdowns under a load
	// spike are normal.
	ThrottlePolls int
	// ReadErrorPolls is how many polls in a row with failing NVML reads raise
	// NVMLReadError. Default 3.
	ReadErrorPolls int
	// CorrectableECCPerMinute is the corrected (single-bit) ECC rate that raises
	// ECCSingleBitRate. Default 100; healthy HBM sees a few a day, and a single corrected
	// error never degrades a GPU.
	CorrectableECCPerMinute float64
	// PCIeReplaysPerMinute is the PCIe replay rate that raises PCIeReplays. Default 8,
	// DCGM's PCIe health-watch limit.
	PCIeReplaysPerMinute float64
	// NVLinkErrorsPerMinute is the rate of NVLink data-link errors (replay, recovery,
	// CRC, ECC, summed over links) that raises NVLinkErrors. Default 100.
	NVLinkErrorsPerMinute float64
	// RetiredPagesLimit is the number of retired pages (pre-Ampere GPUs) that raises
	// RetiredPagesLimit. Default 60, near NVIDIA's page-retirement replacement guidance.
	RetiredPagesLimit int
	// IgnoredXIDs are XIDs counted but never turned into a fault, on top of the
	// catalog's application errors (13, 31, 43, 45, ...). Default none.
	IgnoredXIDs []uint64
	// IgnoredReasons are reasons never raised, e.g. ThermalThrottle on a site known to
	// run hot, or "XID74" where NVLink is unused. Default none.
	IgnoredReasons []Reason
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		PollInterval:            10 * time.Second,
		EventWaitTimeout:        5 * time.Second,
		RecoveryPolls:           6,
		ThrottlePolls:           6,
		ReadErrorPolls:          3,
		CorrectableECCPerMinute: 100,
		PCIeReplaysPerMinute:    8,
		NVLinkErrorsPerMinute:   100,
		RetiredPagesLimit:       60,
	}
}

// Validate reports the first bad field by name, as the configuration file (File)
// spells it, so an error in the file is easy to fix.
func (c Config) Validate() error {
	switch {
	case c.PollInterval <= 0:
		return fmt.Errorf("health rules: pollInterval must be positive, got %v", c.PollInterval)
	case c.EventWaitTimeout < time.Millisecond || c.EventWaitTimeout > time.Minute:
		// NVML takes the wait in milliseconds; a minute keeps shutdown prompt.
		return fmt.Errorf("health rules: eventWaitTimeout must be between 1ms and 1m, got %v", c.EventWaitTimeout)
	case c.RecoveryPolls < 1:
		return fmt.Errorf("health rules: recoveryPolls must be at least 1, got %d", c.RecoveryPolls)
	case c.ThrottlePolls < 1:
		return fmt.Errorf("health rules: throttlePolls must be at least 1, got %d", c.ThrottlePolls)
	case c.ReadErrorPolls < 1:
		return fmt.Errorf("health rules: readErrorPolls must be at least 1, got %d", c.ReadErrorPolls)
	case !(c.CorrectableECCPerMinute > 0):
		return fmt.Errorf("health rules: correctableECCPerMinute must be positive, got %v", c.CorrectableECCPerMinute)
	case !(c.PCIeReplaysPerMinute > 0):
		return fmt.Errorf("health rules: pcieReplaysPerMinute must be positive, got %v", c.PCIeReplaysPerMinute)
	case !(c.NVLinkErrorsPerMinute > 0):
		return fmt.Errorf("health rules: nvlinkErrorsPerMinute must be positive, got %v", c.NVLinkErrorsPerMinute)
	case c.RetiredPagesLimit < 1:
		return fmt.Errorf("health rules: retiredPagesLimit must be at least 1, got %d", c.RetiredPagesLimit)
	}
	for _, r := range c.IgnoredReasons {
		if !knownReason(r) {
			return fmt.Errorf("health rules: ignoredReasons has unknown reason %q (want one of the Reason constants or XID<code>)", r)
		}
	}
	return nil
}

func knownReason(r Reason) bool {
	if _, ok := rules[r]; ok {
		return true
	}
	code, ok := strings.CutPrefix(string(r), "XID")
	if !ok {
		return false
	}
	_, err := strconv.ParseUint(code, 10, 64)
	return err == nil
}
