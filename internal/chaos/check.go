package chaos

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// Message is one stored message of a stream.
type Message struct {
	Seq     uint64
	Time    int64 // stored timestamp, Unix ns
	Subject string
	Data    []byte
	Header  nats.Header
}

// Log is what the checks read from the streams: every message of the input
// stream and of the decision stream, in stream order, and the last
// sequences the streams reported before they were read.
type Log struct {
	Inputs       []Message
	Decisions    []Message
	InputLast    uint64
	DecisionLast uint64
}

// Clients is what the clients say they did: their journals (every input
// they sent and every PubAck they received), and the coordinators whose
// tick and policy inputs may be in the log.
type Clients struct {
	Entries      []Entry
	Coordinators []string
	// AckedBefore, when non-zero, limits the lost-input check to the
	// PubAcks journaled before it (Unix ns): the later ones may name inputs
	// stored after the streams were read.
	AckedBefore int64
	// SourcedBefore, when non-zero, limits it further for the inputs of
	// intake streams (quotas) to the PubAcks journaled before it: the
	// intake acknowledges an input before the server sources it into the
	// input stream, which under load takes seconds.
	SourcedBefore int64
	// Hostile are the hostile workers (their journals are among Entries),
	// Attacks their records (checkHostile).
	Hostile []string
	Attacks []AttackRecord
	// Drained says that the workload is over and has drained: every queue
	// job submitted must have completed (checkQueues).
	Drained bool
}

// MaxListed bounds the findings listed per check (all are counted).
const MaxListed = 20

// Findings is one check's findings: how many, and the first MaxListed.
type Findings struct {
	Count int
	Items []string
}

func (f *Findings) add(format string, args ...any) {
	f.Count++
	if len(f.Items) < MaxListed {
		f.Items = append(f.Items, fmt.Sprintf(format, args...))
	}
}

// Result is the outcome of Check.
type Result struct {
	// Lost: inputs a client was acknowledged (PubAck) that the input stream
	// does not hold, or holds with another subject, Msg-Id or body.
	Lost Findings
	// Phantom: stored inputs that no client sent: not in any journal (same
	// Msg-Id, subject and body), and not an input a coordinator appends.
	Phantom Findings
	// DoubleHolders: from the decision stream alone, two lease generations
	// of one job whose authority intervals overlap, or one generation whose
	// holder changes.
	DoubleHolders Findings
	// StaleEffects: accepted worker effects (ack, renew, progress, cancel
	// ACK, result, release) from a generation older than one already
	// granted, naming another generation than the job's, from another
	// holder, or judged at or after the lease's expiry.
	StaleEffects Findings
	// Gaps: breaks of the decision chain: sequence gaps in either stream,
	// causes that go backwards or skip an input, n/of or header
	// inconsistencies, and decisions that differ from the fold of the
	// input stream (the comparison of the coordinator tests' checkChain).
	Gaps Findings
	// Hostile: what the hostile workers' inputs achieved (checkHostile).
	Hostile HostileResult
	// Jobs is every job's end state, for Liveness.
	Jobs map[string]*JobEnd
	// Stats counts what the log holds.
	Stats Stats
}

// OK reports whether every check passed.
func (r *Result) OK() bool {
	return r.Lost.Count+r.Phantom.Count+r.DoubleHolders.Count+r.StaleEffects.Count+r.Gaps.Count+r.Hostile.Findings.Count == 0
}

// Stats are counts over the log and the journals.
type Stats struct {
	Attempted      int            // distinct client inputs sent (by Msg-Id)
	Acked          int            // distinct client inputs acknowledged by the input stream
	Stored         int            // inputs in the input stream
	StoredClient   int            // of which clients' (workers', dispatchers')
	StoredUnacked  int            // clients' stored inputs whose PubAck they never read
	Coordinator    map[string]int // coordinators' inputs, by verb (tick, rules, policy, checkpoint)
	Folded         int            // inputs with their decisions stored
	DedupFailures  int            // one Msg-Id stored twice
	Decisions      int
	Kinds          map[string]int // decisions by kind
	Rejections     map[string]int // verdicts not accepted, by "kind/reason"
	Ops            map[string]int // verdicts of operator inputs, by "verb accepted|refused"
	MaxGeneration  uint64
	GenerationsNew int // leases created (offered or granted)
}

