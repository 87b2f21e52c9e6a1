package nvmlsource

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"chamber.dev/chamber/healthcheck"
)

// fakeModels are the go-nvml fakes NewFake knows, with their NVLink count per GPU and
// whether the GPU has GPM (performance monitoring: Hopper and later).
var fakeModels = map[string]struct {
	new     func() *server.Server
	nvlinks int
	gpm     bool
}{
	"dgxa100": {dgxa100.New, 12, false},
	"dgxh100": {dgxh100.New, 18, true},
	"dgxh200": {dgxh200.New, 18, true},
	"dgxb200": {dgxb200.New, 18, true},
}

// FakeModels lists the models NewFake accepts.
func FakeModels() []string { return []string{"dgxa100", "dgxb200", "dgxh100", "dgxh200"} }

// FakeGPUs is a go-nvml fake node with a fault injector on top. go-nvml's fakes answer
// identity, memory, PCI and MIG only; FakeGPUs fills in the moq ...Func fields for
// utilization, ECC, row remapping, throttling, NVLink, PCIe and the event set, and its
// methods change what they answer. It is an nvml.Interface; safe for concurrent use.
type FakeGPUs struct {
	*server.Server
	model string

	mu       sync.Mutex
	gpus     []*fakeGPU
	initRet  nvml.Return
	events   chan nvml.EventData
	shutdown chan struct{}
}

// fakeGPU is the injected state of one fake GPU.
type fakeGPU struct {
	dev        *server.Device
	handle     fakeDevice
	registered uint64
	lost       bool
	failRet    nvml.Return // answered by every reading when not SUCCESS
	util       nvml.Utilization
	memUsed    uint64
	tempC      uint32
	powerMW    uint32
	throttle   uint64
	ecc        [nvml.MEMORY_ERROR_TYPE_COUNT][nvml.ECC_COUNTER_TYPE_COUNT]uint64
	remap      healthcheck.RowRemap
	replays    int
	nvlinks    int
	nvlinkErrs uint64 // on link 0's CRC_FLIT counter
	gpm        bool   // the GPU has GPM
	// sm is the SM activity GPM reports when smSet; otherwise it follows the GPU
	// utilization, as it does for a job that uses every SM.
	sm    float64
	smSet bool
}

// NewFake returns fake GPUs for a model: "dgxh100", "dgxa100", "dgxh200" or "dgxb200",
// with or without the "fake:" prefix of the agent's --nvml flag. All GPUs start healthy,
// idle and at 35°C.
func NewFake(model string) (*FakeGPUs, error) {
	name := strings.TrimPrefix(model, "fake:")
	m, ok := fakeModels[name]
	if !ok {
		return nil, fmt.Errorf("unknown fake NVML model %q: want one of %s", model, strings.Join(FakeModels(), ", "))
	}
	f := &FakeGPUs{
		Server:   m.new(),
		model:    name,
		initRet:  nvml.SUCCESS,
		events:   make(chan nvml.EventData, 1024),
		shutdown: make(chan struct{}),
	}
	f.InitFunc = func() nvml.Return {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.initRet
	}
	f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{WaitFunc: f.wait, FreeFunc: func() nvml.Return { return nvml.SUCCESS }}, nvml.SUCCESS
	}
	for _, d := range f.Devices {
		dev := d.(*server.Device)
		g := &fakeGPU{dev: dev, handle: fakeDevice{dev}, failRet: nvml.SUCCESS, tempC: 35, powerMW: 70_000, nvlinks: m.nvlinks, gpm: m.gpm}
		f.gpus = append(f.gpus, g)
		f.setDeviceFuncs(g)
	}
	return f, nil
}

// DeviceGetCount answers the number of fake GPUs. It and DeviceGetHandleByIndex shadow
// the moq mock's, which record every call: a simulator polls for hours.
func (f *FakeGPUs) DeviceGetCount() (int, nvml.Return) { return len(f.gpus), nvml.SUCCESS }

// DeviceGetHandleByIndex answers GPU i's handle.
func (f *FakeGPUs) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(f.gpus) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return f.gpus[i].handle, nvml.SUCCESS
}

