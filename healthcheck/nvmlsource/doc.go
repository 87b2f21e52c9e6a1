// Package nvmlsource reads the node's GPUs through NVML for the node agent and feeds
// healthcheck's rules. It calls NVML through go-nvml's nvml.Interface, so go-nvml's
// fakes slot in without a GPU.
//
// Two loops touch NVML, each in a goroutine of its own (Monitor runs both): a Reader
// polls every GPU into a healthcheck.Snapshot, and an EventWatcher waits for XID and
// ECC events. Both feed a healthcheck.Tracker; metrics scrapes and status writers read
// the Tracker and never call NVML. NewFake builds go-nvml's DGX fakes with a fault
// injector (FakeGPUs) for tests and the simulator.
//
// go-nvml is cgo, and so is every binary that links this package. Only the agent
// (agent, cmd/chamber-agent), the simulator (sim, which runs the agent's reading path
// on the fakes) and tests may import it; the controller and kubectl-chamber must not.
// NVML's values become healthcheck's here: a return code is stored as the error in
// healthcheck.ReadError and healthcheck.Event, and GPUSample.ThrottleReasons keeps
// NVML's clocks-event bits, which healthcheck names Throttle*.
package nvmlsource
