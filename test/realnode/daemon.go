package realnode

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// daemon is a long-running process of the node (containerd, the kubelet) with its
// output in a file.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	log  string
}

// startDaemon starts name with args, its output appended to log.
func startDaemon(log, name string, args ...string) (*daemon, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &daemon{cmd: exec.Command(name, args...), done: make(chan struct{}), log: log}
	d.cmd.Stdout, d.cmd.Stderr = f, f
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	return d, nil
}

// stop sends SIGTERM and, after 10 seconds, SIGKILL; it returns once the process has
// exited.
func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// lines is the last n lines of its output that keep accepts (all where keep is nil).
func (d *daemon) lines(n int, keep func(string) bool) string {
	return lastLines(d.log, n, keep)
}

// lastLines is the last n lines of file that keep accepts (all where keep is nil).
func lastLines(file string, n int, keep func(string) bool) string {
	b, _ := os.ReadFile(file)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if keep == nil || keep(line) {
			out = append(out, line)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}
