package v1alpha1

// LabelGPUHold marks Chamber's GPU hold pods, which take a node's failing GPUs out of
// its capacity under GPU-level isolation; its value is the node's name. The
// isolation controller writes them; the admission check counts their GPUs as taken.
const LabelGPUHold = "chamber.dev/gpu-hold"

// TaintGPUUnhealthy is the NoSchedule taint Chamber's isolation puts on a node with
// failing GPUs; its value is the fault's reason (XID79, ECCDoubleBit, ...). The GPUs
// of a node carrying it (any effect) are Isolated in the fleet's state.
const TaintGPUUnhealthy = "chamber.dev/gpu-unhealthy"
