//go:build unix && !linux

package chaos

import "syscall"

// sysProcAttr puts a child in its own process group (a Ctrl-C reaches the
// orchestrator only, which stops its children in order).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
