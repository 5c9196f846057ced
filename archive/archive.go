package archive

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/snapshot"
	"github.com/maknow/tenure/streams"
)

// Config says which log and which archive.
type Config struct {
	// JS is a JetStream context on the server or cluster holding the log,
	// with an operator's rights (Remove purges; Restore stores a snapshot).
	JS jetstream.JetStream
	// Topology names the streams and buckets; one partition at a time.
	Topology streams.Topology
	// Root is the archive directory; the segments of Topology's streams go
	// to StreamDir(Root, Topology).
	Root string
	// StallTimeout ends a read of a stream that delivers nothing for that
	// long (default DefaultStallTimeout).
	StallTimeout time.Duration
	// Now stamps Manifest.Created (nil: time.Now). Nothing else reads it.
	Now func() time.Time
	// Logger receives progress (nil: none).
	Logger *slog.Logger
}

// DefaultStallTimeout is the default of Config.StallTimeout.
const DefaultStallTimeout = 30 * time.Second

func (c Config) withDefaults() (Config, error) {
	if c.JS == nil {
		return c, errors.New("archive: no JetStream context")
	}
	if c.Root == "" {
		return c, errors.New("archive: no archive directory")
	}
	if err := c.Topology.Validate(); err != nil {
		return c, err
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// ErrNotRetained is the error of Remove on streams created without log
// retention (streams.Topology.LogRetention): they deny purges, and
// JetStream cannot cancel that.
var ErrNotRetained = errors.New("archive: the streams were created without log retention (they deny purges, which JetStream cannot cancel): their log cannot be trimmed; create a new deployment with tenure serve --log-retention")

// ErrNoSnapshot is the error of Archive and Remove when there is no stored
// snapshot that checks out against its anchor: a segment ends at one. The
// reader's *snapshot.Error is wrapped with it (errors.Is(err,
// snapshot.ErrNone): none stored yet; snapshot.ErrUnreadable: try again).
var ErrNoSnapshot = errors.New("archive: no stored snapshot checks out against its anchor in the decision stream")

// Result is what Archive did.
type Result struct {
	// Segment is the segment sealed, nil when the archive was up to date
	// (the stored snapshot is not after its last segment's end).
	Segment *Segment
	// Segments are all the archive's segments, the new one included.
	Segments []Segment
}

// Archive seals the next segment: the inputs and decisions after the
// archive's last segment up to the stored snapshot's position (which must
// check out against its anchor, as a coordinator checks it), written with
// the snapshot into a new segment directory. The files are written to a
// temporary directory, synced, read back and compared, record by record,
// with a second read of the streams; only then is the manifest written and
// the directory renamed into place (and the rename synced). So a segment
// under its final name has been verified; a killed archiving leaves a
// temporary directory that the next one removes. It never writes to the
// streams. Running it again with nothing new to seal changes nothing.
func Archive(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dir := StreamDir(cfg.Root, cfg.Topology)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	lock, err := streams.LockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	defer lock.Close()
	if err := removeTemps(dir); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	segs, err := Segments(cfg.Root, cfg.Topology)
	if err != nil {
		return nil, err
	}
	h, err := streams.Open(ctx, cfg.JS, cfg.Topology)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	inInfo, outInfo, err := infos(ctx, h)
	if err != nil {
		return nil, err
	}
	inFrom, outFrom := uint64(1), uint64(1)
	if n := len(segs); n > 0 {
		last := segs[n-1]
		if err := last.verifyHashes(); err != nil {
			return nil, err
		}
		if err := checkTail(ctx, cfg, h, last); err != nil {
			return nil, err
		}
		inFrom, outFrom = last.Manifest.Inputs.Last+1, last.Manifest.Decisions.Last+1
	}
	snap, err := storedSnapshot(ctx, cfg.Topology, h)
	if err != nil {
		return nil, err
	}
	if snap.anchor.InputSeq < inFrom {
		return &Result{Segments: segs}, nil
	}
	if snap.anchor.DecisionSeq < outFrom {
		return nil, archiveErr("the stored snapshot is at input %d, decision %d; the archive ends at decision %d", snap.anchor.InputSeq, snap.anchor.DecisionSeq, outFrom-1)
	}
	if first := inInfo.State.FirstSeq; first > inFrom {
		return nil, archiveErr("%s starts at input %d, after the archive's end (%d): the segments in between are not in %s (another archive directory?)", cfg.Topology.InputStream(), first, inFrom-1, cfg.Root)
	}
	if first := outInfo.State.FirstSeq; first > outFrom {
		return nil, archiveErr("%s starts at decision %d, after the archive's end (%d): the segments in between are not in %s", cfg.Topology.DecisionStream(), first, outFrom-1, cfg.Root)
	}

	n := uint64(len(segs)) + 1
	tmp, err := os.MkdirTemp(dir, tempPrefix+segmentName(n)+"-")
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	sealed := false
	defer func() {
		if !sealed {
			os.RemoveAll(tmp)
		}
	}()
	m := Manifest{
		Format: Format, Segment: n, InputStream: cfg.Topology.InputStream(), DecisionStream: cfg.Topology.DecisionStream(),
		Created: cfg.Now().UTC(),
	}
	if len(segs) > 0 {
		m.Previous = segs[len(segs)-1].Hash
	}
	t0 := time.Now()
	// An input's header block is kept as stored: any publisher chooses its
	// bytes. A decision's are a coordinator's, in its client's own form.
	if m.Inputs, err = exportPart(ctx, cfg, tmp, InputsFile, cfg.Topology.InputStream(), true, inFrom, snap.anchor.InputSeq); err != nil {
		return nil, err
	}
	if m.Decisions, err = exportPart(ctx, cfg, tmp, DecisionsFile, cfg.Topology.DecisionStream(), false, outFrom, snap.anchor.DecisionSeq); err != nil {
		return nil, err
	}
	m.Snapshot = SnapshotPart{
		File: SnapshotFile, Bytes: int64(len(snap.data)), StateHash: hex.EncodeToString(snap.anchor.Hash[:]),
		InputSeq: snap.anchor.InputSeq, DecisionSeq: snap.anchor.DecisionSeq, AnchorSeq: snap.anchor.AnchorSeq,
		Chain: snap.anchor.Chain.String(),
	}
	if err := writeFile(filepath.Join(tmp, SnapshotFile), snap.data); err != nil {
		return nil, err
	}
	cfg.Logger.Info("archive: segment written", "segment", n, "inputs", m.Inputs.Count, "decisions", m.Decisions.Count, "elapsed", time.Since(t0))

	// The read-back: the files as stored, against the streams read again.
	seg := Segment{Dir: tmp, Manifest: m}
	if err := seg.verifySnapshot(); err != nil {
		return nil, fmt.Errorf("archive: the read-back of the segment written failed: %w", err)
	}
	// The snapshot is what the fold gives: the previous segment's state
	// (none for the first) and this segment's inputs.
	var prev *Segment
	if len(segs) > 0 {
		prev = &segs[len(segs)-1]
	}
	if err := replay(prev, seg, cfg.Topology.Partition); err != nil {
		return nil, err
	}
	// Every line read back from disk (hashes, counts, canonical form)
	// against the streams read again.
	if err := compare(ctx, cfg, seg, 0, 0); err != nil {
		return nil, fmt.Errorf("archive: the read-back of the segment written failed: %w", err)
	}
	mb, err := marshalManifest(&m)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(tmp, ManifestFile), mb); err != nil {
		return nil, err
	}
	if err := syncDir(tmp); err != nil {
		return nil, err
	}
	final := filepath.Join(dir, segmentName(n))
	if err := os.Rename(tmp, final); err != nil {
		return nil, fmt.Errorf("archive: seal segment %d: %w", n, err)
	}
	sealed = true
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(mb)
	seg = Segment{Dir: final, Manifest: m, Hash: hex.EncodeToString(sum[:])}
	cfg.Logger.Info("archive: segment sealed", "segment", n, "dir", final, "elapsed", time.Since(t0))
	segs = append(segs, seg)
	return &Result{Segment: &segs[len(segs)-1], Segments: segs}, nil
}

// replay folds segment seg's inputs from the state of segment prev (its
// snapshot; nil: the empty state) and requires the state after the last one
// to hash to seg's snapshot state hash: a checkpoint claim (which the fold
// records without judging it) and a snapshot that do not describe the
// log's own state are never sealed, so never the only state left after a
// removal.
func replay(prev *Segment, seg Segment, part events.Partition) error {
	p := projector.NewPartition(part)
	if prev != nil {
		data, err := os.ReadFile(filepath.Join(prev.Dir, SnapshotFile))
		if err != nil {
			return err
		}
		if err := p.Restore(data); err != nil {
			return archiveErr("%s: the snapshot does not restore: %v", prev.Dir, err)
		}
		if p.LastSeq() != prev.Manifest.Inputs.Last {
			return archiveErr("%s: the snapshot holds the state after input %d, not %d", prev.Dir, p.LastSeq(), prev.Manifest.Inputs.Last)
		}
	}
	c := Inputs([]Segment{seg})
	defer c.Close()
	for {
		r, ok := c.Next()
		if !ok {
			break
		}
		if r.Seq != p.LastSeq()+1 {
			return archiveErr("%s: input %d follows input %d: the stream has a gap, which no fold reproduces", seg.Dir, r.Seq, p.LastSeq())
		}
		if _, err := p.Step(events.Raw{Seq: r.Seq, Time: r.Time, Subject: r.Subject, Body: r.Data}); err != nil {
			return fmt.Errorf("archive: fold input %d: %w", r.Seq, err)
		}
	}
	if err := c.Err(); err != nil {
		return err
	}
	got := sha256.Sum256(p.Snapshot())
	if hex.EncodeToString(got[:]) != seg.Manifest.Snapshot.StateHash {
		return archiveErr("the stored snapshot at input %d (anchored at decision %d) is not the state the fold gives there: it hashes to %s, the fold's to %x; nothing sealed (tenure audit tells more)",
			seg.Manifest.Snapshot.InputSeq, seg.Manifest.Snapshot.AnchorSeq, seg.Manifest.Snapshot.StateHash, got)
	}
	return nil
}

// Removal is what Remove did.
type Removal struct {
	// Through is the last segment whose messages are removed (all of its
	// messages but its last input and last decision, which stay as the
	// streams' first: they are where the state after it stands).
	Through uint64
	// Removed inputs and decisions (0 and 0: they already were).
	Inputs, Decisions uint64
	// FirstInput and FirstDecision are the streams' first sequences after.
	FirstInput, FirstDecision uint64
}

// Remove trims the streams up to the end of segment through (0: the
// archive's last segment), once it has checked, again, that this can lose
// nothing: the streams were created for log retention; every segment up to
// it not removed yet still has the files it was sealed with (their hashes,
// sizes and counts: each was compared with the streams, record by record,
// when it was sealed) and the streams still hold its last input and
// decision as archived; and the stored snapshot checks out against its anchor
// and is at or after the segment's end, so a coordinator restarts without
// the removed messages. It then purges each stream below the segment's last
// sequence (that last input and decision stay: a snapshot's position must be
// in the streams). Killed half way, or run again, it completes or changes
// nothing.
func Remove(ctx context.Context, cfg Config, through uint64) (*Removal, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dir := StreamDir(cfg.Root, cfg.Topology)
	if _, err := os.Stat(dir); err != nil {
		return nil, archiveErr("no segments of %s in %s", cfg.Topology.InputStream(), cfg.Root)
	}
	lock, err := streams.LockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	defer lock.Close()
	segs, err := Segments(cfg.Root, cfg.Topology)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		return nil, archiveErr("no segments of %s in %s: archive one first", cfg.Topology.InputStream(), cfg.Root)
	}
	if through == 0 {
		through = uint64(len(segs))
	}
	if through > uint64(len(segs)) {
		return nil, archiveErr("no segment %d: the archive has %d", through, len(segs))
	}
	target := segs[through-1].Manifest
	h, err := streams.Open(ctx, cfg.JS, cfg.Topology)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	inInfo, outInfo, err := infos(ctx, h)
	if err != nil {
		return nil, err
	}
	if !streams.Retained(inInfo.Config) || !streams.Retained(outInfo.Config) {
		return nil, ErrNotRetained
	}
	// Where the streams were trimmed before: the input stream starts at
	// the last input of the last segment removed, the decision stream
	// holds decisions from that segment's last one (and the last policy_set
	// decision before it, purgeDecisions).
	outTrim := uint64(0)
	for _, s := range segs {
		if s.Manifest.Inputs.Last == inInfo.State.FirstSeq {
			outTrim = s.Manifest.Decisions.Last
		}
	}
	for _, s := range segs[:through] {
		if s.Manifest.Inputs.Last <= inInfo.State.FirstSeq {
			continue // removed before (its files were checked then; its last input is the stream's first)
		}
		// Each was compared with the streams, line by line, when it was
		// sealed: its files must still be what their hashes say, and the
		// streams must still hold its last messages as archived (the
		// archive is this log's).
		if err := s.verifyHashes(); err != nil {
			return nil, err
		}
		if s.Manifest.Inputs.Last >= inInfo.State.FirstSeq && s.Manifest.Decisions.Last >= max(outTrim, outInfo.State.FirstSeq) {
			if err := checkTail(ctx, cfg, h, s); err != nil {
				return nil, err
			}
		}
	}
	snap, err := storedSnapshot(ctx, cfg.Topology, h)
	if err != nil {
		return nil, fmt.Errorf("%w: removing the segment would leave a coordinator nothing to restart from", err)
	}
	if snap.anchor.InputSeq < target.Inputs.Last || snap.anchor.DecisionSeq < target.Decisions.Last {
		return nil, archiveErr("the stored snapshot is at input %d, before segment %d's end (%d): a coordinator could not restart", snap.anchor.InputSeq, through, target.Inputs.Last)
	}
	rm := &Removal{Through: through}
	if inInfo.State.FirstSeq < target.Inputs.Last {
		if err := h.In.Purge(ctx, jetstream.WithPurgeSequence(target.Inputs.Last)); err != nil {
			return nil, fmt.Errorf("archive: purge %s below %d: %w", cfg.Topology.InputStream(), target.Inputs.Last, streams.Classify(err))
		}
	}
	if outInfo.State.FirstSeq < target.Decisions.Last {
		if err := purgeDecisions(ctx, h.Out, cfg.Topology.Partition, target.Decisions.Last); err != nil {
			return nil, fmt.Errorf("archive: purge %s below %d: %w", cfg.Topology.DecisionStream(), target.Decisions.Last, err)
		}
	}
	in2, out2, err := infos(ctx, h)
	if err != nil {
		return nil, err
	}
	rm.FirstInput, rm.FirstDecision = in2.State.FirstSeq, out2.State.FirstSeq
	rm.Inputs = in2.State.FirstSeq - min(in2.State.FirstSeq, inInfo.State.FirstSeq)
	rm.Decisions = out2.State.FirstSeq - min(out2.State.FirstSeq, outInfo.State.FirstSeq)
	cfg.Logger.Info("archive: removed", "through_segment", through, "inputs", rm.Inputs, "decisions", rm.Decisions,
		"first_input", rm.FirstInput, "first_decision", rm.FirstDecision)
	return rm, nil
}

