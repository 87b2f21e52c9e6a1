package healthcheck

import "time"

// EventKind says what an Event reports.
type EventKind string

const (
	// EventXID is a critical XID the driver reported on a GPU.
	EventXID EventKind = "XID"
	// EventDoubleBitECC is an uncorrectable ECC error.
	EventDoubleBitECC EventKind = "DoubleBitECC"
	// EventGPUUnavailable is the driver saying the GPU is gone (newer drivers only).
	EventGPUUnavailable EventKind = "GPUUnavailable"
	// EventUnwatched says a GPU could not be registered for events; polls still cover it.
	EventUnwatched EventKind = "Unwatched"
	// EventWaitError is a failed wait on the event set (not a timeout).
	EventWaitError EventKind = "WaitError"
)

// Event is one NVML event, tied to a GPU by index (-1 when NVML could not say which).
type Event struct {
	Kind EventKind
	GPU  int
	UUID string
	XID  uint64 // for EventXID
	Err  error  // NVML's answer, for EventUnwatched and EventWaitError
	Time time.Time
}
