package archive_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/archive"
	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// retained is the topology of these tests: streams created for log
// retention, in memory (the lock-down is the same).
var retained = streams.Topology{Storage: jetstream.MemoryStorage, LogRetention: true}

type env struct {
	srv *embedded.Server
	js  jetstream.JetStream
	h   *streams.Handles
	top streams.Topology
	n   int // acquires published so far
}

func newEnv(t *testing.T, top streams.Topology) *env {
	t.Helper()
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	h, err := streams.Ensure(context.Background(), js, top, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The tests write their logs by hand, no coordinator ends the genesis.
	if h.In, err = streams.EndGenesis(context.Background(), js, top); err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, js: js, h: h, top: top}
}

func (e *env) cfg(root string) archive.Config {
	return archive.Config{JS: e.js, Topology: e.top, Root: root, StallTimeout: 10 * time.Second}
}

// coord runs a real coordinator (snapshots every 10 inputs, never on a
// timer) until the returned stop is called (or the test ends).
func (e *env) coord(t *testing.T) (*coordinator.Coordinator, func()) {
	t.Helper()
	c, stop := e.launch(t)
	// Live before any worker publishes, as tenure serve is: the rules and
	// the default policy are the log's inputs 1 and 2 (on an empty log).
	testutil.WaitFor(t, 20*time.Second, "the coordinator live", func() bool { return c.Stats().Live })
	return c, stop
}

// launch starts the coordinator as coord does, without waiting for it.
func (e *env) launch(t *testing.T) (*coordinator.Coordinator, func()) {
	t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, Topology: e.top, LeaderTTL: 5 * time.Second,
		SnapshotEvery: 10, SnapshotInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator: %v", err)
		}
		nc.Close()
	}
	t.Cleanup(stop)
	return c, stop
}

// acquire publishes n acquires of new jobs and returns the last sequence.
func (e *env) acquire(t *testing.T, n int) uint64 {
	t.Helper()
	var last uint64
	for range n {
		ack, err := e.js.Publish(context.Background(), fmt.Sprintf("%s.worker.w1.j%d.acquire", events.InputPrefix, e.n), []byte(`{"v":1,"lease_ms":600000}`))
		if err != nil {
			t.Fatal(err)
		}
		e.n++
		last = ack.Sequence
	}
	return last
}

// settle waits until c has decided every stored input and stored a
// snapshot of an input at or after seq.
func (e *env) settle(t *testing.T, c *coordinator.Coordinator, seq uint64) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("a stored snapshot at or after input %d", seq), func() bool {
		st := c.Stats()
		ii, err := e.h.In.Info(context.Background())
		return err == nil && st.Live && st.InputsFolded == ii.State.LastSeq && st.SnapshotSeq >= seq
	})
}

