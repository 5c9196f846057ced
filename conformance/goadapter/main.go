// Command goadapter is the conformance adapter of the Go worker SDK
// (package worker): it speaks adapter protocol 1 (conformance/ADAPTER.md)
// on its standard input and output, carrying out each command with the
// SDK's public API and reporting what the SDK says, nothing it computes
// itself. The conformance runner starts it as a child process, one per
// scenario.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/worker"
)

func main() {
	a := newAdapter(os.Stdout)
	err := a.serve(os.Stdin)
	a.shutdown()
	if err != nil {
		fmt.Fprintln(os.Stderr, "goadapter:", err)
		os.Exit(1)
	}
}

// protocol is the adapter protocol version this adapter implements.
const protocol = 1

// adapter is one session: one worker, its leases, offers and runs.
type adapter struct {
	outMu sync.Mutex
	out   *json.Encoder

	cmds sync.WaitGroup // commands being carried out

	mu       sync.Mutex
	nc       *nats.Conn
	w        *worker.Worker
	leases   map[string]*worker.Lease // by lease id
	watched  map[string]bool          // leases whose lease_lost is being watched for
	offers   map[string]*worker.Offer // received offers, by lease id
	unseen   []string                 // offers no wait_offer returned yet, oldest first
	offerS   chan struct{}            // closed and replaced when an offer arrives
	runs     map[string]*run
	calls    map[string]int // handler calls per job
	watchers sync.WaitGroup // lease watchers and the offer pump
	closing  chan struct{}  // closed by close: watchers stop waiting
	closed   bool           // closeAll ran
}

// run is one Worker.Run in the background.
type run struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once Run returned and run_ended was written
	err    error         // Run's return, once done
}

func newAdapter(out io.Writer) *adapter {
	return &adapter{
		out:     json.NewEncoder(out),
		leases:  make(map[string]*worker.Lease),
		watched: make(map[string]bool),
		offers:  make(map[string]*worker.Offer),
		offerS:  make(chan struct{}),
		runs:    make(map[string]*run),
		calls:   make(map[string]int),
		closing: make(chan struct{}),
	}
}

// obj is a JSON object of the protocol.
type obj = map[string]any

// write writes one line to stdout.
func (a *adapter) write(v obj) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	if err := a.out.Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "goadapter: write:", err)
	}
}

func (a *adapter) event(name string, fields obj) {
	fields["event"] = name
	fields["at_ms"] = time.Now().UnixMilli()
	a.write(fields)
}

// serve reads commands until stdin ends, carrying out each in a goroutine
// of its own.
func (a *adapter) serve(in io.Reader) error {
	a.write(obj{"event": "ready", "protocol": protocol, "sdk": "go", "version": "github.com/maknow/tenure/worker", "at_ms": time.Now().UnixMilli()})
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c.args); err != nil {
			return fmt.Errorf("command %q: %w", sc.Text(), err)
		}
		id, ok := c.args["id"].(float64)
		if !ok {
			return fmt.Errorf("command %q: no id", sc.Text())
		}
		c.id = int64(id)
		c.name, _ = c.args["cmd"].(string)
		a.cmds.Go(func() { a.do(c) })
	}
	return sc.Err()
}

// shutdown closes what the session left open (stdin ended without
// close): closing the worker ends the SDK calls still waiting, then
// their replies are written.
func (a *adapter) shutdown() {
	a.closeAll()
	a.cmds.Wait()
	a.watchers.Wait()
}

type command struct {
	id   int64
	name string
	args obj
}

// failure is an error reply of the adapter itself, with its kind.
type failure struct {
	kind string
	msg  string
}

func (f *failure) Error() string { return f.msg }

func invalid(format string, args ...any) error {
	return &failure{"invalid", fmt.Sprintf(format, args...)}
}

func (a *adapter) do(c command) {
	res, err := a.exec(c)
	if err != nil {
		a.write(obj{"id": c.id, "ok": false, "error": errorObject(err)})
		return
	}
	if res == nil {
		res = obj{}
	}
	a.write(obj{"id": c.id, "ok": true, "result": res})
}

