package realnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// KubeletRoot is the kubelet's root directory: the one NVIDIA's device plugin and the
// chart's agent.podResourcesPath expect (/var/lib/kubelet/device-plugins,
// /var/lib/kubelet/pod-resources).
const KubeletRoot = "/var/lib/kubelet"

// kubeletConfig is the node's KubeletConfiguration. cgroup v1 is refused from 1.35
// unless failCgroupV1 is false; containerd 1.x does not answer the RuntimeConfig CRI
// call, so the kubelet falls back to cgroupDriver (until 1.37). Authentication and
// authorization are open: the kubelet listens on loopback only. No eviction
// thresholds: a test machine's disk is not the node's to guard.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzPort: %d
failSwapOn: false
resolvConf: /etc/resolv.conf
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
`

// Kubelet is a kubelet process on a Containerd.
type Kubelet struct {
	// Log is its output.
	Log string

	proc *daemon
}

// KubeletBinary is $CHAMBER_KUBELET, else bin/kubelet of the repository; ok is false
// where neither exists.
func KubeletBinary() (path string, ok bool) {
	p := os.Getenv("CHAMBER_KUBELET")
	if p == "" {
		p, _ = filepath.Abs("../../bin/kubelet")
	}
	_, err := os.Stat(p)
	return p, err == nil
}

// StartKubelet runs kubelet binary as node name on c, registering with the API server
// of kubeconfig with labels (k=v,...), and returns once its healthz answers. An early
// exit is ErrUnavailable with the kubelet's last lines: what this machine lacks.
func StartKubelet(ctx context.Context, binary string, c *Containerd, kubeconfig, name, labels string) (*Kubelet, error) {
	hz, err := freePort()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	config := filepath.Join(c.Dir, "kubelet-config.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(kubeletConfig, c.Socket, port, hz)), 0o644); err != nil {
		return nil, err
	}
	k := &Kubelet{Log: filepath.Join(c.Dir, "kubelet.log")}
	k.proc, err = startDaemon(k.Log, binary, "--config="+config, "--kubeconfig="+kubeconfig,
		"--hostname-override="+name, "--node-labels="+labels, "--root-dir="+KubeletRoot, "--v=2")
	if err != nil {
		return nil, fmt.Errorf("start kubelet: %w", err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-k.proc.done:
			return nil, fmt.Errorf("%w: the kubelet exited: %s", ErrUnavailable, k.Why())
		case <-ctx.Done():
			k.Stop()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if healthy(fmt.Sprintf("http://127.0.0.1:%d/healthz", hz)) {
			return k, nil
		}
	}
	why := k.Why()
	k.Stop()
	return nil, fmt.Errorf("%w: the kubelet's healthz did not answer within 90s: %s", ErrUnavailable, why)
}

// Why is the kubelet's last error lines (klog's E and F lines), else its last lines.
func (k *Kubelet) Why() string {
	// klog's lines start with their severity: Info, Warning, Error, Fatal.
	if errs := k.proc.lines(5, func(line string) bool { return strings.HasPrefix(line, "E") || strings.HasPrefix(line, "F") }); errs != "" {
		return errs
	}
	return k.proc.lines(5, nil)
}

// Stop ends the kubelet (its containers stay to containerd, whose Stop kills them) and
// unmounts what it left under KubeletRoot.
func (k *Kubelet) Stop() {
	if k.proc == nil {
		return
	}
	k.proc.stop()
	k.proc = nil
	unmountUnder(KubeletRoot)
}

// healthy reports whether url answers 200 ok.
func healthy(url string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "ok"
}

// freePort is a TCP port free on loopback now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