// purgeDecisions removes the decisions below seq, except the last
// policy_set decision if it is one of them: the policy in force stays
// readable from the decision stream (ops.Client.Policies, tenure policy,
// the board), as it was before the removal. The decision subjects name
// their kind, and the set of kinds is closed (events.Kinds): everything
// below that decision goes, then every other kind's decisions below seq.
func purgeDecisions(ctx context.Context, out jetstream.Stream, part events.Partition, seq uint64) error {
	tail := ""
	if part.Partitioned() {
		tail = "." + part.Token()
	}
	policy := events.DecisionPrefix + ".*." + events.NoJob + "." + events.KindPolicySet.String() + tail
	m, err := out.GetLastMsgForSubject(ctx, policy)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence >= seq:
		return streams.Classify(out.Purge(ctx, jetstream.WithPurgeSequence(seq)))
	case err != nil:
		return fmt.Errorf("look up the last policy_set decision: %w", streams.Classify(err))
	}
	if err := out.Purge(ctx, jetstream.WithPurgeSequence(m.Sequence)); err != nil {
		return streams.Classify(err)
	}
	for _, k := range events.Kinds() {
		if k == events.KindPolicySet {
			continue
		}
		filter := events.DecisionPrefix + ".*.*." + k.String() + tail
		if err := out.Purge(ctx, jetstream.WithPurgeSubject(filter), jetstream.WithPurgeSequence(seq)); err != nil {
			return fmt.Errorf("%s: %w", filter, streams.Classify(err))
		}
	}
	return nil
}