func (a *adapter) exec(c command) (obj, error) {
	if c.name == "connect" {
		return a.connect(c)
	}
	a.mu.Lock()
	w := a.w
	a.mu.Unlock()
	if w == nil {
		return nil, invalid("%s before connect", c.name)
	}
	ctx := context.Background()
	switch c.name {
	case "acquire":
		job, err := str(c, "job")
		if err != nil {
			return nil, err
		}
		opts, err := a.leaseOpts(c)
		if err != nil {
			return nil, err
		}
		if ms, ok, err := num(c, "lease_ms"); err != nil {
			return nil, err
		} else if ok {
			opts = append(opts, worker.WithLeaseDuration(time.Duration(ms)*time.Millisecond))
		}
		l, err := w.Acquire(ctx, job, opts...)
		if err != nil {
			return nil, err
		}
		return a.hold(l), nil
	case "wait_offer":
		return a.waitOffer(c)
	case "accept":
		o, err := a.offer(c)
		if err != nil {
			return nil, err
		}
		opts, err := a.leaseOpts(c)
		if err != nil {
			return nil, err
		}
		l, err := o.Accept(ctx, opts...)
		if err != nil {
			return nil, err
		}
		return a.hold(l), nil
	case "decline":
		o, err := a.offer(c)
		if err != nil {
			return nil, err
		}
		return nil, o.Decline(ctx)
	case "renew":
		l, err := a.lease(c)
		if err != nil {
			return nil, err
		}
		return nil, l.Renew(ctx)
	case "progress":
		l, err := a.lease(c)
		if err != nil {
			return nil, err
		}
		v, ok, err := num(c, "value")
		if err != nil || !ok {
			return nil, invalid("progress: value: want a number")
		}
		return nil, l.Progress(ctx, int(v))
	case "complete":
		l, err := a.lease(c)
		if err != nil {
			return nil, err
		}
		outcome, err := str(c, "outcome")
		if err != nil {
			return nil, err
		}
		detail, _ := c.args["detail"].(string)
		if p, _ := c.args["permanent"].(bool); p {
			if outcome != events.OutcomeFailed.String() {
				return nil, invalid("complete: permanent with outcome %s: want FAILED", outcome)
			}
			return nil, l.FailPermanently(ctx, detail)
		}
		o, ok := events.ParseOutcome(outcome)
		if !ok {
			return nil, invalid("complete: outcome %q: want SUCCESS, FAILED or CANCELLED", outcome)
		}
		return nil, l.Complete(ctx, o, detail)
	case "release":
		l, err := a.lease(c)
		if err != nil {
			return nil, err
		}
		return nil, l.Release(ctx)
	case "cancel_ack":
		l, err := a.lease(c)
		if err != nil {
			return nil, err
		}
		return nil, l.AckCancel(ctx)
	case "lease_state":
		l, err := a.lease(c)
		if err != nil {
			return nil, err
		}
		res := obj{"lost": l.Context().Err() != nil, "cause": nil, "cancel_requested": false}
		if l.Context().Err() != nil {
			res["cause"] = causeObject(context.Cause(l.Context()))
		}
		select {
		case <-l.CancelRequested():
			res["cancel_requested"] = true
		default:
		}
		return res, nil
	case "run":
		return a.run(c)
	case "stop_run":
		q, err := str(c, "queue")
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		r := a.runs[q]
		a.mu.Unlock()
		if r == nil {
			return nil, &failure{"unknown", "stop_run: no run of queue " + q}
		}
		r.cancel()
		<-r.done
		a.mu.Lock()
		if a.runs[q] == r {
			delete(a.runs, q)
		}
		a.mu.Unlock()
		return obj{"error": errorOrNil(r.err)}, nil
	case "close":
		a.closeAll()
		return nil, nil
	}
	return nil, &failure{"unsupported", fmt.Sprintf("unknown command %q", c.name)}
}

