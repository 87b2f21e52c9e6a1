// Package healthcheck holds Chamber's GPU health rules, apart from any way of reading
// the GPUs: NVIDIA's XID catalog, the poll rules (Classify, ClassifyXID), the Tracker
// that applies them with hysteresis and stores each GPU's health, the GPUNode and Node
// status built from it, the rules' Config and its file, dcgm-exporter's series
// (ParseDCGM, DCGMNode) and the utilization windows.
//
// A source of readings fills Snapshots and Events and hands them to a Tracker; metrics
// scrapes and status writers read the Tracker. The node agent's source is NVML
// (package healthcheck/nvmlsource); the controller's is dcgm-exporter's series in
// Prometheus (DCGMNode).
//
// Any package may import healthcheck. It must not import the NVML bindings, which are
// cgo: the controller and kubectl-chamber use these rules and build with
// CGO_ENABLED=0. Code that calls NVML belongs in nvmlsource, which converts NVML's
// values into these types (return codes as errors, clocks-event reasons as the
// Throttle* bits).
package healthcheck