// JobEnd is what the decision stream says about one job in the end.
type JobEnd struct {
	State     events.State // after its last decision
	EndedAt   int64        // stored time of the last decision that ended a live lease (0: none)
	Cancelled bool         // a cancellation was requested
}

// Check runs every check on the log and the clients' journals. It does no
// I/O.
func Check(l *Log, c *Clients) *Result {
	r := &Result{Jobs: make(map[string]*JobEnd), Stats: Stats{Kinds: make(map[string]int), Rejections: make(map[string]int), Ops: make(map[string]int), Coordinator: make(map[string]int)}}
	byInput := checkInputSeqs(l, r)
	ds := checkChain(l, r)
	checkFold(l, ds, r)
	checkAuthority(ds, byInput, r)
	checkClients(l, c, byInput, r)
	checkHostile(l, ds, byInput, c, r)
	return r
}

// checkInputSeqs requires the input stream to be 1..InputLast without a
// gap, and indexes it by sequence.
func checkInputSeqs(l *Log, r *Result) map[uint64]*Message {
	by := make(map[uint64]*Message, len(l.Inputs))
	var prev uint64
	for i := range l.Inputs {
		m := &l.Inputs[i]
		if m.Seq != prev+1 {
			r.Gaps.add("input stream jumps from %d to %d", prev, m.Seq)
		}
		prev = m.Seq
		by[m.Seq] = m
	}
	if prev < l.InputLast {
		r.Gaps.add("input stream ends at %d, its last sequence is %d", prev, l.InputLast)
	}
	r.Stats.Stored = len(l.Inputs)
	return by
}

// stored is a decoded stored decision.
type stored struct {
	m *Message
	d events.Decision
}

// checkChain checks the decision stream's structure without the fold:
// contiguous sequences; headers that agree with the body; causes that
// start at input 1 and go up one input at a time, each input's decisions
// numbered 0..of-1 in order. It returns the decodable decisions.
func checkChain(l *Log, r *Result) []stored {
	out := make([]stored, 0, len(l.Decisions))
	var prevSeq, prevCause uint64
	var prevN, prevOf uint32
	for i := range l.Decisions {
		m := &l.Decisions[i]
		if m.Seq != prevSeq+1 {
			r.Gaps.add("decision stream jumps from %d to %d", prevSeq, m.Seq)
		}
		prevSeq = m.Seq
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			r.Gaps.add("decision %d does not decode: %v", m.Seq, err)
			continue
		}
		if hc, hn := m.Header.Get(events.HeaderCause), m.Header.Get(events.HeaderIndex); hc != strconv.FormatUint(d.Cause, 10) || hn != fmt.Sprintf("%d/%d", d.N, d.Of) {
			r.Gaps.add("decision %d: headers %s=%q %s=%q, body says cause %d, %d/%d", m.Seq, events.HeaderCause, hc, events.HeaderIndex, hn, d.Cause, d.N, d.Of)
		}
		switch {
		case d.N >= d.Of:
			r.Gaps.add("decision %d: n %d of %d", m.Seq, d.N, d.Of)
		case d.Cause == 0 || d.Cause > l.InputLast:
			r.Gaps.add("decision %d names cause %d, not an input (last input %d)", m.Seq, d.Cause, l.InputLast)
		case prevCause == 0 && (d.Cause != 1 || d.N != 0):
			r.Gaps.add("decision %d: the first decision is %d.%d, not 1.0", m.Seq, d.Cause, d.N)
		case prevCause == 0:
		case d.Cause < prevCause:
			r.Gaps.add("decision %d: cause goes backwards from %d to %d", m.Seq, prevCause, d.Cause)
		case d.Cause == prevCause && (d.N != prevN+1 || d.Of != prevOf):
			r.Gaps.add("decision %d: %d.%d/%d after %d.%d/%d", m.Seq, d.Cause, d.N, d.Of, prevCause, prevN, prevOf)
		case d.Cause > prevCause && prevN+1 != prevOf:
			r.Gaps.add("decision %d: input %d has %d of its %d decisions, then input %d", m.Seq, prevCause, prevN+1, prevOf, d.Cause)
		case d.Cause > prevCause+1:
			r.Gaps.add("decision %d: inputs %d to %d have no decision", m.Seq, prevCause+1, d.Cause-1)
		case d.Cause > prevCause && d.N != 0:
			r.Gaps.add("decision %d: input %d starts at decision %d", m.Seq, d.Cause, d.N)
		}
		if d.Cause != prevCause {
			r.Stats.Folded++
		}
		prevCause, prevN, prevOf = d.Cause, d.N, d.Of
		out = append(out, stored{m: m, d: d})
	}
	if prevSeq < l.DecisionLast {
		r.Gaps.add("decision stream ends at %d, its last sequence is %d", prevSeq, l.DecisionLast)
	}
	r.Stats.Decisions = len(l.Decisions)
	return out
}

