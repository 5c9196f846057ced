package audit

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/fence"
)

// Effects is what the audit found about the effect receipts it was given
// (Options.Effects, `tenure audit --effects`): every effect a resource
// committed, checked against the leases of the log.
type Effects struct {
	Given     int                   `json:"given"`
	Confirmed int                   `json:"confirmed"` // committed under a lease of the log, within its authority, once
	Skew      time.Duration         `json:"skew_ns"`
	Findings  List[EffectFinding]   `json:"findings"`
	Resources map[string]int        `json:"resources,omitempty"` // receipts per resource
	Kinds     map[EffectProblem]int `json:"kinds,omitempty"`     // findings per kind
}

// EffectProblem is a kind of effect finding.
type EffectProblem string

// Kinds of effect findings.
const (
	// EffectInvalid: a line that is not a receipt.
	EffectInvalid EffectProblem = "invalid"
	// EffectUnknownLease: the log holds no such lease of the job (a forged
	// token, another deployment's, or a job the audit did not replay).
	EffectUnknownLease EffectProblem = "unknown_lease"
	// EffectNoAuthority: committed while its lease did not hold authority
	// by the log's clock (before it started, or after it ended).
	EffectNoAuthority EffectProblem = "no_authority"
	// EffectAfterNewer: committed after a later generation of the job
	// started, by the log's clock.
	EffectAfterNewer EffectProblem = "after_newer_generation"
	// EffectTwice: an effect id committed more than once.
	EffectTwice EffectProblem = "committed_twice"
	// EffectOutOfOrder: at one resource, an older lease's effect committed
	// after a newer lease's (by the resource's positions).
	EffectOutOfOrder EffectProblem = "out_of_order"
)

// EffectFinding is one effect the log does not bear out.
type EffectFinding struct {
	Origin  string        `json:"origin"`
	Kind    EffectProblem `json:"kind"`
	Job     string        `json:"job"`
	Effect  string        `json:"effect"`
	Token   string        `json:"token"`
	Problem string        `json:"problem"`
}

// leaseSpan is one lease of the log: when it held authority, by the
// log's clock, and the inputs that began and ended it.
type leaseSpan struct {
	job      string
	leaseID  string
	gen      uint64
	created  uint64 // the input that created it (offer, acquire, queue assignment)
	start    int64  // when it became ACTIVE (0: never)
	startSeq uint64
	end      int64 // when it stopped being live (0: live at the log's end)
	endSeq   uint64
	endWhy   string
	expires  int64 // its last expires_at
}

// EffectTracker follows the leases of the log through the fold's
// decisions, for CheckEffects. Only the jobs it is told of are tracked.
type EffectTracker struct {
	jobs   map[string]bool // nil: every job
	spans  map[string]*leaseSpan
	byJob  map[string][]*leaseSpan // in creation order
	lastAt int64
}

// NewEffectTracker tracks the leases of jobs (nil: of every job).
func NewEffectTracker(jobs map[string]bool) *EffectTracker {
	return &EffectTracker{jobs: jobs, spans: map[string]*leaseSpan{}, byJob: map[string][]*leaseSpan{}}
}

// Observe takes one decision of the fold, in order.
func (t *EffectTracker) Observe(d *events.Decision) {
	t.lastAt = max(t.lastAt, d.At)
	j := &d.Job
	if j.ID == events.NoJob || j.ID == "" || j.LeaseID == "" || j.Generation == 0 || t.jobs != nil && !t.jobs[j.ID] {
		return
	}
	k := j.ID + "/" + j.LeaseID
	s := t.spans[k]
	if s == nil {
		s = &leaseSpan{job: j.ID, leaseID: j.LeaseID, gen: j.Generation, created: d.Cause}
		t.spans[k] = s
		t.byJob[j.ID] = append(t.byJob[j.ID], s)
	}
	switch {
	case j.State == events.StateActive:
		if s.start == 0 {
			s.start, s.startSeq = d.At, d.Cause
		}
		if s.end == 0 {
			s.expires = j.ExpiresAt
		}
	case j.State.Live():
	case s.end == 0:
		s.end, s.endSeq, s.endWhy = d.At, d.Cause, d.Kind.String()+"/"+string(d.Reason)
		if s.start != 0 && s.expires != 0 && s.expires < s.end {
			s.end = s.expires // authority ended at expires_at, whenever the expiry fired
		}
	}
}