func (e *env) audit(t *testing.T, root string) *audit.Report {
	t.Helper()
	rep, err := audit.Run(context.Background(), audit.Config{JS: e.js, Topology: e.top, Archive: root, StallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("audit (archive %q): %v", root, err)
	}
	if !rep.OK() {
		var b strings.Builder
		audit.WriteSummary(&b, rep, 20)
		t.Fatalf("audit (archive %q) not clean:\n%s", root, b.String())
	}
	return rep
}

func first(t *testing.T, st jetstream.Stream) (uint64, uint64) {
	t.Helper()
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.FirstSeq, info.State.LastSeq
}

// A segment is sealed at the stored snapshot, archived, verified and
// removed, twice; the audit then checks every decision from input 1 on
// across both segments and the streams, or from the stored snapshot
// without the archive; a coordinator restarts on the trimmed log and
// decides on; each command run again changes nothing.
func TestSealArchiveVerifyRemoveAudit(t *testing.T) {
	e := newEnv(t, retained)
	root := t.TempDir()
	ctx := context.Background()
	c, stop := e.coord(t)
	e.settle(t, c, e.acquire(t, 45)-12)

	res, err := archive.Archive(ctx, e.cfg(root))
	if err != nil {
		t.Fatal(err)
	}
	if res.Segment == nil {
		t.Fatal("nothing archived")
	}
	s1 := res.Segment.Manifest
	if s1.Segment != 1 || s1.Inputs.First != 1 || s1.Decisions.First != 1 || s1.Inputs.Last < 30 || s1.Inputs.Count != s1.Inputs.Last {
		t.Fatalf("segment 1: %+v", s1)
	}
	// Again, with no new snapshot: nothing new.
	again, err := archive.Archive(ctx, e.cfg(root))
	if err != nil || again.Segment != nil || len(again.Segments) != 1 {
		t.Fatalf("archive again: %+v, %v", again, err)
	}
	// The archive before anything is removed audits as the streams do.
	rep := e.audit(t, root)
	if rep.Archive == nil || rep.Archive.Inputs != s1.Inputs.Last || rep.From != 1 {
		t.Fatalf("audit with the archive: from %d, archive %+v", rep.From, rep.Archive)
	}

	rm, err := archive.Remove(ctx, e.cfg(root), 0)
	if err != nil {
		t.Fatal(err)
	}
	if rm.FirstInput != s1.Inputs.Last || rm.Inputs != s1.Inputs.Last-1 {
		t.Fatalf("removal %+v of segment %+v", rm, s1)
	}
	// The decision stream keeps decision D_1 and the last policy_set
	// decision before it (the default policy's, decision 2): the policy in
	// force stays readable, as tenure policy reads it.
	pol, err := e.h.Out.GetLastMsgForSubject(ctx, "tenure.out.*._.policy_set")
	if err != nil || pol.Sequence != 2 || rm.FirstDecision != 2 {
		t.Fatalf("the policy_set decision after the removal: %v %v; removal %+v", pol, err, rm)
	}
	if info, _ := e.h.Out.Info(ctx); info.State.Msgs != info.State.LastSeq-s1.Decisions.Last+2 {
		t.Fatalf("decision stream holds %d messages, want decisions %d.. and the policy: %+v", info.State.Msgs, s1.Decisions.Last, info.State)
	}
	if f, _ := first(t, e.h.In); f != s1.Inputs.Last {
		t.Fatalf("input stream starts at %d, want %d", f, s1.Inputs.Last)
	}
	rm2, err := archive.Remove(ctx, e.cfg(root), 0)
	if err != nil || rm2.Inputs != 0 || rm2.Decisions != 0 {
		t.Fatalf("remove again: %+v, %v", rm2, err)
	}

	// The coordinator decides on; a second segment follows the first.
	e.settle(t, c, e.acquire(t, 30)-12)
	res, err = archive.Archive(ctx, e.cfg(root))
	if err != nil || res.Segment == nil {
		t.Fatalf("archive segment 2: %+v, %v", res, err)
	}
	s2 := res.Segment.Manifest
	if s2.Segment != 2 || s2.Inputs.First != s1.Inputs.Last+1 || s2.Decisions.First != s1.Decisions.Last+1 || s2.Previous != res.Segments[0].Hash {
		t.Fatalf("segment 2: %+v after %+v", s2, s1)
	}
	if _, err := archive.Remove(ctx, e.cfg(root), 0); err != nil {
		t.Fatal(err)
	}

	// Restart on the trimmed log: the snapshot covers the removed inputs.
	stop()
	c, _ = e.coord(t)
	e.settle(t, c, e.acquire(t, 15)-12)
	if st := c.Stats(); st.SnapshotsRefused != 0 {
		t.Fatalf("snapshots refused: %+v", st)
	}

	// Across both segments and the streams, from input 1.
	rep = e.audit(t, root)
	_, lastOut := first(t, e.h.Out)
	if rep.From != 1 || rep.Archive.Segments != 2 || rep.Decisions != lastOut || rep.Verified != lastOut {
		t.Fatalf("audit across the segments: from %d, %d decisions read, %d verified, %d stored", rep.From, rep.Decisions, rep.Verified, lastOut)
	}
	// Without the archive: from the stored snapshot.
	rep = e.audit(t, "")
	if rep.Snapshot == nil || !rep.Snapshot.Used || rep.From <= s2.Inputs.Last {
		t.Fatalf("audit without the archive: from %d, snapshot %+v", rep.From, rep.Snapshot)
	}
}

// An archive whose files changed after they were sealed is refused by
// Remove (nothing is purged) and by the audit; an archive of another log
// is refused by Archive, Remove and the audit.
func TestArchiveTampered(t *testing.T) {
	e := newEnv(t, retained)
	root := t.TempDir()
	ctx := context.Background()
	c, _ := e.coord(t)
	e.settle(t, c, e.acquire(t, 30)-12)
	res, err := archive.Archive(ctx, e.cfg(root))
	if err != nil || res.Segment == nil {
		t.Fatalf("archive: %+v, %v", res, err)
	}
	path := filepath.Join(res.Segment.Dir, archive.DecisionsFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	orig := append([]byte(nil), b...)
	i := strings.Index(string(b), `"data":"`) + len(`"data":"`) + 3
	b[i] ^= 'A' ^ 'B' // another base64 digit: still a canonical line
	if b[i] == orig[i] {
		t.Fatal("no change")
	}
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := res.Segment.Verify(); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("verify a changed segment: %v", err)
	}
	if _, err := archive.Remove(ctx, e.cfg(root), 0); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("remove with a changed segment: %v", err)
	}
	if f, _ := first(t, e.h.In); f != 1 {
		t.Fatalf("input stream starts at %d after a refused removal", f)
	}
	if _, err := audit.Run(ctx, audit.Config{JS: e.js, Topology: e.top, Archive: root, StallTimeout: 10 * time.Second}); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("audit with a changed segment: %v", err)
	}
	if err := os.WriteFile(path, orig, 0o640); err != nil {
		t.Fatal(err)
	}

	// Another deployment's log, with the same stream names.
	other := newEnv(t, retained)
	oc, _ := other.coord(t)
	other.settle(t, oc, other.acquire(t, 40)-12)
	if _, err := archive.Archive(ctx, other.cfg(root)); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("archive another log into this archive: %v", err)
	}
	if _, err := audit.Run(ctx, audit.Config{JS: other.js, Topology: other.top, Archive: root, StallTimeout: 10 * time.Second}); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("audit another log with this archive: %v", err)
	}
	if _, err := archive.Remove(ctx, other.cfg(root), 0); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("remove another log's messages with this archive: %v", err)
	}
	if f, _ := first(t, other.h.In); f != 1 {
		t.Fatalf("other input stream starts at %d after a refused removal", f)
	}
}

