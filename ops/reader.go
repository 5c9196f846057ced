package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
)

// The verdicts of the inputs whose every verdict is addressed to the
// client itself (submit, batch submit, policy: PROTOCOL.md §3.2) are read
// by one decision reader per partition, started on the first such call and
// kept until Close: a follow.Follower of tenure.out.<id>.> on the
// partition's decision stream, as the worker SDK reads its own. A call
// then costs its publish and nothing more (no consumer of its own to look
// up, create and delete). The accepted verdicts of offer, cancel and
// resolve are addressed to the job's holder instead, so those calls follow
// the job with a consumer of their own (doIn).

// readerInactive is the inactivity threshold of the client's decision
// consumers: one whose process died is removed that long after its last
// pull.
const readerInactive = 30 * time.Second

// Stash bounds: a verdict that overtook its input's PubAck is claimed when
// the PubAck comes back (milliseconds later), or by a retry of the same
// input (a resend under the same Msg-Id has the same sequence). One that
// nobody claims within stashAge (the caller gave up, or a twin process with
// the same id published it) is dropped, oldest first, and past stashMax
// the oldest is dropped and the drop reported to the ErrorHandler.
const (
	stashAge = 2 * time.Minute
	stashMax = 1 << 16
)

// verdictKey names one stored input: its partition's index and its
// sequence in that partition's input stream.
type verdictKey struct {
	part uint32
	seq  uint64
}

// waiter receives the verdicts of one input: left more are expected (a
// batch has one per element); ch has room for all of them.
//
// It takes only the verdicts of its input's verb and job (any job for a
// batch), or about no job (the whole input rejected): after a server lost
// its unsynced tail in a crash (PROTOCOL.md §2), another input of this
// client may be stored at the sequence of one whose PubAck came back, and
// its verdict is not the lost input's (as in package worker, where the
// simulator found it). The input lost has no verdict.
type waiter struct {
	ch   chan events.Decision
	left int
	verb events.Verb
	job  string
}

// wants reports whether d may be a verdict of w's input. A verdict with no
// verb is of an input whose verb the log's rules do not know
// (bad_subject), which can only be the waiter's own.
func (w *waiter) wants(d *events.Decision) bool {
	return (d.Verb == w.verb || d.Verb == events.VerbNone) && (w.job == events.NoJob || d.Job.ID == events.NoJob || d.Job.ID == w.job)
}

// stashed is a verdict nobody waited for yet, with when it came.
type stashed struct {
	key verdictKey
	d   events.Decision
	at  time.Time
}

// readerOf returns partition part's decision reader, starting it on first
// use, once its consumer exists (or ctx ended first).
func (c *Client) readerOf(ctx context.Context, part events.Partition) (Follower, error) {
	c.rmu.Lock()
	if c.closed {
		c.rmu.Unlock()
		return nil, ErrClosed
	}
	f := c.readers[part.Index]
	if f == nil {
		topo := streams.Topology{Prefix: c.prefix, Partition: part}
		out := topo.DecisionStream()
		f = c.tr.Follow(c.ctx, follow.Config{
			Stream:            out,
			FromNew:           true,
			Filters:           []string{events.AddresseeFilter(c.id)},
			PullAhead:         4096,
			InactiveThreshold: readerInactive,
			OnError: func(err error) {
				c.report(fmt.Errorf("ops: decision reader of %s: %w", out, err))
			},
			OnDrop: func(reason, subject string) {
				c.report(fmt.Errorf("ops: decision stream %s: dropped a message no consumer of this client sent (%s) on %s", out, reason, subject))
			},
		}, func(m follow.Msg) { c.onDecision(part.Index, out, m) })
		c.readers[part.Index] = f
	}
	c.rmu.Unlock()
	select {
	case <-f.Ready():
		return f, nil
	case <-ctx.Done():
		err := f.Err()
		if err == nil {
			err = context.Cause(ctx)
		}
		return nil, fmt.Errorf("ops: follow decisions: %w", streams.Classify(err))
	}
}

// onDecision takes one decision addressed to the client, in stream order:
// a verdict of one of its inputs goes to its caller, or to the stash until
// the caller asks for it. Derived decisions (the requeues, DEAD ends and
// retirements of the jobs it submitted) and the verdicts of other actors'
// inputs (offers and cancels addressed to it as a holder) are not waited
// for by anyone here.
func (c *Client) onDecision(part uint32, stream string, m follow.Msg) {
	d, err := events.DecodeDecision(m.Data)
	if err != nil {
		c.report(fmt.Errorf("ops: decision %d on %s: %w", m.Seq, m.Subject, err))
		return
	}
	if d.Kind.Derived() || d.Role != events.RoleOps || d.Actor != c.id {
		return
	}
	c.keep(receipt.Decision(stream, m.Seq, d.Cause, m.Header.Get(events.HeaderChain), "ops "+c.id))
	k := verdictKey{part, d.Cause}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters[k] {
		if !w.wants(&d) {
			continue
		}
		w.ch <- d // buffered: room for every verdict expected
		w.left--
		if w.left == 0 || d.Job.ID == events.NoJob {
			c.dropWaiterLocked(k, w)
		}
		return
	}
	now := time.Now()
	c.expireLocked(now)
	if len(c.stash)-c.stashHead >= stashMax {
		old := c.stash[c.stashHead]
		c.dropStashedLocked()
		c.reportLocked(fmt.Errorf("ops: stash full: dropped a verdict of input %d nobody claimed", old.key.seq))
	}
	c.stash = append(c.stash, stashed{key: k, d: d, at: now})
	c.stashN[k]++
}

