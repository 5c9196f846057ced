package ops

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/streams"
)

// Transport is a Client's port to JetStream (issue "Deterministic
// simulation"), as worker.Transport is a worker's: what a dispatcher or
// an operator does with it. New uses JetStream over a NATS connection
// (jsTransport, the wire unchanged); the simulator (internal/sim) runs
// clients on a model of JetStream through NewWithTransport, so that
// Submit, SubmitMany, the resolves and SetPolicy, with their retries and
// their verdict matching, are what it simulates.
type Transport interface {
	// Publish stores input msg under Nats-Msg-Id msgID (in stream
	// expectStream only, when it is not ""; JetStream answers 10060
	// "expected stream does not match" and stores nothing otherwise), and
	// returns its PubAck; one attempt, no retries.
	Publish(ctx context.Context, msg *nats.Msg, msgID, expectStream string) (*jetstream.PubAck, error)
	// PublishAsync is Publish without waiting: the future learns the
	// PubAck, or an error (a timeout when no reply came: the outcome is
	// then unknown).
	PublishAsync(msg *nats.Msg, msgID, expectStream string) (jetstream.PubAckFuture, error)
	// Follow reads a stream as follow.Start does, handing each message to
	// fn on a goroutine of its own, until ctx ends or Stop.
	Follow(ctx context.Context, cfg follow.Config, fn func(follow.Msg)) Follower
	// Partitions is the partition count of the deployment whose streams
	// are named by prefix (0: unpartitioned), as streams.Discover finds it.
	Partitions(ctx context.Context, prefix string) (uint32, error)
	// LastMsg returns the last message of stream on subject (which may
	// hold wildcards), and the stream's first sequence; the error matches
	// jetstream.ErrMsgNotFound when the stream holds none (first is then
	// still set).
	LastMsg(ctx context.Context, stream, subject string) (m *jetstream.RawStreamMsg, first uint64, err error)
}

// Follower is a reader Transport.Follow started (a *follow.Follower is
// one).
type Follower = follow.Handle

// jsTransport is JetStream over a connection.
type jsTransport struct{ js jetstream.JetStream }

// publishOpts: a synchronous publish makes one attempt (Client.publish
// retries); an asynchronous one keeps nats.go's retries on no responders.
func publishOpts(msgID, expectStream string, sync bool) []jetstream.PublishOpt {
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(msgID)}
	if sync {
		opts = append(opts, jetstream.WithRetryAttempts(0))
	}
	if expectStream != "" {
		opts = append(opts, jetstream.WithExpectStream(expectStream))
	}
	return opts
}

func (t jsTransport) Publish(ctx context.Context, msg *nats.Msg, msgID, expectStream string) (*jetstream.PubAck, error) {
	return t.js.PublishMsg(ctx, msg, publishOpts(msgID, expectStream, true)...)
}

func (t jsTransport) PublishAsync(msg *nats.Msg, msgID, expectStream string) (jetstream.PubAckFuture, error) {
	return t.js.PublishMsgAsync(msg, publishOpts(msgID, expectStream, false)...)
}

func (t jsTransport) Follow(ctx context.Context, cfg follow.Config, fn func(follow.Msg)) Follower {
	return follow.Start(ctx, t.js, cfg, func(_ context.Context, m follow.Msg) { fn(m) })
}

func (t jsTransport) Partitions(ctx context.Context, prefix string) (uint32, error) {
	return streams.Discover(ctx, t.js, streams.Topology{Prefix: prefix})
}

func (t jsTransport) LastMsg(ctx context.Context, stream, subject string) (*jetstream.RawStreamMsg, uint64, error) {
	s, err := t.js.Stream(ctx, stream)
	if err != nil {
		return nil, 0, err
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	return m, s.CachedInfo().State.FirstSeq, err
}
