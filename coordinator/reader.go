package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
)

// stored is one message read from a stream, in stream order.
type stored struct {
	seq     uint64
	time    int64 // stored timestamp, Unix ns
	subject string
	data    []byte
	header  nats.Header
	err     error // set on the last item when reading failed
}

// readerPullAhead is how many messages a reader asks the server for ahead
// of what it has handed over (the client asks for more when half of them
// have arrived). A restart reads up to DefaultSnapshotEvery inputs and as
// many ~1 KB decisions as fast as the server delivers them; 4,096 keeps
// the server's consumer busy without waiting for the client's next request
// (1,024 left it idle between requests), at a few megabytes of buffers.
const readerPullAhead = 4096

// reader streams a JetStream stream, in order, from a start sequence into a
// channel, through an ordered consumer. It is owned by the goroutine that
// started it: stop() ends it and waits.
//
// The consumer's callback runs on the subscription's goroutine and hands
// each message over on ch, reading the stream sequence and stored time from
// the message's reply subject without allocating (jetstream.Msg.Metadata
// allocates on every message, and Messages' Next a heartbeat timer on every
// call: a fifth of a restart's client CPU went to both). A message the
// callback cannot place is an error on ch, and the reader stops.
type reader struct {
	ch     chan stored
	cancel context.CancelFunc
	done   chan struct{}

	cc   jetstream.ConsumeContext
	mu   sync.Mutex // serialises the callback across the consumer's resets, and stop
	dead bool       // no more items: failed or stopped
}

// startReader reads stream from startSeq onward until ctx ends or stop.
func startReader(ctx context.Context, js jetstream.JetStream, stream string, startSeq uint64, buf int) (*reader, error) {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if startSeq > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = startSeq
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("coordinator: ordered consumer on %s: %w", stream, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &reader{ch: make(chan stored, buf), cancel: cancel, done: make(chan struct{})}
	// A short heartbeat notices a consumer lost with its server (a cluster
	// node killed) within about two seconds instead of the default ten; the
	// ordered consumer then recreates itself where it stood.
	r.cc, err = cons.Consume(func(m jetstream.Msg) { r.handle(rctx, stream, m) },
		jetstream.PullMaxMessages(readerPullAhead), jetstream.PullHeartbeat(time.Second), jetstream.PullExpiry(5*time.Second))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("coordinator: read %s: %w", stream, err)
	}
	go func() {
		defer close(r.done)
		<-rctx.Done() // a callback blocked on ch returns
		r.mu.Lock()
		r.dead = true
		r.mu.Unlock()
		r.cc.Stop()
	}()
	return r, nil
}

// handle runs on the consumer's goroutine, one message at a time.
func (r *reader) handle(ctx context.Context, stream string, m jetstream.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead {
		return
	}
	s := stored{subject: m.Subject(), data: m.Data(), header: m.Headers()}
	var ok bool
	if s.seq, s.time, ok = parseAckReply(m.Reply()); !ok {
		meta, err := m.Metadata()
		if err != nil {
			r.dead = true
			s = stored{err: fmt.Errorf("coordinator: metadata on %s: %w", stream, err)}
		} else {
			s.seq, s.time = meta.Sequence.Stream, meta.Timestamp.UnixNano()
		}
	}
	// Blocking here is the back-pressure: the consumer asks for no more
	// until the loop takes what it has.
	select {
	case r.ch <- s:
	case <-ctx.Done():
		r.dead = true
	}
}

func (r *reader) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
}

// parseAckReply reads the stream sequence and the stored time from the
// reply subject of a message a consumer delivered, without allocating.
// Both forms are understood:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
//	$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>[.<token>...]
func parseAckReply(s string) (seq uint64, ts int64, ok bool) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(s, prefix) {
		return 0, 0, false
	}
	s = s[len(prefix):]
	var tok [9]string
	n := 0
	for ; n < len(tok); n++ {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			tok[n], s = s, ""
			n++
			break
		}
		tok[n], s = s[:i], s[i+1:]
	}
	var f []string // delivered, sseq, cseq, time, pending
	switch {
	case n == 7 && s == "":
		f = tok[2:7]
	case n == 9:
		f = tok[4:9]
	default:
		return 0, 0, false
	}
	seq, ok1 := parseDigits(f[1])
	t, ok2 := parseDigits(f[3])
	if !ok1 || !ok2 || t > 1<<63-1 {
		return 0, 0, false
	}
	return seq, int64(t), true
}

func parseDigits(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// decisionIndex reads the Tenure-Cause and Tenure-N headers of a stored decision.
func decisionIndex(h nats.Header) (cause uint64, n, of uint16, err error) {
	cause, err = strconv.ParseUint(h.Get(events.HeaderCause), 10, 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("coordinator: decision without a valid %s header", events.HeaderCause)
	}
	a, b, ok := strings.Cut(h.Get(events.HeaderIndex), "/")
	n64, err1 := strconv.ParseUint(a, 10, 16)
	of64, err2 := strconv.ParseUint(b, 10, 16)
	if !ok || err1 != nil || err2 != nil || n64 >= of64 {
		return 0, 0, 0, fmt.Errorf("coordinator: decision without a valid %s header", events.HeaderIndex)
	}
	return cause, uint16(n64), uint16(of64), nil
}
