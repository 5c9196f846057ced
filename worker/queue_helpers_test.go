package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
)

// watcher records every decision the coordinator publishes (a core
// subscription to tenure.out.>, made before the test submits anything),
// so that a test waits for the decision it expects instead of polling the
// stream.
type watcher struct {
	t  testing.TB
	mu sync.Mutex
	ds []events.Decision
	ch chan struct{} // closed and replaced at every decision
}

func (e *env) watch() *watcher {
	e.t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL())
	if err != nil {
		e.t.Fatal(err)
	}
	wa := &watcher{t: e.t, ch: make(chan struct{})}
	if _, err := nc.Subscribe(events.DecisionPrefix+".>", func(m *nats.Msg) {
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			wa.t.Errorf("watcher: %s: %v", m.Subject, err)
			return
		}
		wa.mu.Lock()
		wa.ds = append(wa.ds, d)
		close(wa.ch)
		wa.ch = make(chan struct{})
		wa.mu.Unlock()
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return wa
}

// all returns the decisions seen so far, in the order received (each
// partition's in its order).
func (wa *watcher) all() []events.Decision {
	wa.mu.Lock()
	defer wa.mu.Unlock()
	return append([]events.Decision(nil), wa.ds...)
}

// of returns the decisions about job seen so far.
func (wa *watcher) of(job string) []events.Decision {
	var out []events.Decision
	for _, d := range wa.all() {
		if d.Job.ID == job {
			out = append(out, d)
		}
	}
	return out
}

// until waits until cond holds of the decisions seen, failing the test
// with what after timeout.
func (wa *watcher) until(timeout time.Duration, what string, cond func([]events.Decision) bool) {
	wa.t.Helper()
	deadline := time.After(timeout)
	for {
		wa.mu.Lock()
		ds, ch := wa.ds, wa.ch
		wa.mu.Unlock()
		if cond(ds) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			wa.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// state waits until job's latest decision leaves it in state s.
func (wa *watcher) state(timeout time.Duration, job string, s events.State) events.Decision {
	wa.t.Helper()
	var last events.Decision
	wa.until(timeout, fmt.Sprintf("%s %s", job, s), func(ds []events.Decision) bool {
		for i := len(ds) - 1; i >= 0; i-- {
			if ds[i].Job.ID == job {
				last = ds[i]
				return ds[i].Job.State == s
			}
		}
		return false
	})
	return last
}

// kinds renders the kind/reason of decisions, for failure messages.
func kinds(ds []events.Decision) string {
	var b strings.Builder
	for i, d := range ds {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s/%s", d.Kind, d.Reason)
	}
	return b.String()
}

// submit puts job in queue (a submit input of operator op1, to the job's
// partition among count, 0: unpartitioned) with in's queue fields.
func (e *env) submit(count uint32, job, queue string, in events.Input) {
	e.t.Helper()
	in.Role, in.Actor, in.Job, in.Verb, in.Queue = events.RoleOps, "op1", job, events.VerbSubmit, queue
	e.publishOps(count, &in)
}

// publishOps publishes an operator input to its job's partition among
// count (0: unpartitioned).
func (e *env) publishOps(count uint32, in *events.Input) {
	e.t.Helper()
	in.Role, in.Actor = events.RoleOps, "op1"
	subject := events.Partition{Count: count}.Of(in.Job).InputSubject(events.RoleOps, "op1", in.Job, in.Verb)
	if _, err := e.js.Publish(context.Background(), subject, events.AppendInputBody(nil, in)); err != nil {
		e.t.Fatalf("publish %s: %v", subject, err)
	}
}

// runErr is a Run in a goroutine of the test: cancel stops it, wait
// returns its error.
type runErr struct {
	cancel context.CancelFunc
	done   chan error
}

// startRun runs w.Run(queue, h, opts...) until the returned run is
// stopped (at the latest by t.Cleanup, which also checks that it returned).
func startRun(t *testing.T, w *Worker, queue string, h Handler, opts ...RunOption) *runErr {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runErr{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx, queue, h, opts...) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Errorf("Run %s did not return", queue)
		}
	})
	return r
}

// stop cancels the Run's ctx and returns Run's error.
func (r *runErr) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its ctx ended")
		return nil
	}
}

// errorLog collects what a worker's ErrorHandler is told.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) handle(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}
