package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/archive"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/snapshot"
	"github.com/maknow/tenure/streams"
)

// Names the coordinator stores its snapshot under (streams.SnapshotObject
// and its headers).
const (
	SnapshotObject         = streams.SnapshotObject
	HeaderSnapshotInput    = streams.HeaderSnapshotInput
	HeaderSnapshotDecision = streams.HeaderSnapshotDecision
	HeaderSnapshotAnchor   = streams.HeaderSnapshotAnchor
	HeaderSnapshotChain    = streams.HeaderSnapshotChain
	HeaderSnapshotHash     = streams.HeaderSnapshotHash
)

// DefaultStallTimeout is the default of Config.StallTimeout.
const DefaultStallTimeout = 30 * time.Second

// Config says what Run audits.
type Config struct {
	// JS is a JetStream context on the server or cluster holding the log.
	JS jetstream.JetStream
	// Topology names the streams and buckets (streams.Topology{} by default).
	// In a partitioned deployment (streams.Discover) each partition is
	// audited on its own: Topology.Partition names the one to audit.
	Topology streams.Topology
	// From, when above 1, starts the audit from the stored snapshot instead
	// of the first input, once the snapshot checks out (against its anchor
	// in the decision stream, as a coordinator checks it, and its
	// position), provided it covers inputs before From (the audit then
	// starts right after it). Otherwise, or if there is no usable
	// snapshot, the audit replays from the first input and says why in
	// Report.Snapshot (a snapshot that does not check out is a finding).
	From uint64
	// Archive, when set, is an archive directory (package archive) holding
	// the log's sealed segments from input 1 on: the audit replays them,
	// checking every file against its manifest as it reads it, and then
	// the streams from right after the last segment, so that it checks
	// every decision from the first input on, the decision chain across
	// each boundary included. Without it, an audit of streams whose first
	// segments were removed starts from the stored snapshot (From), and
	// fails if that is not usable.
	Archive string
	// Options say what to collect besides the verdicts.
	Options
	// StallTimeout ends the audit with an error when a stream delivers
	// nothing for that long before its end (default DefaultStallTimeout).
	StallTimeout time.Duration
	// Logger receives debug information about the readers (nil: none).
	Logger *slog.Logger
}

