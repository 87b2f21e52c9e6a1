package healthcheck

import (
	"math/bits"

	chamberv1alpha1 "chamber.dev/chamber/api/v1alpha1"
)

// Field names one NVML reading, so errors and unsupported readings are reported per field.
type Field uint8

// The readings a poll takes from each GPU.
const (
	FieldHandle Field = iota
	FieldUUID
	FieldName
	FieldPCI
	FieldMemory
	FieldUtilization
	FieldTemperature
	FieldPower
	FieldThrottle
	FieldECCVolatileCorrected
	FieldECCVolatileUncorrected
	FieldECCAggregateCorrected
	FieldECCAggregateUncorrected
	FieldRetiredPagesSingleBit
	FieldRetiredPagesDoubleBit
	FieldRetiredPagesPending
	FieldRemappedRows
	FieldPCIeReplay
	FieldNVLink
	FieldSMActivity
	fieldCount
)

var fieldNames = [fieldCount]string{
	"handle", "uuid", "name", "pci", "memory", "utilization", "temperature", "power",
	"throttle", "eccVolatileCorrected", "eccVolatileUncorrected", "eccAggregateCorrected",
	"eccAggregateUncorrected", "retiredPagesSingleBit", "retiredPagesDoubleBit",
	"retiredPagesPending", "remappedRows", "pcieReplay", "nvlink", "smActivity",
}

// String returns the field's name as used in logs and status.
func (f Field) String() string {
	if f < fieldCount {
		return fieldNames[f]
	}
	return "unknown"
}

// FieldSet is a set of fields, kept as a bit mask so a poll does not allocate for it.
type FieldSet uint32

// Has reports whether f is in the set.
func (s FieldSet) Has(f Field) bool { return s&(1<<f) != 0 }

// With returns the set with f added.
func (s FieldSet) With(f Field) FieldSet { return s | 1<<f }

// Names lists the set's fields by name, for status output.
func (s FieldSet) Names() []string {
	if s == 0 {
		return nil
	}
	out := make([]string, 0, bits.OnesCount32(uint32(s)))
	for f := range fieldCount {
		if s.Has(f) {
			out = append(out, f.String())
		}
	}
	return out
}

// ReadError is one NVML call that failed on one GPU.
type ReadError struct {
	Field Field
	// Err is NVML's answer: the NVML reader stores the return code itself (nvml.Return
	// is an error), so errors.Is matches it.
	Err error
}

// Error says which reading failed and how.
func (e ReadError) Error() string { return e.Field.String() + ": " + e.Err.Error() }

// ECCCounts are the GPU's total ECC error counters. Volatile counts reset when the
// driver reloads or the GPU resets; aggregate counts last the board's lifetime.
type ECCCounts struct {
	VolatileCorrected    uint64 // single-bit
	VolatileUncorrected  uint64 // double-bit
	AggregateCorrected   uint64
	AggregateUncorrected uint64
}

// RowRemap is the row remapper's state (Ampere and later replace page retirement with it).
type RowRemap struct {
	Correctable   int // rows remapped after correctable errors
	Uncorrectable int // rows remapped after uncorrectable errors
	Pending       bool
	Failure       bool // no spare row was left for a remap
}

// RetiredPages is dynamic page retirement (before Ampere).
type RetiredPages struct {
	SingleBit int // pages retired for repeated single-bit errors
	DoubleBit int // pages retired for a double-bit error
	Pending   bool
}

// NVLinkErrors are the data-link error counters summed over the GPU's active links.
type NVLinkErrors struct {
	ActiveLinks int
	Replay      uint64
	Recovery    uint64
	CRCFlit     uint64
	CRCData     uint64
	ECCData     uint64
}

// Total is the sum of all NVLink error counters.
func (n NVLinkErrors) Total() uint64 {
	return n.Replay + n.Recovery + n.CRCFlit + n.CRCData + n.ECCData
}

// GPUSample is one poll of one GPU. Readings that failed keep their zero value and are
// listed in Errors or Unsupported.
type GPUSample struct {
	Index    int
	UUID     string
	Name     string
	PCIBusID string

	MemoryTotalBytes  uint64
	MemoryUsedBytes   uint64
	GPUUtilPercent    uint32
	MemoryUtilPercent uint32
	// UtilizationSignal is what GPUUtilPercent measures (empty: NVML's GPU
	// utilization).
	UtilizationSignal chamberv1alpha1.UtilizationSignal
	// SMActivityPercent is the share of SM cycles with a warp resident over the
	// last poll interval (NVML's GPM SM utilization on Hopper and later; DCGM's
	// DCGM_FI_PROF_SM_ACTIVE). Unsupported where the GPU has no GPM, and in a
	// GPU's first poll (GPM needs two samples): SMActivityRead says when it holds
	// a reading.
	SMActivityPercent float64
	SMActivityRead    bool
	TemperatureC      uint32
	PowerMilliwatts   uint32
	// ThrottleReasons is NVML's clocks-event reason bit mask (the Throttle* bits).
	ThrottleReasons uint64

	ECC          ECCCounts
	RetiredPages RetiredPages
	RowRemap     RowRemap
	PCIeReplays  uint64
	NVLink       NVLinkErrors

	// Incidents are the health watches' verdicts of a source that runs them (DCGM's,
	// through dcgm-exporter); the agent's NVML polls have none.
	Incidents []Incident

	// Lost is set when any call answered ERROR_GPU_IS_LOST; the rest was not read.
	Lost bool
	// Unsupported lists readings this GPU or driver does not offer: not a fault.
	Unsupported FieldSet
	// Errors lists readings that failed for another reason.
	Errors []ReadError
}

// Incident is one failing or warning health watch of DCGM (dcgm-exporter's
// DCGM_EXP_GPU_HEALTH_STATUS): the subsystem watched (PCIE, NVLINK, MEM, THERMAL, ...)
// and DCGM's error code.
type Incident struct {
	System string
	Code   string
	Fail   bool // DCGM_HEALTH_RESULT_FAIL; otherwise a warning
}

// Snapshot is one poll of every GPU on the node.
type Snapshot struct {
	DriverVersion string
	GPUs          []GPUSample
}