// fakeDevice is the handle FakeGPUs gives out. The readings a poll makes call the mock's
// ...Func fields directly, because moq's methods append every call to a record that is
// never freed: at 720 NVLink counter calls per poll of a DGX, a simulated node would grow
// by about 70 KB every poll. Everything else goes to the mock as usual.
type fakeDevice struct{ *server.Device }

// GetUUID answers the fake GPU's UUID.
func (d fakeDevice) GetUUID() (string, nvml.Return) { return d.GetUUIDFunc() }

// GetName answers the fake GPU's model name.
func (d fakeDevice) GetName() (string, nvml.Return) { return d.GetNameFunc() }

// GetPciInfo answers the fake GPU's PCI identity and bus id.
func (d fakeDevice) GetPciInfo() (nvml.PciInfo, nvml.Return) { return d.GetPciInfoFunc() }

// GetMemoryInfo answers the injected memory use.
func (d fakeDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) { return d.GetMemoryInfoFunc() }

// GetUtilizationRates answers the injected utilization.
func (d fakeDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	return d.GetUtilizationRatesFunc()
}

// GpmQueryDeviceSupport answers whether the fake GPU has GPM.
func (d fakeDevice) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	return d.GpmQueryDeviceSupportFunc()
}

// GpmSampleGet takes a GPM sample of the fake GPU.
func (d fakeDevice) GpmSampleGet(s nvml.GpmSample) nvml.Return { return d.GpmSampleGetFunc(s) }

// fakeGPMSample is a GPM sample of a fake GPU: its SM activity when taken.
type fakeGPMSample struct {
	sm    float64
	taken bool
}

// Free frees nothing: the sample is garbage-collected.
func (s *fakeGPMSample) Free() nvml.Return { return nvml.SUCCESS }

// Get takes the sample on device.
func (s *fakeGPMSample) Get(device nvml.Device) nvml.Return { return device.GpmSampleGet(s) }

// MigGet is not supported by the fake.
func (s *fakeGPMSample) MigGet(nvml.Device, int) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }

// GpmSampleAlloc allocates a fake GPM sample. It shadows the moq mock's, which records
// every call.
func (f *FakeGPUs) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) {
	return &fakeGPMSample{}, nvml.SUCCESS
}

// GpmMetricsGet computes GPM metrics between two fake samples: SM utilization (SM
// activity) over the interval is what the GPU was set to when the second was taken
// (settings change between polls, and hold until the next); other metrics are not
// supported.
func (f *FakeGPUs) GpmMetricsGet(m *nvml.GpmMetricsGetType) nvml.Return {
	s1, ok1 := m.Sample1.(*fakeGPMSample)
	s2, ok2 := m.Sample2.(*fakeGPMSample)
	if !ok1 || !ok2 || !s1.taken || !s2.taken || m.NumMetrics > uint32(len(m.Metrics)) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	for i := range m.NumMetrics {
		met := &m.Metrics[i]
		if nvml.GpmMetricId(met.MetricId) != nvml.GPM_METRIC_SM_UTIL {
			met.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		met.Value, met.NvmlReturn = s2.sm, uint32(nvml.SUCCESS)
	}
	return nvml.SUCCESS
}

// GetTemperature answers the injected temperature.
func (d fakeDevice) GetTemperature(s nvml.TemperatureSensors) (uint32, nvml.Return) {
	return d.GetTemperatureFunc(s)
}

// GetPowerUsage answers the injected power draw.
func (d fakeDevice) GetPowerUsage() (uint32, nvml.Return) { return d.GetPowerUsageFunc() }

// GetCurrentClocksEventReasons answers the injected throttle reasons.
func (d fakeDevice) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	return d.GetCurrentClocksEventReasonsFunc()
}

// GetCurrentClocksThrottleReasons answers the injected throttle reasons (older name).
func (d fakeDevice) GetCurrentClocksThrottleReasons() (uint64, nvml.Return) {
	return d.GetCurrentClocksThrottleReasonsFunc()
}

// GetTotalEccErrors answers the injected ECC counters.
func (d fakeDevice) GetTotalEccErrors(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
	return d.GetTotalEccErrorsFunc(t, c)
}