// Run audits the log: it opens the topology read-only (streams.Open), reads
// the stored snapshot, takes the last sequences of the decision stream and
// then of the input stream (so that every decision it reads has its cause
// within the inputs it reads), checks the snapshot, reads the checkpoint
// inputs to be replayed (Start.Claimed), reads both streams concurrently
// and hands them to Check. It never writes to the streams or buckets: the
// only things it creates on the server are ephemeral consumers (in memory,
// removed when idle). A snapshot replaced by a coordinator while the audit
// reads it is read again (package snapshot); one replaced every time, or
// that could not be read, is no error: the audit then replays from the
// first input, says so in Report.Snapshot.Note and logs it (Warn). An
// error means the audit could
// not be carried out; a log that is not reproduced is a Report whose OK is
// false.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if len(cfg.Witnesses) > 0 && cfg.From > 1 {
		return nil, errors.New("audit: witnesses (receipts, chain heads) are checked against the whole log: audit from the first input")
	}
	t0 := time.Now()
	if cfg.JS == nil {
		return nil, errors.New("audit: no JetStream context")
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var segs []archive.Segment
	if cfg.Archive != "" {
		if cfg.From > 1 {
			return nil, errors.New("audit: an audit with the archive replays from the first input: give the archive or a start, not both")
		}
		var err error
		if segs, err = archive.Segments(cfg.Archive, cfg.Topology); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		if len(segs) == 0 {
			return nil, fmt.Errorf("audit: no segments of %s in %s", cfg.Topology.InputStream(), cfg.Archive)
		}
	}
	h, err := streams.Open(ctx, cfg.JS, cfg.Topology)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	lockdown := h.Verify(cfg.Topology)
	// The snapshot first: a coordinator stores one only once the decisions
	// it covers are stored, so the stream ends taken next cover it.
	snap, err := readSnapshot(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	outInfo, err := h.Out.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: decision stream info: %w", streams.Classify(err))
	}
	inInfo, err := h.In.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: input stream info: %w", streams.Classify(err))
	}
	st := Start{InputEnd: inInfo.State.LastSeq, DecisionEnd: outInfo.State.LastSeq, Partition: cfg.Topology.Partition}
	from := cfg.From
	// Streams whose first segments were archived and removed start later
	// (a segment's last input and decision stay: FirstSeq is one of them).
	inFirst, outFirst := inInfo.State.FirstSeq, outInfo.State.FirstSeq
	trimmed := inFirst > 1 || outFirst > 1
	var archIn, archOut uint64 // the archive's last input and decision
	switch {
	case len(segs) > 0:
		m := segs[len(segs)-1].Manifest
		archIn, archOut = m.Inputs.Last, m.Decisions.Last
		if inFirst > archIn+1 || outFirst > archOut+1 || st.InputEnd < archIn || st.DecisionEnd < archOut {
			return nil, fmt.Errorf("audit: the archive ends at input %d, decision %d; the streams hold inputs %d to %d, decisions %d to %d: segments are missing from %s",
				archIn, archOut, inFirst, st.InputEnd, outFirst, st.DecisionEnd, cfg.Archive)
		}
		if err := archive.CheckTail(ctx, archive.Config{JS: cfg.JS, Topology: cfg.Topology, Root: cfg.Archive, StallTimeout: cfg.StallTimeout}, segs[len(segs)-1]); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
	case trimmed:
		if len(cfg.Witnesses) > 0 {
			return nil, fmt.Errorf("audit: the streams start at input %d (segments were archived and removed): witnesses need the whole log, give the archive", inFirst)
		}
		from = math.MaxUint64 // the stored snapshot, or nothing
	}
	if err := checkSnapshot(ctx, h, snap, from, &st); err != nil {
		return nil, err
	}
	if trimmed && len(segs) == 0 && st.Projector == nil {
		why := "there is none"
		if sc := st.Snapshot; sc != nil {
			why = strings.TrimSpace(sc.Problem + " " + sc.Note)
		}
		return nil, fmt.Errorf("audit: the streams start at input %d, decision %d (segments were archived and removed): audit with the archive (--archive), or from a usable stored snapshot (%s)", inFirst, outFirst, why)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inFrom, outFrom := uint64(1), uint64(1)
	if st.Projector != nil {
		inFrom, outFrom = st.Projector.LastSeq()+1, st.LastDecision+1
	}
	// The checkpoint claims first: each comes after the input it claims
	// the state hash of, which the fold must hash when it gets there.
	if len(segs) > 0 {
		// The archived inputs first, then the streams after them.
		if st.Claimed, err = archivedClaims(segs, cfg.Topology.Partition); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		inFrom, outFrom = archIn+1, archOut+1
	}
	claimed, err := readClaims(ctx, cfg, h, inFrom, st.InputEnd)
	if err != nil {
		return nil, err
	}
	st.Claimed = append(st.Claimed, claimed...)
	ins, err := startReader(ctx, cfg, cfg.Topology.InputStream(), "", inFrom, st.InputEnd, false)
	if err != nil {
		return nil, err
	}
	defer ins.stop()
	outs, err := startReader(ctx, cfg, cfg.Topology.DecisionStream(), "", outFrom, st.DecisionEnd, true)
	if err != nil {
		return nil, err
	}
	defer outs.stop()

	ir := &archivedInputs{r: inputReader{ins}}
	dr := &archivedDecisions{r: decisionReader{outs}}
	if len(segs) > 0 {
		ir.a, dr.a = archive.Inputs(segs), archive.Decisions(segs)
		defer ir.a.Close()
		defer dr.a.Close()
	}
	rep := Check(ir, dr, st, cfg.Options)
	if err := errors.Join(ir.err, dr.err, ins.failure(), outs.failure()); err != nil {
		return nil, err
	}
	if len(segs) > 0 {
		rep.Archive = &ArchiveCheck{Dir: cfg.Archive, Segments: len(segs), Inputs: archIn, Decisions: archOut}
	}
	if lockdown != nil {
		rep.Lockdown = lockdown.Error()
	}
	rep.Elapsed = time.Since(t0)
	return rep, nil
}

