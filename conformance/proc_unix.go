//go:build unix

package conformance

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the adapter in a process group of its own, so that
// killProcessGroup also ends what it started (go run's program, say).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
