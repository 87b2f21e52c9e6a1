package nvmlsource

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"chamber.dev/chamber/healthcheck"
)

// InitNVML initialises NVML through lib (nvml.New() on a GPU node, NewFake elsewhere).
func InitNVML(lib nvml.Interface) error {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("%w: nvml.Init: %v; check that the NVIDIA driver is loaded and the agent runs with the NVIDIA container runtime (or has libnvidia-ml.so.1 and /dev/nvidia* mounted)", healthcheck.ErrNVMLUnavailable, ret)
	}
	return nil
}

// Reader polls every GPU through nvml.Interface. It is not safe for concurrent use: one
// poll loop owns it, and scrapes read the stored results instead (see Tracker).
type Reader struct {
	lib nvml.Interface
	// Identity and capabilities do not change while the driver is loaded, so they are
	// read once: fewer NVML calls per poll.
	ids           map[int]identity
	unsupported   map[int]healthcheck.FieldSet
	links         map[int][]int // NVLink links that exist on the GPU
	driverVersion string
	// gpm is each GPU's last GPM sample, to which the next poll's is compared.
	gpm map[int]nvml.GpmSample
}

type identity struct{ uuid, name, pciBusID string }

// NewReader returns a Reader over an initialised NVML (see InitNVML).
func NewReader(lib nvml.Interface) *Reader {
	return &Reader{
		lib:         lib,
		ids:         map[int]identity{},
		unsupported: map[int]healthcheck.FieldSet{},
		links:       map[int][]int{},
		gpm:         map[int]nvml.GpmSample{},
	}
}

// Close frees the GPM samples the Reader keeps (before NVML shuts down).
func (r *Reader) Close() {
	for i, s := range r.gpm {
		s.Free()
		delete(r.gpm, i)
	}
}

// Read polls every GPU once. It fails only when NVML cannot even count the GPUs; errors
// on one GPU are recorded in that GPU's sample and never hide the others.
func (r *Reader) Read() (healthcheck.Snapshot, error) {
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return healthcheck.Snapshot{}, fmt.Errorf("%w: count GPUs: %v", healthcheck.ErrNVMLUnavailable, ret)
	}
	if r.driverVersion == "" {
		if v, ret := r.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
			r.driverVersion = v
		}
	}
	s := healthcheck.Snapshot{DriverVersion: r.driverVersion, GPUs: make([]healthcheck.GPUSample, n)}
	for i := range n {
		// Filled in place: the readers get a pointer into the slice, so a GPU's
		// sample is not allocated twice.
		s.GPUs[i].Index = i
		r.readGPU(&s.GPUs[i])
	}
	return s, nil
}

// gpuRead carries one GPU's poll so each reading is one short call.
type gpuRead struct {
	r *Reader
	s *healthcheck.GPUSample
}

// ok records the outcome of one NVML call and says whether its value is usable.
func (g gpuRead) ok(f healthcheck.Field, ret nvml.Return) bool {
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		// Not a fault: the board or driver lacks the reading. Remember it to skip the call.
		g.s.Unsupported = g.s.Unsupported.With(f)
		g.r.unsupported[g.s.Index] = g.r.unsupported[g.s.Index].With(f)
		return false
	case nvml.ERROR_GPU_IS_LOST:
		g.s.Lost = true
	}
	g.s.Errors = append(g.s.Errors, healthcheck.ReadError{Field: f, Err: ret})
	return false
}

// skip reports a reading already known to be unsupported, without calling NVML.
func (g gpuRead) skip(f healthcheck.Field) bool {
	if g.r.unsupported[g.s.Index].Has(f) {
		g.s.Unsupported = g.s.Unsupported.With(f)
		return true
	}
	return false
}

// pollReadings are the per-poll readings after identity, in order. NVLink comes last,
// from a method: it keeps the list of links per GPU.
var pollReadings = [...]func(gpuRead, nvml.Device){
	readMemory, readUtilization, readTemperature, readPower, readThrottle,
	readECC, readRetiredPages, readRemappedRows, readPCIe,
}

func (r *Reader) readGPU(s *healthcheck.GPUSample) {
	g := gpuRead{r: r, s: s}
	dev, ret := r.lib.DeviceGetHandleByIndex(s.Index)
	if !g.ok(healthcheck.FieldHandle, ret) {
		return
	}
	if !r.readIdentity(g, dev) || s.Lost {
		return
	}
	// Stop at a lost GPU: every further call would only fail the same way.
	for _, read := range pollReadings {
		read(g, dev)
		if s.Lost {
			return
		}
	}
	r.readSMActivity(g, dev)
	r.readNVLink(g, dev)
}