// Streams created without log retention deny purges: Remove says so and
// removes nothing, and a topology asking for retention on them is refused
// (JetStream cannot cancel DenyPurge).
func TestRemoveNeedsRetainedStreams(t *testing.T) {
	top := streams.Topology{Storage: jetstream.MemoryStorage}
	e := newEnv(t, top)
	root := t.TempDir()
	ctx := context.Background()
	c, _ := e.coord(t)
	e.settle(t, c, e.acquire(t, 30)-12)
	if _, err := archive.Archive(ctx, e.cfg(root)); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Remove(ctx, e.cfg(root), 0); !errors.Is(err, archive.ErrNotRetained) {
		t.Fatalf("remove on streams without retention: %v", err)
	}
	if f, _ := first(t, e.h.In); f != 1 {
		t.Fatalf("input stream starts at %d", f)
	}
	_, err := streams.Ensure(ctx, e.js, streams.Topology{Storage: jetstream.MemoryStorage, LogRetention: true}, time.Minute)
	var mm *streams.ConfigMismatchError
	if !errors.As(err, &mm) || mm.Field != "DenyPurge" {
		t.Fatalf("retention asked of streams made without it: %v", err)
	}
	if r := coordinator.Remedy(err); !strings.Contains(r, "cannot cancel") || strings.Contains(r, "nats stream edit") {
		t.Fatalf("remedy for retention on streams made without it: %q", r)
	}
}

// A coordinator whose stored snapshot is gone after a removal does not
// fold the partial log (nothing is appended) and says why; once Restore
// puts the archive's snapshot back, it resumes, and the audit is clean.
func TestLostSnapshotAfterRemoval(t *testing.T) {
	e := newEnv(t, retained)
	root := t.TempDir()
	ctx := context.Background()
	c, stop := e.coord(t)
	e.settle(t, c, e.acquire(t, 30)-12)
	if _, err := archive.Archive(ctx, e.cfg(root)); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Remove(ctx, e.cfg(root), 0); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := e.h.Snapshots.Delete(ctx, streams.SnapshotObject); err != nil {
		t.Fatal(err)
	}
	_, lastIn := first(t, e.h.In)
	_, lastOut := first(t, e.h.Out)
	if _, err := audit.Run(ctx, audit.Config{JS: e.js, Topology: e.top, StallTimeout: 10 * time.Second}); err == nil || !strings.Contains(err.Error(), "--archive") {
		t.Fatalf("audit of a trimmed log without a snapshot or the archive: %v", err)
	}
	c, _ = e.launch(t)
	testutil.WaitFor(t, 20*time.Second, "the coordinator to say the log was removed", func() bool {
		return strings.Contains(c.Stats().Reason, coordinator.ErrLogRemoved.Error())
	})
	if _, l := first(t, e.h.In); l != lastIn {
		t.Fatalf("inputs appended on a trimmed log: %d after %d", l, lastIn)
	}
	if _, l := first(t, e.h.Out); l != lastOut {
		t.Fatalf("decisions appended on a trimmed log: %d after %d", l, lastOut)
	}
	r, err := archive.Restore(ctx, e.cfg(root))
	if err != nil || r.Segment != 1 {
		t.Fatalf("restore: %+v, %v", r, err)
	}
	e.settle(t, c, e.acquire(t, 20)-12)
	// Restore again: the stored snapshot is newer, nothing is stored.
	if r, err := archive.Restore(ctx, e.cfg(root)); err != nil || r.Segment != 0 {
		t.Fatalf("restore again: %+v, %v", r, err)
	}
	e.audit(t, root)
	e.audit(t, "")
}

