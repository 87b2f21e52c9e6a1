// Package healthcheck reads GPUs through NVML (go-nvml's nvml.Interface, so its fakes
// slot in without a GPU), classifies faults with NVIDIA's XID catalog, and keeps each
// GPU's health for the node agent.
//
// Two loops touch NVML, each in a goroutine of its own (Monitor runs both): a Reader polls
// every GPU into a Snapshot, and an EventWatcher waits for XID and ECC events. Both feed a
// Tracker, which applies the rules (Classify, ClassifyXID) with hysteresis and stores the
// result; metrics scrapes and status writers read the Tracker and never call NVML.
// NewFake builds go-nvml's DGX fakes with a fault injector for tests and the simulator.
package healthcheck
