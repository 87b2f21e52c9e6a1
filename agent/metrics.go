package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"chamber.dev/chamber/healthcheck"
)

// dcgmLabels are dcgm-exporter's labels, in its order, so that dashboards and alerts
// written for it work unchanged. "device" is nvidia<index> (dcgm-exporter uses the
// minor number, equal to the index on ordinary nodes). pod, namespace and container are
// empty for a GPU no pod holds; Prometheus treats an empty label as absent, which is
// what dcgm-exporter emits then.
var dcgmLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"}

// chamberLabels identify a GPU in Chamber's own metrics. They leave out the pod: health
// and XIDs belong to the hardware, and pod labels would start new series at each job.
var chamberLabels = []string{"gpu", "UUID", "modelName", "Hostname"}

// dcgmMetric is one dcgm-exporter metric computed from a poll.
type dcgmMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	field healthcheck.Field // the reading it needs; left out when that failed or is unsupported
	value func(s *healthcheck.GPUSample) float64
}

func dcgm(name, help string, typ prometheus.ValueType, field healthcheck.Field, value func(s *healthcheck.GPUSample) float64) dcgmMetric {
	return dcgmMetric{desc: prometheus.NewDesc(name, help, dcgmLabels, nil), typ: typ, field: field, value: value}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

const mib = 1 << 20

// dcgmMetrics are the fields of dcgm-exporter's default-counters.csv (and its commented
// ECC, retired-page and NVLink lines) that NVML polls provide, with its types and help.
var dcgmMetrics = []dcgmMetric{
	dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", prometheus.GaugeValue, healthcheck.FieldUtilization,
		func(s *healthcheck.GPUSample) float64 { return float64(s.GPUUtilPercent) }),
	dcgm("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (NVML GPM's SM utilization; Hopper and later).", prometheus.GaugeValue, healthcheck.FieldSMActivity,
		func(s *healthcheck.GPUSample) float64 { return s.SMActivityPercent / 100 }),
	dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", prometheus.GaugeValue, healthcheck.FieldUtilization,
		func(s *healthcheck.GPUSample) float64 { return float64(s.MemoryUtilPercent) }),
	dcgm("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", prometheus.GaugeValue, healthcheck.FieldMemory,
		func(s *healthcheck.GPUSample) float64 {
			return float64((s.MemoryTotalBytes - min(s.MemoryUsedBytes, s.MemoryTotalBytes)) / mib)
		}),
	dcgm("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", prometheus.GaugeValue, healthcheck.FieldMemory,
		func(s *healthcheck.GPUSample) float64 { return float64(s.MemoryUsedBytes / mib) }),
	dcgm("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", prometheus.GaugeValue, healthcheck.FieldTemperature,
		func(s *healthcheck.GPUSample) float64 { return float64(s.TemperatureC) }),
	dcgm("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", prometheus.GaugeValue, healthcheck.FieldPower,
		func(s *healthcheck.GPUSample) float64 { return float64(s.PowerMilliwatts) / 1000 }),
	dcgm("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bit mask of NVML's clocks-event reasons).", prometheus.GaugeValue, healthcheck.FieldThrottle,
		func(s *healthcheck.GPUSample) float64 { return float64(s.ThrottleReasons) }),
	dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", prometheus.CounterValue, healthcheck.FieldPCIeReplay,
		func(s *healthcheck.GPUSample) float64 { return float64(s.PCIeReplays) }),
	dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", prometheus.CounterValue, healthcheck.FieldECCVolatileCorrected,
		func(s *healthcheck.GPUSample) float64 { return float64(s.ECC.VolatileCorrected) }),
	dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", prometheus.CounterValue, healthcheck.FieldECCVolatileUncorrected,
		func(s *healthcheck.GPUSample) float64 { return float64(s.ECC.VolatileUncorrected) }),
	dcgm("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", prometheus.CounterValue, healthcheck.FieldECCAggregateCorrected,
		func(s *healthcheck.GPUSample) float64 { return float64(s.ECC.AggregateCorrected) }),
	dcgm("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", prometheus.CounterValue, healthcheck.FieldECCAggregateUncorrected,
		func(s *healthcheck.GPUSample) float64 { return float64(s.ECC.AggregateUncorrected) }),
	dcgm("DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors.", prometheus.CounterValue, healthcheck.FieldRetiredPagesSingleBit,
		func(s *healthcheck.GPUSample) float64 { return float64(s.RetiredPages.SingleBit) }),
	dcgm("DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors.", prometheus.CounterValue, healthcheck.FieldRetiredPagesDoubleBit,
		func(s *healthcheck.GPUSample) float64 { return float64(s.RetiredPages.DoubleBit) }),
	dcgm("DCGM_FI_DEV_RETIRED_PENDING", "Total number of pages pending retirement.", prometheus.CounterValue, healthcheck.FieldRetiredPagesPending,
		func(s *healthcheck.GPUSample) float64 { return b2f(s.RetiredPages.Pending) }),
	dcgm("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors", prometheus.CounterValue, healthcheck.FieldRemappedRows,
		func(s *healthcheck.GPUSample) float64 { return float64(s.RowRemap.Uncorrectable) }),
	dcgm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors", prometheus.CounterValue, healthcheck.FieldRemappedRows,
		func(s *healthcheck.GPUSample) float64 { return float64(s.RowRemap.Correctable) }),
	dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", prometheus.GaugeValue, healthcheck.FieldRemappedRows,
		func(s *healthcheck.GPUSample) float64 { return b2f(s.RowRemap.Failure) }),
	dcgm("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether a row remap is pending (a GPU reset applies it)", prometheus.GaugeValue, healthcheck.FieldRemappedRows,
		func(s *healthcheck.GPUSample) float64 { return b2f(s.RowRemap.Pending) }),
	dcgm("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.", prometheus.CounterValue, healthcheck.FieldNVLink,
		func(s *healthcheck.GPUSample) float64 { return float64(s.NVLink.CRCFlit) }),
	dcgm("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors.", prometheus.CounterValue, healthcheck.FieldNVLink,
		func(s *healthcheck.GPUSample) float64 { return float64(s.NVLink.CRCData) }),
	dcgm("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.", prometheus.CounterValue, healthcheck.FieldNVLink,
		func(s *healthcheck.GPUSample) float64 { return float64(s.NVLink.Replay) }),
	dcgm("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.", prometheus.CounterValue, healthcheck.FieldNVLink,
		func(s *healthcheck.GPUSample) float64 { return float64(s.NVLink.Recovery) }),
}