type key struct {
	cause uint64
	n     uint32
}

// checkFold folds the input stream with a fresh projector and requires
// every stored decision to be the fold's decision of its key (cause, n):
// same subject, same bytes. Decisions the fold derives beyond the stored
// ones are the coordinator's pending tail, not a gap; missing ones in the
// middle are found by checkChain.
func checkFold(l *Log, ds []stored, r *Result) {
	if len(ds) == 0 {
		return
	}
	last := ds[len(ds)-1].d.Cause
	type derived struct {
		subject string
		body    []byte
	}
	want := make(map[key]derived)
	p := projector.New()
	for i := range l.Inputs {
		in := &l.Inputs[i]
		if in.Seq > last {
			break
		}
		out, err := p.Step(events.Raw{Seq: in.Seq, Time: in.Time, Subject: in.Subject, Body: in.Data})
		if err != nil {
			r.Gaps.add("fold of input %d: %v", in.Seq, err)
			return
		}
		for j := range out {
			want[key{out[j].Cause, out[j].N}] = derived{events.DecisionSubject(&out[j]), events.AppendDecision(nil, &out[j])}
		}
	}
	for _, s := range ds {
		w, ok := want[key{s.d.Cause, s.d.N}]
		switch {
		case !ok:
			r.Gaps.add("decision %d (%d.%d): the fold of the input stream derives no such decision", s.m.Seq, s.d.Cause, s.d.N)
		case w.subject != s.m.Subject || !bytes.Equal(w.body, s.m.Data):
			r.Gaps.add("decision %d (%d.%d) differs from the fold:\n    stored  %s %s\n    derived %s %s", s.m.Seq, s.d.Cause, s.d.N, s.m.Subject, s.m.Data, w.subject, w.body)
		}
	}
}

// interval is the authority of one lease generation: from its grant or
// ACK to its expiry or end.
type interval struct {
	gen        uint64
	holder     string
	auth       bool // granted or ACKed: the holder had authority
	start, end int64
	expires    int64 // expires_at in force after the last decision
}

