package healthcheck

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
)

// dcgm-exporter's series that Chamber reads, by the names and labels of its
// documentation and its counters files (github.com/NVIDIA/dcgm-exporter,
// etc/default-counters.csv and etc/dcp-metrics-included.csv; the DCGM_EXP_* series
// come from its optional collectors). A fleet that runs dcgm-exporter with the default
// counters has the XID, PCIe replay, row-remap, utilization and memory series; the ECC,
// retired-page, NVLink-error, thermal-violation and health series need those counters
// turned on (each is read when present; a missing one is never read as zero).
const (
	dcgmGPUUtil            = "DCGM_FI_DEV_GPU_UTIL"
	dcgmMemCopyUtil        = "DCGM_FI_DEV_MEM_COPY_UTIL"
	dcgmGREngineActive     = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
	dcgmSMActive           = "DCGM_FI_PROF_SM_ACTIVE"
	dcgmFBUsed             = "DCGM_FI_DEV_FB_USED"
	dcgmFBFree             = "DCGM_FI_DEV_FB_FREE"
	dcgmFBReserved         = "DCGM_FI_DEV_FB_RESERVED"
	dcgmGPUTemp            = "DCGM_FI_DEV_GPU_TEMP"
	dcgmPowerUsage         = "DCGM_FI_DEV_POWER_USAGE"
	dcgmXIDErrors          = "DCGM_FI_DEV_XID_ERRORS"
	dcgmXIDCount           = "DCGM_EXP_XID_ERRORS_COUNT"
	dcgmHealthStatus       = "DCGM_EXP_GPU_HEALTH_STATUS"
	dcgmPCIeReplay         = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
	dcgmECCSBEVol          = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
	dcgmECCDBEVol          = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
	dcgmECCSBEAgg          = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
	dcgmECCDBEAgg          = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
	dcgmRetiredSBE         = "DCGM_FI_DEV_RETIRED_SBE"
	dcgmRetiredDBE         = "DCGM_FI_DEV_RETIRED_DBE"
	dcgmRetiredPending     = "DCGM_FI_DEV_RETIRED_PENDING"
	dcgmRemapUncorrectable = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
	dcgmRemapCorrectable   = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
	dcgmRemapFailure       = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
	dcgmRemapPending       = "DCGM_FI_DEV_ROW_REMAP_PENDING"
	dcgmNVLinkCRCFlit      = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
	dcgmNVLinkCRCData      = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
	dcgmNVLinkReplay       = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
	dcgmNVLinkRecovery     = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
	dcgmThermalViolation   = "DCGM_FI_DEV_THERMAL_VIOLATION"
	dcgmThrottleReasons    = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
	dcgmClocksEventReasons = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
)

// dcgmSeries is every series name DCGMSelector asks for.
var dcgmSeries = []string{
	dcgmGPUUtil, dcgmMemCopyUtil, dcgmGREngineActive, dcgmSMActive, dcgmFBUsed, dcgmFBFree, dcgmFBReserved,
	dcgmGPUTemp, dcgmPowerUsage, dcgmXIDErrors, dcgmXIDCount, dcgmHealthStatus, dcgmPCIeReplay,
	dcgmECCSBEVol, dcgmECCDBEVol, dcgmECCSBEAgg, dcgmECCDBEAgg, dcgmRetiredSBE, dcgmRetiredDBE,
	dcgmRetiredPending, dcgmRemapUncorrectable, dcgmRemapCorrectable, dcgmRemapFailure,
	dcgmRemapPending, dcgmNVLinkCRCFlit, dcgmNVLinkCRCData, dcgmNVLinkReplay, dcgmNVLinkRecovery,
	dcgmThermalViolation, dcgmThrottleReasons, dcgmClocksEventReasons,
}

// DCGM health results of DCGM_EXP_GPU_HEALTH_STATUS (DCGM's dcgmHealthWatchResult_t).
const (
	dcgmHealthWarn = 10
	dcgmHealthFail = 20
)

// DCGMSelector is the PromQL selector of every dcgm-exporter series Chamber reads;
// matchers (e.g. `job="dcgm-exporter"`, empty for none) narrow it to the fleet's
// exporters.
func DCGMSelector(matchers string) string {
	sel := `{__name__=~"` + strings.Join(dcgmSeries, "|") + `"`
	if m := strings.TrimSpace(matchers); m != "" {
		sel += "," + m
	}
	return sel + "}"
}

