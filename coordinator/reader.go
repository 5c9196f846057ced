package coordinator

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
)

// stored is one message read from a stream, in stream order.
type stored struct {
	seq     uint64
	time    int64 // stored timestamp, Unix ns
	subject string
	data    []byte
	header  nats.Header
	pending uint64 // messages the stream held after this one when it was delivered
}

// readerPullAhead is how many messages a reader asks the server for ahead
// of what it has handed over (the client asks for more when half of them
// have arrived). A restart reads up to DefaultSnapshotEvery inputs and as
// many ~1 KB decisions as fast as the server delivers them; 4,096 keeps
// the server's consumer busy without waiting for the client's next request
// (1,024 left it idle between requests), at a few megabytes of buffers.
const readerPullAhead = 4096

// reader streams a stream, in order, from a start sequence into a
// channel, through the backend's reader (JetStream's: a follow.Follower,
// which replaces its consumer whenever one is lost, and creates them with
// short requests, so that a cluster without a meta leader for a few
// seconds stalls it no longer than that). It is owned by the goroutine
// that started it: stop() ends it and waits. Blocking on ch is the
// back-pressure: the reader asks for no more than readerPullAhead messages
// ahead of what the loop has taken.
type reader struct {
	ch     chan stored
	r      Reader
	cancel context.CancelFunc // ends a handler blocked on ch
}

// startReader reads the input stream (input) or the decision stream from
// startSeq onward until ctx ends or stop.
func startReader(ctx context.Context, be Backend, input bool, startSeq uint64, buf int) *reader {
	// The reader's own context: the session may stop a reader whose
	// buffer is full and go on (a snapshot refused after the readers read
	// ahead of it); a handler waiting on ch for the session's context
	// would then wait for ever, and stop with it
	// (TestModelSnapshotRefusedAfterReadingAhead).
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan stored, buf)
	r := be.Read(ctx, input, startSeq, func(m Stored) {
		s := stored{seq: m.Seq, time: m.Time, subject: m.Subject, data: m.Data, header: m.Header, pending: m.Pending}
		select {
		case ch <- s:
		case <-ctx.Done():
		}
	})
	return &reader{ch: ch, r: r, cancel: cancel}
}

// stop ends the reader and waits for its handler to return.
func (r *reader) stop() {
	if r == nil {
		return
	}
	r.cancel()
	r.r.Stop()
}

// decisionIndex reads the Tenure-Cause and Tenure-N headers of a stored decision.
func decisionIndex(h nats.Header) (cause uint64, n, of uint32, err error) {
	cause, err = strconv.ParseUint(h.Get(events.HeaderCause), 10, 64)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("coordinator: decision without a valid %s header", events.HeaderCause)
	}
	a, b, ok := strings.Cut(h.Get(events.HeaderIndex), "/")
	n64, err1 := strconv.ParseUint(a, 10, 32)
	of64, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil || n64 >= of64 {
		return 0, 0, 0, fmt.Errorf("coordinator: decision without a valid %s header", events.HeaderIndex)
	}
	return cause, uint32(n64), uint32(of64), nil
}