// storedSnapshot is the stored snapshot as read (info nil: none is
// stored): what the reader read of it (snap) and its findings (the
// reader's errors ErrUnanchored, ErrMismatch, ErrFormat). note says why it
// cannot be used although nothing is known to be wrong with it (replaced
// while it was read, every time the reader tried; unreadable for now);
// problem is a finding that kept it from being read (ErrCorrupt: its
// chunks do not match its metadata).
type storedSnapshot struct {
	info          *jetstream.ObjectInfo
	snap          *snapshot.Snapshot
	findings      error
	note, problem string
}

// readSnapshot reads the stored snapshot (snapshot.Reader.Inspect: its
// bytes whatever its headers say, then every check a coordinator makes).
// The snapshot is optional to an audit: one replaced while it is read, or
// that cannot be read now, is not used (the audit replays from the first
// input), which the result notes and the log says; one whose bytes do not
// match its metadata is a finding. An error means ctx ended.
func readSnapshot(ctx context.Context, cfg Config, h *streams.Handles) (storedSnapshot, error) {
	rd := snapshot.Reader{Objects: snapshot.JetStream(cfg.Topology, h), Decisions: h.Out, Partition: cfg.Topology.Partition}
	s, err := rd.Inspect(ctx)
	var se *snapshot.Error
	switch {
	case errors.Is(err, snapshot.ErrNone):
		return storedSnapshot{}, nil
	case ctx.Err() != nil:
		return storedSnapshot{}, fmt.Errorf("audit: read snapshot: %w", ctx.Err())
	case errors.Is(err, snapshot.ErrCorrupt) && errors.As(err, &se):
		return storedSnapshot{info: s.Info, problem: se.Reason}, nil
	case errors.Is(err, snapshot.ErrUnreadable), errors.Is(err, snapshot.ErrReplaced):
		info := &jetstream.ObjectInfo{}
		if s != nil {
			info = s.Info
		}
		cfg.Logger.Warn("audit: not using the stored snapshot: replaying from the first input", "err", err,
			"snapshot_input_seq", info.Headers.Get(HeaderSnapshotInput))
		return storedSnapshot{info: info, note: err.Error()}, nil
	}
	return storedSnapshot{info: s.Info, snap: s, findings: err}, nil
}