// Restored is what Restore did.
type Restored struct {
	// Segment is the segment whose snapshot was stored (0: none, the
	// stored snapshot checks out and is at or after it).
	Segment uint64
	// InputSeq is where the snapshot now stored stands.
	InputSeq uint64
}

// Restore stores the archive's last snapshot as the coordinator's snapshot
// when the stored one is missing, does not check out, or is older: the way
// back for a deployment whose removed segment no stored snapshot covers
// any more (the coordinator stands by with ErrLogRemoved until then). The
// snapshot is checked, as a coordinator checks it, against its anchor in
// the decision stream before it is stored; a coordinator checks it again
// before it restores it.
func Restore(ctx context.Context, cfg Config) (*Restored, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	segs, err := Segments(cfg.Root, cfg.Topology)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		return nil, archiveErr("no segments of %s in %s", cfg.Topology.InputStream(), cfg.Root)
	}
	last := segs[len(segs)-1]
	if err := last.Verify(); err != nil {
		return nil, err
	}
	h, err := streams.Open(ctx, cfg.JS, cfg.Topology)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	sp := last.Manifest.Snapshot
	cur, err := storedSnapshot(ctx, cfg.Topology, h)
	switch {
	case err == nil && cur.anchor.InputSeq >= sp.InputSeq:
		return &Restored{InputSeq: cur.anchor.InputSeq}, nil
	case errors.Is(err, snapshot.ErrUnreadable), errors.Is(err, snapshot.ErrReplaced):
		// Nothing is known to be wrong with it, and it may be newer than
		// the archive's: replacing it would throw that away.
		return nil, fmt.Errorf("archive: the stored snapshot could not be checked, nothing stored (run it again): %w", err)
	}
	data, err := os.ReadFile(filepath.Join(last.Dir, SnapshotFile))
	if err != nil {
		return nil, err
	}
	hdr := nats.Header{}
	hdr.Set(streams.HeaderSnapshotInput, strconv.FormatUint(sp.InputSeq, 10))
	hdr.Set(streams.HeaderSnapshotDecision, strconv.FormatUint(sp.DecisionSeq, 10))
	hdr.Set(streams.HeaderSnapshotAnchor, strconv.FormatUint(sp.AnchorSeq, 10))
	hdr.Set(streams.HeaderSnapshotHash, sp.StateHash)
	hdr.Set(streams.HeaderSnapshotChain, sp.Chain)
	checked, err := reader(cfg.Topology, h).Check(ctx, hdr, data)
	a := checked.Anchor
	if err != nil {
		return nil, fmt.Errorf("archive: segment %d's snapshot does not check out against the decision stream: %w", last.Manifest.Segment, err)
	}
	meta := jetstream.ObjectMeta{Name: streams.SnapshotObject, Headers: hdr}
	if _, err := h.Snapshots.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("archive: store the snapshot: %w", streams.Classify(err))
	}
	cfg.Logger.Info("archive: snapshot restored", "segment", last.Manifest.Segment, "input_seq", a.InputSeq)
	return &Restored{Segment: last.Manifest.Segment, InputSeq: a.InputSeq}, nil
}

