package coordinator

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/tracing"
)

// Appends. The live loop hands the decisions it derived to an appender, in
// order; the appender publishes them in units and matches the stream's
// replies to them, so that appends are pipelined, never one round trip per
// decision.
//
// A unit is either one decision, published with Nats-Expected-Last-Sequence
// set to the sequence the decision stream must have before it, or an atomic
// batch (JetStream atomic batch publish, which the decision stream allows)
// of up to Config.AppendBatch decisions whose first message carries that
// expectation. The stream stores a batch all or nothing, and checks the
// expectation when it commits the batch, against its last sequence then;
// the messages of one connection reach the stream in order, so batches can
// be pipelined like single appends: each one's expectation counts the
// decisions of the batches before it. nats-server 2.15 refuses an expected
// last sequence on any message of a batch but the first (10164, which
// streams.Classify maps to ErrLostAuthority too), so only the first carries
// it: the fence covers the whole batch, since the batch is atomic. Every
// message keeps its deterministic Nats-Msg-Id; a batch holding a message id
// the stream has seen is refused whole (10201).
//
// When batches: with sync_interval always, the stream fsyncs every message
// it stores, one by one, but a committed batch once; on a replicated stream
// every append is a consensus round trip, a batch one proposal. But on a
// one-replica file stream, nats-server 2.15 stages each atomic batch in a
// file store of its own, created, fsynced and removed for every batch: some
// ten milliseconds on the machine BENCHMARKS.md describes, whatever the sync
// mode, during which the stream stores nothing else. With nats-server's
// default sync interval, batches therefore cost more than they save. The
// client cannot ask the server how it syncs, and timing single replies
// from the client is too noisy to tell (replies come in bursts, and the
// loop is busy folding between them), so the appender compares what each
// way of appending achieves:
//
//   - With no backlog (fewer than batchMin decisions waiting), decisions
//     leave at once, one by one, pipelined: the latency of an idle system.
//   - While a backlog lasts, it measures the decisions acknowledged per
//     second over epochs of epochLen, one way at a time: one by one (up to
//     maxSinglesFast in flight), or in batches (up to AppendBatches in
//     flight, plus maxSinglesSlow singles; the decisions derived meanwhile
//     queue up and leave together as the next batch). It keeps the way that
//     achieved more (one by one unless batches do a quarter better), and
//     tries the other again, for two epochs, every retrialEpochs epochs (the
//     first epoch after a change still carries the other way's appends, and
//     is not counted).
//
// On the machine BENCHMARKS.md describes, batches win by ten times with
// sync always; with sync interval they lose by half in the pipeline but win
// by a fifth for a queue's load, and the measurement is misled into them by
// SDK workers' bursts of renewals (a tenth of the SDK path's rate). A
// process that configures the server itself (tenure serve with its
// embedded server) knows when batches always win, and says so
// (Config.AppendMode): with sync always the appender batches at once and
// spends no epoch one by one (a second or two of a 1,000,000-lease expiry
// storm's decisions were fsynced one at a time).
//
// (orbit.go's jetstreamext.PublishMsgBatch speaks the same protocol, but
// waits for each batch's reply before returning, and by default for an
// acknowledgement of its first message too; the loop needs the replies as
// events of its select. The protocol is three headers.)

// Atomic batch headers (nats-server 2.15, ADR-50).
const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"
	headerExpectSeq   = "Nats-Expected-Last-Sequence"
	headerMsgID       = "Nats-Msg-Id"
	// maxAtomicBatch is nats-server's default limit on the messages of an
	// atomic batch.
	maxAtomicBatch = 1000
	// appendTimeout bounds the wait for a unit's reply.
	appendTimeout = 10 * time.Second
	// batchMin is how many decisions must wait before they may leave as a
	// batch.
	batchMin = 32
	// epochLen is how long the appender measures one way of appending;
	// retrialEpochs is how often it tries the other way again.
	epochLen      = 200 * time.Millisecond
	retrialEpochs = 50
	// Single appends in flight: appending one by one, and while batching.
	maxSinglesFast = 256
	maxSinglesSlow = 8
)

// unit is one append awaiting its reply.
type unit struct {
	id          uint64
	first, last uint64       // the decision sequences it carries
	cause       uint64       // the input that caused its last decision
	chain       events.Chain // the chain value of its last decision
	sent        time.Time
}