// finding returns the *snapshot.Error of kind among the findings err (one,
// or several joined), nil if there is none.
func finding(err error, kind error) *snapshot.Error {
	var se *snapshot.Error
	if errors.As(err, &se) && se.Kind == kind {
		return se
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok && se != err {
		for _, e := range j.Unwrap() {
			if f := finding(e, kind); f != nil {
				return f
			}
		}
	}
	return nil
}

// checkSnapshot checks the snapshot readSnapshot read; when it checks out
// and from asks for it, st starts from it. It checks it as a coordinator
// does before restoring it (streams.SnapshotAnchor: the decision at its
// anchor claims exactly its input and state hash, and its bytes hash to
// it), and more: it restores, it holds the input its headers say, and its
// decision sequence is the last decision of that input. Only a snapshot
// that checks out is used; one that does not is a finding (not an error)
// and the audit replays from the first input, comparing the fold with it
// when it gets there. One without an anchor (stored by an older Tenure) is
// not used either, but only noted.
func checkSnapshot(ctx context.Context, h *streams.Handles, snap storedSnapshot, from uint64, st *Start) error {
	if snap.info == nil {
		if from > 1 {
			st.Snapshot = &SnapshotCheck{Note: "no stored snapshot: replaying from the first input"}
		}
		return nil
	}
	info := snap.info
	anchor, anchorErr := streams.ParseSnapshotHeaders(info.Headers)
	if snap.note != "" || snap.problem != "" {
		sc := &SnapshotCheck{Size: int(info.Size), Problem: snap.problem, Note: snap.note + ": not compared with the fold"}
		if from > 1 {
			sc.Note = snap.note + ": replaying from the first input"
		}
		if snap.note == "" {
			sc.Note = ""
		}
		sc.InputSeq, _ = strconv.ParseUint(info.Headers.Get(HeaderSnapshotInput), 10, 64)
		sc.DecisionSeq, _ = strconv.ParseUint(info.Headers.Get(HeaderSnapshotDecision), 10, 64)
		if anchorErr == nil {
			sc.AnchorSeq, sc.StateHash = anchor.AnchorSeq, anchor.Hash
		}
		st.Snapshot = sc
		return nil
	}
	data := snap.snap.Data
	sc := &SnapshotCheck{Size: len(data)}
	st.Snapshot = sc
	inSeq, err1 := strconv.ParseUint(info.Headers.Get(HeaderSnapshotInput), 10, 64)
	decSeq, err2 := strconv.ParseUint(info.Headers.Get(HeaderSnapshotDecision), 10, 64)
	sc.InputSeq, sc.DecisionSeq = inSeq, decSeq
	if err1 != nil || err2 != nil {
		sc.Problem = fmt.Sprintf("bad %s / %s headers", HeaderSnapshotInput, HeaderSnapshotDecision)
		return nil
	}
	p := snap.snap.State
	if p == nil {
		sc.Problem = "it does not restore"
		if f := finding(snap.findings, snapshot.ErrFormat); f != nil && f.Err != nil {
			sc.Problem = f.Err.Error()
		}
		return nil
	}
	last, problem, err := checkSnapshotPosition(ctx, h, p, inSeq, decSeq, st)
	if err != nil {
		return err
	}
	if problem != "" {
		sc.Problem = problem
		return nil
	}
	// Its anchor in the decision stream, its chain value, and its bytes
	// against it, as the reader checked them.
	var ae *streams.AnchorError
	switch mismatch := finding(snap.findings, snapshot.ErrMismatch); {
	case errors.Is(anchorErr, streams.ErrSnapshotUnanchored):
		sc.addNote(anchorErr.Error() + ": a coordinator does not restore it")
	case mismatch != nil && errors.As(mismatch, &ae):
		sc.Problem = ae.Error()
		if anchorErr == nil {
			sc.AnchorSeq, sc.StateHash = anchor.AnchorSeq, anchor.Hash
		}
	case mismatch != nil:
		sc.Problem = mismatch.Reason
	case snap.findings != nil:
		sc.Problem = snap.findings.Error()
	default:
		sc.AnchorSeq, sc.StateHash = anchor.AnchorSeq, anchor.Hash
		sc.Anchored = true
	}
	switch {
	case from <= 1:
		// Full replay: Check compares the fold with the snapshot's bytes.
		st.SnapshotData = data
	case !sc.Anchored:
		sc.addNote("not used: replaying from the first input")
		st.SnapshotData = data
	case inSeq >= from:
		sc.addNote(fmt.Sprintf("the snapshot covers input %d, not before %d: replaying from the first input", inSeq, from))
		st.SnapshotData = data
	default:
		sc.Used = true
		st.Projector, st.Base = p, data
		st.LastDecision, st.Last = decSeq, last
		st.Chain = anchor.Chain
	}
	return nil
}

// readClaims reads the checkpoint inputs from input from to input end
// (PROTOCOL.md §6.16) and returns the inputs whose state they claim a hash
// of, for Check to hash when the fold gets there (Start.Claimed). It reads
// only those inputs: one look-up of the first (none: nothing to read),
// then a consumer filtered to the checkpoint subjects of the partition
// from it. A checkpoint that does not decode, or names an input not before
// it, is left out: the fold rejects it, and no claim is recorded.
func readClaims(ctx context.Context, cfg Config, h *streams.Handles, from, end uint64) ([]uint64, error) {
	if from > end {
		return nil, nil
	}
	part := cfg.Topology.Partition
	filter := part.InputSubject(events.RoleCoord, "*", events.NoJob, events.VerbCheckpoint)
	first, err := h.In.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: look up the first checkpoint input: %w", streams.Classify(err))
	}
	if first.Sequence > end {
		return nil, nil
	}
	r, err := startReader(ctx, cfg, cfg.Topology.InputStream(), filter, first.Sequence, end, false)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	var claimed []uint64
	var in events.Input
	for {
		m, ok := r.next()
		if !ok {
			break
		}
		subject, ok := part.StripInput(m.subject)
		if !ok || events.DecodeInput(subject, m.data, &in) != nil || in.Verb != events.VerbCheckpoint || in.CheckpointSeq >= m.seq {
			continue
		}
		claimed = append(claimed, in.CheckpointSeq)
	}
	if err := r.failure(); err != nil {
		return nil, err
	}
	cfg.Logger.Debug("audit: checkpoint claims read ahead", "claims", len(claimed), "from", first.Sequence, "to", end)
	return claimed, nil
}

