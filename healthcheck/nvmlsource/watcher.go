package nvmlsource

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"

	"chamber.dev/chamber/healthcheck"
)

// watchedEvents are the event types asked for, as NVIDIA's k8s-device-plugin does, plus
// GPU-unavailable where the driver offers it. Each GPU gets the subset it supports.
const watchedEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeGpuUnavailableError)

// EventWatcher waits on an NVML event set for XIDs and ECC errors. Its Run loop belongs in
// a goroutine of its own: NVML's wait blocks.
type EventWatcher struct {
	set       nvml.EventSet
	clock     clock.WithTicker
	timeout   time.Duration
	watched   []watchedGPU
	unwatched []healthcheck.Event
}

// watchedGPU is a GPU registered with the event set.
type watchedGPU struct {
	index  int
	uuid   string
	handle nvml.Device
}

// NewEventWatcher creates an event set on an initialised NVML and registers every GPU. It
// fails only when the event set cannot be created; a GPU that cannot be registered is
// reported by Unwatched and by Run, and the others are still watched.
func NewEventWatcher(lib nvml.Interface, clk clock.WithTicker, waitTimeout time.Duration) (*EventWatcher, error) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("create NVML event set: %w", ret)
	}
	w := &EventWatcher{set: set, clock: clk, timeout: waitTimeout}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		set.Free()
		return nil, fmt.Errorf("%w: count GPUs: %v", healthcheck.ErrNVMLUnavailable, ret)
	}
	for i := range n {
		if ret := w.register(lib, i); ret != nvml.SUCCESS {
			w.unwatched = append(w.unwatched, healthcheck.Event{Kind: healthcheck.EventUnwatched, GPU: i, Err: ret, Time: clk.Now()})
		}
	}
	return w, nil
}

func (w *EventWatcher) register(lib nvml.Interface, i int) nvml.Return {
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return ret
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return ret
	}
	supported, ret := dev.GetSupportedEventTypes()
	if ret != nvml.SUCCESS {
		return ret
	}
	if ret := dev.RegisterEvents(watchedEvents&supported, w.set); ret != nvml.SUCCESS {
		return ret // ERROR_NOT_SUPPORTED: a GPU too old for events
	}
	w.watched = append(w.watched, watchedGPU{index: i, uuid: uuid, handle: dev})
	return nvml.SUCCESS
}

// Unwatched lists the GPUs that could not be registered, with NVML's answer.
func (w *EventWatcher) Unwatched() []healthcheck.Event { return w.unwatched }

// Next waits once, up to the wait timeout. ok is false on a timeout or an event type
// Chamber does not act on.
func (w *EventWatcher) Next() (ev healthcheck.Event, ok bool) {
	data, ret := w.set.Wait(uint32(w.timeout / time.Millisecond))
	now := w.clock.Now()
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_TIMEOUT:
		return healthcheck.Event{}, false
	default:
		return healthcheck.Event{Kind: healthcheck.EventWaitError, GPU: -1, Err: ret, Time: now}, true
	}
	ev = healthcheck.Event{GPU: -1, Time: now}
	switch {
	case data.EventType&nvml.EventTypeXidCriticalError != 0:
		ev.Kind, ev.XID = healthcheck.EventXID, data.EventData
	case data.EventType&nvml.EventTypeDoubleBitEccError != 0:
		ev.Kind = healthcheck.EventDoubleBitECC
	case data.EventType&nvml.EventTypeGpuUnavailableError != 0:
		ev.Kind = healthcheck.EventGPUUnavailable
	default:
		return healthcheck.Event{}, false
	}
	// Events on MIG instances carry the parent GPU's handle; Chamber tracks whole GPUs.
	ev.GPU, ev.UUID = w.gpuOf(data.Device)
	return ev, true
}

// gpuOf finds the GPU of an event. The handle is compared first: a GPU that fell off the
// bus answers ERROR_GPU_IS_LOST to GetUUID, and its XID 79 must still reach it.
func (w *EventWatcher) gpuOf(dev nvml.Device) (int, string) {
	if dev == nil {
		return -1, ""
	}
	// NVML's handles are comparable (a struct holding a pointer), and so are the fakes'
	// pointers; check anyway, since comparing other dynamic types would panic.
	if t := reflect.TypeOf(dev); t.Comparable() {
		for _, g := range w.watched {
			if reflect.TypeOf(g.handle) == t && g.handle == dev {
				return g.index, g.uuid
			}
		}
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return -1, ""
	}
	for _, g := range w.watched {
		if g.uuid == uuid {
			return g.index, uuid
		}
	}
	return -1, uuid
}

// Run delivers events until ctx is done; it returns within one wait timeout of that.
// deliver must not block for long: NVML queues events only so far.
func (w *EventWatcher) Run(ctx context.Context, deliver func(healthcheck.Event)) {
	for _, ev := range w.unwatched {
		deliver(ev)
	}
	for ctx.Err() == nil {
		ev, ok := w.Next()
		if !ok {
			continue
		}
		deliver(ev)
		if ev.Kind == healthcheck.EventWaitError {
			// A broken event set fails at once; back off rather than spin a core.
			select {
			case <-ctx.Done():
			case <-w.clock.After(w.timeout):
			}
		}
	}
}

// Close frees the event set.
func (w *EventWatcher) Close() error {
	if ret := w.set.Free(); ret != nvml.SUCCESS {
		return fmt.Errorf("free NVML event set: %w", ret)
	}
	return nil
}