// expireLocked drops the stashed verdicts older than stashAge.
func (c *Client) expireLocked(now time.Time) {
	for c.stashHead < len(c.stash) && now.Sub(c.stash[c.stashHead].at) > stashAge {
		c.dropStashedLocked()
	}
	if c.stashHead > 1024 && c.stashHead*2 > len(c.stash) { // reslice, bounded work per verdict
		c.stash = append(c.stash[:0], c.stash[c.stashHead:]...)
		c.stashHead = 0
	}
}

// dropStashedLocked drops the oldest stashed entry (claimed or not).
func (c *Client) dropStashedLocked() {
	e := &c.stash[c.stashHead]
	if e.key.seq != 0 {
		if c.stashN[e.key]--; c.stashN[e.key] <= 0 {
			delete(c.stashN, e.key)
		}
	}
	*e = stashed{}
	c.stashHead++
}

// takeStashedLocked removes and returns the stashed verdicts of input k
// that w wants, in arrival order.
func (c *Client) takeStashedLocked(k verdictKey, w *waiter) []events.Decision {
	n := c.stashN[k]
	if n == 0 {
		return nil
	}
	var out []events.Decision
	seen := 0
	for i := c.stashHead; i < len(c.stash) && seen < n; i++ {
		if e := &c.stash[i]; e.key == k {
			seen++
			if !w.wants(&e.d) {
				continue
			}
			out = append(out, e.d)
			e.key, e.d = verdictKey{}, events.Decision{} // claimed: its slot ages out empty
		}
	}
	if c.stashN[k] -= len(out); c.stashN[k] <= 0 {
		delete(c.stashN, k)
	}
	return out
}

// dropWaiterLocked removes w from the waiters of input k, if it is there.
func (c *Client) dropWaiterLocked(k verdictKey, w *waiter) {
	ws := c.waiters[k]
	for i, x := range ws {
		if x == w {
			ws = slices.Delete(ws, i, i+1)
			break
		}
	}
	if len(ws) == 0 {
		delete(c.waiters, k)
		return
	}
	c.waiters[k] = ws
}

// await waits for the n verdicts of input k, or for a verdict about no
// job (the whole input rejected), which is then the only one. On error it
// returns the verdicts learned so far, and the error matches ErrNoVerdict
// (or is ErrClosed).
func (c *Client) await(ctx context.Context, k verdictKey, n int, verb events.Verb, job string) ([]events.Decision, error) {
	ds := make([]events.Decision, 0, n)
	whole := false
	w := &waiter{verb: verb, job: job}
	c.mu.Lock()
	for _, d := range c.takeStashedLocked(k, w) {
		ds = append(ds, d)
		whole = whole || d.Job.ID == events.NoJob
	}
	if len(ds) >= n || whole {
		c.mu.Unlock()
		return ds, nil
	}
	w.ch, w.left = make(chan events.Decision, n-len(ds)), n-len(ds)
	c.waiters[k] = append(c.waiters[k], w)
	c.mu.Unlock()
	for len(ds) < n && !whole {
		select {
		case d := <-w.ch:
			ds = append(ds, d)
			whole = d.Job.ID == events.NoJob
		case <-ctx.Done():
			c.mu.Lock()
			c.dropWaiterLocked(k, w)
			c.mu.Unlock()
			for len(ds) < n && !whole { // arrived while giving up
				select {
				case d := <-w.ch:
					ds = append(ds, d)
					whole = d.Job.ID == events.NoJob
					continue
				default:
				}
				break
			}
			if len(ds) == n || whole {
				return ds, nil
			}
			if c.ctx.Err() != nil {
				return ds, ErrClosed
			}
			return ds, &noVerdictError{fmt.Sprintf("ops: no verdict for input %d (%d of %d): %v", k.seq, len(ds), n, context.Cause(ctx))}
		}
	}
	return ds, nil
}

// ErrClosed is returned by the calls of a Client after Close.
var ErrClosed = errors.New("ops: client closed")

// Close stops the client's decision readers and deletes their consumers.
// Calls that wait for a verdict then return ErrClosed (the input may still
// be decided). It is idempotent; a Client is not usable after it.
func (c *Client) Close() error {
	c.rmu.Lock()
	if c.closed {
		c.rmu.Unlock()
		return nil
	}
	c.closed = true
	readers := c.readers
	c.readers = nil
	c.rmu.Unlock()
	c.cancel()
	for _, f := range readers {
		f.Stop()
	}
	return nil
}

// report hands err to the ErrorHandler, if any.
func (c *Client) report(err error) {
	if c.onErr != nil && err != nil && c.ctx.Err() == nil {
		c.onErr(err)
	}
}

// reportLocked reports err without holding c.mu while the handler runs.
func (c *Client) reportLocked(err error) {
	if c.onErr == nil {
		return
	}
	c.mu.Unlock()
	c.report(err)
	c.mu.Lock()
}