func infos(ctx context.Context, h *streams.Handles) (*jetstream.StreamInfo, *jetstream.StreamInfo, error) {
	in, err := h.In.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("archive: input stream info: %w", streams.Classify(err))
	}
	out, err := h.Out.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("archive: decision stream info: %w", streams.Classify(err))
	}
	return in, out, nil
}

type stored struct {
	anchor streams.SnapshotAnchor
	data   []byte
}

// errNoSnapshotYet is why there is no snapshot on a young deployment: a
// segment ends at a stored snapshot, and the coordinator stores its first
// after tenure serve's --snapshot-every inputs or --snapshot-interval.
var errNoSnapshotYet = errors.New("no snapshot stored yet: the live coordinator stores one after --snapshot-every inputs or --snapshot-interval (1 minute by default); run it again then")

// storedSnapshot reads the stored snapshot and checks it as a coordinator
// does before restoring it (snapshot.Reader); any failure is ErrNoSnapshot
// with the reader's error.
func storedSnapshot(ctx context.Context, top streams.Topology, h *streams.Handles) (*stored, error) {
	s, err := reader(top, h).Read(ctx)
	if errors.Is(err, snapshot.ErrNone) {
		return nil, fmt.Errorf("%w: %w: %w", ErrNoSnapshot, err, errNoSnapshotYet)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, err)
	}
	return &stored{anchor: s.Anchor, data: s.Data}, nil
}