var (
	descXID = prometheus.NewDesc("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", dcgmLabels, nil)

	descHealth = prometheus.NewDesc("chamber_gpu_health",
		"GPU health as the agent publishes it: 1 for the GPU's current state (Healthy, Degraded, Unhealthy), 0 for the others.",
		append(chamberLabels[:len(chamberLabels):len(chamberLabels)], "health"), nil)
	descXIDTotal = prometheus.NewDesc("chamber_gpu_xid_errors_total",
		"XID errors seen on the GPU since the agent started, by XID; every repeat counts (DCGM_FI_DEV_XID_ERRORS keeps only the last).",
		append(chamberLabels[:len(chamberLabels):len(chamberLabels)], "xid"), nil)
	descFault = prometheus.NewDesc("chamber_gpu_fault",
		"Active GPU faults: 1 per fault, by reason (XID79, ECCDoubleBit, ...) and the health it implies.",
		append(chamberLabels[:len(chamberLabels):len(chamberLabels)], "reason", "severity"), nil)
	descNVMLUp = prometheus.NewDesc("chamber_agent_nvml_up",
		"1 while NVML answers; 0 while the agent reports NVMLUnavailable and retries.", []string{"Hostname"}, nil)
)

var healthStates = []healthcheck.Health{healthcheck.Healthy, healthcheck.Degraded, healthcheck.Unhealthy}

// gpuCollector turns the Tracker's GPU states into metrics at scrape time. It reads
// memory only: NVML is polled by the Monitor and pods are mapped by the agent's loop,
// so a scrape costs the same on a busy node as on an idle one.
type gpuCollector struct{ a *Agent }

func newGPUCollector(a *Agent) *gpuCollector { return &gpuCollector{a: a} }

// Describe sends every metric's description.
func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.a.cfg.DCGMMetrics {
		for _, m := range dcgmMetrics {
			ch <- m.desc
		}
		ch <- descXID
	}
	for _, d := range []*prometheus.Desc{descHealth, descXIDTotal, descFault, descNVMLUp} {
		ch <- d
	}
}

// Collect sends the metrics of every GPU from the Tracker's latest state.
func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	host := c.a.cfg.NodeName
	view := c.a.scrapeView()
	ch <- prometheus.MustNewConstMetric(descNVMLUp, prometheus.GaugeValue, b2f(view.nvmlUp), host)
	for _, g := range c.a.monitor.Tracker().GPUs() {
		idx := strconv.Itoa(g.Index)
		s := &g.Sample
		pod, _ := healthcheck.PodOf(g, view.pods)
		if !g.LastPoll.IsZero() && c.a.cfg.DCGMMetrics {
			// Every dcgm metric of a GPU has the same labels: made once, shared.
			labels := prometheus.MakeLabelPairs(descXID, []string{idx, g.UUID, s.PCIBusID, "nvidia" + idx, s.Name, host, view.driver, pod.Container, pod.Namespace, pod.Name})
			for _, m := range dcgmMetrics {
				if healthcheck.ReadingOK(s, m.field) {
					ch <- &sharedLabelsMetric{desc: m.desc, typ: m.typ, value: m.value(s), labels: labels}
				}
			}
			ch <- &sharedLabelsMetric{desc: descXID, typ: prometheus.GaugeValue, value: float64(view.lastXID[g.Index]), labels: labels}
		}
		ids := []string{idx, g.UUID, s.Name, host}
		for _, h := range healthStates {
			ch <- prometheus.MustNewConstMetric(descHealth, prometheus.GaugeValue, b2f(g.Health == h), append(ids, string(h))...)
		}
		for code, n := range g.XIDCounts {
			ch <- prometheus.MustNewConstMetric(descXIDTotal, prometheus.CounterValue, float64(n), append(ids, strconv.FormatUint(code, 10))...)
		}
		for _, f := range g.Faults {
			ch <- prometheus.MustNewConstMetric(descFault, prometheus.GaugeValue, 1, append(ids, string(f.Reason), string(f.Severity))...)
		}
	}
}

// sharedLabelsMetric is a sample whose label pairs it shares with the GPU's other
// samples. Label pairs are most of a scrape's allocations (prometheus.NewConstMetric
// makes them per sample), and the encoder only reads them.
type sharedLabelsMetric struct {
	desc   *prometheus.Desc
	typ    prometheus.ValueType
	value  float64
	labels []*dto.LabelPair
}

// Desc returns the metric's description.
func (m *sharedLabelsMetric) Desc() *prometheus.Desc { return m.desc }

// Write fills out the sample with the shared labels.
func (m *sharedLabelsMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.typ == prometheus.CounterValue {
		out.Counter = &dto.Counter{Value: &m.value}
	} else {
		out.Gauge = &dto.Gauge{Value: &m.value}
	}
	return nil
}