// GetRetiredPages answers not supported, as Ampere and later do.
func (d fakeDevice) GetRetiredPages(c nvml.PageRetirementCause) ([]uint64, nvml.Return) {
	return d.GetRetiredPagesFunc(c)
}

// GetRetiredPagesPendingStatus answers not supported, as Ampere and later do.
func (d fakeDevice) GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return) {
	return d.GetRetiredPagesPendingStatusFunc()
}

// GetRemappedRows answers the injected row-remapper state.
func (d fakeDevice) GetRemappedRows() (int, int, bool, bool, nvml.Return) {
	return d.GetRemappedRowsFunc()
}

// GetPcieReplayCounter answers the injected PCIe replay count.
func (d fakeDevice) GetPcieReplayCounter() (int, nvml.Return) { return d.GetPcieReplayCounterFunc() }

// GetNvLinkState answers enabled for the model's links.
func (d fakeDevice) GetNvLinkState(l int) (nvml.EnableState, nvml.Return) {
	return d.GetNvLinkStateFunc(l)
}

// GetNvLinkErrorCounter answers the injected NVLink errors.
func (d fakeDevice) GetNvLinkErrorCounter(l int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
	return d.GetNvLinkErrorCounterFunc(l, c)
}

// Model returns the fake's model name, e.g. "dgxh100".
func (f *FakeGPUs) Model() string { return f.model }

// answer is what every reading of a fake GPU checks first: a lost GPU, or an injected
// error.
func (f *FakeGPUs) answer(g *fakeGPU) nvml.Return {
	if g.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	return g.failRet
}

// setDeviceFuncs installs the readings. Each locks f.mu: the injector changes state while
// a poll goroutine reads it.
func (f *FakeGPUs) setDeviceFuncs(g *fakeGPU) {
	d := g.dev
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sup := nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION}
		if g.gpm {
			sup.IsSupportedDevice = 1
		}
		return sup, f.answer(g)
	}
	d.GpmSampleGetFunc = func(s nvml.GpmSample) nvml.Return {
		f.mu.Lock()
		defer f.mu.Unlock()
		fs, ok := s.(*fakeGPMSample)
		switch {
		case !g.gpm:
			return nvml.ERROR_NOT_SUPPORTED
		case !ok:
			return nvml.ERROR_INVALID_ARGUMENT
		case f.answer(g) != nvml.SUCCESS:
			return f.answer(g)
		}
		fs.sm, fs.taken = float64(g.util.Gpu), true
		if g.smSet {
			fs.sm = g.sm
		}
		return nvml.SUCCESS
	}
	uuid, name := d.GetUUIDFunc, d.GetNameFunc
	d.GetUUIDFunc = func() (string, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return "", r
		}
		return uuid()
	}
	d.GetNameFunc = func() (string, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return "", r
		}
		return name()
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return nvml.PciInfo{}, r
		}
		// The fake keeps its bus id outside PciInfo; put it where NVML does.
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId}
		for i := 0; i < len(d.PciBusID) && i < len(p.BusId)-1; i++ {
			p.BusId[i] = int8(d.PciBusID[i])
		}
		return p, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return nvml.Memory{}, r
		}
		m := d.MemoryInfo
		m.Used, m.Free = g.memUsed, m.Total-g.memUsed
		return m, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return g.util, f.answer(g)
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return g.tempC, f.answer(g)
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return g.powerMW, f.answer(g)
	}
	throttle := func() (uint64, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return g.throttle, f.answer(g)
	}
	d.GetCurrentClocksEventReasonsFunc = throttle
	d.GetCurrentClocksThrottleReasonsFunc = throttle
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if t >= nvml.MEMORY_ERROR_TYPE_COUNT || c >= nvml.ECC_COUNTER_TYPE_COUNT {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return g.ecc[t][c], f.answer(g)
	}
	// A100 and later retire no pages: they remap rows. NVML says so.
	d.GetRetiredPagesFunc = func(nvml.PageRetirementCause) ([]uint64, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return nil, r
		}
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return 0, r
		}
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return g.remap.Correctable, g.remap.Uncorrectable, g.remap.Pending, g.remap.Failure, f.answer(g)
	}
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return g.replays, f.answer(g)
	}
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return 0, r
		}
		if link < 0 || link >= g.nvlinks {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkErrorCounterFunc = func(link int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return 0, r
		}
		if link < 0 || link >= g.nvlinks {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if link == 0 && c == nvml.NVLINK_ERROR_DL_CRC_FLIT {
			return g.nvlinkErrs, nvml.SUCCESS
		}
		return 0, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, f.answer(g)
	}
	d.RegisterEventsFunc = func(mask uint64, _ nvml.EventSet) nvml.Return {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r := f.answer(g); r != nvml.SUCCESS {
			return r
		}
		g.registered |= mask
		return nvml.SUCCESS
	}
}