// reader is the reader of the stored snapshot of top.
func reader(top streams.Topology, h *streams.Handles) *snapshot.Reader {
	return &snapshot.Reader{Objects: snapshot.JetStream(top, h), Decisions: h.Out, Partition: top.Partition}
}

// CheckTail checks that the streams of cfg.Topology still hold segment
// last's last input and last decision (Remove keeps them) as it archived
// them: that the archive is this log's. An auditor calls it before it
// replays the archive and then the streams after it.
func CheckTail(ctx context.Context, cfg Config, last Segment) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	h, err := streams.Open(ctx, cfg.JS, cfg.Topology)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return checkTail(ctx, cfg, h, last)
}

// checkTail checks that the streams still hold the archive's last input
// and last decision (Remove keeps them), as archived: the archive belongs
// to this log.
func checkTail(ctx context.Context, cfg Config, h *streams.Handles, last Segment) error {
	m := last.Manifest
	for _, c := range []struct {
		st   jetstream.Stream
		part Part
		raw  bool
	}{{h.In, m.Inputs, m.Format != FormatV1}, {h.Out, m.Decisions, false}} {
		want, err := lastRecord(last.Dir, c.part)
		if err != nil {
			return err
		}
		name := c.st.CachedInfo().Config.Name
		var got *Record
		err = readRange(ctx, cfg, name, c.raw, c.part.Last, c.part.Last, func(r *Record) error {
			if r.Seq == c.part.Last {
				cp := *r
				got = &cp
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("archive: read %s %d: %w", name, c.part.Last, streams.Classify(err))
		}
		if got == nil {
			return archiveErr("%s no longer holds sequence %d, the end of segment %d: this archive is not its log's, or messages were removed past it", name, c.part.Last, m.Segment)
		}
		if !got.Equal(&want) {
			return archiveErr("%s's message %d is not the one segment %d ends with: this archive is not this log's", name, c.part.Last, m.Segment)
		}
	}
	return nil
}

func lastRecord(dir string, p Part) (Record, error) {
	c, err := openPart(dir, p)
	if err != nil {
		return Record{}, err
	}
	defer c.close()
	var last Record
	for {
		r, ok := c.next()
		if !ok {
			break
		}
		last = r
	}
	if c.err != nil {
		return last, c.err
	}
	if last.Seq != p.Last {
		return last, archiveErr("%s: %s has no record at its last sequence %d", dir, p.File, p.Last)
	}
	return last, nil
}

// exportPart writes stream's messages from..last to dir/file (with raw,
// their header blocks as stored).
func exportPart(ctx context.Context, cfg Config, dir, file, stream string, raw bool, from, last uint64) (Part, error) {
	p := Part{File: file, First: from, Last: last}
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return p, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	sum := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, &counter{h: sum, n: &p.Bytes}), 1<<20)
	var line []byte
	err = readRange(ctx, cfg, stream, raw, from, last, func(r *Record) error {
		if p.Count == 0 && r.Seq != from {
			return archiveErr("%s starts at %d, not %d", stream, r.Seq, from)
		}
		line = appendLine(line[:0], r)
		p.Count++
		_, err := w.Write(line)
		return err
	})
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return p, fmt.Errorf("archive: export %s %d..%d: %w", stream, from, last, err)
	}
	p.SHA256 = hex.EncodeToString(sum.Sum(nil))
	return p, f.Close()
}

