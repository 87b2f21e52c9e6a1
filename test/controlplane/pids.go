package controlplane

// Pids returns the process id of each running component by name (etcd,
// kube-apiserver, kueue, ...), for tests that measure their CPU and memory.
func (cp *ControlPlane) Pids() map[string]int {
	pids := make(map[string]int, len(cp.procs))
	for _, p := range cp.procs {
		if p.cmd.Process != nil && !p.exited() {
			pids[p.name] = p.cmd.Process.Pid
		}
	}
	return pids
}