// An archiving killed half way leaves a temporary directory: the next one
// removes it and seals the segment; Segments never lists it.
func TestKilledArchivingLeavesNoSegment(t *testing.T) {
	e := newEnv(t, retained)
	root := t.TempDir()
	ctx := context.Background()
	c, _ := e.coord(t)
	e.settle(t, c, e.acquire(t, 30)-12)
	dir := archive.StreamDir(root, e.top)
	tmp := filepath.Join(dir, ".tmp-0000000001-123")
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, archive.InputsFile), []byte("{\"seq\":1}\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if segs, err := archive.Segments(root, e.top); err != nil || len(segs) != 0 {
		t.Fatalf("segments with a temporary directory: %v, %v", segs, err)
	}
	res, err := archive.Archive(ctx, e.cfg(root))
	if err != nil || res.Segment == nil || res.Segment.Manifest.Segment != 1 {
		t.Fatalf("archive: %+v, %v", res, err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary directory left: %v", err)
	}
	// A segment directory without its manifest is a finding, not a segment.
	if err := os.Remove(filepath.Join(res.Segment.Dir, archive.ManifestFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Segments(root, e.top); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("segment without a manifest: %v", err)
	}
}

// PROTOCOL.md §21's manifest example decodes into Manifest with no unknown
// field, and names every field a real manifest has: the document is what
// the code writes.
func TestProtocolManifestExample(t *testing.T) {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)[strings.Index(string(doc), "## 21. The archive"):]
	start := strings.Index(sec, "```json\n") + len("```json\n")
	block := sec[start : start+strings.Index(sec[start:], "```")]
	var m archive.Manifest
	dec := json.NewDecoder(strings.NewReader(block))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("the example does not decode: %v\n%s", err, block)
	}
	if m.Format != archive.Format || m.Inputs.File != archive.InputsFile || m.Decisions.File != archive.DecisionsFile || m.Snapshot.File != archive.SnapshotFile {
		t.Fatalf("example names %+v", m)
	}
	var docKeys, realKeys map[string]any
	if err := json.Unmarshal([]byte(block), &docKeys); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(archive.Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &realKeys); err != nil {
		t.Fatal(err)
	}
	for k := range realKeys {
		if _, ok := docKeys[k]; !ok {
			t.Errorf("the example lacks %q", k)
		}
	}
}