// wait is the fake event set's Wait: the next injected event, or ERROR_TIMEOUT after the
// timeout as NVML does.
func (f *FakeGPUs) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	select {
	case ev := <-f.events:
		return ev, nvml.SUCCESS
	default:
	}
	t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer t.Stop()
	select {
	case ev := <-f.events:
		return ev, nvml.SUCCESS
	case <-t.C:
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	case <-f.shutdown:
		return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
	}
}

// Close makes pending and future event waits return at once, so tests need not wait for
// the event timeout when they stop a Monitor.
func (f *FakeGPUs) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.shutdown:
	default:
		close(f.shutdown)
	}
}

func (f *FakeGPUs) gpu(i int) (*fakeGPU, error) {
	if i < 0 || i >= len(f.gpus) {
		return nil, fmt.Errorf("fake %s has GPUs 0 to %d, not %d", f.model, len(f.gpus)-1, i)
	}
	return f.gpus[i], nil
}

// update applies change to GPU i under the lock, then queues the events it returns.
func (f *FakeGPUs) update(i int, change func(g *fakeGPU) []nvml.EventData) error {
	f.mu.Lock()
	g, err := f.gpu(i)
	var evs []nvml.EventData
	if err == nil {
		evs = change(g)
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for _, ev := range evs {
		select {
		case f.events <- ev:
		default:
			return fmt.Errorf("fake %s: event queue full; is an event watcher running?", f.model)
		}
	}
	return nil
}

// event builds an event for GPU g if it is registered for the type, as NVML delivers only
// registered types. Call with f.mu held.
func event(g *fakeGPU, typ, data uint64) []nvml.EventData {
	if g.registered&typ == 0 {
		return nil
	}
	return []nvml.EventData{{Device: g.handle, EventType: typ, EventData: data,
		GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}}
}

// FailInit makes nvml.Init answer ret (nvml.SUCCESS restores it), to test the
// NVMLUnavailable path.
func (f *FakeGPUs) FailInit(ret nvml.Return) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initRet = ret
}

// RaiseXID delivers XID code on GPU i to the event watcher. Only a registered GPU gets
// events, as with NVML: start the watcher first.
func (f *FakeGPUs) RaiseXID(i int, code uint64) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		return event(g, nvml.EventTypeXidCriticalError, code)
	})
}

// RaiseDoubleBitECC adds an uncorrectable ECC error to GPU i's counters and delivers the
// double-bit ECC event and XID 48, as the driver does.
func (f *FakeGPUs) RaiseDoubleBitECC(i int) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.ecc[nvml.MEMORY_ERROR_TYPE_UNCORRECTED][nvml.VOLATILE_ECC]++
		g.ecc[nvml.MEMORY_ERROR_TYPE_UNCORRECTED][nvml.AGGREGATE_ECC]++
		return append(event(g, nvml.EventTypeDoubleBitEccError, 0), event(g, nvml.EventTypeXidCriticalError, 48)...)
	})
}

// AddCorrectableECC adds n corrected (single-bit) ECC errors to GPU i's counters.
func (f *FakeGPUs) AddCorrectableECC(i int, n uint64) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.ecc[nvml.MEMORY_ERROR_TYPE_CORRECTED][nvml.VOLATILE_ECC] += n
		g.ecc[nvml.MEMORY_ERROR_TYPE_CORRECTED][nvml.AGGREGATE_ECC] += n
		return nil
	})
}

