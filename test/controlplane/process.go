package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// stopTimeout is how long a component gets to exit after SIGTERM before SIGKILL: a
// kube-apiserver whose etcd is already gone may not exit on SIGTERM at all.
const stopTimeout = 10 * time.Second

// process is one running control-plane component.
type process struct {
	name    string
	binary  string
	args    []string
	env     []string // added to this process's environment
	logPath string
	// ready says whether it serves, for Restart; nil: once started.
	ready func() error
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited
	err   error         // exit error, valid after done is closed
}

// startProcess runs binary with args and env (added to the test's environment), its
// output appended to logDir/<name>.log.
//
// The child gets its own process group, so a Ctrl-C in the terminal reaches only the
// test (which then stops components in order), and SIGKILL as its parent-death signal,
// so no component outlives a test binary that was killed outright. The parent-death
// signal fires when the thread that forked the child exits, so the goroutine that
// starts the child keeps its OS thread locked until the child is gone.
func startProcess(name, binary string, args, env []string, logDir string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{
		name:    name,
		binary:  binary,
		args:    args,
		env:     env,
		logPath: logPath,
		done:    make(chan struct{}),
	}
	p.cmd = exec.Command(binary, args...)
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = logFile
	p.cmd.Stderr = logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer logFile.Close()
		if err := p.cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, binary, err)
	}
	return p, nil
}

// exited reports whether the process has already stopped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to stopTimeout, then SIGKILLs the whole process group.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// logTail returns the last lines of the process's log, for error messages.
func (p *process) logTail() string { return p.tail(20) }

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// failure describes why a component did not become ready, with its log tail.
func (p *process) failure(err error) error {
	state := "still running"
	if p.exited() {
		state = fmt.Sprintf("exited: %v", p.err)
	}
	return fmt.Errorf("%s did not become ready (%s): %w\n--- %s (last lines) ---\n%s",
		p.name, state, err, p.logPath, p.logTail())
}

// errExited is returned by readiness polls when the component died while starting.
var errExited = errors.New("process exited")