// A snapshot anchored by a checkpoint claim the fold does not bear out (a
// coordinator-role publisher's claim, which the fold records without
// judging it, and a matching object) is never sealed: Archive folds the
// segment and compares, so it can never become the only state left after
// a removal.
func TestForgedSnapshotNotSealed(t *testing.T) {
	e := newEnv(t, retained)
	ctx := context.Background()
	c, _ := e.coord(t) // snapshots every 10 inputs
	e.settle(t, c, e.acquire(t, 12)-12)
	last := e.acquire(t, 1) // S: the input the forged claim is about
	testutil.WaitFor(t, 20*time.Second, "input S decided", func() bool { return c.Stats().InputsFolded >= last })

	// The state after S had input 3 (an acquire) never happened.
	p := projector.New()
	var lastDecision uint64
	for seq := uint64(1); seq <= last; seq++ {
		m, err := e.h.In.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		subject := m.Subject
		if seq == 3 {
			subject = "tenure.in.worker.w1.forged.acquire"
		}
		if _, err := p.Step(events.Raw{Seq: seq, Time: m.Time.UnixNano(), Subject: subject, Body: m.Data}); err != nil {
			t.Fatal(err)
		}
	}
	bogus := p.Snapshot()
	hash := sha256.Sum256(bogus)
	ack, err := e.js.Publish(ctx, "tenure.in.coord.evil._.checkpoint", fmt.Appendf(nil, `{"v":1,"input_seq":%d,"state_hash":"%x"}`, last, hash))
	if err != nil {
		t.Fatal(err)
	}
	var anchor uint64
	testutil.WaitFor(t, 20*time.Second, "the forged claim recorded", func() bool {
		_, l := first(t, e.h.Out)
		m, err := e.h.Out.GetMsg(ctx, l)
		if err != nil {
			return false
		}
		d, err := events.DecodeDecision(m.Data)
		if err == nil && d.Kind == events.KindCheckpointed && d.Cause == ack.Sequence {
			anchor = l
			return true
		}
		return false
	})
	_, l := first(t, e.h.Out)
	var chain string
	for seq := l; seq > 0; seq-- {
		m, err := e.h.Out.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(events.HeaderCause) == fmt.Sprint(last) {
			lastDecision, chain = seq, m.Header.Get(events.HeaderChain)
			break
		}
	}
	hdr := nats.Header{}
	hdr.Set(streams.HeaderSnapshotInput, fmt.Sprint(last))
	hdr.Set(streams.HeaderSnapshotDecision, fmt.Sprint(lastDecision))
	hdr.Set(streams.HeaderSnapshotAnchor, fmt.Sprint(anchor))
	hdr.Set(streams.HeaderSnapshotHash, fmt.Sprintf("%x", hash))
	hdr.Set(streams.HeaderSnapshotChain, chain)
	if _, err := e.h.Snapshots.Put(ctx, jetstream.ObjectMeta{Name: streams.SnapshotObject, Headers: hdr}, bytes.NewReader(bogus)); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	_, err = archive.Archive(ctx, e.cfg(root))
	if !errors.Is(err, archive.ErrArchive) || !strings.Contains(err.Error(), "not the state the fold gives") {
		t.Fatalf("archive at a forged snapshot: %v", err)
	}
	if segs, err := archive.Segments(root, e.top); err != nil || len(segs) != 0 {
		t.Fatalf("segments after a refused archiving: %v, %v", segs, err)
	}
}

// A publisher chooses its subject's bytes and its headers: an input whose
// subject and headers are no UTF-8 is archived losslessly (the fold
// rejects it, the archive keeps it as stored), so no worker can keep a
// segment from being sealed; the audit across the removed segment is clean.
func TestHostileBytesArchived(t *testing.T) {
	e := newEnv(t, retained)
	root := t.TempDir()
	ctx := context.Background()
	c, _ := e.coord(t)
	m := &nats.Msg{Subject: events.InputPrefix + ".worker.w1.\xff\xfe.acquire", Data: []byte("\xff{\"v\":1}"),
		Header: nats.Header{"X-Bytes": {"\xfe\"\\"}, "Nats-Msg-Id": {"id-\xff"}}}
	ack, err := e.js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("the server refused the publish: %v", err)
	}
	e.settle(t, c, e.acquire(t, 20)-12)
	res, err := archive.Archive(ctx, e.cfg(root))
	if err != nil || res.Segment == nil || res.Segment.Manifest.Inputs.Last < ack.Sequence {
		t.Fatalf("archive: %+v, %v", res, err)
	}
	got := false
	cur := archive.Inputs(res.Segments)
	for r, ok := cur.Next(); ok; r, ok = cur.Next() {
		if r.Seq == ack.Sequence {
			got = r.Subject == m.Subject && bytes.Equal(r.Data, m.Data) && r.Header["X-Bytes"][0] == "\xfe\"\\"
		}
	}
	if cur.Err() != nil || !got {
		t.Fatalf("the input is not archived as stored (%v)", cur.Err())
	}
	if _, err := archive.Remove(ctx, e.cfg(root), 0); err != nil {
		t.Fatal(err)
	}
	e.audit(t, root)
}