// checkSnapshotPosition checks that the snapshot restored into p covers
// input inSeq and that decision decSeq is the last decision of that input,
// stored at the snapshot's time, and the next decision (if any) starts a
// later input. It returns the key of decision decSeq.
func checkSnapshotPosition(ctx context.Context, h *streams.Handles, p *projector.Projector, inSeq, decSeq uint64, st *Start) (Key, string, error) {
	switch {
	case p.LastSeq() != inSeq:
		return Key{}, fmt.Sprintf("the snapshot holds input %d, its %s header says %d", p.LastSeq(), HeaderSnapshotInput, inSeq), nil
	case inSeq == 0 || inSeq > st.InputEnd:
		return Key{}, fmt.Sprintf("input %d is not in the input stream (last %d)", inSeq, st.InputEnd), nil
	case decSeq == 0 || decSeq > st.DecisionEnd:
		return Key{}, fmt.Sprintf("decision %d is not in the decision stream (last %d)", decSeq, st.DecisionEnd), nil
	}
	get := func(seq uint64) (StoredDecision, error) {
		m, err := h.Out.GetMsg(ctx, seq)
		if err != nil {
			return StoredDecision{}, err
		}
		return StoredDecision{Seq: seq, Subject: m.Subject, Body: m.Data,
			Cause: m.Header.Get(events.HeaderCause), Index: m.Header.Get(events.HeaderIndex), Chain: m.Header.Get(events.HeaderChain)}, nil
	}
	s, err := get(decSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Key{}, fmt.Sprintf("decision %d is not in the decision stream", decSeq), nil
	}
	if err != nil {
		return Key{}, "", fmt.Errorf("audit: read decision %d: %w", decSeq, streams.Classify(err))
	}
	k := parseKey(&s)
	if !k.hdrOK || k.key.Cause != inSeq || k.key.N+1 != k.of {
		return Key{}, fmt.Sprintf("decision %d (%s %s, %s %s) is not the last decision of input %d",
			decSeq, events.HeaderCause, s.Cause, events.HeaderIndex, s.Index, inSeq), nil
	}
	d, err := events.DecodeDecision(s.Body)
	if err != nil || d.Cause != inSeq || d.At != p.Now() {
		return Key{}, fmt.Sprintf("decision %d does not carry the snapshot's input %d and time %s", decSeq, inSeq, events.FormatTime(p.Now())), nil
	}
	if decSeq < st.DecisionEnd {
		s, err := get(decSeq + 1)
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return Key{}, "", fmt.Errorf("audit: read decision %d: %w", decSeq+1, streams.Classify(err))
		}
		if err == nil {
			if nk := parseKey(&s); nk.hdrOK && (nk.key.Cause <= inSeq || nk.key.N != 0) {
				return Key{}, fmt.Sprintf("decision %d after the snapshot's position is %s, not the first decision of a later input", decSeq+1, nk.key), nil
			}
		}
	}
	return k.key, "", nil
}

// record is one message as read from a stream.
type record struct {
	seq          uint64
	time         int64
	subject      string
	data         []byte
	cause, index string
	chain        string
	source       string // an input's Nats-Stream-Source
}

const (
	batchSize    = 512
	batchesAhead = 32
	pullAhead    = 8192
)

// reader reads one stream in order, from a start sequence to an end
// sequence, through a follow.Follower whose handler hands batches of
// records over a channel; the batches' memory is recycled.
type reader struct {
	ctx     context.Context
	cancel  context.CancelFunc
	stream  string
	end     uint64
	stall   time.Duration
	ch      chan []record
	free    chan []record
	f       *follow.Follower
	cur     []record
	i       int
	batch   []record // being filled by the handler (one call at a time)
	done    bool     // the handler saw the last record
	mu      sync.Mutex
	err     error
	lastErr error // last error the consumer reported (it recovers by itself)
}

