package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is one child process of a cluster: a nats-server node or a
// coordinator. Kill and Stop end it; Start starts it again with the same
// arguments (and, for a node, the same store).
type Proc struct {
	Name    string
	path    string
	args    []string
	logPath string
	files   []*os.File // the child's file descriptors 3, 4, ...

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has exited
}

// Start starts the process if it is not running. Its output goes to its
// log file in the cluster directory.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = p.files
	// Its own process group: a Ctrl-C in the terminal reaches `tenure
	// cluster up`, which stops its children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("cluster: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		_ = cmd.Wait()
		logf.Close()
		p.mu.Lock()
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Running reports whether the process is running.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Pid is the process id (0 when not running).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// LogPath is the file the process writes its output to.
func (p *Proc) LogPath() string { return p.logPath }

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Proc) Kill() { p.signal(syscall.SIGKILL, time.Minute) }

// Stop asks the process to end (SIGTERM), waits up to grace, then kills it.
func (p *Proc) Stop(grace time.Duration) {
	if !p.signal(syscall.SIGTERM, grace) {
		p.Kill()
	}
}

// signal sends sig and waits up to wait for the exit; it reports whether
// the process is gone.
func (p *Proc) signal(sig syscall.Signal, wait time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return false
	}
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

// freePorts returns n distinct free TCP ports on the loopback address.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
