package coordinator

// The watch of the streams' configuration: while a session is live (or
// waits for the end of genesis to go live), a goroutine of its own reads
// the input and decision streams' configuration again whenever the server
// says one was updated, and on an interval, and reports a configuration
// less safe than the topology's at once: the session then refuses
// (ErrStreamChanged) instead of appending on a log that can now be
// trimmed, replaced or rewritten through the stream's settings.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/streams"
)

// ErrStreamChanged means the configuration of the input or decision stream
// changed, while the coordinator was live, into one that Ensure would have
// refused at its start (it wraps the *streams.ConfigMismatchError: Remedy
// says what to do). The coordinator stops appending and Run returns it.
var ErrStreamChanged = errors.New("coordinator: a stream's configuration changed under the live coordinator")

// AdvisorySubject is the subject of JetStream's advisory that stream
// was updated, $JS.EVENT.ADVISORY.STREAM.UPDATED.<stream>, published by
// the server in the stream's account. The coordinator subscribes to it
// for its input and decision streams (tenure auth init allows it).
func AdvisorySubject(stream string) string { return "$JS.EVENT.ADVISORY.STREAM.UPDATED." + stream }

// Pending limits of the advisory subscriptions: advisories are rare and
// only a hint to read the configuration again, so a flood aimed at them
// (a push consumer delivering there) is dropped by the client library
// once this much is pending, and counted (nats.Subscription.Dropped).
const (
	watchPendingMsgs  = 64
	watchPendingBytes = 1 << 20
)

// watch is a session's watch of its streams' configuration.
type watch struct {
	trigger chan struct{} // an advisory came (capacity 1: coalesced)
	found   chan error    // the first refusal found (capacity 1); the goroutine then ends
	open    chan struct{} // closed once the input stream is seen past its genesis
	subs    []*nats.Subscription
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startWatch subscribes to the streams' updated advisories on
// Config.WatchConn and starts the goroutine that checks the configuration:
// at once, on each advisory, and every Config.StreamCheckInterval. A
// subscription the server refuses (permissions of an older tenure auth
// init) leaves the interval.
func (s *session) startWatch() (*watch, error) {
	c := s.c
	top := c.cfg.Topology
	w := &watch{trigger: make(chan struct{}, 1), found: make(chan error, 1), open: make(chan struct{})}
	if c.jsb == nil {
		// Another backend (the simulator's model): no configuration to
		// change under the coordinator, and no genesis (its streams are
		// made open).
		close(w.open)
		w.cancel = func() {}
		return w, nil
	}
	for _, name := range []string{top.InputStream(), top.DecisionStream()} {
		sub, err := c.cfg.WatchConn.Subscribe(AdvisorySubject(name), func(m *nats.Msg) {
			if m.Reply != "" {
				// The server's advisories have no reply subject; a
				// consumer's delivery has its $JS.ACK one.
				c.drops.drop("stream advisory subscription", errNotAdvisory)
				return
			}
			select {
			case w.trigger <- struct{}{}:
			default:
			}
		})
		if err != nil {
			w.unsubscribe()
			return nil, fmt.Errorf("coordinator: subscribe to %s: %w", AdvisorySubject(name), err)
		}
		_ = sub.SetPendingLimits(watchPendingMsgs, watchPendingBytes) // a valid subscription, valid limits
		w.subs = append(w.subs, sub)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	w.cancel = cancel
	w.wg.Add(1)
	go func() { defer w.wg.Done(); s.watchLoop(ctx, w) }()
	return w, nil
}

// errNotAdvisory is why a message on an advisory subscription is dropped.
var errNotAdvisory = errors.New("a delivery of a consumer, not an advisory of the server")

// stop ends the watch and waits for its goroutine.
func (w *watch) stop() {
	if w == nil {
		return
	}
	w.cancel()
	w.wg.Wait()
	w.unsubscribe()
}

func (w *watch) unsubscribe() {
	for _, sub := range w.subs {
		_ = sub.Unsubscribe()
	}
	w.subs = nil
}

// watchLoop checks the streams' configuration until ctx ends or a check
// finds one it refuses.
func (s *session) watchLoop(ctx context.Context, w *watch) {
	c := s.c
	every := c.clk.NewTicker(c.cfg.StreamCheckInterval)
	defer every.Stop()
	open := false
	for {
		// Until the input stream is seen past its genesis, the genesis
		// subjects are accepted; from then on only every input subject
		// (a stream is never narrowed back).
		genesis, err := c.jsb.h.Check(ctx, c.cfg.Topology, !open)
		var mismatch *streams.ConfigMismatchError
		switch {
		case errors.As(err, &mismatch):
			w.found <- fmt.Errorf("%w: %w", ErrStreamChanged, err)
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			c.log.Debug("stream configuration not checked", "err", err)
		case !genesis && !open:
			open = true
			close(w.open)
		}
		select {
		case <-ctx.Done():
			return
		case <-w.trigger:
		case <-every.C():
		}
	}
}
