package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// reader streams a JetStream stream, in order, from a start sequence into a
// channel, through an ordered consumer. It is owned by the goroutine that
// started it: stop() ends it and waits.
type reader struct {
	ch     chan stored
	cancel context.CancelFunc
	done   chan struct{}
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
	// A short heartbeat notices a consumer lost with its server (a cluster
	// node killed) within about two seconds instead of the default ten.
	it, err := cons.Messages(jetstream.PullMaxMessages(1024), jetstream.PullHeartbeat(time.Second), jetstream.PullExpiry(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("coordinator: read %s: %w", stream, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &reader{ch: make(chan stored, buf), cancel: cancel, done: make(chan struct{})}
	go func() {
		<-rctx.Done()
		it.Stop()
	}()
	go func() {
		defer close(r.done)
		for {
			m, err := it.Next()
			if err != nil {
				if rctx.Err() == nil && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					select {
					case r.ch <- stored{err: fmt.Errorf("coordinator: read %s: %w", stream, err)}:
					case <-rctx.Done():
					}
				}
				return
			}
			meta, err := m.Metadata()
			if err != nil {
				select {
				case r.ch <- stored{err: fmt.Errorf("coordinator: metadata on %s: %w", stream, err)}:
				case <-rctx.Done():
				}
				return
			}
			s := stored{
				seq:     meta.Sequence.Stream,
				time:    meta.Timestamp.UnixNano(),
				subject: m.Subject(),
				data:    m.Data(),
				header:  m.Headers(),
			}
			select {
			case r.ch <- s:
			case <-rctx.Done():
				return
			}
		}
	}()
	return r, nil
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
