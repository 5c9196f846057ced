package chaos

import "syscall"

// sysProcAttr puts a child in its own process group (a Ctrl-C reaches the
// orchestrator only, which stops its children in order) and kills it if
// the orchestrator dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
