package modelcheck

import (
	"fmt"
	"sort"
	"strings"

	"github.com/maknow/tenure/events"
)

// Base is the stored time of the scope's first input (2026-01-01T00:00:00Z);
// traces show times as offsets from it.
const Base int64 = 1767225600 * 1e9

const ms = int64(1e6)

// leaseKey is the lease key of the scopes' rules input.
var leaseKey = [events.LeaseKeyLen]byte{'m', 'o', 'd', 'e', 'l', 'c', 'h', 'e', 'c', 'k'}

// Scope is what Run explores: the actors, the jobs, the inputs they may
// send and how many.
type Scope struct {
	Name    string
	Workers []string // worker actors
	Jobs    []string // job ids
	// Depth is the number of inputs after the setup (the rules input,
	// then the policy): every sequence of up to Depth inputs is explored.
	Depth int
	// Revision is the rules revision the setup puts in force (0: the
	// current one; 1: the setup has no rules input).
	Revision uint32
	// Policy is put in force by the setup.
	Policy events.Policy
	// AltPolicy, if set, is a policy an operator may put in force at any
	// point.
	AltPolicy *events.Policy
	// Queue, if set, adds the queue verbs: a dispatcher submits a job to
	// this queue, workers announce capacity on it (one slot, for each of
	// PullTTLs) and withdraw it, the operator retries and discards.
	Queue    string
	PullTTLs []int64 // ms
	// MaxAttempts, BackoffMS and BackoffMaxMS are the submit's.
	MaxAttempts             uint64
	BackoffMS, BackoffMaxMS int64
	// ConcurrencyKey, if set, is the submit's concurrency key (rules
	// revision 9), and MaxActive the limits of it the operator may set
	// (the op verb limit; a lift too).
	ConcurrencyKey string
	MaxActive      []uint64
	// Past adds, to every input that chooses its time, a stored time
	// before the fold's: the fold must clamp it.
	Past bool
	// Cold replays the whole input sequence of every new state on an
	// empty projector, and compares its state hash and last decisions with
	// those of the projector restored from the parent's snapshot.
	Cold bool
	// Continuous steps every transition on a projector that folded the
	// whole input sequence from the start without a restore (the fold as
	// a coordinator that never restarts runs it), and compares it with
	// one restored from the parent's snapshot: what a projector holds
	// beyond its snapshot, and reads, shows as a difference. It costs a
	// replay of the sequence per transition.
	Continuous bool
	// Ops limits the operator's verbs to those named (offer, cancel,
	// affirm, revoke, settle, retry, discard, submit, policy); nil: all.
	Ops []string
	// WorkerVerbs limits the workers' verbs to those named (acquire, ack,
	// renew, batch, progress, cancel_ack, result, release, pull); nil:
	// all.
	WorkerVerbs []string
	// Claims limits the leases workers name to those named (cur, old,
	// future, wrong: claimKind); nil: all.
	Claims []string
}

