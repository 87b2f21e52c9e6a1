// Package agent is Chamber's node agent: it reads the node's GPUs through
// nvmlsource.Monitor, serves their metrics under dcgm-exporter's names, and publishes
// their health to the API server as a GPUNode status and a GPUHealthy Node condition.
//
// The package is a library so that the fleet simulator can run hundreds of agents in
// one process: New takes its NVML, API client, clock and pod mapping from the caller
// and binds no ports; Serve is the wiring of the chamber-agent binary.
//
// Three loops run in an agent. nvmlsource.Monitor polls NVML every poll interval and
// waits for XID events, both writing to its Tracker. The agent's own loop reads the
// Tracker every second (cheap, no NVML) and every poll interval (also refreshing the
// pod mapping and the utilization window), and writes to the API server only when the
// published state changed or the heartbeat is due. Metrics scrapes read the Tracker
// too, so a scrape never waits on NVML or the kubelet.
package agent
