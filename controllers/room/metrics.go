package room

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	roomsMade = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chamber_room_made_total",
		Help: "Times Chamber moved lower-tier workloads off a node to make room for a workload that waited for a node with enough free GPUs.",
	})
	moves = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chamber_room_moves_total",
		Help: "Workloads whose eviction room for big jobs asked for (with notice; Kueue requeues them onto other nodes' free GPUs).",
	})
)

func init() {
	metrics.Registry.MustRegister(roomsMade, moves)
}