func (a *adapter) connect(c command) (obj, error) {
	url, id := os.Getenv("TENURE_NATS_URL"), os.Getenv("TENURE_WORKER_ID")
	if url == "" || id == "" {
		return nil, invalid("connect: TENURE_NATS_URL and TENURE_WORKER_ID must be set")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.w != nil {
		return nil, invalid("connect: already connected")
	}
	opts := []worker.Option{worker.WithErrorHandler(func(err error) {
		fmt.Fprintln(os.Stderr, "goadapter: worker:", err)
	})}
	if p := os.Getenv("TENURE_STREAM_PREFIX"); p != "" {
		opts = append(opts, worker.WithStreamPrefix(p))
	}
	for _, o := range []struct {
		name string
		opt  func(time.Duration) worker.Option
	}{{"verdict_timeout_ms", worker.WithVerdictTimeout}, {"publish_timeout_ms", worker.WithPublishTimeout}} {
		if ms, ok, err := num(c, o.name); err != nil {
			return nil, err
		} else if ok {
			opts = append(opts, o.opt(time.Duration(ms)*time.Millisecond))
		}
	}
	nopts := []nats.Option{nats.Name("goadapter " + id), nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}
	if user := os.Getenv("TENURE_NATS_USER"); user != "" {
		// The worker's credential (tenure auth init): its user, and the
		// only inbox prefix it may subscribe to.
		nopts = append(nopts, nats.UserInfo(user, os.Getenv("TENURE_NATS_PASSWORD")))
	}
	if p := os.Getenv("TENURE_NATS_INBOX_PREFIX"); p != "" {
		nopts = append(nopts, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	w, err := worker.Connect(nc, id, opts...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	a.nc, a.w = nc, w
	a.watchers.Go(func() { a.pumpOffers(w) })
	return obj{"worker": id}, nil
}

// pumpOffers takes every offer the SDK hands to the application.
func (a *adapter) pumpOffers(w *worker.Worker) {
	for {
		select {
		case o, ok := <-w.Offers():
			if !ok {
				return
			}
			a.mu.Lock()
			a.offers[o.LeaseID] = &o
			a.unseen = append(a.unseen, o.LeaseID)
			close(a.offerS)
			a.offerS = make(chan struct{})
			a.mu.Unlock()
			a.event("offer", offerObject(&o))
		case <-a.closing:
			return
		}
	}
}

func (a *adapter) waitOffer(c command) (obj, error) {
	ms, ok, err := num(c, "timeout_ms")
	if err != nil || !ok {
		return nil, invalid("wait_offer: timeout_ms: want a number")
	}
	job, _ := c.args["job"].(string)
	timeout := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer timeout.Stop()
	for {
		a.mu.Lock()
		for i, id := range a.unseen {
			if o := a.offers[id]; job == "" || o.Job == job {
				a.unseen = append(a.unseen[:i:i], a.unseen[i+1:]...)
				a.mu.Unlock()
				return offerObject(o), nil
			}
		}
		ch := a.offerS
		a.mu.Unlock()
		select {
		case <-ch:
		case <-timeout.C:
			return nil, &failure{"timeout", fmt.Sprintf("wait_offer: no offer within %v ms", ms)}
		case <-a.closing:
			return nil, &failure{"invalid", "wait_offer: the worker was closed"}
		}
	}
}

func offerObject(o *worker.Offer) obj {
	res := obj{
		"job": o.Job, "lease_id": o.LeaseID, "generation": o.Generation, "token": o.Token().String(),
		"lease_ms": o.Duration.Milliseconds(), "ack_deadline": o.AckDeadline.UTC().Format(time.RFC3339Nano),
	}
	if j := &o.Decision.Job; j.Queue != "" {
		res["queue"] = j.Queue
		if j.HasPayload {
			res["payload"] = j.Payload
		}
	}
	return res
}

func (a *adapter) offer(c command) (*worker.Offer, error) {
	id, err := str(c, "lease_id")
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	o := a.offers[id]
	if o == nil {
		return nil, &failure{"unknown", "no offer of lease " + id}
	}
	return o, nil
}

func (a *adapter) lease(c command) (*worker.Lease, error) {
	id, err := str(c, "lease_id")
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.leases[id]
	if l == nil {
		return nil, &failure{"unknown", "no lease " + id}
	}
	return l, nil
}

// hold keeps l, watches it for lease_lost, and returns its lease object.
func (a *adapter) hold(l *worker.Lease) obj {
	a.watch(l)
	return leaseObject(l)
}

// watch emits lease_lost when l's authority ends (once per lease).
func (a *adapter) watch(l *worker.Lease) {
	t := l.Token()
	a.mu.Lock()
	a.leases[t.LeaseID] = l
	if a.watched[t.LeaseID] {
		a.mu.Unlock()
		return
	}
	a.watched[t.LeaseID] = true
	a.watchers.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.watchers.Done()
		<-l.Context().Done()
		ev := leaseObject(l)
		ev["cause"] = causeObject(context.Cause(l.Context()))
		a.event("lease_lost", ev)
	}()
}

func leaseObject(l *worker.Lease) obj {
	t := l.Token()
	return obj{"job": t.Job, "lease_id": t.LeaseID, "generation": t.Generation, "token": t.String()}
}

func (a *adapter) leaseOpts(c command) ([]worker.LeaseOption, error) {
	opts := []worker.LeaseOption{worker.WithRenewErrorHandler(func(l *worker.Lease, err error) {
		ev := leaseObject(l)
		delete(ev, "token")
		ev["error"] = errorObject(err)
		a.event("renew_error", ev)
	})}
	if f, ok, err := num(c, "renew_fraction"); err != nil {
		return nil, err
	} else if ok {
		opts = append(opts, worker.WithRenewFraction(f))
	}
	return opts, nil
}

func (a *adapter) run(c command) (obj, error) {
	q, err := str(c, "queue")
	if err != nil {
		return nil, err
	}
	var opts []worker.RunOption
	if n, ok, err := num(c, "concurrency"); err != nil {
		return nil, err
	} else if ok {
		opts = append(opts, worker.WithConcurrency(int(n)))
	}
	if ms, ok, err := num(c, "capacity_ttl_ms"); err != nil {
		return nil, err
	} else if ok {
		opts = append(opts, worker.WithCapacityTTL(time.Duration(ms)*time.Millisecond))
	}
	b, err := parseBehaviour(c.args["behaviour"])
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runs[q] != nil {
		return nil, invalid("run: queue %s already runs", q)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{})}
	a.runs[q] = r
	w := a.w
	go func() {
		defer close(r.done)
		r.err = w.Run(ctx, q, func(ctx context.Context, j *worker.Job) error { return a.handle(ctx, q, b, j) }, opts...)
		a.event("run_ended", obj{"queue": q, "error": errorOrNil(r.err)})
	}()
	return nil, nil
}

// step is one handler behaviour (ADAPTER.md §3.12).
type step struct {
	Progress []int  `json:"progress"`
	Then     string `json:"then"`
	Message  string `json:"message"`
}

type behaviour struct {
	Default *step             `json:"default"`
	Jobs    map[string][]step `json:"jobs"`
}

func parseBehaviour(v any) (behaviour, error) {
	var b behaviour
	if v != nil {
		raw, _ := json.Marshal(v)
		if err := json.Unmarshal(raw, &b); err != nil {
			return b, invalid("run: behaviour: %v", err)
		}
	}
	if b.Default == nil {
		b.Default = &step{Then: "succeed"}
	}
	for _, s := range append([]step{*b.Default}, flatten(b.Jobs)...) {
		switch s.Then {
		case "succeed", "fail", "fail_permanent", "throw", "block":
		default:
			return b, invalid("run: behaviour: then %q", s.Then)
		}
	}
	return b, nil
}

func flatten(m map[string][]step) []step {
	var out []step
	for _, s := range m {
		out = append(out, s...)
	}
	return out
}

func (b behaviour) step(job string, call int) step {
	if s := b.Jobs[job]; len(s) > 0 {
		return s[min(call, len(s))-1]
	}
	return *b.Default
}

// handle is the handler of a run.
func (a *adapter) handle(ctx context.Context, queue string, b behaviour, j *worker.Job) (err error) {
	a.watch(j.Lease)
	a.mu.Lock()
	a.calls[j.ID]++
	call := a.calls[j.ID]
	a.mu.Unlock()
	s := b.step(j.ID, call)
	started := leaseObject(j.Lease)
	started["queue"], started["attempt"], started["max_attempts"], started["call"] = queue, j.Attempt, j.MaxAttempts, call
	if j.HasPayload {
		started["payload"] = j.Payload
	}
	if !j.ScheduledFor.IsZero() {
		started["scheduled_for_ms"] = j.ScheduledFor.UnixMilli()
	}
	a.event("handler_started", started)
	progressErrs := []any{}
	defer func() {
		ended := leaseObject(j.Lease)
		delete(ended, "token")
		ended["queue"], ended["attempt"], ended["call"], ended["then"] = queue, j.Attempt, call, s.Then
		ended["progress_errors"] = progressErrs
		ended["ctx_cause"] = nil
		if ctx.Err() != nil {
			ended["ctx_cause"] = causeObject(context.Cause(ctx))
		}
		a.event("handler_ended", ended)
	}()
	for _, v := range s.Progress {
		if err := j.Lease.Progress(ctx, v); err != nil {
			progressErrs = append(progressErrs, errorObject(err))
		}
	}
	msg := s.Message
	if msg == "" {
		msg = "conformance: " + s.Then
	}
	switch s.Then {
	case "fail":
		return errors.New(msg)
	case "fail_permanent":
		return worker.Permanent(errors.New(msg))
	case "throw":
		panic(msg)
	case "block":
		<-ctx.Done()
		return context.Cause(ctx)
	}
	return nil
}

// closeAll stops every run, closes the worker and the connection.
func (a *adapter) closeAll() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	runs := make([]*run, 0, len(a.runs))
	for q, r := range a.runs {
		runs = append(runs, r)
		delete(a.runs, q)
	}
	w, nc := a.w, a.nc
	a.mu.Unlock()
	for _, r := range runs {
		r.cancel()
		<-r.done
	}
	if w != nil {
		if err := w.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "goadapter: close:", err)
		}
	}
	a.mu.Lock()
	select {
	case <-a.closing:
	default:
		close(a.closing)
	}
	a.mu.Unlock()
	// Every lease's context is done once the worker is closed: wait for
	// their lease_lost events, so that they come before close's reply.
	a.watchers.Wait()
	if nc != nil {
		nc.Close()
	}
}