// startReader starts reading stream from sequence from to end, only the
// subjects matching filter when it is not "".
func startReader(ctx context.Context, cfg Config, stream, filter string, from, end uint64, headers bool) (*reader, error) {
	r := &reader{stream: stream, end: end, stall: cfg.StallTimeout,
		ch: make(chan []record, batchesAhead), free: make(chan []record, batchesAhead+2)}
	r.ctx, r.cancel = context.WithCancel(ctx)
	if from > end {
		close(r.ch)
		return r, nil
	}
	r.batch = make([]record, 0, batchSize)
	log := cfg.Logger
	// A follow.Follower, as the coordinator's readers: a short heartbeat
	// notices a consumer lost with its server (a cluster node killed)
	// within seconds, and a lost consumer is replaced with short, retried
	// requests (an ordered consumer stalls ~10 s when the node was the
	// JetStream meta leader).
	var filters []string
	if filter != "" {
		filters = []string{filter}
	}
	r.f = follow.Start(r.ctx, cfg.JS, follow.Config{Stream: stream, StartSeq: from, Filters: filters, PullAhead: pullAhead,
		OnError: func(err error) {
			log.Debug("audit: consumer", "stream", stream, "err", err)
			r.mu.Lock()
			r.lastErr = err
			r.mu.Unlock()
		}}, func(ctx context.Context, m follow.Msg) { r.handle(ctx, m, headers) })
	select {
	case <-r.f.Ready():
		return r, nil
	case <-ctx.Done():
		r.stop()
		return nil, fmt.Errorf("audit: read %s: %w", stream, ctx.Err())
	case <-time.After(r.stall):
		err := r.f.Err()
		r.stop()
		return nil, fmt.Errorf("audit: read %s: no consumer after %v: %w", stream, r.stall, streams.Classify(err))
	}
}

// handle runs on the follower's goroutine, one message at a time.
func (r *reader) handle(ctx context.Context, m follow.Msg, headers bool) {
	if r.done {
		return
	}
	rec := record{seq: m.Seq, time: m.Time, subject: m.Subject, data: m.Data}
	if m.Header != nil {
		rec.source = m.Header.Get(streams.HeaderStreamSource)
	}
	if headers && m.Header != nil {
		rec.cause, rec.index = m.Header.Get(events.HeaderCause), m.Header.Get(events.HeaderIndex)
		rec.chain = m.Header.Get(events.HeaderChain)
	}
	last := rec.seq >= r.end || m.Pending == 0
	if rec.seq <= r.end {
		r.batch = append(r.batch, rec)
	}
	if len(r.batch) < batchSize && !last {
		return
	}
	select {
	case r.ch <- r.batch:
	case <-ctx.Done():
		r.done = true
		return
	}
	if last {
		r.done = true
		close(r.ch)
		return
	}
	select {
	case b := <-r.free:
		r.batch = b[:0]
	default:
		r.batch = make([]record, 0, batchSize)
	}
}

func (r *reader) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

func (r *reader) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// next returns the next record; false at the end, on cancellation or
// after StallTimeout without a message (failure then says why).
func (r *reader) next() (*record, bool) {
	if r.i < len(r.cur) {
		r.i++
		return &r.cur[r.i-1], true
	}
	if r.cur != nil {
		// Check keeps references to the bytes, never to the records.
		clear(r.cur)
		select {
		case r.free <- r.cur:
		default:
		}
		r.cur = nil
	}
	var timer *time.Timer
	for {
		select {
		case b, ok := <-r.ch:
			if timer != nil {
				timer.Stop()
			}
			if !ok {
				return nil, false
			}
			if len(b) == 0 {
				continue
			}
			r.cur, r.i = b, 1
			return &r.cur[0], true
		case <-r.ctx.Done():
			r.fail(fmt.Errorf("audit: read %s: %w", r.stream, r.ctx.Err()))
			return nil, false
		default:
		}
		if timer == nil {
			timer = time.NewTimer(r.stall)
			defer timer.Stop()
		}
		select {
		case b, ok := <-r.ch:
			if !ok {
				return nil, false
			}
			if len(b) == 0 {
				continue
			}
			r.cur, r.i = b, 1
			return &r.cur[0], true
		case <-r.ctx.Done():
			r.fail(fmt.Errorf("audit: read %s: %w", r.stream, r.ctx.Err()))
			return nil, false
		case <-timer.C:
			r.mu.Lock()
			last := r.lastErr
			r.mu.Unlock()
			r.fail(fmt.Errorf("audit: read %s: nothing received for %v before sequence %d (last consumer error: %v)", r.stream, r.stall, r.end, last))
			return nil, false
		}
	}
}