// rawPublish publishes each header block and body on subject as a NATS
// client that writes its own protocol (HPUB) would: the server stores the
// block's bytes as they are, whatever a NATS client library would make of
// them.
func rawPublish(t *testing.T, url, subject string, blocks []string, body string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("no INFO: %q %v", line, err)
	}
	var out strings.Builder
	out.WriteString(`CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}` + "\r\n")
	for _, hdr := range blocks {
		fmt.Fprintf(&out, "HPUB %s %d %d\r\n%s%s\r\n", subject, len(hdr), len(hdr)+len(body), hdr, body)
	}
	out.WriteString("PING\r\n")
	if _, err := conn.Write([]byte(out.String())); err != nil {
		t.Fatal(err)
	}
	if line, err := rd.ReadString('\n'); err != nil || line != "PONG\r\n" {
		t.Fatalf("publishing raw header blocks: %q %v", line, err)
	}
}

// A publisher writes its header block's bytes (its protocol is text): an
// input whose block a NATS client cannot parse (a line without a colon),
// or parses to less than it holds (an empty name, a name repeated apart,
// other spacing), is archived as stored: the segment's line holds the
// bytes the stream holds (the server's message get shows them; it
// rewrites some blocks itself, a status line or bare LFs), which read back
// the same, and the audit across the removed segment is clean. (The
// archive used to keep what the client parsed: the first lost every
// header, the others lines or their order, and the segment was sealed all
// the same.)
func TestMalformedHeaderBlocksArchivedAsStored(t *testing.T) {
	e := newEnv(t, retained)
	root := t.TempDir()
	ctx := context.Background()
	c, _ := e.coord(t)
	blocks := []string{
		"NATS/1.0\r\nNats-Msg-Id: raw-1\r\nno colon on this line\r\n\r\n",
		"NATS/1.0 503 No Responders\r\nX-A: 1\r\n\r\n",
		"NATS/1.0\r\n: empty name\r\nX-A: 1\r\n\r\n",
		"NATS/1.0\r\nX-A: 1\r\nX-B: 2\r\nX-A: 3\r\n\r\n",
		"NATS/1.0\r\nX-A:1\r\nX-B:    2\r\n\r\n",
		"NATS/1.0\nX-A: 1\n\r\n",
	}
	subject := events.InputPrefix + ".worker.w1.raw-headers.acquire"
	rawPublish(t, e.srv.ClientURL(), subject, blocks, `{"v":1,"lease_ms":600000}`)
	e.settle(t, c, e.acquire(t, 20)-12)
	res, err := archive.Archive(ctx, e.cfg(root))
	if err != nil || res.Segment == nil {
		t.Fatalf("archive: %+v, %v", res, err)
	}
	if f := res.Segment.Manifest.Format; f != archive.Format {
		t.Fatalf("segment format %q", f)
	}
	var got []string
	cur := archive.Inputs(res.Segments)
	for r, ok := cur.Next(); ok; r, ok = cur.Next() {
		if r.Subject == subject {
			got = append(got, string(r.RawHeader))
			if want := archive.ParseHeader(r.RawHeader); !maps.EqualFunc(r.Header, want, slices.Equal) {
				t.Errorf("input %d: Header %v, the client parses %v", r.Seq, r.Header, want)
			}
		}
	}
	// What the stream holds, from its message get (a request of this
	// test's own: nats.go's GetMsg parses the block).
	var stored []string
	for seq := uint64(1); ; seq++ {
		resp, err := e.js.Conn().Request("$JS.API.STREAM.MSG.GET."+e.top.InputStream(), fmt.Appendf(nil, `{"seq":%d}`, seq), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Message *struct {
				Subject string `json:"subject"`
				Hdrs    []byte `json:"hdrs"`
			} `json:"message"`
		}
		if err := json.Unmarshal(resp.Data, &m); err != nil || m.Message == nil {
			break // past the last
		}
		if m.Message.Subject == subject {
			stored = append(stored, string(m.Message.Hdrs))
		}
	}
	if cur.Err() != nil || len(got) != len(blocks) || !slices.Equal(got, stored) {
		t.Fatalf("archived header blocks (%v):\n got    %q\n stored %q", cur.Err(), got, stored)
	}
	for i, b := range []int{0, 2, 3, 4} { // kept by the server as published
		if got[b] != blocks[b] {
			t.Errorf("block %d: stored %q, published %q", i, got[b], blocks[b])
		}
	}
	if _, err := archive.Remove(ctx, e.cfg(root), 0); err != nil {
		t.Fatal(err)
	}
	e.audit(t, root)
}