// sentinels are the SDK's sentinels by their protocol names (ADAPTER.md §2.3).
var sentinels = []struct {
	name string
	err  error
}{
	{"lost_authority", worker.ErrLostAuthority},
	{"stale_generation", worker.ErrStaleGeneration},
	{"expired", worker.ErrExpired},
	{"conflict", worker.ErrConflict},
	{"rejected", worker.ErrRejected},
	{"not_accepted", worker.ErrNotAccepted},
	{"duplicate", worker.ErrDuplicate},
	{"late", worker.ErrLate},
	{"lease_held", worker.ErrLeaseHeld},
	{"cancel_requested", worker.ErrCancelRequested},
	{"no_verdict", worker.ErrNoVerdict},
	{"lease_ended", worker.ErrLeaseEnded},
	{"closed", worker.ErrClosed},
	{"sequence_exhausted", worker.ErrSequenceExhausted},
	{"run_stopped", worker.ErrRunStopped},
	{"permanent", worker.ErrPermanent},
}

func matching(err error) []any {
	is := []any{}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			is = append(is, s.name)
		}
	}
	return is
}

// errorObject is err as an error object (ADAPTER.md §2.3).
func errorObject(err error) obj {
	o := obj{"is": matching(err), "message": err.Error()}
	var f *failure
	var ve *worker.VerdictError
	switch {
	case errors.As(err, &f):
		o["kind"] = f.kind
	case errors.As(err, &ve):
		o["kind"] = "verdict"
		v := obj{"kind": ve.Kind.String(), "reason": string(ve.Reason)}
		if ve.Detail != "" {
			v["detail"] = ve.Detail
		}
		o["verdict"] = v
	case len(o["is"].([]any)) > 0:
		o["kind"] = "sdk"
	default:
		o["kind"] = "internal"
	}
	return o
}

