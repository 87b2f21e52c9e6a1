package controlplane

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// DCGMExporter serves what NVIDIA's dcgm-exporter serves for one node of 8 H100s, with
// its series names and labels (its etc/default-counters.csv; the node's name in
// Hostname, as with NODE_NAME set), for tests of what Chamber reads from a Prometheus
// that scrapes it. Serve it with net/http/httptest; RaiseXID and SetDown change what
// it serves.
type DCGMExporter struct {
	Node string

	mu   sync.Mutex
	xid  map[int]int
	down bool
}

// NewDCGMExporter is the exporter of node's GPUs, all healthy and 90% busy.
func NewDCGMExporter(node string) *DCGMExporter {
	return &DCGMExporter{Node: node, xid: map[int]int{}}
}

// RaiseXID makes DCGM_FI_DEV_XID_ERRORS of the GPU the XID, as dcgm-exporter reports
// the last XID a GPU raised.
func (e *DCGMExporter) RaiseXID(gpu, xid int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.xid[gpu] = xid
}

// SetDown makes the exporter answer 503, as one whose DCGM stopped answering.
func (e *DCGMExporter) SetDown(down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down = down
}

// ServeHTTP serves the exposition.
func (e *DCGMExporter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down {
		http.Error(w, "DCGM not answering", http.StatusServiceUnavailable)
		return
	}
	var b strings.Builder
	series := []struct{ name, typ, help string }{
		{"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."},
		{"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."},
		{"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."},
		{"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."},
		{"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"},
	}
	for _, s := range series {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", s.name, s.help, s.name, s.typ)
		for gpu := range 8 {
			v := 0
			switch s.name {
			case "DCGM_FI_DEV_GPU_UTIL":
				v = 90
			case "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE":
				v = 40960
			case "DCGM_FI_DEV_XID_ERRORS":
				v = e.xid[gpu]
			}
			fmt.Fprintf(&b, `%s{gpu="%d",UUID="GPU-%s-%d",pci_bus_id="00000000:%02X:00.0",device="nvidia%d",modelName="NVIDIA H100 80GB HBM3",Hostname="%s",DCGM_FI_DRIVER_VERSION="550.54.15"} %d`+"\n",
				s.name, gpu, e.Node, gpu, 0x18+gpu, gpu, e.Node, v)
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}