// stop ends the reader; a handler blocked on a full channel returns.
func (r *reader) stop() {
	r.cancel()
	r.f.Stop() // nil when there was nothing to read
}

type inputReader struct{ r *reader }

func (a inputReader) NextInput() (events.Raw, bool) {
	m, ok := a.r.next()
	if !ok {
		return events.Raw{}, false
	}
	return events.Raw{Seq: m.seq, Time: m.time, Subject: m.subject, Body: m.data, Source: m.source}, true
}

type decisionReader struct{ r *reader }

func (a decisionReader) NextDecision() (StoredDecision, bool) {
	m, ok := a.r.next()
	if !ok {
		return StoredDecision{}, false
	}
	return StoredDecision{Seq: m.seq, Subject: m.subject, Body: m.data, Cause: m.cause, Index: m.index, Chain: m.chain}, true
}

// archivedInputs reads the archive's inputs (a, nil without an archive)
// and then the stream's (r). A finding or error of the archive ends it
// (err): the stream's inputs after an archive not read through would be
// holes.
type archivedInputs struct {
	a   *archive.Cursor
	r   inputReader
	err error
}

func (c *archivedInputs) NextInput() (events.Raw, bool) {
	if c.a != nil {
		if rec, ok := c.a.Next(); ok {
			return events.Raw{Seq: rec.Seq, Time: rec.Time, Subject: rec.Subject, Body: rec.Data}, true
		}
		if c.err = c.a.Err(); c.err != nil {
			return events.Raw{}, false
		}
		c.a = nil
	}
	if c.err != nil {
		return events.Raw{}, false
	}
	return c.r.NextInput()
}

// archivedDecisions is archivedInputs for the decisions.
type archivedDecisions struct {
	a   *archive.Cursor
	r   decisionReader
	err error
}

func (c *archivedDecisions) NextDecision() (StoredDecision, bool) {
	if c.a != nil {
		if rec, ok := c.a.Next(); ok {
			h := nats.Header(rec.Header)
			return StoredDecision{Seq: rec.Seq, Subject: rec.Subject, Body: rec.Data,
				Cause: h.Get(events.HeaderCause), Index: h.Get(events.HeaderIndex), Chain: h.Get(events.HeaderChain)}, true
		}
		if c.err = c.a.Err(); c.err != nil {
			return StoredDecision{}, false
		}
		c.a = nil
	}
	if c.err != nil {
		return StoredDecision{}, false
	}
	return c.r.NextDecision()
}

// archivedClaims reads the checkpoint claims of the archived inputs, as
// readClaims reads the stream's.
func archivedClaims(segs []archive.Segment, part events.Partition) ([]uint64, error) {
	var claimed []uint64
	var in events.Input
	filter := part.InputSubject(events.RoleCoord, "*", events.NoJob, events.VerbCheckpoint)
	verb := filter[strings.LastIndexByte(filter, '.'):] // ".checkpoint"
	c := archive.Inputs(segs)
	defer c.Close()
	for {
		rec, ok := c.Next()
		if !ok {
			break
		}
		if !strings.HasSuffix(rec.Subject, verb) {
			continue
		}
		subject, ok := part.StripInput(rec.Subject)
		if !ok {
			continue
		}
		if events.DecodeInput(subject, rec.Data, &in) != nil || in.Verb != events.VerbCheckpoint || in.CheckpointSeq >= rec.Seq {
			continue
		}
		claimed = append(claimed, in.CheckpointSeq)
	}
	return claimed, c.Err()
}