// DCGMFreshnessQuery is the PromQL that gives each node's newest sample time (in
// seconds), by nodeLabel, from the series every dcgm-exporter has (the last XID, or
// the utilization): timestamp() reads the samples' own times only from a plain
// selector, and drops the series name, so one selector per name, joined with or.
func DCGMFreshnessQuery(matchers, nodeLabel string) string {
	var parts []string
	for _, name := range []string{dcgmXIDErrors, dcgmGPUUtil, dcgmGREngineActive} {
		sel := name
		if m := strings.TrimSpace(matchers); m != "" {
			sel += "{" + m + "}"
		}
		parts = append(parts, "timestamp("+sel+")")
	}
	return fmt.Sprintf("max by (%s) (%s)", nodeLabel, strings.Join(parts, " or "))
}

// DCGMGPU is one GPU's series in one query, turned into the agent's terms.
type DCGMGPU struct {
	// Sample holds what the series say, with what is missing in Unsupported.
	Sample GPUSample
	// XID is DCGM_FI_DEV_XID_ERRORS: the last XID the GPU raised (0: none).
	XID uint64
	// XIDCounts is DCGM_EXP_XID_ERRORS_COUNT by XID, where that collector runs.
	XIDCounts map[uint64]float64
	// ThermalViolation is DCGM_FI_DEV_THERMAL_VIOLATION (ns throttled for heat);
	// HasThermal says whether it was there.
	ThermalViolation float64
	HasThermal       bool
	// Pod holds the GPU by dcgm-exporter's pod mapping (pod, namespace, container).
	Pod    PodRef
	Driver string
	// activity holds the utilization series read, by signal; resolve picks one.
	activity map[chamberv1alpha1.UtilizationSignal]float64
}

// DCGMReadings are one query's GPUs: node name -> GPU index -> readings.
type DCGMReadings map[string]map[int]*DCGMGPU

// readable are the fields a DCGM series can fill; each starts Unsupported and is
// cleared by the series that carries it.
var readable = []Field{FieldMemory, FieldUtilization, FieldSMActivity, FieldTemperature, FieldPower, FieldThrottle,
	FieldECCVolatileCorrected, FieldECCVolatileUncorrected, FieldECCAggregateCorrected,
	FieldECCAggregateUncorrected, FieldRetiredPagesSingleBit, FieldRetiredPagesDoubleBit,
	FieldRetiredPagesPending, FieldRemappedRows, FieldPCIeReplay, FieldNVLink}

// ParseDCGM groups the samples of an instant query of DCGMSelector by the node in
// nodeLabel (dcgm-exporter's Hostname is the node's name where it runs with NODE_NAME
// set, as its chart and the GPU Operator do) and the GPU in `gpu`. Series without
// either label, or with a value that is not a number, are left out and counted in
// skipped.
func ParseDCGM(v model.Vector, nodeLabel string) (r DCGMReadings, skipped int) {
	r = DCGMReadings{}
	for _, s := range v {
		node := string(s.Metric[model.LabelName(nodeLabel)])
		index, err := strconv.Atoi(string(s.Metric["gpu"]))
		value := float64(s.Value)
		if node == "" || err != nil || index < 0 || math.IsNaN(value) {
			skipped++
			continue
		}
		gpus := r[node]
		if gpus == nil {
			gpus = map[int]*DCGMGPU{}
			r[node] = gpus
		}
		g := gpus[index]
		if g == nil {
			g = &DCGMGPU{Sample: GPUSample{Index: index}}
			for _, f := range readable {
				g.Sample.Unsupported = g.Sample.Unsupported.With(f)
			}
			gpus[index] = g
		}
		g.identify(s.Metric)
		g.set(string(s.Metric[model.MetricNameLabel]), s.Metric, value)
	}
	for _, gpus := range r {
		for _, g := range gpus {
			g.resolve()
		}
	}
	return r, skipped
}

// utilizationSignals are the utilization series in the order they are believed:
// SM activity says how much of the GPU works, not only that something runs.
var utilizationSignals = []chamberv1alpha1.UtilizationSignal{
	chamberv1alpha1.SignalGPUUtilization, chamberv1alpha1.SignalGraphicsEngineActivity,
}

