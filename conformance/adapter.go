package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Adapter says how to start an adapter (ADAPTER.md): a command line run
// by sh -c, in a working directory.
type Adapter struct {
	// Command is the command line, e.g. "go run ./conformance/goadapter"
	// or "node sdk/ts/dist/conformance-adapter.js".
	Command string
	// Dir is the working directory ("" the test's, which for go test is
	// the package's directory).
	Dir string
	// Env holds more environment variables (NAME=value) for it.
	Env []string
}

// Timeouts of the adapter's process.
const (
	readyTimeout = 120 * time.Second // until the ready event (go run compiles)
	exitTimeout  = 10 * time.Second  // from the end of stdin to the exit
	replyTimeout = 60 * time.Second  // a command's reply, unless the step says
)

// proc is a running adapter.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events *feed
	stderr *lockedBuffer

	mu       sync.Mutex
	nextID   int64
	replies  map[int64]chan map[string]any
	protoErr error // a line that broke the protocol
	inClosed bool

	readDone chan struct{} // stdout reached its end
	exited   chan struct{} // the process was waited for
	waitErr  error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProc starts a's command with env added and waits for its ready
// event.
func startProc(a Adapter, env []string) (*proc, error) {
	cmd := exec.Command("sh", "-c", a.Command)
	cmd.Dir = a.Dir
	cmd.Env = append(append(os.Environ(), a.Env...), env...)
	setProcessGroup(cmd)
	p := &proc{
		cmd: cmd, events: newFeed(), stderr: &lockedBuffer{},
		replies: make(map[int64]chan map[string]any), readDone: make(chan struct{}), exited: make(chan struct{}),
	}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start adapter %q: %w", a.Command, err)
	}
	go p.read(stdout)
	go func() {
		<-p.readDone
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	ready, err := p.events.wait(ctx, 0, func(e entry) error { return nil })
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("adapter %q: no ready event within %v (%v)", a.Command, readyTimeout, p.exitState())
	}
	if ready.v["event"] != "ready" {
		p.kill()
		return nil, fmt.Errorf("adapter %q: first line %s: want the ready event", a.Command, text(ready.v))
	}
	if v, _ := ready.v["protocol"].(float64); v != 1 {
		p.kill()
		return nil, fmt.Errorf("adapter %q speaks adapter protocol %s: want 1", a.Command, text(ready.v["protocol"]))
	}
	return p, nil
}

// read takes every line of the adapter's stdout: a reply to its command,
// or an event.
func (p *proc) read(stdout io.Reader) {
	defer close(p.readDone)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m == nil {
			p.broken(fmt.Errorf("adapter wrote %q: not a JSON object", sc.Text()))
			continue
		}
		if _, ok := m["event"].(string); ok {
			p.events.add(entry{v: m})
			continue
		}
		id, ok := m["id"].(float64)
		if !ok {
			p.broken(fmt.Errorf("adapter wrote %s: neither an event nor a reply", sc.Text()))
			continue
		}
		p.mu.Lock()
		ch := p.replies[int64(id)]
		delete(p.replies, int64(id))
		p.mu.Unlock()
		if ch == nil {
			p.broken(fmt.Errorf("adapter wrote %s: a reply to no command waiting for one", sc.Text()))
			continue
		}
		ch <- m
	}
	if err := sc.Err(); err != nil {
		p.broken(fmt.Errorf("reading the adapter's stdout: %w", err))
	}
}

func (p *proc) broken(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.protoErr == nil {
		p.protoErr = err
	}
}

// brokenErr is the first protocol error the adapter made, if any.
func (p *proc) brokenErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.protoErr
}

// send writes a command and returns the channel its reply comes on.
func (p *proc) send(name string, args map[string]any) (int64, <-chan map[string]any, error) {
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	ch := make(chan map[string]any, 1)
	p.replies[id] = ch
	p.mu.Unlock()
	cmd := map[string]any{}
	for k, v := range args {
		cmd[k] = v
	}
	cmd["id"], cmd["cmd"] = id, name
	line, err := json.Marshal(cmd)
	if err != nil {
		return id, nil, err
	}
	if _, err := p.stdin.Write(append(line, '\n')); err != nil {
		return id, nil, fmt.Errorf("send %s: %w (%v)", name, err, p.exitState())
	}
	return id, ch, nil
}

// reply waits for the reply on ch.
func (p *proc) reply(ch <-chan map[string]any, timeout time.Duration) (map[string]any, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case m := <-ch:
		return m, nil
	case <-p.readDone:
		select {
		case m := <-ch:
			return m, nil
		default:
		}
		return nil, fmt.Errorf("the adapter closed its stdout before replying (%v)", p.exitState())
	case <-t.C:
		return nil, fmt.Errorf("no reply within %v", timeout)
	}
}

// exitState says whether the process exited, and how.
func (p *proc) exitState() string {
	select {
	case <-p.exited:
		if p.waitErr != nil {
			return "exited: " + p.waitErr.Error()
		}
		return "exited with status 0"
	default:
		return "still running"
	}
}

// end closes stdin and waits for the process to exit, killing it after
// exitTimeout; it returns an error unless it exited with status 0 in time.
func (p *proc) end() error {
	p.mu.Lock()
	if !p.inClosed {
		p.inClosed = true
		p.stdin.Close()
	}
	p.mu.Unlock()
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(exitTimeout):
		p.kill()
		<-p.exited
		return errors.New("did not exit within " + exitTimeout.String() + " of the end of its stdin: killed")
	}
}

// kill kills the process (and its process group), and closes stdin.
func (p *proc) kill() {
	p.mu.Lock()
	if !p.inClosed {
		p.inClosed = true
		p.stdin.Close()
	}
	p.mu.Unlock()
	killProcessGroup(p.cmd)
}
