package realnode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Namespace is the containerd namespace everything runs in: the CRI plugin's, so that
// an image imported here is the one a kubelet finds.
const Namespace = "k8s.io"

// ErrUnavailable wraps what this machine lacks to run containers: a test skips on it.
var ErrUnavailable = errors.New("not runnable on this machine")

// Containerd is a containerd process of its own: its own root, state, socket and CNI
// configuration under Dir, nothing of the machine's /var/lib/containerd.
type Containerd struct {
	// Dir holds its root, state, config and log.
	Dir string
	// Socket is its gRPC socket (CRI included).
	Socket string
	// Snapshotter is overlayfs where it mounts here, else native.
	Snapshotter string

	proc *daemon
	log  string
}

// StartContainerd starts containerd with its state under dir (which must be short:
// unix socket paths have a 108-byte limit). CNI plugins are Debian's
// (/usr/lib/cni); a bridge network 10.244.0.0/24 serves pods not on the host network.
func StartContainerd(ctx context.Context, dir string) (*Containerd, error) {
	for _, bin := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%w: %s not on PATH (apt-get install containerd runc)", ErrUnavailable, bin)
		}
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: containerd needs root", ErrUnavailable)
	}
	c := &Containerd{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), log: filepath.Join(dir, "containerd.log")}
	for _, snapshotter := range []string{"overlayfs", "native"} {
		c.Snapshotter = snapshotter
		if err := c.start(ctx); err != nil {
			return nil, err
		}
		ok, err := c.pluginOK(ctx, "io.containerd.snapshotter.v1", snapshotter)
		if err != nil || ok {
			if err != nil {
				c.Stop()
			}
			return c, err
		}
		c.Stop()
	}
	return nil, fmt.Errorf("%w: neither the overlayfs nor the native snapshotter loads (%s)", ErrUnavailable, c.log)
}

func (c *Containerd) start(ctx context.Context) error {
	def, err := exec.CommandContext(ctx, "containerd", "config", "default").Output()
	if err != nil {
		return fmt.Errorf("%w: containerd config default: %v", ErrUnavailable, err)
	}
	cniDir := filepath.Join(c.Dir, "net.d")
	if err := os.MkdirAll(cniDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cniDir, "10-realnode.conflist"), []byte(bridgeNetwork), 0o644); err != nil {
		return err
	}
	cfg := string(def)
	for _, r := range []struct{ re, with string }{
		{`(?m)^root = .*$`, fmt.Sprintf("root = %q", filepath.Join(c.Dir, "root"))},
		{`(?m)^state = .*$`, fmt.Sprintf("state = %q", filepath.Join(c.Dir, "state"))},
		{`(?m)^(\s*)address = "/run/containerd/containerd.sock"$`, fmt.Sprintf("${1}address = %q", c.Socket)},
		{`(?m)^(\s*)bin_dir = .*$`, `${1}bin_dir = "/usr/lib/cni"`},
		{`(?m)^(\s*)conf_dir = .*$`, fmt.Sprintf("${1}conf_dir = %q", cniDir)},
		{`(?m)^(\s*)snapshotter = "overlayfs"$`, fmt.Sprintf("${1}snapshotter = %q", c.Snapshotter)},
		// Where the machine withholds CAP_SYS_RESOURCE (this container does), no process
		// may lower its OOM score below its parent's: the kubelet's -998 for pod
		// sandboxes fails runc ("can't get final child's PID from pipe: EOF"). The CRI
		// plugin then keeps scores at or above containerd's own.
		{`(?m)^(\s*)restrict_oom_score_adj = false$`, "${1}restrict_oom_score_adj = true"},
	} {
		cfg = regexp.MustCompile(r.re).ReplaceAllString(cfg, r.with)
	}
	config := filepath.Join(c.Dir, "config.toml")
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		return err
	}
	if c.proc, err = startDaemon(c.log, "containerd", "--config", config); err != nil {
		return fmt.Errorf("%w: start containerd: %v", ErrUnavailable, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.proc.done:
			return fmt.Errorf("%w: containerd exited at start: %s", ErrUnavailable, c.proc.lines(5, nil))
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := c.Ctr(ctx, "version"); err == nil {
			return nil
		}
	}
	c.Stop()
	return fmt.Errorf("%w: containerd did not answer within 30s: %s", ErrUnavailable, c.proc.lines(5, nil))
}

// The pods' network (CNI's name for it) and its bridge.
const (
	networkName = "realnode"
	bridgeName  = "realnode0"
)

// bridgeNetwork is the pods' network: Debian's bridge and host-local plugins.
const bridgeNetwork = `{
  "cniVersion": "0.4.0",
  "name": "` + networkName + `",
  "plugins": [
    {"type": "bridge", "bridge": "` + bridgeName + `", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
`

// pluginOK reports whether containerd loaded plugin name of type typ.
func (c *Containerd) pluginOK(ctx context.Context, typ, name string) (bool, error) {
	out, err := c.Ctr(ctx, "plugins", "ls")
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 4 && f[0] == typ && f[1] == name {
			return f[len(f)-1] == "ok", nil
		}
	}
	return false, nil
}

// Ctr runs ctr against this containerd in Namespace and returns its output.
func (c *Containerd) Ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.Socket, "--namespace", Namespace}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Import loads an image tarball (docker's or OCI's format, as `make image` writes).
func (c *Containerd) Import(ctx context.Context, tarball string) error {
	_, err := c.Ctr(ctx, "images", "import", tarball)
	return err
}

// Tasks lists the running tasks' IDs and process IDs.
func (c *Containerd) Tasks(ctx context.Context) (map[string]int, error) {
	out, err := c.Ctr(ctx, "tasks", "ls")
	if err != nil {
		return nil, err
	}
	tasks := map[string]int{}
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 {
			continue
		}
		var pid int
		_, _ = fmt.Sscan(f[1], &pid)
		tasks[f[0]] = pid
	}
	return tasks, nil
}

// Remove kills container id's task, then deletes the task and the container.
func (c *Containerd) Remove(ctx context.Context, id string) {
	_, _ = c.Ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
	for i := 0; i < 50; i++ {
		if _, err := c.Ctr(ctx, "tasks", "delete", id); err == nil || strings.Contains(err.Error(), "not found") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, _ = c.Ctr(ctx, "containers", "delete", id)
}

// Stop kills every container (their shims outlive containerd otherwise), then
// containerd, and unmounts what is left under Dir. Dir itself is the caller's.
func (c *Containerd) Stop() {
	if c.proc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-c.proc.done:
	default:
		if out, err := c.Ctr(ctx, "containers", "ls", "--quiet"); err == nil {
			for _, id := range strings.Fields(out) {
				c.Remove(ctx, id)
			}
		}
		c.proc.stop()
	}
	c.proc = nil
	unmountUnder(c.Dir)
}

// Errors is containerd's last n error lines.
func (c *Containerd) Errors(n int) string {
	return lastLines(c.log, n, func(line string) bool { return strings.Contains(line, "level=error") })
}

// unmountUnder unmounts every mount at or below dir, deepest first (the kubelet
// bind-mounts its root directory onto itself).
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			mounts = append(mounts, f[1])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}
