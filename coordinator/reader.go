package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
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
// channel, through an ephemeral pull consumer of its own that it replaces
// whenever the one it reads is lost or skips a message. It is owned by the
// goroutine that started it: stop() ends it and waits.
//
// It does what an ordered consumer (jetstream.OrderedConsumer) does, but
// creates its consumers with a short request timeout, retried every
// readerRetry: an ordered consumer recreates its consumer with one request
// of a fixed 10 s timeout, and a consumer creation sent while the cluster
// has no meta leader (its node was killed) is dropped by every server, so
// the reader stood still for those 10 s even when the cluster had healed
// within 5.
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

	js      jetstream.JetStream
	stream  string
	restart chan struct{} // buffered: the current consumer must be replaced

	mu   sync.Mutex // serialises the callback, replacements, and stop
	dead bool       // no more items: failed or stopped
	gen  int        // the current consumer's generation; callbacks of older ones are ignored
	next uint64     // the next stream sequence to hand over
	dseq uint64     // the last delivery sequence of the current consumer
	cc   jetstream.ConsumeContext
	name string // the current consumer's name
}

const (
	readerCreateTimeout = time.Second            // one consumer creation request
	readerRetry         = 100 * time.Millisecond // between failed creations
)

// startReader reads stream from startSeq onward until ctx ends or stop.
func startReader(ctx context.Context, js jetstream.JetStream, stream string, startSeq uint64, buf int) (*reader, error) {
	rctx, cancel := context.WithCancel(ctx)
	r := &reader{ch: make(chan stored, buf), cancel: cancel, done: make(chan struct{}),
		js: js, stream: stream, restart: make(chan struct{}, 1), next: max(startSeq, 1)}
	go r.run(rctx)
	return r, nil
}

// run creates the consumer, and a new one each time a replacement is
// asked for, until ctx ends.
func (r *reader) run(ctx context.Context) {
	defer close(r.done)
	defer func() {
		r.mu.Lock()
		r.dead = true
		cc, name := r.cc, r.name
		r.mu.Unlock()
		r.drop(cc, name)
	}()
	for {
		if !r.consume(ctx) {
			return
		}
		select {
		case <-r.restart:
		case <-ctx.Done():
			return
		}
		r.mu.Lock()
		r.gen++ // from now on the old consumer's callbacks are ignored
		cc, name := r.cc, r.name
		r.cc, r.name, r.dseq = nil, "", 0
		r.mu.Unlock()
		r.drop(cc, name)
	}
}

// consume creates a consumer starting at r.next, retrying until it exists
// or ctx ends (false).
func (r *reader) consume(ctx context.Context) bool {
	for {
		r.mu.Lock()
		next, gen := r.next, r.gen
		r.mu.Unlock()
		cctx, ccancel := context.WithTimeout(ctx, readerCreateTimeout)
		cons, err := r.js.CreateConsumer(cctx, r.stream, jetstream.ConsumerConfig{
			Name:              "tenure_" + strings.ReplaceAll(uuid.NewString(), "-", ""),
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       next,
			AckPolicy:         jetstream.AckNonePolicy,
			InactiveThreshold: 5 * time.Minute,
			Replicas:          1,
			MemoryStorage:     true,
		})
		ccancel()
		if err == nil {
			// A short heartbeat notices a consumer lost with its server (a
			// cluster node killed) within about two seconds.
			var cc jetstream.ConsumeContext
			cc, err = cons.Consume(func(m jetstream.Msg) { r.handle(ctx, gen, m) },
				jetstream.PullMaxMessages(readerPullAhead), jetstream.PullHeartbeat(time.Second), jetstream.PullExpiry(5*time.Second),
				jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
					if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
						errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders) {
						r.replace(gen)
					}
				}))
			if err == nil {
				r.mu.Lock()
				r.cc, r.name = cc, cons.CachedInfo().Name
				r.mu.Unlock()
				return true
			}
			r.drop(nil, cons.CachedInfo().Name)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(readerRetry):
		}
	}
}

// replace asks run for a new consumer, if the one of generation gen is
// still the current one.
func (r *reader) replace(gen int) {
	r.mu.Lock()
	cur := gen == r.gen && !r.dead
	r.mu.Unlock()
	if cur {
		select {
		case r.restart <- struct{}{}:
		default:
		}
	}
}

// drop stops a consumer and deletes it from the server (in the background:
// the server may be unreachable; its inactivity threshold removes it then).
func (r *reader) drop(cc jetstream.ConsumeContext, name string) {
	if cc != nil {
		cc.Stop()
	}
	if name != "" {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = r.js.DeleteConsumer(ctx, r.stream, name)
		}()
	}
}

// handle runs on the consumer's goroutine, one message at a time.
func (r *reader) handle(ctx context.Context, gen int, m jetstream.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead || gen != r.gen {
		return
	}
	s := stored{subject: m.Subject(), data: m.Data(), header: m.Headers()}
	var dseq uint64
	if d, ok := streams.ParseAckReply(m.Reply()); ok {
		s.seq, dseq, s.time = d.StreamSeq, d.ConsumerSeq, d.Time
	} else {
		meta, err := m.Metadata()
		if err != nil {
			r.dead = true
			s = stored{err: fmt.Errorf("coordinator: metadata on %s: %w", r.stream, err)}
		} else {
			s.seq, dseq, s.time = meta.Sequence.Stream, meta.Sequence.Consumer, meta.Timestamp.UnixNano()
		}
	}
	if s.err == nil {
		if dseq != r.dseq+1 || s.seq < r.next {
			// A message skipped (or one already handed over): start again
			// after the last one handed over.
			r.gen++
			go r.replaceNow()
			return
		}
		r.dseq, r.next = dseq, s.seq+1
	}
	// Blocking here is the back-pressure: the consumer asks for no more
	// until the loop takes what it has.
	select {
	case r.ch <- s:
	case <-ctx.Done():
		r.dead = true
	}
}

// replaceNow asks run for a new consumer (the current generation was
// already abandoned by handle).
func (r *reader) replaceNow() {
	select {
	case r.restart <- struct{}{}:
	default:
	}
}

func (r *reader) stop() {
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
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
