package controlplane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a program that starts a control plane, prints
// its components' pids and directory, and waits to be signalled.
const helperEnv = "CHAMBER_CONTROLPLANE_HELPER"

func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("run as a child by TestSignalLeavesNothing")
	}
	cp, err := Start(context.Background(), Options{Scheduler: true})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var pids []string
	for _, p := range cp.procs {
		pids = append(pids, strconv.Itoa(p.cmd.Process.Pid))
	}
	fmt.Println("ready", cp.Dir, strings.Join(pids, ","))
	time.Sleep(5 * time.Minute)
}

// TestSignalLeavesNothing interrupts (Ctrl-C) and kills a program running a control
// plane: no component survives either, and the directory a killed program leaves is
// swept by the next start.
func TestSignalLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	tests := map[string]struct {
		signal      syscall.Signal
		wantDirGone bool // removed by the program itself
	}{
		"interrupted": {signal: syscall.SIGINT, wantDirGone: true},
		"killed":      {signal: syscall.SIGKILL, wantDirGone: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
			cmd.Env = append(os.Environ(), helperEnv+"=1")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

			var dir string
			var pids []int
			scanner := bufio.NewScanner(stdout)
			for scanner.Scan() {
				fields := strings.Fields(scanner.Text())
				if len(fields) == 3 && fields[0] == "ready" {
					dir = fields[1]
					for _, s := range strings.Split(fields[2], ",") {
						pid, _ := strconv.Atoi(s)
						pids = append(pids, pid)
					}
					break
				}
				if len(fields) > 0 && fields[0] == "error" {
					t.Fatal(scanner.Text())
				}
			}
			if len(pids) != 3 {
				t.Fatalf("helper did not report 3 components (got %v)", pids)
			}

			if err := cmd.Process.Signal(tc.signal); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			for _, pid := range pids {
				if !gone(pid, 15*time.Second) {
					t.Errorf("component %d survived %s", pid, tc.signal)
				}
			}
			_, err = os.Stat(dir)
			if tc.wantDirGone && !os.IsNotExist(err) {
				t.Errorf("directory %s left after %s (stat: %v)", dir, tc.signal, err)
			}
			sweepStaleDirs()
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("directory %s not swept after %s (stat: %v)", dir, tc.signal, err)
			}
		})
	}
}

// gone waits until no process has the pid (a killed child is reaped by init).
func gone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		// A zombie still answers kill -0; its state in /proc says it is dead.
		if data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(data), ") Z ") {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
