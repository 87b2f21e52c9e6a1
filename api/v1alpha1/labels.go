package v1alpha1

// LabelGPUHold marks Chamber's GPU hold pods, which take a node's failing GPUs out of
// its capacity under GPU-level isolation; its value is the node's name. The
// isolation controller writes them; the admission check counts their GPUs as taken.
const LabelGPUHold = "chamber.dev/gpu-hold"