// readSMActivity reads the share of SM cycles with a warp resident since the last poll,
// from NVML's GPU performance monitoring (GPM: Hopper and later). A GPU without GPM,
// or whose GPM calls fail, has no such reading (unsupported, not an error: the older
// utilization stands in); the first poll has none yet, GPM needing two samples.
func (r *Reader) readSMActivity(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldSMActivity) {
		return
	}
	// unsupported: the GPU or driver has no GPM (remembered, as other readings'), the
	// GPU is lost, or this poll's GPM calls failed (this poll only: the next tries
	// again). GPM trouble is never a fault: the older utilization stands in.
	unsupported := func(ret nvml.Return) {
		switch ret {
		case nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
			g.ok(healthcheck.FieldSMActivity, nvml.ERROR_NOT_SUPPORTED)
		case nvml.ERROR_GPU_IS_LOST:
			g.ok(healthcheck.FieldSMActivity, ret)
		default:
			g.s.Unsupported = g.s.Unsupported.With(healthcheck.FieldSMActivity)
		}
		if prev := r.gpm[g.s.Index]; prev != nil {
			prev.Free()
			delete(r.gpm, g.s.Index)
		}
	}
	prev := r.gpm[g.s.Index]
	if prev == nil {
		if sup, ret := dev.GpmQueryDeviceSupport(); ret != nvml.SUCCESS || sup.IsSupportedDevice == 0 {
			unsupported(ret)
			return
		}
	}
	cur, ret := r.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		unsupported(ret)
		return
	}
	if ret := dev.GpmSampleGet(cur); ret != nvml.SUCCESS {
		cur.Free()
		unsupported(ret)
		return
	}
	r.gpm[g.s.Index] = cur
	if prev == nil {
		// This poll's reading is not there yet; the GPU has it from the next poll on.
		g.s.Unsupported = g.s.Unsupported.With(healthcheck.FieldSMActivity)
		return
	}
	defer prev.Free()
	m := nvml.GpmMetricsGetType{NumMetrics: 1, Sample1: prev, Sample2: cur}
	m.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	if ret := r.lib.GpmMetricsGet(&m); ret != nvml.SUCCESS || nvml.Return(m.Metrics[0].NvmlReturn) != nvml.SUCCESS {
		g.s.Unsupported = g.s.Unsupported.With(healthcheck.FieldSMActivity) // this poll only
		return
	}
	g.s.SMActivityPercent, g.s.SMActivityRead = min(max(m.Metrics[0].Value, 0), 100), true
}

func (r *Reader) readIdentity(g gpuRead, dev nvml.Device) bool {
	s := g.s
	if id, ok := r.ids[s.Index]; ok {
		s.UUID, s.Name, s.PCIBusID = id.uuid, id.name, id.pciBusID
		return true
	}
	complete := true
	if v, ret := dev.GetUUID(); g.ok(healthcheck.FieldUUID, ret) {
		s.UUID = v
	} else {
		complete = false
	}
	if s.Lost {
		return false
	}
	if v, ret := dev.GetName(); g.ok(healthcheck.FieldName, ret) {
		s.Name = v
	} else {
		complete = false
	}
	if v, ret := dev.GetPciInfo(); g.ok(healthcheck.FieldPCI, ret) {
		s.PCIBusID = busID(v.BusId)
	} else {
		complete = false
	}
	if complete {
		r.ids[s.Index] = identity{s.UUID, s.Name, s.PCIBusID}
	}
	return true
}

// busID turns NVML's NUL-terminated C string into a Go string.
func busID(b [32]int8) string {
	var buf [32]byte
	n := 0
	for ; n < len(b) && b[n] != 0; n++ {
		buf[n] = byte(b[n])
	}
	return string(buf[:n])
}

func readMemory(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldMemory) {
		return
	}
	if m, ret := dev.GetMemoryInfo(); g.ok(healthcheck.FieldMemory, ret) {
		g.s.MemoryTotalBytes, g.s.MemoryUsedBytes = m.Total, m.Used
	}
}

func readUtilization(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldUtilization) {
		return
	}
	if u, ret := dev.GetUtilizationRates(); g.ok(healthcheck.FieldUtilization, ret) {
		g.s.GPUUtilPercent, g.s.MemoryUtilPercent = u.Gpu, u.Memory
	}
}

func readTemperature(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldTemperature) {
		return
	}
	if t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); g.ok(healthcheck.FieldTemperature, ret) {
		g.s.TemperatureC = t
	}
}

func readPower(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldPower) {
		return
	}
	if p, ret := dev.GetPowerUsage(); g.ok(healthcheck.FieldPower, ret) {
		g.s.PowerMilliwatts = p
	}
}

func readThrottle(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldThrottle) {
		return
	}
	reasons, ret := dev.GetCurrentClocksEventReasons()
	if ret == nvml.ERROR_FUNCTION_NOT_FOUND {
		// Drivers before r535 only have the older name for the same bit mask.
		reasons, ret = dev.GetCurrentClocksThrottleReasons()
	}
	if g.ok(healthcheck.FieldThrottle, ret) {
		g.s.ThrottleReasons = reasons
	}
}

