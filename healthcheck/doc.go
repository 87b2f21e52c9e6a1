// Package healthcheck reads GPUs through NVML (go-nvml's nvml.Interface, so its fakes
// slot in without a GPU), classifies faults with NVIDIA's XID catalog, and keeps each
// GPU's health for the node agent.
package healthcheck
