package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// proc is one child process the orchestrator owns: started, signalled and
// restarted by it. A process that exits without being told to is recorded
// (and, if restart is set, started again after a short pause).
type proc struct {
	name    string
	path    string
	args    func() []string // evaluated at each start
	logPath string
	restart bool       // restart after an unexpected exit
	files   []*os.File // the child's file descriptors 3, 4, ...

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{} // closed when the current process has exited
	expectExit bool
	closed     bool // the run is over: never restart
	starts     int
	unexpected []string // descriptions of unexpected exits
}

// start starts the process if it is not running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked()
}

func (p *proc) startLocked() error {
	if p.closed || p.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.path, p.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = p.files
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start %s: %w", p.name, err)
	}
	p.cmd, p.done, p.expectExit = cmd, make(chan struct{}), false
	p.starts++
	done := p.done
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		close(done)
		if p.cmd != cmd {
			return
		}
		p.cmd = nil
		if p.expectExit || p.closed {
			return
		}
		p.unexpected = append(p.unexpected, fmt.Sprintf("%s exited by itself: %v (log %s)", p.name, err, p.logPath))
		if p.restart {
			go func() {
				time.Sleep(300 * time.Millisecond)
				_ = p.start()
			}()
		}
	}()
	return nil
}

// running reports whether the process is running.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("chaos: %s is not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// stop ends the process with sig (SIGKILL, or SIGTERM then SIGKILL after
// grace) and waits until it has exited.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.expectExit = true
	_ = cmd.Process.Signal(sig)
	if sig == syscall.SIGSTOP || sig == syscall.SIGCONT {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot handle SIGTERM
	_ = cmd.Process.Kill()
	<-done
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() { p.stop(syscall.SIGKILL, time.Minute) }

// close stops the process for good.
func (p *proc) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stop(syscall.SIGTERM, 5*time.Second)
}

// exits returns the unexpected exits so far.
func (p *proc) exits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unexpected...)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func url(port int) string { return "nats://127.0.0.1:" + strconv.Itoa(port) }

var errNotReady = errors.New("chaos: not ready")
