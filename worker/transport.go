package worker

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
)

// Transport is a worker's port to JetStream (issue "Deterministic
// simulation"): the two things the SDK does with it, publishing an input
// and reading the decisions addressed to the worker. Connect uses
// JetStream over a NATS connection (jsTransport); the simulator
// (internal/sim) runs workers on a model of JetStream through
// NewWithTransport.
type Transport interface {
	// Publish stores input msg under Nats-Msg-Id msgID, in stream
	// expectStream only (Nats-Expected-Stream; JetStream answers 10060
	// "expected stream does not match" and stores nothing otherwise), and
	// returns its PubAck; one attempt, no retries.
	Publish(ctx context.Context, msg *nats.Msg, msgID, expectStream string) (*jetstream.PubAck, error)
	// Follow reads a stream as follow.Start does, handing each message to
	// fn on a goroutine of its own, until ctx ends or Stop.
	Follow(ctx context.Context, cfg follow.Config, fn func(follow.Msg)) Follower
}

// Follower is a reader Transport.Follow started (a *follow.Follower is
// one): follow.Handle, shared with package ops's port.
type Follower = follow.Handle

// jsTransport is JetStream over a connection.
type jsTransport struct{ js jetstream.JetStream }

func (t jsTransport) Publish(ctx context.Context, msg *nats.Msg, msgID, expectStream string) (*jetstream.PubAck, error) {
	return t.js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID), jetstream.WithExpectStream(expectStream), jetstream.WithRetryAttempts(0))
}

func (t jsTransport) Follow(ctx context.Context, cfg follow.Config, fn func(follow.Msg)) Follower {
	return follow.Start(ctx, t.js, cfg, func(_ context.Context, m follow.Msg) { fn(m) })
}
