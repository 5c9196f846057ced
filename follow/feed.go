package follow

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
)

// Sink is a read model fed with one partition's decisions by Feed (the
// web board's and the state API's models).
type Sink interface {
	// PositionOf is the last sequence of part's decision stream applied.
	PositionOf(part uint32) uint64
	// Apply folds decision d, stored at seq of part's decision stream.
	Apply(part uint32, seq uint64, d *events.Decision)
	// Skip records seq of part's stream as read without a decision in it
	// (an undecodable body).
	Skip(part uint32, seq uint64)
	// SetCaughtUp says the model reached part's stream's last sequence as
	// it was when the reading began.
	SetCaughtUp(part uint32)
}

// Feed reads the decision stream stream (partition part's) into sink until
// ctx ends, from sink's position on, with a Follower, and with a new one,
// after a backoff of 100 ms doubling to 2 s (back to 100 ms after any
// progress), whenever its Follower stops on its own. log receives the
// restarts (debug) and the undecodable decisions (warn).
func Feed(ctx context.Context, js jetstream.JetStream, stream string, part uint32, sink Sink, log *slog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		before := sink.PositionOf(part)
		err := feedOnce(ctx, js, stream, part, sink, log)
		if ctx.Err() != nil {
			return
		}
		if sink.PositionOf(part) > before {
			backoff = 100 * time.Millisecond
		}
		log.Debug("following the decision stream again", "stream", stream, "err", err, "after", sink.PositionOf(part))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// feedOnce reads stream into sink from its position on until ctx ends (nil)
// or the Follower stops (why: the error it delivered, else its last
// consumer creation's). The partition is caught up once sink has reached
// the stream's last sequence as it was when the reading began.
func feedOnce(ctx context.Context, js jetstream.JetStream, stream string, part uint32, sink Sink, log *slog.Logger) error {
	var target atomic.Uint64
	target.Store(math.MaxUint64)
	errc := make(chan error, 1) // why the Follower stopped, if it stopped on its own
	cfg := Config{
		Stream: stream, StartSeq: sink.PositionOf(part) + 1, PullAhead: 4096,
		OnError: func(err error) { log.Debug("following", "err", err) },
	}
	f := Start(ctx, js, cfg, func(_ context.Context, m Msg) {
		if m.Err != nil {
			select {
			case errc <- m.Err:
			default:
			}
			return
		}
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			log.Warn("undecodable decision", "stream", stream, "seq", m.Seq, "err", err)
			sink.Skip(part, m.Seq)
		} else {
			sink.Apply(part, m.Seq, &d)
		}
		if m.Seq >= target.Load() {
			sink.SetCaughtUp(part)
		}
	})
	defer f.Stop()
	stopped := func() error {
		select {
		case err := <-errc:
			return err
		default:
			return f.Err()
		}
	}
	select {
	case <-f.Ready():
	case <-f.Done():
		return stopped()
	}
	// The end of the stream as the reading began: retried until the
	// stream answers, as the Follower retries its consumer.
	for ctx.Err() == nil {
		st, err := js.Stream(ctx, stream)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = st.Info(ctx)
		}
		if err == nil {
			target.Store(info.State.LastSeq)
			if sink.PositionOf(part) >= info.State.LastSeq {
				sink.SetCaughtUp(part)
			}
			break
		}
		select {
		case <-ctx.Done():
		case <-f.Done():
			return stopped()
		case <-time.After(time.Second):
		}
	}
	select {
	case <-ctx.Done():
	case <-f.Done():
	}
	f.Stop()
	return stopped()
}