// has reports whether a verb list (nil: every verb) includes v.
func has(list []string, v string) bool {
	if list == nil {
		return true
	}
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// lessPolicy is the policy of the scopes: short durations, so that every
// boundary is a few steps away. A lease lasts 1 s, its lifetime is 1.5 s
// (a renewal late in a lease is capped), an offer must be ACKed within
// 400 ms, a cancel reconciled within 600 ms (so that either the cancel
// deadline or the expiry comes first, depending on when the cancel came),
// and a job gets at most 3 leases.
func lessPolicy() events.Policy {
	return events.Policy{
		MinLease:       100 * ms,
		MaxLease:       1500 * ms,
		DefaultLease:   1000 * ms,
		AckTimeout:     400 * ms,
		CancelTimeout:  600 * ms,
		MaxLifetime:    1500 * ms,
		MaxGenerations: 3,
	}
}

// altPolicy is the policy an operator may switch to: shorter leases (a
// renewal of a 1 s lease is clamped to 800 ms), a shorter cancel timeout,
// and a retention of 1.2 s.
func altPolicy() *events.Policy {
	p := lessPolicy()
	p.DefaultLease = 500 * ms
	p.MaxLease = 800 * ms
	p.CancelTimeout = 300 * ms
	p.Retain = 1200 * ms
	return &p
}

// retainPolicy is lessPolicy with a retention: jobs are retired 1.2 s after
// their lease ended, and their ids start again at generation 1.
func retainPolicy() events.Policy {
	p := lessPolicy()
	p.Retain = 1200 * ms
	return p
}

// scopes are the named scopes. "ci" is the set go test runs, "check" the
// set make check runs; the others are for the mutation tests and for
// exploring by hand (go run ./internal/modelcheck/cmd/modelcheck -scope
// NAME [-depth N] [-continuous]).
var scopes = map[string]Scope{
	// Two workers and one job: every lease verb and every claim, stored
	// times before the fold's too, to a depth that reaches conflicts,
	// cancellation and a third generation.
	"lease":      {Name: "lease", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 7, Policy: lessPolicy(), Past: true, Cold: true},
	"lease-deep": {Name: "lease-deep", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 9, Policy: lessPolicy(), Past: true, Cold: true},
	// Two jobs: batch renewals, one holder's leases of two jobs, ticks that
	// fire one job's deadline and not the other's.
	"two-jobs": {Name: "two-jobs", Workers: []string{"w1", "w2"}, Jobs: []string{"a", "b"}, Depth: 5, Policy: lessPolicy(), Cold: true},
	// Three workers: a conflict between two non-holders, a third claim.
	"three-workers": {Name: "three-workers", Workers: []string{"w1", "w2", "w3"}, Jobs: []string{"a"}, Depth: 6, Policy: lessPolicy(), Cold: true},
	// Retention: retired jobs, ids used again from generation 1, late
	// inputs for a retired job; and a policy change mid-lease.
	"retain": {Name: "retain", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 6, Policy: retainPolicy(), AltPolicy: altPolicy(), Continuous: true},
	// A queue: submits, announcements of two ttls, the queue's offers,
	// missed ACKs, declines, retries with backoff, DEAD jobs, standings.
	"queue": {Name: "queue", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 5, Policy: lessPolicy(),
		Queue: "q", PullTTLs: []int64{300, 3000}, MaxAttempts: 2, BackoffMS: 50, BackoffMaxMS: 100, Continuous: true},
	// Two queue jobs: two offers at once, one worker's two leases.
	"queue-two": {Name: "queue-two", Workers: []string{"w1", "w2"}, Jobs: []string{"a", "b"}, Depth: 4, Policy: lessPolicy(),
		Queue: "q", PullTTLs: []int64{300, 3000}, MaxAttempts: 2, BackoffMS: 50, BackoffMaxMS: 100, Continuous: true},

	// Earlier rules revisions, which keep folding their logs as they did:
	// revision 1 (lease ids anyone can name, no rules input), 2 (no
	// retention), 3 (retention), 4 (queues, before fair matching).
	"rev1": {Name: "rev1", Revision: 1, Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 6, Policy: lessPolicy(), Cold: true},
	"rev2": {Name: "rev2", Revision: 2, Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 6, Policy: lessPolicy(), Cold: true},
	"rev3": {Name: "rev3", Revision: 3, Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 5, Policy: retainPolicy(), AltPolicy: altPolicy(), Cold: true},
	"rev4": {Name: "rev4", Revision: 4, Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 4, Policy: lessPolicy(),
		Queue: "q", PullTTLs: []int64{300, 3000}, MaxAttempts: 2, BackoffMS: 50, BackoffMaxMS: 100, Continuous: true},

	// The scopes of go test: small enough for -race on two loaded cores.
	"ci-lease": {Name: "ci-lease", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 4, Policy: lessPolicy(), Past: true, Cold: true},
	// The queue's verbs and the claims of the holder (the others are
	// ci-lease's), every transition also stepped without a restore.
	"ci-queue": {Name: "ci-queue", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 4, Policy: lessPolicy(),
		Queue: "q", PullTTLs: []int64{300, 3000}, MaxAttempts: 2, BackoffMS: 50, BackoffMaxMS: 100, Continuous: true,
		WorkerVerbs: []string{"ack", "renew", "result", "release", "pull"}, Claims: []string{"cur", "old"},
		Ops: []string{"cancel", "revoke", "retry", "discard", "submit"}},
	// Retention and a policy change, with the holder's claims and the
	// older lease's.
	"ci-retain": {Name: "ci-retain", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 4, Policy: retainPolicy(), AltPolicy: altPolicy(), Cold: true,
		WorkerVerbs: []string{"acquire", "ack", "renew", "result", "release"}, Claims: []string{"cur", "old"},
		Ops: []string{"offer", "cancel", "policy"}},

	// The scopes of the mutation tests (mutation_test.go): ci-lease's
	// moves to depth 3, and a queue with one announcement ttl.
	"mut-lease": {Name: "mut-lease", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 3, Policy: lessPolicy()},
	// Concurrency keys (revision 9): a job of a key whose limit (0 or 1)
	// the operator sets and lifts at any point. One job: with two, a
	// worker's input at another job's due ACK deadline leaves it OFFERED
	// past it (under fair firing, revision 6, only ticks fire the
	// deadlines of jobs an input does not name), which the ack rule
	// counts as a finding whatever the limits.
	"ci-limits": {Name: "ci-limits", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 5, Policy: lessPolicy(),
		Queue: "q", PullTTLs: []int64{3000}, MaxAttempts: 2, BackoffMS: 50, BackoffMaxMS: 100, Continuous: true,
		ConcurrencyKey: "k", MaxActive: []uint64{0, 1},
		WorkerVerbs: []string{"ack", "result", "release", "pull"}, Claims: []string{"cur"}, Ops: []string{"submit", "limit", "cancel"}},
	"limits": {Name: "limits", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 5, Policy: lessPolicy(),
		Queue: "q", PullTTLs: []int64{300, 3000}, MaxAttempts: 2, BackoffMS: 50, BackoffMaxMS: 100, Continuous: true,
		ConcurrencyKey: "k", MaxActive: []uint64{0, 1}},
	"mut-queue": {Name: "mut-queue", Workers: []string{"w1", "w2"}, Jobs: []string{"a"}, Depth: 3, Policy: lessPolicy(),
		Queue: "q", PullTTLs: []int64{3000}, MaxAttempts: 2, BackoffMS: 50, BackoffMaxMS: 100,
		WorkerVerbs: []string{"ack", "result", "release", "pull"}, Claims: []string{"cur"}, Ops: []string{"submit"}},
}

// sets are named lists of scopes.
var sets = map[string][]string{
	"ci":    {"ci-lease", "ci-queue", "ci-retain", "ci-limits"},
	"check": {"lease-deep", "two-jobs", "three-workers", "retain", "queue", "queue-two", "limits", "rev1", "rev4"},
}

// Lookup returns the scopes a name stands for: a set ("ci", "check") or a
// single scope.
func Lookup(name string) ([]Scope, error) {
	if list, ok := sets[name]; ok {
		out := make([]Scope, len(list))
		for i, n := range list {
			out[i] = scopes[n]
		}
		return out, nil
	}
	if s, ok := scopes[name]; ok {
		return []Scope{s}, nil
	}
	return nil, fmt.Errorf("modelcheck: no scope %q (have %s)", name, strings.Join(Names(), ", "))
}

// Names lists the sets and scopes Lookup knows, sorted.
func Names() []string {
	var out []string
	for n := range sets {
		out = append(out, n)
	}
	for n := range scopes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// String describes the scope on one line.
func (s Scope) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: workers=%s jobs=%s depth=%d", s.Name, strings.Join(s.Workers, ","), strings.Join(s.Jobs, ","), s.Depth)
	if s.Revision != 0 {
		fmt.Fprintf(&b, " revision=%d", s.Revision)
	}
	if s.Queue != "" {
		fmt.Fprintf(&b, " queue=%s", s.Queue)
	}
	if s.ConcurrencyKey != "" {
		fmt.Fprintf(&b, " concurrency-key=%s max-active=%v", s.ConcurrencyKey, s.MaxActive)
	}
	if s.Policy.Retain != 0 || s.AltPolicy != nil && s.AltPolicy.Retain != 0 {
		b.WriteString(" retention")
	}
	if s.AltPolicy != nil {
		b.WriteString(" policy-change")
	}
	if s.Past {
		b.WriteString(" past-times")
	}
	if s.Continuous {
		b.WriteString(" continuous")
	} else if s.Cold {
		b.WriteString(" cold-replay")
	}
	return b.String()
}
