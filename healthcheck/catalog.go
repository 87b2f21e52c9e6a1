package healthcheck

import (
	"cmp"
	"slices"
	"strconv"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// Health is the state of one GPU as the agent publishes it.
type Health string

const (
	// Healthy GPUs take any workload.
	Healthy Health = "Healthy"
	// Degraded GPUs still run work but need attention (a reset when convenient,
	// cooling, a link).
	Degraded Health = "Degraded"
	// Unhealthy GPUs must not get new work; the isolation controller acts on them.
	Unhealthy Health = "Unhealthy"
)

// rank orders health so the worst fault wins.
func (h Health) rank() int {
	switch h {
	case Unhealthy:
		return 2
	case Degraded:
		return 1
	default:
		return 0
	}
}

// Worse returns the worse of two health values.
func Worse(a, b Health) Health {
	if b.rank() > a.rank() {
		return b
	}
	if a == "" {
		return Healthy
	}
	return a
}

// Reason is a machine-readable cause of a fault, e.g. "XID79" or "ECCDoubleBit".
type Reason string

// Reasons raised by the poll and event rules (XIDs use XIDReason).
const (
	// ReasonGPULost: NVML answers ERROR_GPU_IS_LOST, or the driver reported the GPU
	// unavailable.
	ReasonGPULost Reason = "GPULost"
	// ReasonECCDoubleBit: an uncorrectable (double-bit) ECC error since the driver loaded.
	ReasonECCDoubleBit Reason = "ECCDoubleBit"
	// ReasonECCSingleBitRate: corrected ECC errors arrive faster than
	// Config.CorrectableECCPerMinute.
	ReasonECCSingleBitRate Reason = "ECCSingleBitRate"
	// ReasonRowRemapFailure: the GPU ran out of spare rows to remap a bad one.
	ReasonRowRemapFailure Reason = "RowRemapFailure"
	// ReasonRowRemapPending: a row remap is recorded and waits for a GPU reset to take
	// effect.
	ReasonRowRemapPending Reason = "RowRemapPending"
	// ReasonRetiredPagesPending: a page retirement waits for a GPU reset (pre-Ampere GPUs).
	ReasonRetiredPagesPending Reason = "RetiredPagesPending"
	// ReasonRetiredPagesLimit: retired pages reached Config.RetiredPagesLimit
	// (pre-Ampere GPUs).
	ReasonRetiredPagesLimit Reason = "RetiredPagesLimit"
	// ReasonThermalThrottle: hardware or software thermal slowdown for
	// Config.ThrottlePolls polls in a row.
	ReasonThermalThrottle Reason = "ThermalThrottle"
	// ReasonPowerThrottle: hardware slowdown or power-brake slowdown for
	// Config.ThrottlePolls polls in a row.
	ReasonPowerThrottle Reason = "PowerThrottle"
	// ReasonPCIeReplays: PCIe replays faster than Config.PCIeReplaysPerMinute (a bad
	// riser, slot or cable).
	ReasonPCIeReplays Reason = "PCIeReplays"
	// ReasonNVLinkErrors: NVLink data-link errors faster than Config.NVLinkErrorsPerMinute.
	ReasonNVLinkErrors Reason = "NVLinkErrors"
	// ReasonNVMLReadError: NVML calls on this GPU failed for Config.ReadErrorPolls
	// polls in a row.
	ReasonNVMLReadError Reason = "NVMLReadError"
	// ReasonDCGMHealthFail: a DCGM health watch fails on the GPU (dcgm-exporter's
	// DCGM_EXP_GPU_HEALTH_STATUS at FAIL); it clears when the watch passes again.
	ReasonDCGMHealthFail Reason = "DCGMHealthFail"
	// ReasonDCGMHealthWarn: a DCGM health watch warns on the GPU.
	ReasonDCGMHealthWarn Reason = "DCGMHealthWarn"
)

// Finding is one fault condition seen in one poll or one event, before hysteresis.
type Finding struct {
	Reason     Reason
	Severity   Health
	Action     chamber.FaultAction
	Persistent bool // stays until an operator clears it; transient ones clear after clean polls
	Message    string
}

// rules describes every non-XID reason; Classify fills in Message.
var rules = map[Reason]Finding{
	ReasonGPULost:             {Severity: Unhealthy, Action: chamber.FaultActionRebootNode, Persistent: true, Message: "GPU is lost to the driver (ERROR_GPU_IS_LOST)"},
	ReasonECCDoubleBit:        {Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true, Message: "uncorrectable double-bit ECC error"},
	ReasonECCSingleBitRate:    {Severity: Degraded, Action: chamber.FaultActionResetGPU, Message: "high rate of corrected single-bit ECC errors"},
	ReasonRowRemapFailure:     {Severity: Unhealthy, Action: chamber.FaultActionDrainAndReplace, Persistent: true, Message: "row remapping failed: no spare rows left"},
	ReasonRowRemapPending:     {Severity: Degraded, Action: chamber.FaultActionResetGPU, Message: "row remap pending until the GPU is reset"},
	ReasonRetiredPagesPending: {Severity: Degraded, Action: chamber.FaultActionResetGPU, Message: "page retirement pending until the GPU is reset"},
	ReasonRetiredPagesLimit:   {Severity: Unhealthy, Action: chamber.FaultActionDrainAndReplace, Persistent: true, Message: "retired pages reached the replacement limit"},
	ReasonThermalThrottle:     {Severity: Degraded, Action: chamber.FaultActionWatch, Message: "sustained thermal slowdown"},
	ReasonPowerThrottle:       {Severity: Degraded, Action: chamber.FaultActionWatch, Message: "sustained hardware or power-brake slowdown"},
	ReasonPCIeReplays:         {Severity: Degraded, Action: chamber.FaultActionWatch, Message: "high PCIe replay rate"},
	ReasonNVLinkErrors:        {Severity: Degraded, Action: chamber.FaultActionWatch, Message: "high NVLink error rate"},
	ReasonNVMLReadError:       {Severity: Degraded, Action: chamber.FaultActionWatch, Message: "NVML reads on this GPU keep failing"},
	ReasonDCGMHealthFail:      {Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Message: "a DCGM health watch fails"},
	ReasonDCGMHealthWarn:      {Severity: Degraded, Action: chamber.FaultActionWatch, Message: "a DCGM health watch warns"},
}

// Rule returns how a non-XID reason is classified; ok is false for unknown reasons and
// XIDs.
func Rule(r Reason) (Finding, bool) {
	f, ok := rules[r]
	f.Reason = r
	return f, ok
}

func finding(r Reason, msg string) Finding {
	f := rules[r]
	f.Reason = r
	if msg != "" {
		f.Message = msg
	}
	return f
}

// XIDInfo is one entry of the XID catalog.
type XIDInfo struct {
	Code       uint64
	Name       string // NVIDIA's short description
	Severity   Health // Healthy for application errors: they never make a GPU unhealthy
	Action     chamber.FaultAction
	Persistent bool
	Known      bool // false for codes not in Chamber's catalog
}

// xidCatalog follows NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors) for the
// codes seen on data-centre GPUs. Display, video-engine and unused codes are left out;
// they fall to unknownXID. Persistent means the GPU stays out until an operator clears
// it after the reset or reboot the action names (a reboot also restarts the agent).
var xidCatalog = []XIDInfo{
	// Application errors: the application is at fault; the k8s-device-plugin ignores
	// these too.
	{Code: 13, Name: "Graphics engine exception", Severity: Healthy, Action: chamber.FaultActionIgnore},
	{Code: 31, Name: "GPU memory page fault", Severity: Healthy, Action: chamber.FaultActionIgnore},
	{Code: 43, Name: "GPU stopped processing", Severity: Healthy, Action: chamber.FaultActionIgnore},
	{Code: 45, Name: "Preemptive cleanup, due to previous errors", Severity: Healthy, Action: chamber.FaultActionIgnore},
	{Code: 68, Name: "NVDEC0 exception", Severity: Healthy, Action: chamber.FaultActionIgnore},
	{Code: 109, Name: "Context switch timeout", Severity: Healthy, Action: chamber.FaultActionIgnore},
	{Code: 137, Name: "NVLink FLA privilege error (illegal peer access by an application)", Severity: Healthy, Action: chamber.FaultActionIgnore},

	// PCIe or driver trouble that a reset usually clears.
	{Code: 32, Name: "Invalid or corrupted push buffer stream (PCIe DMA)", Severity: Degraded, Action: chamber.FaultActionResetGPU},
	{Code: 38, Name: "Driver firmware error", Severity: Unhealthy, Action: chamber.FaultActionRebootNode, Persistent: true},
	{Code: 44, Name: "Graphics engine fault during context switch", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 54, Name: "Auxiliary power is not connected to the GPU board", Severity: Unhealthy, Action: chamber.FaultActionDrainAndReplace, Persistent: true},
	{Code: 61, Name: "Internal micro-controller breakpoint/warning", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 62, Name: "Internal micro-controller halt", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 69, Name: "Graphics engine class error", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},

	// Memory.
	{Code: 48, Name: "Double-bit ECC error", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 63, Name: "ECC page retirement or row remapping recording event", Severity: Degraded, Action: chamber.FaultActionResetGPU},
	{Code: 64, Name: "ECC page retirement or row remapper recording failure", Severity: Unhealthy, Action: chamber.FaultActionRebootNode, Persistent: true},
	{Code: 92, Name: "High single-bit ECC error rate", Severity: Degraded, Action: chamber.FaultActionResetGPU},
	{Code: 94, Name: "Contained ECC error (one application affected)", Severity: Degraded, Action: chamber.FaultActionResetGPU},
	{Code: 95, Name: "Uncontained ECC error (all applications affected)", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 140, Name: "Unrecovered ECC error", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 171, Name: "Uncorrectable DRAM error", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 172, Name: "Uncorrectable SRAM error", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},

	// Links and bus.
	{Code: 74, Name: "NVLink error", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 79, Name: "GPU has fallen off the bus", Severity: Unhealthy, Action: chamber.FaultActionRebootNode, Persistent: true},
	{Code: 121, Name: "C2C link corrected error", Severity: Degraded, Action: chamber.FaultActionResetGPU},
	{Code: 136, Name: "Link training failed", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 167, Name: "PCIe fatal timeout", Severity: Unhealthy, Action: chamber.FaultActionRebootNode, Persistent: true},

	// Firmware, GSP and security.
	{Code: 110, Name: "Security fault error", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 119, Name: "GSP RPC timeout", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 120, Name: "GSP error", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 123, Name: "SPI PMU RPC write failure", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 143, Name: "GPU initialization failure", Severity: Unhealthy, Action: chamber.FaultActionRebootNode, Persistent: true},
	{Code: 154, Name: "GPU recovery action changed (reset or reboot required)", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
	{Code: 169, Name: "Internal micro-controller halt (SEC2)", Severity: Unhealthy, Action: chamber.FaultActionResetGPU, Persistent: true},
}

var xidByCode = func() map[uint64]XIDInfo {
	m := make(map[uint64]XIDInfo, len(xidCatalog))
	for _, x := range xidCatalog {
		x.Known = true
		m[x.Code] = x
	}
	return m
}()

// LookupXID classifies an XID code. A code missing from the catalog is Degraded and
// transient: it is reported and watched, but it does not isolate a node on its own.
func LookupXID(code uint64) XIDInfo {
	if x, ok := xidByCode[code]; ok {
		return x
	}
	return XIDInfo{Code: code, Name: "XID not in Chamber's catalog", Severity: Degraded, Action: chamber.FaultActionResetGPU}
}

// XIDCatalog returns every catalogued XID, ordered by code.
func XIDCatalog() []XIDInfo {
	out := make([]XIDInfo, 0, len(xidByCode))
	for _, x := range xidByCode {
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b XIDInfo) int { return cmp.Compare(a.Code, b.Code) })
	return out
}

// XIDReason is the machine-readable reason for an XID, e.g. "XID79".
func XIDReason(code uint64) Reason {
	return Reason("XID" + strconv.FormatUint(code, 10))
}

// ClassifyXID turns an XID into a Finding; ok is false when it must not affect health
// (an application error, or a code in Config.IgnoredXIDs).
func ClassifyXID(code uint64, cfg Config) (Finding, bool) {
	x := LookupXID(code)
	if x.Severity == Healthy || slices.Contains(cfg.IgnoredXIDs, code) {
		return Finding{}, false
	}
	return Finding{
		Reason:     XIDReason(code),
		Severity:   x.Severity,
		Action:     x.Action,
		Persistent: x.Persistent,
		Message:    "XID " + strconv.FormatUint(code, 10) + ": " + x.Name,
	}, true
}