type counter struct {
	h hash.Hash
	n *int64
}

func (c *counter) Write(b []byte) (int, error) {
	c.h.Write(b)
	*c.n += int64(len(b))
	return len(b), nil
}

// compare reads segment s's files through, checking their hashes, counts
// and order, and the streams side by side, and requires every record the
// streams still hold (from inFirst and outFirst on; 0: all) to be written
// as its line: the line equals the stream's message encoded (appendLine),
// which is also the line's canonical check.
func compare(ctx context.Context, cfg Config, s Segment, inFirst, outFirst uint64) error {
	m := s.Manifest
	for _, c := range []struct {
		stream string
		part   Part
		first  uint64
		raw    bool
	}{{cfg.Topology.InputStream(), m.Inputs, inFirst, m.Format != FormatV1}, {cfg.Topology.DecisionStream(), m.Decisions, outFirst, false}} {
		from := max(c.part.First, c.first)
		if from > c.part.Last {
			continue
		}
		cur, err := openPart(s.Dir, c.part)
		if err != nil {
			return err
		}
		line, seq, ok := cur.nextLine()
		for ok && seq < from {
			line, seq, ok = cur.nextLine()
		}
		var enc []byte
		err = readRange(ctx, cfg, c.stream, c.raw, from, c.part.Last, func(r *Record) error {
			if !ok {
				if cur.err != nil {
					return cur.err
				}
				return archiveErr("%s: %s ends before %s's message %d", s.Dir, c.part.File, c.stream, r.Seq)
			}
			enc = appendLine(enc[:0], r)
			if seq != r.Seq || !bytes.Equal(line, enc) {
				return archiveErr("%s: %s's record %d is not %s's message %d as stored", s.Dir, c.part.File, seq, c.stream, r.Seq)
			}
			line, seq, ok = cur.nextLine()
			return nil
		})
		if err == nil && ok {
			err = archiveErr("%s: %s holds record %d, which %s does not", s.Dir, c.part.File, seq, c.stream)
		}
		if err == nil {
			err = cur.err // the file's end: its hash, size and count
		}
		cur.close()
		if err != nil {
			return err
		}
	}
	return nil
}

