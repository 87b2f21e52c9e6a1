// Package exporter holds Chamber's Prometheus collectors over the fleet model (GPU
// states, utilization, idle time, queue depth, efficiency, cost per team) and the cost
// model. Scrapes read the in-memory model only; they never call NVML or the API server.
package exporter
