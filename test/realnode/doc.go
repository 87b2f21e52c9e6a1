// Package realnode runs Chamber's image on a real container runtime beside the test
// control plane: a containerd of its own (Debian's containerd 1.6 and runc), and a
// real kubelet on it (Kubernetes' own, at the control plane's version) with a fake
// NVIDIA device plugin, where kwok only pretends. A test skips, saying why, where the
// machine lacks something: root, containerd and runc (make tools installs Debian's
// containerd, runc and containernetworking-plugins), the image (make image, which
// make test runs first), the kubelet (make tools builds bin/kubelet).
//
// What the node has of a GPU node: the chart's DaemonSet pod runs the image's
// /chamber-agent under runc, reads the kubelet's pod-resources socket through the
// chart's hostPath mount, and sees the device IDs the kubelet assigned to pods from
// the device plugin's nvidia.com/gpu; the chart's Deployment pod runs
// /chamber-controller there too. What it lacks: GPUs and the driver (the agent
// reads fake NVML, --nvml=fake:dgxh100) and a cluster network (the agent and the
// controller run on the host's network and reach the loopback API server);
// PostRender makes both changes to the chart's output, and nothing else.
package realnode