func errorOrNil(err error) any {
	if err == nil {
		return nil
	}
	return errorObject(err)
}

// causeObject is the cause of a lease's (or a handler's) context as a
// cause object (ADAPTER.md §2.4).
func causeObject(err error) obj {
	o := errorObject(err)
	delete(o, "kind")
	o["cause"] = causeClass(err)
	return o
}

func causeClass(err error) string {
	if errors.Is(err, worker.ErrRunStopped) {
		return "run_stopped"
	}
	var ve *worker.VerdictError
	if errors.As(err, &ve) {
		switch {
		case ve.Kind == events.KindCancelRequested || ve.Reason == events.ReasonCancelRequested:
			return "cancel_requested"
		case ve.Kind == events.KindUnresolved || ve.Kind == events.KindResolved && ve.Reason == events.ReasonSettled:
			return "unresolved"
		case ve.Kind == events.KindResolved && ve.Reason == events.ReasonLeaseRevoked:
			return "revoked"
		case ve.Kind == events.KindConflict:
			return "conflict"
		case errors.Is(err, worker.ErrStaleGeneration):
			return "stale_generation"
		case errors.Is(err, worker.ErrExpired):
			return "expired"
		}
		return "lost_authority"
	}
	switch {
	case errors.Is(err, worker.ErrLeaseEnded):
		return "ended"
	case errors.Is(err, worker.ErrClosed):
		return "closed"
	case errors.Is(err, worker.ErrExpired):
		return "local_deadline"
	}
	return "lost_authority"
}

func str(c command, name string) (string, error) {
	s, ok := c.args[name].(string)
	if !ok || s == "" {
		return "", invalid("%s: %s: want a string", c.name, name)
	}
	return s, nil
}

// num is the number argument name: ok false when absent.
func num(c command, name string) (v float64, ok bool, err error) {
	x, present := c.args[name]
	if !present || x == nil {
		return 0, false, nil
	}
	f, isNum := x.(float64)
	if !isNum {
		return 0, false, invalid("%s: %s: want a number", c.name, name)
	}
	return f, true, nil
}
