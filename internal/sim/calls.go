package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/jsmodel"
	"github.com/maknow/tenure/verdict"
	"github.com/maknow/tenure/worker"
)

// calls is a Go SDK worker's transport as the simulator sees it: the
// model's (jsmodel.Transport), with what the wrong-waiter oracle
// (checkCalls) needs besides. A call of the SDK the simulator makes
// (Acquire, Progress, Complete, AckCancel) carries a *call in its context
// (calls.tag); the SDK publishes the call's input on the caller's
// goroutine with a context derived from it, so Publish learns which call
// an input and its PubAck are. Follow notes when each decision addressed
// to the worker reached it (its reader handed it to the SDK), by the
// bubble's clock.
type calls struct {
	tr     *jsmodel.Transport
	worker string

	mu        sync.Mutex
	list      []*call
	delivered map[decAt]time.Time // a decision (its sequence and stored time) -> when it reached the worker
}

// decAt names a decision as stored: its sequence in the decision stream
// and its stored time (a sequence alone may name two decisions: one lost
// in a crash, and the one stored at its sequence since).
type decAt struct {
	seq uint64
	at  int64
}

// call is one SDK call of the simulator's and what it returned.
type call struct {
	op    string // acquire, progress, complete, cancel_ack
	job   string
	seq   uint64    // its input's sequence, from its PubAck (0: none learned)
	msgID string    // that input's Nats-Msg-Id
	acked time.Time // when that PubAck came back
	ret   time.Time // when the call returned
	// What it returned: a decision that is not accepted (a *VerdictError),
	// a lease (Acquire), nil (accepted), no verdict (ErrNoVerdict), or
	// another error.
	outcome  callOutcome
	decision events.Decision // outcomeVerdict
	leaseID  string          // outcomeOK of an acquire: the lease it returned
	err      string
}

type callOutcome uint8

const (
	outcomeOther callOutcome = iota
	outcomeOK
	outcomeVerdict
	outcomeNoVerdict
)

type callKey struct{}

func newCalls(tr *jsmodel.Transport, workerID string) *calls {
	return &calls{tr: tr, worker: workerID, delivered: map[decAt]time.Time{}}
}

var _ worker.Transport = (*calls)(nil)

// tag returns ctx carrying a new call of op on job.
func (c *calls) tag(ctx context.Context, op, job string) (context.Context, *call) {
	k := &call{op: op, job: job}
	return context.WithValue(ctx, callKey{}, k), k
}

// done records what call k returned: err, and for an accepted acquire the
// lease it returned.
func (c *calls) done(k *call, err error, l *worker.Lease) {
	k.ret = time.Now()
	var ve *worker.VerdictError
	switch {
	case err == nil:
		k.outcome = outcomeOK
		if l != nil {
			k.leaseID = l.Token().LeaseID
		}
	case errors.Is(err, worker.ErrNoVerdict):
		// (first: a call whose context ended wraps the context's cause,
		// which may be a *VerdictError, the decision that ended its
		// lease: no verdict of its own input)
		k.outcome = outcomeNoVerdict
	case errors.Is(err, worker.ErrClosed):
		k.outcome = outcomeOther
	case errors.As(err, &ve):
		k.outcome, k.decision = outcomeVerdict, ve.Decision
	default:
		k.outcome = outcomeOther
	}
	if err != nil {
		k.err = err.Error()
	}
	c.mu.Lock()
	c.list = append(c.list, k)
	c.mu.Unlock()
}

func (c *calls) Publish(ctx context.Context, msg *nats.Msg, msgID, expectStream string) (*jetstream.PubAck, error) {
	a, err := c.tr.Publish(ctx, msg, msgID, expectStream)
	if k, ok := ctx.Value(callKey{}).(*call); ok && err == nil {
		// (on the caller's goroutine: the call has not returned yet)
		k.seq, k.msgID, k.acked = a.Sequence, msgID, time.Now()
	}
	return a, err
}

func (c *calls) Follow(ctx context.Context, cfg follow.Config, fn func(follow.Msg)) worker.Follower {
	return c.tr.Follow(ctx, cfg, func(m follow.Msg) {
		c.mu.Lock()
		if _, ok := c.delivered[decAt{m.Seq, m.Time}]; !ok {
			c.delivered[decAt{m.Seq, m.Time}] = time.Now()
		}
		c.mu.Unlock()
		fn(m)
	})
}

// verdicts indexes the stored verdicts of worker inputs: by the input's
// sequence, the first decision answering it (its decision stream
// sequence too); and the granted decisions by lease id.
type verdicts struct {
	byCause map[uint64]storedDecision
	granted map[string]storedDecision
}