// readRange reads stream's messages from..last in order and hands each to
// fn (on the reader's goroutine, one at a time); fn's error ends it. With
// raw, a message's header block is kept as stored (Record.RawHeader, from
// the stream's message get), and required to be the one the delivery came
// with (its length and what the client parsed of it).
func readRange(ctx context.Context, cfg Config, stream string, raw bool, from, last uint64, fn func(*Record) error) error {
	if from > last {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	var seen atomic.Uint64
	finished := false
	finish := func(err error) {
		finished = true
		done <- err
	}
	f := follow.Start(ctx, cfg.JS, follow.Config{Stream: stream, StartSeq: from}, func(ctx context.Context, m follow.Msg) {
		if finished {
			return
		}
		seen.Add(1)
		if m.Seq > last {
			finish(nil)
			return
		}
		r := Record{Seq: m.Seq, Time: m.Time, Subject: m.Subject, Header: m.Header, Data: m.Data}
		if len(r.Header) == 0 {
			r.Header = nil
		}
		if raw && m.HeaderLen > 0 {
			hdr, err := streams.StoredHeader(ctx, cfg.JS, stream, m.Seq)
			switch {
			case err != nil:
				finish(err)
				return
			case len(hdr) != m.HeaderLen || !maps.EqualFunc(ParseHeader(hdr), r.Header, slices.Equal):
				finish(archiveErr("%s's message %d: its stored header block (%d bytes) is not the one it was delivered with (%d bytes)", stream, m.Seq, len(hdr), m.HeaderLen))
				return
			}
			r.RawHeader = hdr
		}
		if err := fn(&r); err != nil {
			finish(err)
			return
		}
		if m.Seq == last {
			finish(nil)
		}
	})
	defer f.Stop()
	tick := time.NewTicker(cfg.StallTimeout)
	defer tick.Stop()
	var at uint64
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			n := seen.Load()
			if n == at {
				return fmt.Errorf("archive: read %s: nothing received for %v before sequence %d (%v)", stream, cfg.StallTimeout, last, f.Err())
			}
			at = n
		}
	}
}

func writeFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("archive: write %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("archive: sync %s: %w", dir, err)
	}
	return nil
}

// removeTemps removes the temporary directories a killed archiving left.
func removeTemps(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() && isTemp(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func marshalManifest(m *Manifest) ([]byte, error) {
	b, err := jsonIndent(m)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