// appender publishes units on one connection and collects their replies.
//
// Its inbox is its own, drawn from crypto/rand (not nats.go's NUID-based
// inboxes, which another client can predict): any client can make the
// server send a PubAck or an API response to a subject it names, so an
// inbox that can be named can be aimed at. A reply that is not the stream's
// answer to the oldest unit (another stream's PubAck, an unknown unit) is
// dropped and counted (forged), never taken for an append's outcome.
type appender struct {
	conn    AppendConn
	stream  string
	inbox   string // reply subjects are inbox.<unit id>
	forged  uint64 // replies dropped: not the stream's answer to a unit in flight
	replies chan *nats.Msg
	batchID string // this appender's batch ids are batchID-<unit id>
	next    uint64
	units   []unit // awaiting their reply, oldest first
	batches int    // the units in flight that are batches
	hdr     nats.Header
	hdrVals [10][1]string // the values of hdr's keys, reused
	msg     nats.Msg      // the message being published, reused
	log     *slog.Logger
	// The way of appending under backlog, and its measurement.
	batching  bool
	epochFrom time.Time  // start of the current epoch (zero: none)
	epochN    uint64     // decisions acknowledged in it
	settling  bool       // the epoch after a change, not counted
	trial     bool       // the current way is on trial
	rate      [2]float64 // decisions/s achieved one by one, in batches (0: unknown)
	epochs    int        // epochs counted since the last trial
	now       func() time.Time
	fixed     bool // the way is given (Config.AppendMode), not measured
}

// maxSingles is how many single appends may be in flight.
func (a *appender) maxSingles() int {
	if a.batching {
		return maxSinglesSlow
	}
	return maxSinglesFast
}

// measure counts n decisions acknowledged; backlog says whether decisions
// are still waiting to be sent. An epoch counts only if the backlog lasted
// all through it.
func (a *appender) measure(n uint64, backlog bool) {
	if a.fixed {
		return
	}
	now := a.now()
	if !backlog {
		a.epochFrom = time.Time{}
		return
	}
	if a.epochFrom.IsZero() {
		a.epochFrom, a.epochN = now, 0
		return
	}
	a.epochN += n
	el := now.Sub(a.epochFrom)
	if el < epochLen {
		return
	}
	count := a.epochN
	a.epochFrom, a.epochN = now, 0
	if a.settling {
		a.settling = false
		return
	}
	way := 0
	if a.batching {
		way = 1
	}
	a.rate[way] = float64(count) / el.Seconds()
	a.epochs++
	was := a.batching
	switch {
	case a.trial: // the other way has had its epoch: keep the better
		a.trial, a.epochs = false, 0
		a.batching = a.rate[1] > 1.25*a.rate[0]
	case a.rate[1-way] == 0 || a.epochs >= retrialEpochs:
		a.trial, a.epochs = true, 0
		a.batching = !a.batching
	}
	if a.batching != was {
		a.settling = true
		a.log.Debug("append mode", "batching", a.batching, "one_by_one_per_s", int(a.rate[0]), "batches_per_s", int(a.rate[1]))
	}
}

// newAppender returns the appender of stream on be's appends connection,
// appending the way mode says (measuring the ways under AppendMeasure),
// timed by clk (nil: the real clock).
func newAppender(be Backend, stream string, maxUnits int, mode AppendMode, log *slog.Logger, clk clock.Clock) (*appender, error) {
	var r [8]byte
	_, _ = rand.Read(r[:]) // never fails
	a := &appender{
		stream:   stream,
		replies:  make(chan *nats.Msg, maxUnits+16),
		batchID:  "tb" + hex.EncodeToString(r[:]),
		hdr:      nats.Header{},
		log:      log,
		now:      clock.OrReal(clk).Now,
		fixed:    mode != AppendMeasure,
		batching: mode == AppendBatched,
	}
	var err error
	if a.conn, err = be.Appends(a.replies); err != nil {
		return nil, err
	}
	a.inbox = a.conn.Inbox()
	return a, nil
}

func (a *appender) close() {
	if a != nil && a.conn != nil {
		a.conn.Close()
	}
}

