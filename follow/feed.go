package follow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
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

// Restorer is a Sink that can start where a decision stream whose first
// decisions were removed (archived, then trimmed: package archive) goes
// on: from the coordinator's stored snapshot.
type Restorer interface {
	Sink
	// Restore sets part's state and position to a point from which the
	// decision stream goes on without a gap (the stored snapshot's). Feed
	// calls it when the stream no longer holds the decision after the
	// sink's position, and tries again after the backoff if it fails.
	Restore(ctx context.Context, part uint32) error
}

// errGap is why a reading stopped: the stream no longer holds the decision
// after the sink's position (the first decisions were removed).
var errGap = errors.New("the decision stream no longer holds the decisions after the read model's position: restoring from the stored snapshot")

// Feed reads the decision stream stream (partition part's) into sink until
// ctx ends, from sink's position on, with a Follower, and with a new one,
// after a backoff of 100 ms doubling to 2 s (back to 100 ms after any
// progress), whenever its Follower stops on its own. log receives the
// restarts (debug) and the undecodable decisions (warn).
//
// A decision stream has no gap but where its first decisions were removed
// (archived: the stream then starts later, and may keep one policy_set
// decision before that start). If sink is a Restorer, Feed restores it
// (Restorer.Restore) before it reads a stream that no longer holds the
// decision after sink's position, and whenever the next decision it reads
// is not that one; otherwise it reads on from the stream's first decision
// after the position.
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
	restorer, _ := sink.(Restorer)
	if restorer != nil {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		if first := st.CachedInfo().State.FirstSeq; first > sink.PositionOf(part)+1 {
			log.Info("the decision stream starts at "+strconv.FormatUint(first, 10)+": restoring the read model from the stored snapshot", "stream", stream)
			if err := restorer.Restore(ctx, part); err != nil {
				return err
			}
		}
	}
	var target atomic.Uint64
	target.Store(math.MaxUint64)
	gap := make(chan struct{}) // closed when a decision after a gap was handed over (with a Restorer)
	var gapped atomic.Bool
	cfg := Config{
		Stream: stream, StartSeq: sink.PositionOf(part) + 1, PullAhead: 4096,
		OnError: func(err error) { log.Debug("following", "err", err) },
	}
	f := Start(ctx, js, cfg, func(_ context.Context, m Msg) {
		if restorer != nil && (gapped.Load() || m.Seq > sink.PositionOf(part)+1) {
			if !gapped.Swap(true) {
				close(gap)
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
	stopped := f.Err
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
		case <-gap:
			return restoreAfterGap(ctx, f, part, restorer, log, stream)
		case <-time.After(time.Second):
		}
	}
	select {
	case <-ctx.Done():
	case <-f.Done():
	case <-gap:
		return restoreAfterGap(ctx, f, part, restorer, log, stream)
	}
	f.Stop()
	return stopped()
}

// restoreAfterGap stops f, which handed over a decision after a gap, and
// restores the sink; the next reading starts after its new position.
func restoreAfterGap(ctx context.Context, f *Follower, part uint32, r Restorer, log *slog.Logger, stream string) error {
	f.Stop()
	log.Info("decisions removed from the decision stream after the read model's position: restoring the read model from the stored snapshot", "stream", stream)
	if err := r.Restore(ctx, part); err != nil {
		return fmt.Errorf("%w: %w", errGap, err)
	}
	return nil
}
