package audit

import (
	"slices"
	"strconv"
	"strings"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// Flow is what the audit found of the flow rules of rules revision 8
// (PROTOCOL.md §26): the evidence that they held, by the log's clock,
// checked from the decisions alone, and every breach as a finding. A
// clean log has no finding: the fold never breaks its own rules; a
// finding means decisions the fold did not make (the audit's other
// findings say where) or a fold that is wrong.
//
// It covers the decisions the audit folded: from its start (Config.From,
// a snapshot) on.
type Flow struct {
	// Scheduled counts the scheduled jobs submitted (a submit's run_at or
	// delay_ms), Offers the offers of scheduled jobs (assigned).
	Scheduled uint64 `json:"scheduled"`
	Offers    uint64 `json:"scheduled_offers"`
	// UniqueKeys counts the unique keys named (by queue and key),
	// Duplicates the submits refused for a key another job held
	// (duplicate_unique_key), MaxHolders the most jobs that held one key
	// at once (1 when the rule held).
	UniqueKeys int    `json:"unique_keys"`
	Duplicates uint64 `json:"unique_duplicates"`
	MaxHolders int    `json:"unique_max_holders"`
	// Keys are the concurrency keys (revision 9) that had a limit, by
	// queue then key: per key the most of its jobs live when one of them
	// was offered under a limit, against the limits in force.
	Keys []FlowKey `json:"concurrency_keys,omitempty"`
	// Rates are the rate limits (revision 9) of queues (Key "") and of
	// concurrency keys, by queue then key: per limit its starts and the
	// most in any window of one period, against what its bucket allows.
	Rates []FlowRate `json:"rate_limits,omitempty"`
	// Schedules are the cron schedules (revision 10), by id: per
	// schedule its due times fired, refused and recorded missed, each
	// checked to be the next of its definition.
	Schedules []FlowSchedule `json:"schedules,omitempty"`
	// Findings are the breaches.
	Findings List[FlowFinding] `json:"findings"`
}

// FlowProblem classifies a breach of a flow rule.
type FlowProblem string

// Flow problems.
const (
	// FlowOfferedEarly: a queue job offered before its run_at, or before
	// its submit's time plus its delay_ms.
	FlowOfferedEarly FlowProblem = "offered_early"
	// FlowUniqueTwice: a job held its unique key while another job of
	// its queue held it.
	FlowUniqueTwice FlowProblem = "unique_key_twice"
	// FlowUniqueNotHeld: a submit refused (or a retry) for a unique key
	// that the job it names did not hold.
	FlowUniqueNotHeld FlowProblem = "unique_key_not_held"
	// FlowConcurrencyExceeded: a queue job offered while the live leases
	// of its concurrency key were at or above the key's limit (revision
	// 9).
	FlowConcurrencyExceeded FlowProblem = "concurrency_exceeded"
	// FlowRateExceeded: a queue job offered when its queue's or its
	// concurrency key's rate limit had no token, by the bucket recomputed
	// from the limits and the offers before it (revision 9).
	FlowRateExceeded FlowProblem = "rate_exceeded"
)

// FlowRate is what the audit observed of one rate limit (revision 9,
// PROTOCOL.md §26.5): of a queue (Key "") or of a concurrency key.
type FlowRate struct {
	Queue string `json:"queue"`
	Key   string `json:"concurrency_key,omitempty"`
	// Limited tells whether a rate is in force at the end, Rate per
	// PeriodMS which (the last one when lifted).
	Limited  bool   `json:"limited"`
	Rate     uint64 `json:"rate"`
	PeriodMS int64  `json:"period_ms"`
	// Starts counts the offers under the limit; MaxInPeriod is the most
	// of them in any window of one period (its period then), and Allowed
	// the most its bucket allows in such a window, rate + (period-1)/T
	// with T = ceil(period/rate) (at most twice the rate; rate at once):
	// MaxInPeriod is at most Allowed when the rule held.
	Starts      uint64 `json:"starts"`
	MaxInPeriod uint64 `json:"max_in_period"`
	Allowed     uint64 `json:"allowed_in_period"`
}

// rateState is a rate limit's bucket as the audit recomputes it, and the
// starts of the last period.
type rateState struct {
	rate   uint64
	period int64 // ns
	tat    int64
	window []int64
	stats  *FlowRate
}

func (r *rateState) interval() int64 { return (r.period + int64(r.rate) - 1) / int64(r.rate) }

// FlowKey is what the audit observed of one concurrency key of a queue
// that had a limit (revision 9, PROTOCOL.md §26.4).
type FlowKey struct {
	Queue string `json:"queue"`
	Key   string `json:"concurrency_key"`
	// Limited tells whether a limit is in force at the end, Limit which;
	// MaxLimit is the highest limit that was in force.
	Limited  bool   `json:"limited"`
	Limit    uint64 `json:"limit"`
	MaxLimit uint64 `json:"max_limit"`
	// Offers counts the offers of the key's jobs under a limit; MaxActive
	// is the most live leases of the key (OFFERED or ACTIVE) just after
	// one of them, never above the limit then when the rule held, and so
	// never above MaxLimit; MaxLive the most at any time while a limit
	// was in force (above MaxActive only when a limit was set, or
	// lowered, below the leases then live: a limit revokes nothing).
	Offers    uint64 `json:"offers"`
	MaxActive uint64 `json:"max_active"`
	MaxLive   uint64 `json:"max_live"`
}

// FlowFinding is one breach: the decision that breached the rule.
type FlowFinding struct {
	Problem FlowProblem `json:"problem"`
	Cause   uint64      `json:"cause"`
	N       uint32      `json:"n"`
	Job     string      `json:"job,omitempty"`
	Detail  string      `json:"detail"`
}

// FlowTracker checks the flow rules on a stream of decisions given in
// order (Observe), for Result.
type FlowTracker struct {
	max  int
	flow Flow
	// keys holds, per unique key (queue, key), the latest projection of
	// the job that last held it; named every key named.
	keys    map[[2]string]events.Job
	named   map[[2]string]bool
	holders map[string]events.Job // the same projections, by job id
	// Concurrency keys (revision 9): the live leases of jobs naming one,
	// by job id, their count by (queue, key), and the keys that had a
	// limit.
	live     map[string]events.Job
	keyLive  map[[2]string]uint64
	keyStats map[[2]string]*FlowKey
	// Rate limits (revision 9): the buckets in force, and what was
	// observed of every rate limit, by (queue, key).
	rates     map[[2]string]*rateState
	rateStats map[[2]string]*FlowRate
	// Schedules (revision 10): each one followed, and what was observed
	// of every schedule, by id.
	scheds     map[string]*schedAudit
	schedStats map[string]*FlowSchedule
}

// NewFlowTracker returns a tracker that lists at most maxListed findings
// (all are counted; negative: no bound).
func NewFlowTracker(maxListed int) *FlowTracker { return &FlowTracker{max: maxListed} }

// Seed takes the state an audit starts from (a snapshot): the holders of
// unique keys then.
func (t *FlowTracker) Seed(p *projector.Projector) {
	for _, j := range p.Jobs() {
		if j.Queue == "" || !holdsKeyAt(&j, p.Now()) {
			continue
		}
		if t.keys == nil {
			t.keys, t.named, t.holders = map[[2]string]events.Job{}, map[[2]string]bool{}, map[string]events.Job{}
		}
		k := [2]string{j.Queue, j.UniqueKey}
		t.keys[k], t.holders[j.ID] = j, j
	}
	for _, l := range p.Limits() {
		t.setLimit(l.Limit)
		if r := t.rates[[2]string{l.Queue, l.ConcurrencyKey}]; r != nil {
			r.tat = l.TAT
		}
	}
	for _, j := range p.Jobs() {
		if j.ConcurrencyKey != "" && j.State.Live() {
			t.start(&j)
		}
	}
	t.seedSchedules(p)
}

// setLimit takes a limit (set, changed or lifted).
func (t *FlowTracker) setLimit(l events.Limit) {
	k := [2]string{l.Queue, l.ConcurrencyKey}
	switch r := t.rates[k]; {
	case l.Rate == 0:
		if r != nil {
			r.stats.Limited = false
			delete(t.rates, k)
		}
	case r == nil || r.rate != l.Rate || r.period != l.PeriodMS*1e6:
		// Another rate: a full bucket (the same one keeps its bucket).
		if t.rates == nil {
			t.rates, t.rateStats = map[[2]string]*rateState{}, map[[2]string]*FlowRate{}
		}
		st := t.rateStats[k]
		if st == nil {
			st = &FlowRate{Queue: l.Queue, Key: l.ConcurrencyKey}
			t.rateStats[k] = st
		}
		r = &rateState{rate: l.Rate, period: l.PeriodMS * 1e6, stats: st}
		st.Limited, st.Rate, st.PeriodMS = true, l.Rate, l.PeriodMS
		st.Allowed = max(st.Allowed, l.Rate+uint64((r.period-1)/r.interval()))
		t.rates[k] = r
	}
	st := t.keyStats[k]
	if st == nil {
		if !l.HasMaxActive {
			return
		}
		if t.keyStats == nil {
			t.keyStats = map[[2]string]*FlowKey{}
		}
		st = &FlowKey{Queue: l.Queue, Key: l.ConcurrencyKey}
		t.keyStats[k] = st
	}
	st.Limited, st.Limit = l.HasMaxActive, l.MaxActive
	if l.HasMaxActive {
		st.MaxLimit = max(st.MaxLimit, l.MaxActive)
		st.MaxLive = max(st.MaxLive, t.keyLive[k])
	}
}

// start counts a new live lease of j, a job naming a concurrency key.
func (t *FlowTracker) start(j *events.Job) {
	if t.live == nil {
		t.live, t.keyLive = map[string]events.Job{}, map[[2]string]uint64{}
	}
	k := [2]string{j.Queue, j.ConcurrencyKey}
	t.live[j.ID] = *j
	t.keyLive[k]++
	if st := t.keyStats[k]; st != nil && st.Limited {
		st.MaxLive = max(st.MaxLive, t.keyLive[k])
	}
}

// rateStart checks an offer (d) against the rate limit of (queue, key),
// if any, and spends its token.
func (t *FlowTracker) rateStart(queue, key string, d *events.Decision) {
	r := t.rates[[2]string{queue, key}]
	if r == nil {
		return
	}
	T := r.interval()
	if tau := int64(r.rate-1) * T; r.tat > addNs(d.At, tau) {
		scope := "queue " + queue
		if key != "" {
			scope = "concurrency key " + key + " of queue " + queue
		}
		t.find(d, FlowRateExceeded, "offered at "+events.FormatTime(d.At)+" with no token of the rate limit of "+scope+" ("+u64(r.rate)+" per "+strconv.FormatInt(r.period/1e6, 10)+" ms) before "+events.FormatTime(r.tat-tau))
	}
	r.tat = addNs(max(r.tat, d.At), T)
	w := r.window[:0]
	for _, at := range r.window {
		if at > d.At-r.period {
			w = append(w, at)
		}
	}
	r.window = append(w, d.At)
	r.stats.Starts++
	r.stats.MaxInPeriod = max(r.stats.MaxInPeriod, uint64(len(r.window)))
}

// concurrency follows the live leases of d's job, which names a
// concurrency key, and checks an offer of it against the key's limit.
func (t *FlowTracker) concurrency(d *events.Decision) {
	j := &d.Job
	k := [2]string{j.Queue, j.ConcurrencyKey}
	prev, was := t.live[j.ID]
	if was && (!j.State.Live() || prev.Generation != j.Generation || d.Kind == events.KindRetired) {
		delete(t.live, j.ID)
		if t.keyLive[k]--; t.keyLive[k] == 0 {
			delete(t.keyLive, k)
		}
		was = false
	}
	if !j.State.Live() || was || d.Kind == events.KindRetired {
		return
	}
	st := t.keyStats[k]
	if st != nil && st.Limited && d.Kind == events.KindAssigned {
		st.Offers++
		if t.keyLive[k] >= st.Limit {
			t.find(d, FlowConcurrencyExceeded, "offered while "+u64(t.keyLive[k])+" jobs of concurrency key "+j.ConcurrencyKey+" of queue "+j.Queue+" were live, limit "+u64(st.Limit))
		}
		st.MaxActive = max(st.MaxActive, t.keyLive[k]+1)
	}
	t.start(j)
}

// Observe takes the next decision.
func (t *FlowTracker) Observe(d *events.Decision) {
	j := &d.Job
	if d.Schedule != nil {
		t.schedule(d)
	}
	if d.Kind == events.KindLimitSet && d.Limit != nil {
		t.setLimit(*d.Limit)
	}
	if d.Kind == events.KindAssigned && len(t.rates) != 0 {
		t.rateStart(j.Queue, "", d)
		if j.ConcurrencyKey != "" {
			t.rateStart(j.Queue, j.ConcurrencyKey, d)
		}
	}
	if j.ConcurrencyKey != "" && j.Queue != "" {
		t.concurrency(d)
	}
	if d.Reason == events.ReasonDuplicateUniqueKey || d.Reason == events.ReasonUniqueKeyHeld {
		t.flow.Duplicates++
		// The job named must hold the key, by the decisions before.
		h, ok := t.holders[d.DuplicateOf]
		if !ok || !holdsKeyAt(&h, d.At) {
			t.find(d, FlowUniqueNotHeld, "refused for a unique key that job "+d.DuplicateOf+" did not hold")
		}
	}
	if j.Queue == "" {
		return
	}
	if j.UniqueKey != "" {
		t.unique(d)
	}
	scheduled := j.RunAt != 0 || j.Delay != 0
	switch d.Kind {
	case events.KindSubmitted:
		if scheduled {
			t.flow.Scheduled++
		}
	case events.KindAssigned:
		if !scheduled {
			return
		}
		t.flow.Offers++
		switch {
		case j.RunAt > d.At:
			t.find(d, FlowOfferedEarly, "offered at "+events.FormatTime(d.At)+", before its run_at "+events.FormatTime(j.RunAt))
		case j.Delay != 0 && addNs(j.SubmittedAt, j.Delay) > d.At:
			t.find(d, FlowOfferedEarly, "offered at "+events.FormatTime(d.At)+", before its submit's time plus delay_ms "+events.FormatTime(addNs(j.SubmittedAt, j.Delay)))
		}
	}
}

// unique follows the holder of the unique key of d's job.
func (t *FlowTracker) unique(d *events.Decision) {
	j := d.Job
	k := [2]string{j.Queue, j.UniqueKey}
	if t.keys == nil {
		t.keys, t.named, t.holders = map[[2]string]events.Job{}, map[[2]string]bool{}, map[string]events.Job{}
	}
	if !t.named[k] {
		t.named[k] = true
		t.flow.UniqueKeys++
	}
	h, known := t.keys[k]
	switch {
	case d.Kind == events.KindRetired:
		if known && h.ID == j.ID {
			delete(t.keys, k)
			delete(t.holders, j.ID)
		}
	case !holdsKeyAt(&j, d.At):
		if known && h.ID == j.ID {
			t.keys[k], t.holders[j.ID] = j, j
		}
	default:
		if known && h.ID != j.ID && holdsKeyAt(&h, d.At) {
			t.find(d, FlowUniqueTwice, "job "+j.ID+" holds unique key "+j.UniqueKey+" of queue "+j.Queue+", which job "+h.ID+" holds")
			t.flow.MaxHolders = max(t.flow.MaxHolders, 2)
		}
		t.flow.MaxHolders = max(t.flow.MaxHolders, 1)
		if known && h.ID != j.ID {
			delete(t.holders, h.ID)
		}
		t.keys[k], t.holders[j.ID] = j, j
	}
}

// holdsKeyAt reports whether j holds its unique key at time at
// (PROTOCOL.md §26.2): it is QUEUED, OFFERED, ACTIVE or UNRESOLVED, an
// ownership conflict of it is pending, or its last lease ended less than
// unique_for_ms before.
func holdsKeyAt(j *events.Job, at int64) bool {
	if j.UniqueKey == "" {
		return false
	}
	switch j.State {
	case events.StateQueued, events.StateOffered, events.StateActive, events.StateUnresolved:
		return true
	}
	return j.Conflict || j.UniqueFor > 0 && addNs(j.EndedAt, j.UniqueFor) > at
}

func (t *FlowTracker) find(d *events.Decision, p FlowProblem, detail string) {
	job := d.Job.ID
	if job == events.NoJob {
		job = ""
	}
	t.flow.Findings.add(t.max, FlowFinding{Problem: p, Cause: d.Cause, N: d.N, Job: job, Detail: detail})
}

// Result is what the tracker found in the decisions observed so far.
func (t *FlowTracker) Result() Flow {
	f := t.flow
	f.Keys = nil
	for _, st := range t.keyStats {
		f.Keys = append(f.Keys, *st)
	}
	slices.SortFunc(f.Keys, func(a, b FlowKey) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	f.Rates = nil
	for _, st := range t.rateStats {
		f.Rates = append(f.Rates, *st)
	}
	slices.SortFunc(f.Rates, func(a, b FlowRate) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	f.Schedules = t.scheduleResult()
	return f
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// addNs is t + d, saturating (as the fold's times do).
func addNs(t, d int64) int64 {
	const maxTime = int64(1<<63 - 1)
	if t > maxTime-d {
		return maxTime
	}
	return t + d
}

// writeFlow writes the flow section of a summary: nothing for a log that
// used no flow rule and breached none.
func writeFlow(p func(string, ...any), f *Flow, list int) {
	if f.Scheduled == 0 && f.Offers == 0 && f.UniqueKeys == 0 && f.Duplicates == 0 && len(f.Keys) == 0 && len(f.Rates) == 0 && len(f.Schedules) == 0 && f.Findings.Count == 0 {
		return
	}
	p("%-12s %d\n", "flow:", f.Findings.Count)
	if f.Scheduled != 0 || f.Offers != 0 {
		p("  scheduled jobs: %d submitted, %d offers of them\n", f.Scheduled, f.Offers)
	}
	if f.UniqueKeys != 0 || f.Duplicates != 0 {
		p("  unique keys: %d named, %d submits refused as duplicates, at most %d holder(s) of a key at once (limit 1)\n", f.UniqueKeys, f.Duplicates, f.MaxHolders)
	}
	for _, k := range f.Keys {
		now := "lifted"
		if k.Limited {
			now = "limit " + u64(k.Limit)
		}
		p("  concurrency key %s/%s: %d offers under a limit, at most %d live just after one (highest limit %d), at most %d live at once; now %s\n",
			k.Queue, k.Key, k.Offers, k.MaxActive, k.MaxLimit, k.MaxLive, now)
	}
	for _, r := range f.Rates {
		scope := "queue " + r.Queue
		if r.Key != "" {
			scope = "concurrency key " + r.Queue + "/" + r.Key
		}
		now := "lifted"
		if r.Limited {
			now = "in force"
		}
		p("  rate limit of %s: %d per %d ms (%s), %d starts, at most %d in one period (its bucket allows %d)\n",
			scope, r.Rate, r.PeriodMS, now, r.Starts, r.MaxInPeriod, r.Allowed)
	}
	for _, s := range f.Schedules {
		span := "no due time handled"
		if s.First != "" {
			span = "due times " + s.First + " to " + s.Last + ", each once and in turn unless a finding says otherwise"
		}
		deleted := ""
		if s.Deleted {
			deleted = ", deleted"
		}
		p("  schedule %s (%q, queue %s%s): %d fired, %d fired and refused, %d recorded missed; %s\n",
			s.ID, s.Cron, s.Queue, deleted, s.Fires, s.Refused, s.Missed, span)
	}
	n := len(f.Findings.Items)
	if list >= 0 {
		n = min(n, list)
	}
	for _, x := range f.Findings.Items[:n] {
		p("  %d.%d %s: %s: %s\n", x.Cause, x.N, x.Job, x.Problem, x.Detail)
	}
	if f.Findings.Count > n {
		p("  ... %d more\n", f.Findings.Count-n)
	}
}