// SetRowRemapPending marks a row remap pending on GPU i (with XID 63, as the driver logs)
// or, with false, done.
func (f *FakeGPUs) SetRowRemapPending(i int, pending bool) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.remap.Pending = pending
		if !pending {
			return nil
		}
		g.remap.Uncorrectable++
		return event(g, nvml.EventTypeXidCriticalError, 63)
	})
}

// FailRowRemap makes GPU i report a row-remap failure (no spare rows left) and XID 64.
func (f *FakeGPUs) FailRowRemap(i int) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.remap.Failure = true
		return event(g, nvml.EventTypeXidCriticalError, 64)
	})
}

// LoseGPU makes GPU i fall off the bus: XID 79, then ERROR_GPU_IS_LOST from every call.
func (f *FakeGPUs) LoseGPU(i int) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		evs := event(g, nvml.EventTypeXidCriticalError, 79)
		g.lost = true
		return evs
	})
}

// FailReads makes every reading of GPU i answer ret (e.g. nvml.ERROR_UNKNOWN), as a sick
// driver does; nvml.SUCCESS restores it.
func (f *FakeGPUs) FailReads(i int, ret nvml.Return) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.failRet = ret
		return nil
	})
}

// SetThrottle sets GPU i's clocks-event reasons (nvml.ClocksEventReason* bits; 0 for none).
func (f *FakeGPUs) SetThrottle(i int, reasons uint64) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.throttle = reasons
		return nil
	})
}

// SetUtilization sets GPU i's GPU and memory utilization, in percent.
func (f *FakeGPUs) SetUtilization(i int, gpuPercent, memoryPercent uint32) error {
	if gpuPercent > 100 || memoryPercent > 100 {
		return fmt.Errorf("utilization is a percentage, got %d and %d", gpuPercent, memoryPercent)
	}
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.util = nvml.Utilization{Gpu: gpuPercent, Memory: memoryPercent}
		return nil
	})
}

// SetSMActivity sets the SM activity GPU i's GPM reports (percent of SM cycles with a
// warp resident), apart from its utilization: a kernel spinning on a few SMs reads
// 100% utilization and little SM activity. Unset, it follows the utilization.
func (f *FakeGPUs) SetSMActivity(i int, percent float64) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("SM activity is a percentage, got %v", percent)
	}
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.sm, g.smSet = percent, true
		return nil
	})
}

// SetMemoryUsed sets GPU i's used framebuffer memory, capped at its total.
func (f *FakeGPUs) SetMemoryUsed(i int, bytes uint64) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.memUsed = min(bytes, g.dev.MemoryInfo.Total)
		return nil
	})
}

// SetTemperature sets GPU i's temperature (°C) and power draw (milliwatts).
func (f *FakeGPUs) SetTemperature(i int, celsius, milliwatts uint32) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.tempC, g.powerMW = celsius, milliwatts
		return nil
	})
}

// AddPCIeReplays adds n to GPU i's PCIe replay counter.
func (f *FakeGPUs) AddPCIeReplays(i, n int) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.replays += n
		return nil
	})
}

// AddNVLinkErrors adds n CRC errors on GPU i's first NVLink.
func (f *FakeGPUs) AddNVLinkErrors(i int, n uint64) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.nvlinkErrs += n
		return nil
	})
}

// ResetGPU does what nvidia-smi -r does to GPU i: volatile ECC counters, pending remaps,
// throttling, injected errors and a lost state clear; lifetime counters and a remap
// failure (hardware) stay.
func (f *FakeGPUs) ResetGPU(i int) error {
	return f.update(i, func(g *fakeGPU) []nvml.EventData {
		g.lost, g.failRet, g.throttle = false, nvml.SUCCESS, 0
		g.ecc[nvml.MEMORY_ERROR_TYPE_CORRECTED][nvml.VOLATILE_ECC] = 0
		g.ecc[nvml.MEMORY_ERROR_TYPE_UNCORRECTED][nvml.VOLATILE_ECC] = 0
		g.remap.Pending = false
		return nil
	})
}