type storedDecision struct {
	seq uint64 // in the decision stream
	at  int64  // stored time
	d   events.Decision
}

func indexVerdicts(l *chaos.Log) *verdicts {
	v := &verdicts{byCause: map[uint64]storedDecision{}, granted: map[string]storedDecision{}}
	for _, m := range l.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err != nil || d.Kind.Derived() || d.Role != events.RoleWorker {
			continue
		}
		if _, ok := v.byCause[d.Cause]; !ok {
			v.byCause[d.Cause] = storedDecision{m.Seq, m.Time, d}
		}
		if d.Kind == events.KindGranted {
			v.granted[d.Job.LeaseID] = storedDecision{m.Seq, m.Time, d}
		}
	}
	return v
}

// checkCalls is the wrong-waiter oracle: every SDK call the simulator
// made that returned a decision, a lease, an acceptance or "no verdict"
// must agree with the stored verdict of its own input:
//
//   - a refusal (*VerdictError) must be that verdict: its cause the
//     call's input, its kind and reason the stored ones;
//   - a lease from Acquire must be the one its input was granted;
//   - an acceptance (nil) needs its input's verdict stored, and accepted;
//   - "no verdict" is wrong once that verdict had reached the worker (its
//     reader handed it to the SDK) before the call returned, at an
//     earlier instant of the bubble's clock: the SDK held the verdict its
//     caller waited for and told it there was none.
//
// It also counts (net.Touch) the calls whose verdict reached the worker
// before their PubAck: the path where a verdict waits for its caller.
//
// A call whose input the server acknowledged and then lost in a crash
// (excused: by Msg-Id, lost.go) is not checked: the sequence its PubAck
// named holds another input since, and its verdict another's.
func checkCalls(rep *Report, net *jsmodel.Net, v *verdicts, c *calls, excused map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.list {
		if k.seq != 0 && excused[k.msgID] {
			net.Touch("sdk calls: input lost in a crash, not checked")
			continue
		}
		what := fmt.Sprintf("sdk call: %s's %s of %s (input %d, returned at %s)", c.worker, k.op, k.job, k.seq, k.ret.Format("15:04:05.000000"))
		own, stored := v.byCause[k.seq]
		var reached time.Time
		if stored {
			reached = c.delivered[decAt{own.seq, own.at}]
			if !reached.IsZero() && !k.acked.IsZero() && reached.Before(k.acked) {
				net.Touch("sdk calls: verdict before its PubAck")
			}
		}
		switch k.outcome {
		case outcomeVerdict:
			net.Touch("sdk calls: refused, checked")
			d := k.decision
			switch {
			case k.seq == 0:
				rep.finding("%s: given the verdict of input %d (%s/%s) though its own input was never acknowledged", what, d.Cause, d.Kind, d.Reason)
			case d.Cause != k.seq:
				rep.finding("%s: given the verdict of input %d (%s/%s on %s), not its own", what, d.Cause, d.Kind, d.Reason, d.Job.ID)
			case !stored:
				rep.finding("%s: given %s/%s, but no verdict of its input is stored", what, d.Kind, d.Reason)
			case own.d.Kind != d.Kind || own.d.Reason != d.Reason || own.d.Job.ID != d.Job.ID:
				rep.finding("%s: given %s/%s on %s, but its stored verdict is %s/%s on %s", what, d.Kind, d.Reason, d.Job.ID, own.d.Kind, own.d.Reason, own.d.Job.ID)
			}
		case outcomeOK:
			net.Touch("sdk calls: accepted, checked")
			switch {
			case k.op == "acquire":
				g, ok := v.granted[k.leaseID]
				if !ok || g.d.Cause != k.seq {
					rep.finding("%s: returned lease %s, which its input was not granted (granted by input %d)", what, k.leaseID, g.d.Cause)
				}
			case !stored:
				rep.finding("%s: accepted, but no verdict of its input is stored", what)
			case verdict.Of(events.RoleWorker, own.d) != nil:
				rep.finding("%s: accepted, but its stored verdict is %s/%s", what, own.d.Kind, own.d.Reason)
			}
		case outcomeNoVerdict:
			if k.seq == 0 {
				break // its outcome unknown to the SDK too: no PubAck
			}
			net.Touch("sdk calls: no verdict, checked")
			if stored && !reached.IsZero() && reached.Before(k.ret) {
				rep.finding("%s: told no verdict (%s), but its verdict (decision %d, %s/%s) had reached the worker at %s", what, k.err, own.seq, own.d.Kind, own.d.Reason, reached.Format("15:04:05.000000"))
			}
		}
	}
}