// checkAuthority derives, from the decisions alone, every lease
// generation's authority interval and finds the overlaps, and checks every
// accepted worker effect against the generations granted before it.
func checkAuthority(ds []stored, inputs map[uint64]*Message, r *Result) {
	ivs := make(map[string]map[uint64]*interval)
	maxGen := make(map[string]uint64)
	var cause uint64
	verdict := 0 // index of the next verdict among its input's
	var in events.Input
	for _, s := range ds {
		d := &s.d
		if d.Cause != cause {
			cause, verdict = d.Cause, 0
		}
		idx := -1
		if !d.Kind.Derived() {
			idx = verdict
			verdict++
		}
		r.Stats.Kinds[d.Kind.String()]++
		if !d.Kind.Accepted() && !d.Kind.Derived() {
			r.Stats.Rejections[d.Kind.String()+"/"+string(d.Reason)]++
		}
		if d.Role == events.RoleOps && !d.Kind.Derived() {
			outcome := " refused"
			if d.Kind.Accepted() {
				outcome = " accepted"
			}
			r.Stats.Ops[d.Verb.String()+outcome]++
		}
		j := &d.Job
		if j.ID == events.NoJob || j.ID == "" {
			continue
		}
		je := r.Jobs[j.ID]
		if je == nil {
			je = &JobEnd{}
			r.Jobs[j.ID] = je
		}
		if je.State.Live() && !j.State.Live() {
			je.EndedAt = s.m.Time
		}
		je.State = j.State
		if d.Kind == events.KindCancelRequested {
			je.Cancelled = true
		}
		if j.Generation == 0 {
			continue
		}
		r.Stats.MaxGeneration = max(r.Stats.MaxGeneration, j.Generation)
		byGen := ivs[j.ID]
		if byGen == nil {
			byGen = make(map[uint64]*interval)
			ivs[j.ID] = byGen
		}
		iv := byGen[j.Generation]
		if iv == nil {
			iv = &interval{gen: j.Generation, holder: j.Holder}
			byGen[j.Generation] = iv
		}
		if iv.holder != j.Holder {
			r.DoubleHolders.add("job %s generation %d: holder %s, then %s (decision %d)", j.ID, j.Generation, iv.holder, j.Holder, s.m.Seq)
			iv.holder = j.Holder
		}

		if d.Kind.Accepted() && d.Role == events.RoleWorker {
			checkEffect(s, idx, inputs, maxGen[j.ID], iv, &in, r)
		}
		switch {
		case d.Kind == events.KindOffered || d.Kind == events.KindGranted:
			r.Stats.GenerationsNew++
			if j.Generation <= maxGen[j.ID] {
				r.StaleEffects.add("job %s: %s generation %d at decision %d, generation %d was already created", j.ID, d.Kind, j.Generation, s.m.Seq, maxGen[j.ID])
			}
			maxGen[j.ID] = max(maxGen[j.ID], j.Generation)
		}
		if (d.Kind == events.KindGranted || d.Kind == events.KindAcked) && d.Kind.Accepted() && !iv.auth {
			iv.auth, iv.start = true, d.At
		}
		if j.ExpiresAt != 0 {
			iv.expires = j.ExpiresAt
		}
		if iv.auth {
			iv.end = iv.expires
			if !j.State.Live() && j.EndedAt != 0 && j.EndedAt < iv.end {
				iv.end = j.EndedAt
			}
		}
	}
	jobs := make([]string, 0, len(ivs))
	for id := range ivs {
		jobs = append(jobs, id)
	}
	sort.Strings(jobs)
	for _, id := range jobs {
		var list []*interval
		for _, iv := range ivs[id] {
			if iv.auth {
				list = append(list, iv)
			}
		}
		slices.SortFunc(list, func(a, b *interval) int { return int(a.gen) - int(b.gen) })
		for a := 0; a < len(list); a++ {
			for b := a + 1; b < len(list); b++ {
				x, y := list[a], list[b]
				if x.start < y.end && y.start < x.end {
					r.DoubleHolders.add("job %s: generation %d (%s, %s to %s) and generation %d (%s, %s to %s) overlap",
						id, x.gen, x.holder, events.FormatTime(x.start), events.FormatTime(x.end),
						y.gen, y.holder, events.FormatTime(y.start), events.FormatTime(y.end))
				}
			}
		}
	}
}

// effects are the accepted verdicts of worker inputs that act on a lease.
var effects = map[events.Kind]bool{
	events.KindAcked: true, events.KindRenewed: true, events.KindProgressed: true,
	events.KindCancelAcked: true, events.KindCompleted: true, events.KindReleased: true,
}