// send publishes ps, whose sequences are after..after+len(ps), as one unit:
// a single fenced append for one decision, an atomic batch for more.
func (a *appender) send(ps []pending, after uint64) error {
	a.next++
	id := a.next
	reply := a.inbox + "." + strconv.FormatUint(id, 10)
	batch := ""
	if len(ps) > 1 {
		batch = a.batchID + "-" + strconv.FormatUint(id, 10)
	}
	// The header map, its value slices and the message are reused from one
	// decision to the next: PublishMsg encodes them into the connection's
	// buffer before it returns.
	h, v, msg := a.hdr, &a.hdrVals, &a.msg
	for i := range ps {
		p := &ps[i]
		clear(h)
		set := func(k int, key, val string) {
			v[k][0] = val
			h[key] = v[k][:1:1]
		}
		set(0, events.HeaderCause, strconv.FormatUint(p.cause, 10))
		set(1, events.HeaderIndex, strconv.Itoa(int(p.n))+"/"+strconv.Itoa(int(p.of)))
		set(2, headerMsgID, events.DecisionMsgID(p.cause, p.n))
		set(7, events.HeaderChain, p.chain.String())
		if p.src > 0 {
			set(8, events.HeaderSourceSeq, strconv.FormatUint(p.src, 10))
		}
		if p.trace != "" {
			set(9, tracing.HeaderTraceParent, p.trace)
		}
		if i == 0 {
			set(3, headerExpectSeq, strconv.FormatUint(after, 10))
		}
		*msg = nats.Msg{Subject: p.subject, Data: p.body, Header: h}
		if batch != "" {
			set(4, headerBatchID, batch)
			set(5, headerBatchSeq, strconv.Itoa(i+1))
		}
		if i == len(ps)-1 {
			msg.Reply = reply
			if batch != "" {
				set(6, headerBatchCommit, "1")
			}
		}
		err := a.conn.Publish(msg)
		*msg = nats.Msg{}
		if err != nil {
			return fmt.Errorf("coordinator: append decision %d: %w", after+uint64(i)+1, err)
		}
	}
	if batch != "" {
		a.batches++
	}
	last := &ps[len(ps)-1]
	a.units = append(a.units, unit{id: id, first: after + 1, last: after + uint64(len(ps)), cause: last.cause, chain: last.chain, sent: a.now()})
	return nil
}

// pubReply is the stream's reply to a unit: a PubAck (with batch and count
// for a batch) or an error.
type pubReply struct {
	Stream    string              `json:"stream"`
	Seq       uint64              `json:"seq"`
	Duplicate bool                `json:"duplicate"`
	Batch     string              `json:"batch"`
	Count     uint64              `json:"count"`
	Error     *jetstream.APIError `json:"error"`
}

// parsePubAck reads the usual PubAck, {"stream":"S","seq":N} or
// {"stream":"S","seq":N,"batch":"B","count":C}, without reflection; it
// reports false for anything else (errors, duplicates, other fields), which
// encoding/json then reads.
func parsePubAck(b []byte, r *pubReply) bool {
	const pre = `{"stream":"`
	if len(b) < len(pre) || string(b[:len(pre)]) != pre {
		return false
	}
	b = b[len(pre):]
	i := 0
	for i < len(b) && b[i] != '"' && b[i] != '\\' {
		i++
	}
	if i == len(b) || b[i] != '"' {
		return false
	}
	r.Stream = string(b[:i])
	b = b[i+1:]
	num := func(key string) (uint64, bool) {
		if len(b) < len(key) || string(b[:len(key)]) != key {
			return 0, false
		}
		b = b[len(key):]
		j, v := 0, uint64(0)
		for j < len(b) && j < 19 && b[j] >= '0' && b[j] <= '9' {
			v = v*10 + uint64(b[j]-'0')
			j++
		}
		if j == 0 || j == 19 {
			return 0, false
		}
		b = b[j:]
		return v, true
	}
	var ok bool
	if r.Seq, ok = num(`,"seq":`); !ok {
		return false
	}
	if const_ := `,"batch":"`; len(b) > len(const_) && string(b[:len(const_)]) == const_ {
		b = b[len(const_):]
		j := 0
		for j < len(b) && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j == len(b) || b[j] != '"' {
			return false
		}
		r.Batch = string(b[:j])
		b = b[j+1:]
		if r.Count, ok = num(`,"count":`); !ok {
			return false
		}
	}
	return string(b) == "}"
}