// resolve takes the truest utilization series the GPU has: SM activity as its own
// reading, the rest as its utilization.
func (g *DCGMGPU) resolve() {
	if pct, ok := g.activity[chamberv1alpha1.SignalSMActivity]; ok {
		g.Sample.SMActivityPercent, g.Sample.SMActivityRead = min(max(pct, 0), 100), true
		g.has(FieldSMActivity)
	}
	for _, sig := range utilizationSignals {
		if pct, ok := g.activity[sig]; ok {
			g.Sample.GPUUtilPercent = uint32(min(max(pct, 0)+0.5, 100))
			g.Sample.UtilizationSignal = sig
			g.has(FieldUtilization)
			return
		}
	}
}

func (g *DCGMGPU) identify(m model.Metric) {
	if v := string(m["UUID"]); v != "" {
		g.Sample.UUID = v
	}
	if v := string(m["modelName"]); v != "" {
		g.Sample.Name = v
	}
	if v := string(m["pci_bus_id"]); v != "" {
		g.Sample.PCIBusID = v
	}
	if v := string(m["DCGM_FI_DRIVER_VERSION"]); v != "" {
		g.Driver = v
	}
	if pod := string(m["pod"]); pod != "" {
		g.Pod = PodRef{Namespace: string(m["namespace"]), Name: pod, Container: string(m["container"])}
	}
}

func (g *DCGMGPU) activityOf(sig chamberv1alpha1.UtilizationSignal, pct float64) {
	if g.activity == nil {
		g.activity = map[chamberv1alpha1.UtilizationSignal]float64{}
	}
	g.activity[sig] = pct
}

// has clears f from the sample's Unsupported set: its series is there.
func (g *DCGMGPU) has(f Field) { g.Sample.Unsupported &^= 1 << f }

func (g *DCGMGPU) set(name string, m model.Metric, v float64) {
	s := &g.Sample
	u := uint64(max(v, 0))
	switch name {
	case dcgmGPUUtil:
		g.activityOf(chamberv1alpha1.SignalGPUUtilization, v)
	case dcgmSMActive:
		g.activityOf(chamberv1alpha1.SignalSMActivity, v*100) // a ratio
	case dcgmGREngineActive:
		g.activityOf(chamberv1alpha1.SignalGraphicsEngineActivity, v*100) // a ratio
	case dcgmMemCopyUtil:
		s.MemoryUtilPercent = uint32(min(u, 100))
	case dcgmFBUsed:
		s.MemoryUsedBytes = u << 20
		s.MemoryTotalBytes += u << 20
		g.has(FieldMemory)
	case dcgmFBFree, dcgmFBReserved:
		s.MemoryTotalBytes += u << 20
	case dcgmGPUTemp:
		s.TemperatureC = uint32(u)
		g.has(FieldTemperature)
	case dcgmPowerUsage:
		s.PowerMilliwatts = uint32(max(v, 0) * 1000)
		g.has(FieldPower)
	case dcgmXIDErrors:
		g.XID = u
	case dcgmXIDCount:
		if xid, err := strconv.ParseUint(string(m["xid"]), 10, 64); err == nil {
			if g.XIDCounts == nil {
				g.XIDCounts = map[uint64]float64{}
			}
			g.XIDCounts[xid] = v
		}
	case dcgmHealthStatus:
		if v >= dcgmHealthWarn {
			s.Incidents = append(s.Incidents, Incident{System: string(m["health_watch"]), Code: string(m["health_error_code"]), Fail: v >= dcgmHealthFail})
		}
	case dcgmPCIeReplay:
		s.PCIeReplays = u
		g.has(FieldPCIeReplay)
	case dcgmECCSBEVol:
		s.ECC.VolatileCorrected = u
		g.has(FieldECCVolatileCorrected)
	case dcgmECCDBEVol:
		s.ECC.VolatileUncorrected = u
		g.has(FieldECCVolatileUncorrected)
	case dcgmECCSBEAgg:
		s.ECC.AggregateCorrected = u
		g.has(FieldECCAggregateCorrected)
	case dcgmECCDBEAgg:
		s.ECC.AggregateUncorrected = u
		g.has(FieldECCAggregateUncorrected)
	case dcgmRetiredSBE:
		s.RetiredPages.SingleBit = int(u)
		g.has(FieldRetiredPagesSingleBit)
	case dcgmRetiredDBE:
		s.RetiredPages.DoubleBit = int(u)
		g.has(FieldRetiredPagesDoubleBit)
	case dcgmRetiredPending:
		s.RetiredPages.Pending = u > 0
		g.has(FieldRetiredPagesPending)
	case dcgmRemapUncorrectable:
		s.RowRemap.Uncorrectable = int(u)
		g.has(FieldRemappedRows)
	case dcgmRemapCorrectable:
		s.RowRemap.Correctable = int(u)
		g.has(FieldRemappedRows)
	case dcgmRemapFailure:
		s.RowRemap.Failure = u > 0
		g.has(FieldRemappedRows)
	case dcgmRemapPending:
		s.RowRemap.Pending = u > 0
		g.has(FieldRemappedRows)
	case dcgmNVLinkCRCFlit:
		s.NVLink.CRCFlit = u
		g.has(FieldNVLink)
	case dcgmNVLinkCRCData:
		s.NVLink.CRCData = u
		g.has(FieldNVLink)
	case dcgmNVLinkReplay:
		s.NVLink.Replay = u
		g.has(FieldNVLink)
	case dcgmNVLinkRecovery:
		s.NVLink.Recovery = u
		g.has(FieldNVLink)
	case dcgmThermalViolation:
		g.ThermalViolation, g.HasThermal = v, true
	case dcgmThrottleReasons, dcgmClocksEventReasons:
		s.ThrottleReasons |= u
		g.has(FieldThrottle)
	}
}