func readECC(g gpuRead, dev nvml.Device) {
	for _, c := range []struct {
		f   healthcheck.Field
		typ nvml.MemoryErrorType
		ctr nvml.EccCounterType
		dst *uint64
	}{
		{healthcheck.FieldECCVolatileCorrected, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC, &g.s.ECC.VolatileCorrected},
		{healthcheck.FieldECCVolatileUncorrected, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, &g.s.ECC.VolatileUncorrected},
		{healthcheck.FieldECCAggregateCorrected, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC, &g.s.ECC.AggregateCorrected},
		{healthcheck.FieldECCAggregateUncorrected, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC, &g.s.ECC.AggregateUncorrected},
	} {
		if g.skip(c.f) {
			continue
		}
		v, ret := dev.GetTotalEccErrors(c.typ, c.ctr)
		if g.ok(c.f, ret) {
			*c.dst = v
		}
		if g.s.Lost {
			return
		}
	}
}

func readRetiredPages(g gpuRead, dev nvml.Device) {
	// Ampere and later answer ERROR_NOT_SUPPORTED here: they remap rows instead.
	if !g.skip(healthcheck.FieldRetiredPagesSingleBit) {
		if p, ret := dev.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS); g.ok(healthcheck.FieldRetiredPagesSingleBit, ret) {
			g.s.RetiredPages.SingleBit = len(p)
		}
	}
	if !g.s.Lost && !g.skip(healthcheck.FieldRetiredPagesDoubleBit) {
		if p, ret := dev.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR); g.ok(healthcheck.FieldRetiredPagesDoubleBit, ret) {
			g.s.RetiredPages.DoubleBit = len(p)
		}
	}
	if !g.s.Lost && !g.skip(healthcheck.FieldRetiredPagesPending) {
		if st, ret := dev.GetRetiredPagesPendingStatus(); g.ok(healthcheck.FieldRetiredPagesPending, ret) {
			g.s.RetiredPages.Pending = st == nvml.FEATURE_ENABLED
		}
	}
}

func readRemappedRows(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldRemappedRows) {
		return
	}
	corr, unc, pending, failure, ret := dev.GetRemappedRows()
	if g.ok(healthcheck.FieldRemappedRows, ret) {
		g.s.RowRemap = healthcheck.RowRemap{Correctable: corr, Uncorrectable: unc, Pending: pending, Failure: failure}
	}
}

func readPCIe(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldPCIeReplay) {
		return
	}
	if v, ret := dev.GetPcieReplayCounter(); g.ok(healthcheck.FieldPCIeReplay, ret) && v >= 0 {
		g.s.PCIeReplays = uint64(v)
	}
}

var nvlinkCounters = []nvml.NvLinkErrorCounter{
	nvml.NVLINK_ERROR_DL_REPLAY, nvml.NVLINK_ERROR_DL_RECOVERY,
	nvml.NVLINK_ERROR_DL_CRC_FLIT, nvml.NVLINK_ERROR_DL_CRC_DATA, nvml.NVLINK_ERROR_DL_ECC_DATA,
}

func (r *Reader) readNVLink(g gpuRead, dev nvml.Device) {
	if g.skip(healthcheck.FieldNVLink) {
		return
	}
	links, known := r.links[g.s.Index]
	if !known {
		// First poll: probe every possible link once and remember the ones that exist.
		for l := range nvml.NVLINK_MAX_LINKS {
			_, ret := dev.GetNvLinkState(l)
			switch ret {
			case nvml.SUCCESS:
				links = append(links, l)
			case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
				// No such link on this GPU.
			default:
				// Do not remember a link list built while NVML misbehaved; probe again next poll.
				g.ok(healthcheck.FieldNVLink, ret)
				return
			}
		}
		if len(links) == 0 {
			g.ok(healthcheck.FieldNVLink, nvml.ERROR_NOT_SUPPORTED)
			return
		}
		r.links[g.s.Index] = links
	}
	n := &g.s.NVLink
	failed := nvml.SUCCESS
	for _, l := range links {
		state, ret := dev.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			failed = ret
			if ret == nvml.ERROR_GPU_IS_LOST {
				break
			}
			continue
		}
		if state != nvml.FEATURE_ENABLED {
			continue // a link that is down has no counters worth reading
		}
		n.ActiveLinks++
		for _, c := range nvlinkCounters {
			v, ret := dev.GetNvLinkErrorCounter(l, c)
			switch ret {
			case nvml.SUCCESS:
			case nvml.ERROR_NOT_SUPPORTED:
				continue // e.g. ECC_DATA on links without data ECC
			default:
				failed = ret
				continue
			}
			switch c {
			case nvml.NVLINK_ERROR_DL_REPLAY:
				n.Replay += v
			case nvml.NVLINK_ERROR_DL_RECOVERY:
				n.Recovery += v
			case nvml.NVLINK_ERROR_DL_CRC_FLIT:
				n.CRCFlit += v
			case nvml.NVLINK_ERROR_DL_CRC_DATA:
				n.CRCData += v
			case nvml.NVLINK_ERROR_DL_ECC_DATA:
				n.ECCData += v
			}
		}
	}
	if failed != nvml.SUCCESS {
		g.ok(healthcheck.FieldNVLink, failed) // one error per GPU and poll, not one per link
	}
}
