// Package ops is the dispatcher and operator side of Tenure: offer a job to
// a holder, request its cancellation, resolve an ownership conflict or an
// unresolved job, and set the policy. Every call publishes one input on
// tenure.in.ops.<id>.<job>.<verb> and returns the coordinator's verdict:
// the decision whose cause is that input. A verdict that is not an accepted
// one comes back as a *RejectedError carrying the decision, so that callers
// can match on it with errors.As (or errors.Is against the sentinels).
package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// Sentinels matched by *RejectedError.
var (
	// ErrRejected matches every verdict that is not an accepted one.
	ErrRejected = errors.New("ops: not accepted")
	// ErrNoVerdict means no verdict arrived before the context ended (is a
	// coordinator running?). The input may still be decided later.
	ErrNoVerdict = errors.New("ops: no verdict")
)

// RejectedError is a verdict that was not accepted.
type RejectedError struct {
	Decision events.Decision
}

// Error describes the verdict.
func (e *RejectedError) Error() string {
	s := fmt.Sprintf("ops: %s %s: %s/%s", e.Decision.Verb, e.Decision.Job.ID, e.Decision.Kind, e.Decision.Reason)
	if e.Decision.Detail != "" {
		s += " (" + e.Decision.Detail + ")"
	}
	return s
}

// Is matches ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Client publishes operator inputs as one ops actor.
type Client struct {
	id      string
	js      jetstream.JetStream
	timeout time.Duration
}

// New returns a client that acts as ops actor id (a token; server
// permissions should let it publish only on tenure.in.ops.<id>.>).
func New(nc *nats.Conn, id string) (*Client, error) {
	if !events.ValidToken(id) {
		return nil, fmt.Errorf("ops: invalid id %q", id)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Client{id: id, js: js, timeout: 10 * time.Second}, nil
}

// Offer offers job to holder. leaseMS and ackTimeoutMS of 0 take the policy's defaults.
func (c *Client) Offer(ctx context.Context, job, holder string, leaseMS, ackTimeoutMS int64) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbOffer, Holder: holder, LeaseMS: leaseMS, AckTimeoutMS: ackTimeoutMS})
}

// Cancel requests the cancellation of job's live lease. A non-zero
// generation (with its leaseID) makes the request apply to that lease only.
func (c *Client) Cancel(ctx context.Context, job, leaseID string, generation uint64, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbCancel, LeaseID: leaseID, Generation: generation, Text: reason})
}

// Affirm settles an ownership conflict in favour of the named live lease.
func (c *Client) Affirm(ctx context.Context, job, holder, leaseID string, generation uint64, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbResolve, Action: events.ActionAffirm, Holder: holder, LeaseID: leaseID, Generation: generation, Text: reason})
}

// Revoke ends job's live lease (if any) and clears its ownership conflict.
func (c *Client) Revoke(ctx context.Context, job, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbResolve, Action: events.ActionRevoke, Text: reason})
}

// Settle gives an UNRESOLVED job its terminal outcome (FAILED or CANCELLED).
func (c *Client) Settle(ctx context.Context, job string, outcome events.Outcome, reason string) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: job, Verb: events.VerbResolve, Action: events.ActionSettle, Outcome: outcome, Text: reason})
}

// SetPolicy replaces the policy; it applies to inputs stored after it.
func (c *Client) SetPolicy(ctx context.Context, p events.Policy) (events.Decision, error) {
	return c.do(ctx, &events.Input{Job: events.NoJob, Verb: events.VerbPolicy, Policy: p})
}

// do publishes in and waits for its verdict.
func (c *Client) do(ctx context.Context, in *events.Input) (events.Decision, error) {
	in.Role, in.Actor = events.RoleOps, c.id
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	// Follow the decisions about this job from now on, before publishing,
	// so the verdict cannot be missed.
	filter := events.JobDecisionFilter(in.Job)
	if in.Job == events.NoJob {
		filter = events.DecisionPrefix + ".*." + events.NoJob + ".*"
	}
	// (An ordered consumer is created on its first fetch, so DeliverNew
	// could start after the verdict: start from the stream's next sequence
	// as read before publishing instead.)
	stream, err := c.js.Stream(ctx, streams.Topology{}.DecisionStream())
	if err != nil {
		return events.Decision{}, fmt.Errorf("ops: decision stream: %w", streams.Classify(err))
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return events.Decision{}, fmt.Errorf("ops: decision stream: %w", streams.Classify(err))
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
	})
	if err != nil {
		return events.Decision{}, fmt.Errorf("ops: follow decisions: %w", streams.Classify(err))
	}
	msg := nats.NewMsg(events.InputSubject(events.RoleOps, c.id, in.Job, in.Verb))
	msg.Data = events.AppendInputBody(nil, in)
	ack, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(c.id+"-"+uuid.NewString()))
	if err != nil {
		return events.Decision{}, fmt.Errorf("ops: publish %s: %w", in.Verb, streams.Classify(err))
	}
	for {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				return events.Decision{}, fmt.Errorf("%w for input %d: %v", ErrNoVerdict, ack.Sequence, ctx.Err())
			}
			return events.Decision{}, fmt.Errorf("ops: read decisions: %w", err)
		}
		d, err := events.DecodeDecision(m.Data())
		if err != nil || d.Cause != ack.Sequence || d.Kind.Derived() {
			continue
		}
		if !d.Kind.Accepted() {
			return d, &RejectedError{Decision: d}
		}
		return d, nil
	}
}
