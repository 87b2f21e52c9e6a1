package fleet

import "sync"

// Workers are the fleet models of the worker clusters Chamber watches (Kueue's
// MultiKueue workers), by worker name: the inventory keeps them, the MultiKueue
// dispatcher reads them. Safe for concurrent use; the zero value is empty.
type Workers struct {
	mu     sync.RWMutex
	models map[string]*Model
}

// Set records worker's model; nil forgets it.
func (w *Workers) Set(worker string, m *Model) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m == nil {
		delete(w.models, worker)
		return
	}
	if w.models == nil {
		w.models = map[string]*Model{}
	}
	w.models[worker] = m
}

// Get is worker's model once its watches have synced; nil before, and for a worker
// not watched.
func (w *Workers) Get(worker string) *Model {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if m := w.models[worker]; m != nil && m.Synced() {
		return m
	}
	return nil
}