// checkEffect checks one accepted worker verdict (the idx-th verdict of its
// input) against the generation its input names, the newest generation
// created before it (newest), and the lease's expiry before it.
func checkEffect(s stored, idx int, inputs map[uint64]*Message, newest uint64, iv *interval, in *events.Input, r *Result) {
	d := &s.d
	if !effects[d.Kind] {
		return
	}
	j := &d.Job
	what := fmt.Sprintf("decision %d: %s of job %s by %s", s.m.Seq, d.Kind, j.ID, d.Actor)
	if j.Generation < newest {
		r.StaleEffects.add("%s: accepted on generation %d, generation %d exists", what, j.Generation, newest)
	}
	if d.Actor != j.Holder {
		r.StaleEffects.add("%s: accepted from a worker that is not the holder (%s)", what, j.Holder)
	}
	if d.Kind != events.KindAcked && iv.expires != 0 && d.At >= iv.expires {
		r.StaleEffects.add("%s: accepted at %s, the lease expired at %s", what, events.FormatTime(d.At), events.FormatTime(iv.expires))
	}
	m := inputs[d.Cause]
	if m == nil {
		return // a gap, found elsewhere
	}
	if err := events.DecodeInput(m.Subject, m.Data, in); err != nil {
		r.StaleEffects.add("%s: accepted, but its input %d does not decode: %v", what, d.Cause, err)
		return
	}
	gen, job := in.Generation, in.Job
	switch {
	case in.Verb == events.VerbRenew:
		if idx < 0 || idx >= len(in.Leases) {
			r.StaleEffects.add("%s: verdict %d of a renew of %d leases", what, idx, len(in.Leases))
			return
		}
		gen, job = in.Leases[idx].Generation, in.Leases[idx].Job
	case in.Job == events.NoJob && len(in.Batch) > 0: // a batch ack or result (revision 7)
		if idx < 0 || idx >= len(in.Batch) {
			r.StaleEffects.add("%s: verdict %d of a batch %s of %d leases", what, idx, in.Verb, len(in.Batch))
			return
		}
		gen, job = in.Batch[idx].Generation, in.Batch[idx].Job
	}
	switch {
	case job != j.ID:
		r.StaleEffects.add("%s: its input %d names job %s", what, d.Cause, job)
	case gen < newest:
		r.StaleEffects.add("%s: its input %d names generation %d, generation %d exists", what, d.Cause, gen, newest)
	case gen != j.Generation:
		r.StaleEffects.add("%s: its input %d names generation %d, the lease is generation %d", what, d.Cause, gen, j.Generation)
	}
}

// checkClients compares the input stream with the clients' journals.
func checkClients(l *Log, c *Clients, inputs map[uint64]*Message, r *Result) {
	type sent struct{ subject, sha string }
	sentBy := make(map[string][]sent)
	acked := make(map[string]bool)
	for _, e := range c.Entries {
		switch e.Kind {
		case EntrySent:
			sentBy[e.MsgID] = append(sentBy[e.MsgID], sent{e.Subject, e.BodySHA})
		case EntryAck:
			acked[e.MsgID] = true
		}
	}
	r.Stats.Attempted, r.Stats.Acked = len(sentBy), len(acked)

	// With quotas a worker's PubAck names its intake stream and the
	// sequence there (PROTOCOL.md §4.2): the input stream holds the input
	// with the server's Nats-Stream-Source header naming both.
	type source struct {
		stream string
		seq    uint64
	}
	sourced := make(map[source]*Message)
	for i := range l.Inputs {
		m := &l.Inputs[i]
		name, rest, ok := strings.Cut(m.Header.Get(streams.HeaderStreamSource), " ")
		seq, _, _ := strings.Cut(rest, " ")
		if n, err := strconv.ParseUint(seq, 10, 64); ok && err == nil {
			sourced[source{name, n}] = m
		}
	}
	lost := make(map[string]bool)
	for _, e := range c.Entries {
		if e.Kind != EntryAck || lost[e.MsgID] || c.AckedBefore != 0 && e.At >= c.AckedBefore {
			continue
		}
		m, what := inputs[e.Seq], fmt.Sprintf("input %d", e.Seq)
		if _, intake := (streams.Topology{}).IntakeWorker(e.Stream); intake {
			if c.SourcedBefore != 0 && e.At >= c.SourcedBefore {
				continue // maybe not sourced yet
			}
			m, what = sourced[source{e.Stream, e.Seq}], fmt.Sprintf("input %d of %s", e.Seq, e.Stream)
		}
		switch {
		case m == nil:
			r.Lost.add("%s (%s, Msg-Id %s) was acknowledged and is not in the input stream (last %d)", what, e.Subject, e.MsgID, l.InputLast)
		case m.Subject != e.Subject || m.Header.Get(nats.MsgIdHdr) != e.MsgID || BodySHA(m.Data) != e.BodySHA:
			r.Lost.add("%s was acknowledged as %s (Msg-Id %s), the stream holds %s (Msg-Id %s) with another body or subject",
				what, e.Subject, e.MsgID, m.Subject, m.Header.Get(nats.MsgIdHdr))
		default:
			continue
		}
		lost[e.MsgID] = true
	}

	coords := make(map[string]bool)
	for _, id := range c.Coordinators {
		coords[id] = true
	}
	seen := make(map[string]bool)
	var in events.Input
	for i := range l.Inputs {
		m := &l.Inputs[i]
		id := m.Header.Get(nats.MsgIdHdr)
		if id != "" && seen[id] {
			r.Stats.DedupFailures++
		}
		seen[id] = true
		if s, err := events.ParseInputSubject(m.Subject); err == nil && s.Role == events.RoleCoord {
			if !coords[s.Actor] {
				r.Phantom.add("input %d (%s): no such coordinator", m.Seq, m.Subject)
			} else if what := coordinatorInput(m, id, s.Actor, &in); what != "" {
				r.Phantom.add("input %d (%s, Msg-Id %q): %s", m.Seq, m.Subject, id, what)
			} else {
				r.Stats.Coordinator[s.Verb.String()]++
			}
			continue
		}
		r.Stats.StoredClient++
		if id == "" {
			r.Phantom.add("input %d (%s) has no Nats-Msg-Id: no client of this run sent it", m.Seq, m.Subject)
			continue
		}
		sha := BodySHA(m.Data)
		found := false
		for _, s := range sentBy[id] {
			found = found || s.subject == m.Subject && s.sha == sha
		}
		if !found {
			r.Phantom.add("input %d (%s, Msg-Id %s): no client sent it", m.Seq, m.Subject, id)
			continue
		}
		if !acked[id] {
			r.Stats.StoredUnacked++
		}
	}
}