// errForged is reply's answer to a message that is not the stream's reply
// to a unit in flight: the caller drops it (appender.forged counts it) and
// goes on waiting for the real one, which a lost reply turns into an
// overdue unit (or, once the stream answers a later unit, an error).
var errForged = errors.New("coordinator: not a reply to an append in flight")

// reply matches one reply to its unit, which must be the oldest in flight
// (the stream answers in order), and returns it. An error means the append
// was refused or its outcome is unknown: the coordinator must resynchronise
// (ErrLostAuthority if another writer moved the stream on); errForged means
// m is no reply of the stream's (dropped, counted).
//
// backlog says whether decisions are waiting to be sent (see measure).
func (a *appender) reply(m *nats.Msg, backlog bool) (unit, error) {
	idStr := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	id, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil || len(a.units) == 0 || id < a.units[0].id || id > a.units[len(a.units)-1].id {
		a.forged++
		return unit{}, fmt.Errorf("%w: %s (unit %s; oldest in flight %d)", errForged, m.Subject, idStr, a.oldest())
	}
	var r pubReply
	noResponders := len(m.Data) == 0 && m.Header.Get("Status") == "503"
	if !noResponders && !parsePubAck(m.Data, &r) {
		if err := json.Unmarshal(m.Data, &r); err != nil {
			a.forged++
			return unit{}, fmt.Errorf("%w: %s: not a PubAck: %q", errForged, m.Subject, m.Data)
		}
	}
	if !noResponders && r.Stream != a.stream {
		// Every PubAck and publish error of a stream names it: this one
		// answers a publish to another stream, aimed at this inbox.
		a.forged++
		return unit{}, fmt.Errorf("%w: %s: a reply of stream %q", errForged, m.Subject, r.Stream)
	}
	if id != a.units[0].id {
		// The stream's answer to a later unit (the inbox is this
		// appender's own: no other account can name it): the oldest's
		// reply was lost (a stream leader change, a reconnect). Waiting
		// for it would stall every append until it is overdue;
		// resynchronising finds out from the stream what was stored.
		u := a.units[0]
		return u, fmt.Errorf("coordinator: append decisions %d to %d: their reply was lost (the stream answered unit %d first): %w",
			u.first, u.last, id, streams.ErrTransient)
	}
	u := a.units[0]
	a.units = a.units[1:] // a queue: send's appends reallocate once its capacity is used up (compacting it was 2% of the CPU)
	if u.last > u.first {
		a.batches--
	}
	a.measure(u.last-u.first+1, backlog)
	fail := func(err error) (unit, error) {
		return u, fmt.Errorf("coordinator: append decisions %d to %d: %w", u.first, u.last, err)
	}
	if noResponders {
		return fail(streams.Classify(nats.ErrNoResponders))
	}
	if r.Error != nil {
		return fail(streams.Classify(r.Error))
	}
	if r.Seq != u.last || r.Duplicate || u.last > u.first && r.Count != u.last-u.first+1 {
		// Stored elsewhere than expected, or deduplicated against a message
		// someone else stored: whoever it is, this writer is not alone.
		return fail(fmt.Errorf("%w: reply %s", streams.ErrLostAuthority, m.Data))
	}
	return u, nil
}

// oldest is the id of the oldest unit in flight (0: none).
func (a *appender) oldest() uint64 {
	if len(a.units) == 0 {
		return 0
	}
	return a.units[0].id
}

// privateInbox is a reply subject prefix of nc's that nobody else can
// name: the connection's inbox prefix (so that the server permissions of
// its user allow it), then 128 bits of crypto/rand.
func privateInbox(nc *nats.Conn) string {
	prefix := nc.Opts.InboxPrefix
	if prefix == "" {
		prefix = nats.InboxPrefix[:len(nats.InboxPrefix)-1] // "_INBOX"
	}
	var r [16]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand)
	return prefix + "." + hex.EncodeToString(r[:])
}

// overdue reports whether the oldest unit has waited for its reply too long.
func (a *appender) overdue() error {
	if len(a.units) > 0 && a.now().Sub(a.units[0].sent) > appendTimeout {
		u := a.units[0]
		return fmt.Errorf("coordinator: append decisions %d to %d: no reply after %v: %w", u.first, u.last, appendTimeout, streams.ErrTransient)
	}
	return nil
}
