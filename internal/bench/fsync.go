package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// fsyncCounter counts the fsync and fdatasync system calls this process
// makes during a window (the embedded nats-server's, above all: with
// sync_interval always it syncs every message it stores), with perf's
// syscall tracepoints (`perf stat -e syscalls:sys_enter_fsync,... -p PID`).
// It needs the perf tool and the right to trace (root, or a
// kernel.perf_event_paranoid that allows it); without them the count is
// not measured (-1, and why), never a silent zero.
type fsyncCounter struct {
	cmd *exec.Cmd
	out bytes.Buffer
	err error // why nothing is counted
}

// startFsyncs starts counting for d (perf runs `sleep d` attached to this
// process). Wait for the count with wait.
func startFsyncs(d time.Duration) *fsyncCounter {
	c := &fsyncCounter{}
	perf, err := exec.LookPath("perf")
	if err != nil {
		c.err = errors.New("perf is not installed")
		return c
	}
	c.cmd = exec.CommandContext(context.Background(), perf, "stat", "-x", ",", "-e", "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync",
		"-p", strconv.Itoa(os.Getpid()), "--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
	c.cmd.Stderr = &c.out
	if err := c.cmd.Start(); err != nil {
		c.err, c.cmd = fmt.Errorf("perf: %w", err), nil
	}
	return c
}

// wait returns the count, or -1 and why it was not measured.
func (c *fsyncCounter) wait() (int64, error) {
	if c.cmd == nil {
		return -1, c.err
	}
	if err := c.cmd.Wait(); err != nil {
		return -1, fmt.Errorf("perf stat: %v: %s", err, strings.TrimSpace(c.out.String()))
	}
	var n int64
	found := 0
	for _, line := range strings.Split(c.out.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || !strings.HasPrefix(f[2], "syscalls:sys_enter_f") {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1, fmt.Errorf("perf stat: %q: %s is not counted (tracing not allowed?)", line, f[2])
		}
		n += v
		found++
	}
	if found != 2 {
		return -1, fmt.Errorf("perf stat counted %d of fsync and fdatasync: %s", found, strings.TrimSpace(c.out.String()))
	}
	return n, nil
}