// defaultPolicy is the body of the default policy a coordinator appends to
// an empty log.
var defaultPolicy = events.AppendInputBody(nil, &events.Input{Verb: events.VerbPolicy, Policy: events.DefaultPolicy()})

// coordinatorInput says what is wrong with input m (Msg-Id id) as an input
// of coordinator actor, "" if nothing: what a coordinator appends is a tick,
// the rules input and the default policy that open an empty log (input 1
// and 2, fenced, without a Msg-Id; rules later carry one), or a checkpoint,
// each with its body and its Msg-Id "<verb>-<coordinator>-<random>"
// (coordinator/genesis.go, PROTOCOL.md §14).
func coordinatorInput(m *Message, id, actor string, in *events.Input) string {
	if err := events.DecodeInput(m.Subject, m.Data, in); err != nil {
		return fmt.Sprintf("does not decode: %v", err)
	}
	ours := func(verb events.Verb) bool { return strings.HasPrefix(id, verb.String()+"-"+actor+"-") }
	switch in.Verb {
	case events.VerbTick:
		if string(m.Data) == `{"v":1}` && ours(in.Verb) {
			return ""
		}
	case events.VerbRules:
		// (an older coordinator's revision too: a log it began is moved
		// to the current one by the next)
		if in.Revision >= events.Revision2 && in.Revision <= events.CurrentRevision && (id == "" && m.Seq == 1 || ours(in.Verb)) {
			return ""
		}
	case events.VerbPolicy:
		// The default policy follows the rules (input 2), or opens a log of
		// rules revision 1 (input 1).
		if id == "" && m.Seq <= 2 && bytes.Equal(m.Data, defaultPolicy) {
			return ""
		}
	case events.VerbCheckpoint:
		if ours(in.Verb) {
			return ""
		}
	}
	return "not an input a coordinator appends (tick, rules, default policy, checkpoint) with its Msg-Id"
}

// Liveness returns the jobs whose id starts with prefix, whose lease was
// never asked to be cancelled, and that are still live or whose last live
// lease ended after deadline (Unix ns): the decision that ended it was
// stored in the decision stream after deadline. (Readers of the decision
// stream learn of the end then; the end's time on the log's clock, its
// ended_at, can be earlier.)
func Liveness(r *Result, prefix string, deadline int64) Findings {
	var f Findings
	ids := make([]string, 0)
	for id := range r.Jobs {
		if strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		je := r.Jobs[id]
		switch {
		case je.Cancelled:
		case je.State.Live():
			f.add("job %s is still %s", id, je.State)
		case je.EndedAt > deadline:
			f.add("job %s: the decision ending it (%s) was stored at %s, after %s", id, je.State, events.FormatTime(je.EndedAt), events.FormatTime(deadline))
		}
	}
	return f
}
