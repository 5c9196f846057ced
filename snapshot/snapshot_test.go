package snapshot_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/snapshot"
	"github.com/maknow/tenure/streams"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// The read timeout of a snapshot grows with its size and stays positive at
// any size an object store can report (it used to overflow past 2^55 bytes).
func TestReadTimeout(t *testing.T) {
	for _, c := range []struct {
		size uint64
		want time.Duration
	}{
		{0, 10 * time.Second},
		{4 << 20, 11 * time.Second},
		{1 << 40, 10*time.Second + time.Hour},
		{1<<64 - 1, 10*time.Second + time.Hour},
	} {
		if got := snapshot.ReadTimeout(c.size); got != c.want {
			t.Errorf("ReadTimeout(%d) = %v, want %v", c.size, got, c.want)
		}
	}
}

// fixture is a real server holding a log a real coordinator decided and
// the snapshot it stored (data, hdr, at pos), and checkpointed decisions
// claiming the state hashes of the fakes (anchors: state hash to decision
// sequence), as a coordinator would have anchored them.
type fixture struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	top     streams.Topology
	h       *streams.Handles
	data    []byte
	hdr     nats.Header
	pos     streams.SnapshotAnchor
	anchors map[[32]byte]uint64
}

// runCoordinator runs a coordinator, calls publish once it is live, and
// stops it once it has decided every input stored (and stored a snapshot
// if snapEvery > 0).
func runCoordinator(t *testing.T, f *fixture, snapEvery int, publish func()) {
	t.Helper()
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: f.nc, LeaderTTL: time.Second, SnapshotEvery: snapEvery,
		SnapshotInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testutil.WaitFor(t, 30*time.Second, "the coordinator live", func() bool { return c.Stats().Live })
	publish()
	testutil.WaitFor(t, 30*time.Second, "the coordinator caught up", func() bool {
		ii, err1 := f.h.In.Info(ctx)
		oi, err2 := f.h.Out.Info(ctx)
		st := c.Stats()
		return err1 == nil && err2 == nil && st.Live && st.InputsFolded == ii.State.LastSeq && st.DecisionsStored == oi.State.LastSeq &&
			(snapEvery <= 0 || st.SnapshotSeq > 0)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	f := &fixture{nc: nc, js: js, anchors: map[[32]byte]uint64{}}
	var err error
	if f.h, err = streams.Ensure(ctx, js, f.top, time.Second); err != nil {
		t.Fatal(err)
	}
	runCoordinator(t, f, 5, func() {
		for i := range 12 {
			if _, err := js.Publish(ctx, events.InputSubject(events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire), []byte(`{"v":1,"lease_ms":600000}`)); err != nil {
				t.Error(err)
			}
		}
	})
	info, err := f.h.Snapshots.GetInfo(ctx, streams.SnapshotObject)
	if err != nil {
		t.Fatal(err)
	}
	if f.data, err = f.h.Snapshots.GetBytes(ctx, streams.SnapshotObject); err != nil {
		t.Fatal(err)
	}
	f.hdr = info.Headers
	if f.pos, err = streams.ParseSnapshotHeaders(f.hdr); err != nil {
		t.Fatal(err)
	}
	return f
}

// anchor anchors the state hashes of fakes as claims about the snapshot's
// input, as a coordinator anchors its snapshots: a checkpoint input each,
// decided by a coordinator.
func (f *fixture) anchor(t *testing.T, fakes ...[]byte) {
	t.Helper()
	ctx := context.Background()
	runCoordinator(t, f, -1, func() {
		for _, fake := range fakes {
			in := events.Input{Verb: events.VerbCheckpoint, CheckpointSeq: f.pos.InputSeq, StateHash: sha256.Sum256(fake)}
			subject := f.top.Partition.InputSubject(events.RoleCoord, "c1", events.NoJob, events.VerbCheckpoint)
			if _, err := f.js.Publish(ctx, subject, events.AppendInputBody(nil, &in)); err != nil {
				t.Error(err)
			}
		}
	})
	oi, err := f.h.Out.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := f.pos.AnchorSeq + 1; seq <= oi.State.LastSeq; seq++ {
		m, err := f.h.Out.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := events.DecodeDecision(m.Data); err == nil && d.Kind == events.KindCheckpointed && d.Checkpoint.InputSeq == f.pos.InputSeq {
			f.anchors[d.Checkpoint.StateHash] = seq
		}
	}
	for _, fake := range fakes {
		if f.anchors[sha256.Sum256(fake)] == 0 {
			t.Fatalf("no checkpointed decision claims the hash of a fake")
		}
	}
}

// headers returns the genuine snapshot's headers, changed by mod.
func (f *fixture) headers(mod func(h nats.Header)) nats.Header {
	h := nats.Header{}
	for k, v := range f.hdr {
		h[k] = append([]string(nil), v...)
	}
	if mod != nil {
		mod(h)
	}
	return h
}

// anchoredAs returns the headers of the genuine snapshot with the anchor
// and hash of fake.
func (f *fixture) anchoredAs(fake []byte) nats.Header {
	return f.headers(func(h nats.Header) {
		sum := sha256.Sum256(fake)
		h.Set(streams.HeaderSnapshotHash, hex.EncodeToString(sum[:]))
		h.Set(streams.HeaderSnapshotAnchor, fmt.Sprint(f.anchors[sum]))
	})
}

// put stores data under hdr, in chunks of chunk bytes (0: the default).
func (f *fixture) put(t *testing.T, data []byte, hdr nats.Header, chunk uint32) *jetstream.ObjectInfo {
	t.Helper()
	meta := jetstream.ObjectMeta{Name: streams.SnapshotObject, Headers: hdr}
	if chunk > 0 {
		meta.Opts = &jetstream.ObjectMetaOptions{ChunkSize: chunk}
	}
	info, err := f.h.Snapshots.Put(context.Background(), meta, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// rewriteMeta rewrites the stored object's description (as anyone who
// may store the snapshot can).
func (f *fixture) rewriteMeta(t *testing.T, mod func(info *jetstream.ObjectInfo)) {
	t.Helper()
	ctx := context.Background()
	subject := "$O." + f.top.SnapshotBucket() + ".M." + base64.URLEncoding.EncodeToString([]byte(streams.SnapshotObject))
	m, err := f.h.SnapshotStream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	mod(&info)
	body, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := f.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
}

// replacing reads the object store's stream (the chunks) and, once at
// chunks of a version were read, stores another version (replace) before
// the next read, times times (-1: every version).
type replacing struct {
	streams.MsgGetter
	at, times int
	replace   func()

	mu             sync.Mutex
	read, replaced int
}

func (r *replacing) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	r.mu.Lock()
	if r.read == r.at && (r.times < 0 || r.replaced < r.times) {
		r.replace()
		r.replaced++
		r.read = 0 // this read finds the chunk purged
	} else {
		r.read++
	}
	r.mu.Unlock()
	return r.MsgGetter.GetMsg(ctx, seq, opts...)
}

// withCRC returns b with its CRC-32C trailer recomputed.
func withCRC(b []byte) []byte {
	body := bytes.Clone(b[:len(b)-4])
	return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

// The one reader of the stored snapshot, on a real server, against a
// snapshot a real coordinator stored and anchored: what it returns when
// the snapshot checks out, and the typed error of each way it does not
// (Read: as a coordinator, the archive and the read models read it;
// Inspect: as the auditor does). None of them waits for the context's end.
func TestReader(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	// Fakes a coordinator anchored (a checkpoint claiming their hash for
	// the snapshot's input): bytes of an unknown format; the genuine state
	// with a rules revision its format cannot hold; the state after
	// another input.
	unknown := append([]byte("TNRSNAP9"), f.data[8:]...)
	badRev := bytes.Clone(f.data)
	// The format (the magic's last byte) is the current revision's;
	// revision 5 is format 5's, which no later format holds.
	if string(badRev[:7]) != "TNRSNAP" || badRev[7] <= '5' || badRev[7] > '9' || badRev[8] != byte(events.CurrentRevision) {
		t.Fatalf("the genuine snapshot starts %q %d: the fake needs updating", badRev[:8], badRev[8])
	}
	format := badRev[7]
	badRev[8] = 5 // revision 5 is format 5's
	badRev = withCRC(badRev)
	other := func() []byte {
		p := projector.NewPartition(f.top.Partition)
		for seq := uint64(1); seq < f.pos.InputSeq; seq++ {
			m, err := f.h.In.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			subject, _ := f.top.Partition.StripInput(m.Subject)
			if _, err := p.Step(events.Raw{Seq: m.Sequence, Time: m.Time.UnixNano(), Subject: subject, Body: m.Data}); err != nil {
				t.Fatal(err)
			}
		}
		return p.Snapshot()
	}()
	f.anchor(t, unknown, badRev, other)

	truncated := f.data[:len(f.data)-100]
	flipped := bytes.Clone(f.data)
	flipped[len(flipped)/2] ^= 1

	// A decision stream that does not answer: read through a closed
	// connection.
	nc2, js2 := testutil.Connect(t, f.nc.ConnectedUrl())
	h2, err := streams.Open(ctx, js2, f.top)
	if err != nil {
		t.Fatal(err)
	}
	nc2.Close()

	type want struct {
		kind   error  // nil: it checks out
		reason string // in the error
	}
	cases := []struct {
		name string
		// setup stores the case's snapshot; it may return the reader's
		// object store and decision stream (nil: the fixture's).
		setup   func(t *testing.T) (snapshot.Objects, streams.MsgGetter)
		read    want
		inspect want // zero: as read
		aheads  int  // Read's calls of Ahead
	}{
		{name: "genuine", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.hdr, 0)
			return nil, nil
		}, aheads: 1},
		{name: "genuine, in chunks of 64 bytes", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			if info := f.put(t, f.data, f.hdr, 64); info.Chunks < 4 {
				t.Fatalf("%d chunks: the test means nothing", info.Chunks)
			}
			return nil, nil
		}, aheads: 1},
		{name: "none stored", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.hdr, 0)
			if err := f.h.Snapshots.Delete(ctx, streams.SnapshotObject); err != nil {
				t.Fatal(err)
			}
			return nil, nil
		}, read: want{kind: snapshot.ErrNone}},
		{name: "replaced while read, once", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			if info := f.put(t, f.data, f.hdr, 64); info.Chunks < 4 {
				t.Fatalf("%d chunks: the test means nothing", info.Chunks)
			}
			r := &replacing{MsgGetter: f.h.SnapshotStream, at: 2, times: 1, replace: func() { f.put(t, f.data, f.hdr, 0) }}
			return snapshot.NewObjects(f.top.SnapshotBucket(), f.h.Snapshots, r), nil
		}, aheads: 2},
		{name: "replaced while read, every time", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.hdr, 64)
			r := &replacing{MsgGetter: f.h.SnapshotStream, at: 1, times: -1, replace: func() { f.put(t, f.data, f.hdr, 64) }}
			return snapshot.NewObjects(f.top.SnapshotBucket(), f.h.Snapshots, r), nil
		}, read: want{snapshot.ErrReplaced, "replaced after 1 of its"}, aheads: snapshot.ReplacedTries},
		{name: "chunks gone, its description stays", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			info := f.put(t, f.data, f.hdr, 0)
			if err := f.h.SnapshotStream.Purge(ctx, jetstream.WithPurgeSubject("$O."+f.top.SnapshotBucket()+".C."+info.NUID)); err != nil {
				t.Fatal(err)
			}
			return nil, nil
		}, read: want{snapshot.ErrUnreadable, "chunk 1 of 1 is not in the object store's stream"}, aheads: snapshot.UnreadableTries},
		{name: "decision stream not answering", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.hdr, 0)
			return nil, h2.Out
		}, read: want{snapshot.ErrUnreadable, "connection closed"}},
		{name: "corrupt: digest rewritten", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.hdr, 0)
			f.rewriteMeta(t, func(info *jetstream.ObjectInfo) {
				sum := sha256.Sum256(flipped)
				info.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
			})
			return nil, nil
		}, read: want{snapshot.ErrCorrupt, "do not match the digest"}, aheads: 1},
		{name: "corrupt: a size of 2^62 bytes", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.hdr, 0)
			f.rewriteMeta(t, func(info *jetstream.ObjectInfo) { info.Size = 1 << 62 })
			return nil, nil
		}, read: want{snapshot.ErrCorrupt, "its metadata says 4611686018427387904"}, aheads: 1},
		{name: "truncated, under the genuine headers", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, truncated, f.hdr, 0)
			return nil, nil
		}, read: want{snapshot.ErrMismatch, "its bytes do not hash to the state hash anchored"}, inspect: want{snapshot.ErrFormat, "checksum mismatch"}, aheads: 1},
		{name: "a bit flipped, under the genuine headers", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, flipped, f.hdr, 0)
			return nil, nil
		}, read: want{snapshot.ErrMismatch, "its bytes do not hash to the state hash anchored"}, inspect: want{snapshot.ErrFormat, "checksum mismatch"}, aheads: 1},
		{name: "no anchor", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.headers(func(h nats.Header) {
				h.Del(streams.HeaderSnapshotAnchor)
				h.Del(streams.HeaderSnapshotHash)
			}), 0)
			return nil, nil
		}, read: want{snapshot.ErrUnanchored, "no state hash anchored"}},
		{name: "unreadable position", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.headers(func(h nats.Header) { h.Set(streams.HeaderSnapshotInput, "x") }), 0)
			return nil, nil
		}, read: want{snapshot.ErrMismatch, "unreadable position"}},
		{name: "not the last decision of its input", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.headers(func(h nats.Header) { h.Set(streams.HeaderSnapshotDecision, fmt.Sprint(f.pos.DecisionSeq-1)) }), 0)
			return nil, nil
		}, read: want{snapshot.ErrMismatch, "is not the last of input"}},
		{name: "another chain value", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.headers(func(h nats.Header) { h.Set(streams.HeaderSnapshotChain, strings.Repeat("ab", 32)) }), 0)
			return nil, nil
		}, read: want{snapshot.ErrMismatch, "its position, has chain value"}},
		{name: "a hash its anchor does not claim", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, flipped, f.headers(func(h nats.Header) {
				sum := sha256.Sum256(flipped)
				h.Set(streams.HeaderSnapshotHash, hex.EncodeToString(sum[:]))
			}), 0)
			return nil, nil
		}, read: want{snapshot.ErrMismatch, "claims input"}},
		{name: "an anchor that is no checkpoint", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.headers(func(h nats.Header) { h.Set(streams.HeaderSnapshotAnchor, "1") }), 0)
			return nil, nil
		}, read: want{snapshot.ErrMismatch, "not a checkpointed one"}},
		{name: "unknown format, anchored", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, unknown, f.anchoredAs(unknown), 0)
			return nil, nil
		}, read: want{snapshot.ErrFormat, "missing header"}, aheads: 1},
		{name: "a revision its format cannot hold, anchored", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, badRev, f.anchoredAs(badRev), 0)
			return nil, nil
		}, read: want{snapshot.ErrFormat, fmt.Sprintf("revision 5 in a format %c snapshot", format)}, aheads: 1},
		{name: "the state after another input, anchored", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, other, f.anchoredAs(other), 0)
			return nil, nil
		}, read: want{snapshot.ErrMismatch, fmt.Sprintf("it holds the state after input %d, its headers say %d", f.pos.InputSeq-1, f.pos.InputSeq)}, aheads: 1},
		// Last: the next version stored would purge the chunks of that
		// NUID, its own among them (the client's Put purges by the
		// description's NUID).
		{name: "corrupt: a wildcard for its NUID", setup: func(t *testing.T) (snapshot.Objects, streams.MsgGetter) {
			f.put(t, f.data, f.hdr, 0)
			f.rewriteMeta(t, func(info *jetstream.ObjectInfo) { info.NUID = ">" })
			return nil, nil
		}, read: want{snapshot.ErrCorrupt, `names no stored object (NUID ">")`}, aheads: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs, dec := c.setup(t)
			if objs == nil {
				objs = snapshot.JetStream(f.top, f.h)
			}
			if dec == nil {
				dec = f.h.Out
			}
			var aheads []streams.SnapshotAnchor
			rd := snapshot.Reader{Objects: objs, Decisions: dec, Partition: f.top.Partition,
				Ahead: func(a streams.SnapshotAnchor) { aheads = append(aheads, a) }}
			check := func(what string, s *snapshot.Snapshot, err error, w want, deadline context.Context) {
				t.Helper()
				if deadline.Err() != nil {
					t.Fatalf("%s: returned after its context's end: %v", what, err)
				}
				if w.kind == nil {
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if s.State == nil || s.State.LastSeq() != f.pos.InputSeq || !bytes.Equal(s.Data, f.data) || s.Anchor != f.pos {
						t.Fatalf("%s: snapshot at %+v, %d bytes", what, s.Anchor, len(s.Data))
					}
					return
				}
				var se *snapshot.Error
				if !errors.Is(err, w.kind) || !errors.As(err, &se) || !strings.Contains(err.Error(), w.reason) {
					t.Fatalf("%s: %v, want %v saying %q", what, err, w.kind, w.reason)
				}
			}
			deadline, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			s, err := rd.Read(deadline)
			check("Read", s, err, c.read, deadline)
			if len(aheads) != c.aheads {
				t.Fatalf("Read called Ahead %d times, want %d", len(aheads), c.aheads)
			}
			if len(aheads) > 0 && (aheads[0].InputSeq != f.pos.InputSeq || aheads[0].DecisionSeq != f.pos.DecisionSeq) {
				t.Fatalf("Ahead at %+v, want the position of %+v", aheads[0], f.pos)
			}
			if c.name == "replaced while read, once" || c.name == "replaced while read, every time" {
				// Inspect reads its own versions (the replacements above
				// counted Read's).
				objs, _ = c.setup(t)
				rd.Objects = objs
			}
			w := c.inspect
			if w == (want{}) {
				w = c.read
			}
			s, err = rd.Inspect(deadline)
			check("Inspect", s, err, w, deadline)
			// A finding about the snapshot comes with what was read.
			if errors.Is(err, snapshot.ErrMismatch) || errors.Is(err, snapshot.ErrUnanchored) || errors.Is(err, snapshot.ErrFormat) {
				if s == nil || s.Data == nil || s.Info == nil {
					t.Fatalf("Inspect: %v, and nothing of what it read", err)
				}
			}
		})
	}
}