// DCGMNode turns one node's successive DCGM readings into the agent's health state: a
// poll of the Tracker per query, and an event per XID that is new since the last
// query (DCGM_FI_DEV_XID_ERRORS keeps only the last XID, so a new value or a first
// sight of one is an event; DCGM_EXP_XID_ERRORS_COUNT, where exported, also tells a
// repeat of the same XID).
type DCGMNode struct {
	tracker   *Tracker
	lastXID   map[int]uint64
	xidCounts map[int]map[uint64]float64
	thermal   map[int]float64
}

// NewDCGMNode starts a node's health state in tracker.
func NewDCGMNode(tracker *Tracker) *DCGMNode {
	return &DCGMNode{tracker: tracker, lastXID: map[int]uint64{}, xidCounts: map[int]map[uint64]float64{}, thermal: map[int]float64{}}
}

// Tracker is the node's health state.
func (n *DCGMNode) Tracker() *Tracker { return n.tracker }

// Observe applies one query's readings of the node's GPUs, taken at `at`.
func (n *DCGMNode) Observe(gpus map[int]*DCGMGPU, at time.Time) {
	snap := Snapshot{GPUs: make([]GPUSample, 0, len(gpus))}
	for _, i := range slices.Sorted(maps.Keys(gpus)) {
		g := gpus[i]
		for _, xid := range n.newXIDs(i, g) {
			n.tracker.RecordEvent(Event{Kind: EventXID, GPU: i, UUID: g.Sample.UUID, XID: xid, Time: at})
		}
		s := g.Sample
		if g.HasThermal {
			// Time throttled for heat grew since the last query: the GPU is being
			// slowed to protect itself, as NVML's thermal slowdown bit says.
			if prev, ok := n.thermal[i]; ok && g.ThermalViolation > prev {
				s.ThrottleReasons |= ThrottleSWThermalSlowdown
			}
			n.thermal[i] = g.ThermalViolation
			s.Unsupported &^= 1 << FieldThrottle
		}
		if g.Driver != "" {
			snap.DriverVersion = g.Driver
		}
		snap.GPUs = append(snap.GPUs, s)
	}
	n.tracker.Observe(snap)
}

// newXIDs are the XIDs GPU i raised since the last query, each once.
func (n *DCGMNode) newXIDs(i int, g *DCGMGPU) []uint64 {
	var out []uint64
	if last, ok := n.lastXID[i]; g.XID != 0 && (!ok || last != g.XID) {
		out = append(out, g.XID)
	}
	n.lastXID[i] = g.XID
	prev := n.xidCounts[i]
	for xid, c := range g.XIDCounts {
		if c > prev[xid] && (len(out) == 0 || out[0] != xid) {
			out = append(out, xid)
		}
	}
	n.xidCounts[i] = g.XIDCounts
	return out
}