// authorityEnd is when s's authority ended: its end, or for a lease live
// at the log's end, its expires_at.
func (s *leaseSpan) authorityEnd() int64 {
	if s.end != 0 {
		return s.end
	}
	return s.expires
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000000") }

// CheckEffects checks effect receipts against the leases t followed:
//
//   - each receipt's lease is a lease of its job in the log, with its
//     generation (unknown_lease otherwise);
//   - it was committed while that lease held authority by the log's clock,
//     from the input that made it ACTIVE to the one that ended it (or its
//     expires_at), each widened by skew, the most the resource's clock
//     may differ from the NATS server's (no_authority), and not after a
//     later lease of the job started (after_newer_generation);
//   - each effect id of a job is committed once (committed_twice);
//   - at each resource, a job's effects are committed in the order of its
//     leases (out_of_order).
//
// Lines with an error are findings too (invalid). maxListed bounds the
// findings listed (negative: all).
func (t *EffectTracker) CheckEffects(lines []fence.ReceiptLine, skew time.Duration, maxListed int) Effects {
	e := Effects{Given: len(lines), Skew: skew, Resources: map[string]int{}, Kinds: map[EffectProblem]int{}}
	find := func(l *fence.ReceiptLine, kind EffectProblem, format string, args ...any) {
		e.Kinds[kind]++
		e.Findings.add(maxListed, EffectFinding{Origin: l.Origin(), Kind: kind, Job: l.Job, Effect: l.Effect,
			Token: l.Token().String(), Problem: fmt.Sprintf(format, args...)})
	}
	sk := int64(skew)
	type key struct{ job, effect string }
	once := map[key][]*fence.ReceiptLine{}
	type rkey struct{ resource, job string }
	byRes := map[rkey][]*fence.ReceiptLine{}
	bad := map[*fence.ReceiptLine]bool{}
	for i := range lines {
		l := &lines[i]
		if l.Err != nil {
			find(l, EffectInvalid, "not a receipt: %v", l.Err)
			bad[l] = true
			continue
		}
		e.Resources[l.Resource]++
		once[key{l.Job, l.Effect}] = append(once[key{l.Job, l.Effect}], l)
		byRes[rkey{l.Resource, l.Job}] = append(byRes[rkey{l.Resource, l.Job}], l)
		s := t.spans[l.Job+"/"+l.LeaseID]
		switch {
		case s == nil:
			find(l, EffectUnknownLease, "effect %s of job %s was committed under lease %s, which the log never gave job %s (a forged token, another deployment's, or a log the audit did not read whole)", l.Effect, l.Job, l.LeaseID, l.Job)
			bad[l] = true
			continue
		case s.gen != l.Generation:
			find(l, EffectUnknownLease, "effect %s of job %s names generation %d of lease %s, which is generation %d in the log (created by input %d)", l.Effect, l.Job, l.Generation, l.LeaseID, s.gen, s.created)
			bad[l] = true
			continue
		case s.start == 0:
			find(l, EffectNoAuthority, "effect %s of job %s was committed at %s under lease %s (generation %d, offered by input %d), which never held authority (never ACKed)", l.Effect, l.Job, stamp(l.CommittedAt), l.LeaseID, l.Generation, s.created)
			bad[l] = true
			continue
		}
		at := l.CommittedAt
		if at < s.start-sk {
			find(l, EffectNoAuthority, "effect %s of job %s was committed at %s, before lease %s (generation %d) held authority from %s (input %d)", l.Effect, l.Job, stamp(at), l.LeaseID, l.Generation, stamp(s.start), s.startSeq)
			bad[l] = true
			continue
		}
		if end := s.authorityEnd(); end != 0 && at >= end+sk {
			how := "expires_at, no decision yet"
			if s.end != 0 {
				how = fmt.Sprintf("%s, input %d", s.endWhy, s.endSeq)
			}
			if n := t.newerStarted(s, at-sk); n != nil {
				find(l, EffectAfterNewer, "effect %s of job %s was committed at %s by generation %d (lease %s), after generation %d (lease %s) started at %s (input %d); generation %d's authority had ended at %s (%s)", l.Effect, l.Job, stamp(at), l.Generation, l.LeaseID, n.gen, n.leaseID, stamp(n.start), n.startSeq, l.Generation, stamp(end), how)
			} else {
				find(l, EffectNoAuthority, "effect %s of job %s was committed at %s by generation %d (lease %s, granted by input %d), after its authority ended at %s (%s)", l.Effect, l.Job, stamp(at), l.Generation, l.LeaseID, s.startSeq, stamp(end), how)
			}
			bad[l] = true
			continue
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(once), func(a, b key) int { return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.effect, b.effect)) }) {
		ls := once[k]
		if len(ls) < 2 {
			continue
		}
		for _, l := range ls[1:] {
			find(l, EffectTwice, "effect %s of job %s was committed again by %s at %s position %d; first by %s at position %d (%s)", l.Effect, l.Job, l.Token(), l.Resource, l.Position, ls[0].Token(), ls[0].Position, ls[0].Origin())
			bad[l] = true
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(byRes), func(a, b rkey) int { return cmp.Or(cmp.Compare(a.resource, b.resource), cmp.Compare(a.job, b.job)) }) {
		ls := byRes[k]
		slices.SortStableFunc(ls, func(a, b *fence.ReceiptLine) int { return cmp.Compare(a.Position, b.Position) })
		var top *fence.ReceiptLine
		var topSeq uint64
		for _, l := range ls {
			seq, _ := l.Token().Seq()
			if top != nil && seq < topSeq {
				find(l, EffectOutOfOrder, "effect %s of job %s by %s was committed at %s position %d, after %s's effect %s at position %d", l.Effect, l.Job, l.Token(), l.Resource, l.Position, top.Token(), top.Effect, top.Position)
				bad[l] = true
				continue
			}
			top, topSeq = l, seq
		}
	}
	for i := range lines {
		if !bad[&lines[i]] {
			e.Confirmed++
		}
	}
	return e
}

// newerStarted is the first lease of s's job created after s that was
// ACTIVE at or before at.
func (t *EffectTracker) newerStarted(s *leaseSpan, at int64) *leaseSpan {
	after := false
	for _, n := range t.byJob[s.job] {
		if n == s {
			after = true
			continue
		}
		if after && n.start != 0 && n.start <= at {
			return n
		}
	}
	return nil
}

// CheckEffectsOf checks receipts against decisions, the fold's (or the
// verified stored ones) in order: NewEffectTracker of the receipts' jobs,
// Observe, CheckEffects.
func CheckEffectsOf(ds []events.Decision, lines []fence.ReceiptLine, skew time.Duration, maxListed int) Effects {
	t := NewEffectTracker(ReceiptJobs(lines))
	for i := range ds {
		t.Observe(&ds[i])
	}
	return t.CheckEffects(lines, skew, maxListed)
}

// ReceiptJobs is the set of jobs the receipts name.
func ReceiptJobs(lines []fence.ReceiptLine) map[string]bool {
	jobs := make(map[string]bool)
	for _, l := range lines {
		if l.Job != "" {
			jobs[l.Job] = true
		}
	}
	return jobs
}
