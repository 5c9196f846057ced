package audit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// replacingJS is a JetStream context through which the snapshot reader
// of the audit reads the stored snapshot's chunks (from the snapshot
// bucket's stream, one by one): once it has read at chunks of a version,
// the next read first replaces the snapshot (replace), times
// times in all (-1: every time).
type replacingJS struct {
	jetstream.JetStream
	bucket  string
	at      int
	times   int
	replace func()

	mu       sync.Mutex
	read     int // chunks read since the last replacement
	replaced int
}

func (j *replacingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := j.JetStream.Stream(ctx, name)
	if err != nil || name != "OBJ_"+j.bucket {
		return s, err
	}
	return &replacingStream{Stream: s, j: j}, nil
}

type replacingStream struct {
	jetstream.Stream
	j *replacingJS
}

func (s *replacingStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	j := s.j
	j.mu.Lock()
	if j.read == j.at && (j.times < 0 || j.replaced < j.times) {
		j.replace()
		j.replaced++
		j.read = 0 // this read finds the chunk purged: the next version's are counted
	} else {
		j.read++
	}
	j.mu.Unlock()
	return s.Stream.GetMsg(ctx, seq, opts...)
}

// A coordinator storing a new snapshot while the audit reads the stored one
// purges the chunks being read. The audit's reader notices it (rather than
// waiting for chunks that never come) and reads the new version, which is
// used; replaced every time it is read, the snapshot is not used: the
// audit replays from the first input, and says why in the report and the
// log. (Before the one reader, the audit gave up on the snapshot the first
// time it was replaced.)
func TestSnapshotReplacedWhileRead(t *testing.T) {
	e := newEnv(t, memTopology)
	inputs := publishWorkload(t, e, -1, input{})
	p := projector.New()
	for _, x := range inputs[:5] {
		if _, err := p.Step(events.Raw{Seq: x.seq, Time: x.time, Subject: x.subject, Body: x.data}); err != nil {
			t.Fatal(err)
		}
	}
	good := p.Snapshot()          // inputs 1..5; decision 6 is the last of input 5
	inputs = e.anchor(t, 5, good) // anchored at decision 12
	e.appendDecisions(t, derive(t, inputs))
	// The version being read: 40 chunks of 128 KiB. (Its content does not
	// matter: it is never used; were it used, it would not restore.)
	big := make([]byte, 40<<17)
	rng := rand.NewChaCha8([32]byte{7})
	_, _ = rng.Read(big)

	for _, c := range []struct {
		name  string
		at    int // chunks read when the new version is stored
		times int
	}{
		{"before the first chunk", 0, 1},
		{"after the first chunk", 1, 1},
		{"after 20 chunks", 20, 1},
		{"every time", 0, -1},
	} {
		for _, from := range []uint64{0, 6} {
			e.putSnapshot(t, big, "5", "6")
			js := &replacingJS{JetStream: e.js, bucket: e.top.SnapshotBucket(), at: c.at, times: c.times,
				replace: func() { e.putAnchoredSnapshot(t, good, "5", "6", 12) }}
			var logs bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			r, err := audit.Run(ctx, audit.Config{JS: js, Topology: e.top, From: from,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			cancel()
			if err != nil {
				t.Fatalf("%s, from %d: %v", c.name, from, err)
			}
			if js.replaced == 0 {
				t.Fatalf("%s, from %d: the snapshot was never replaced", c.name, from)
			}
			requireClean(t, r)
			s := r.Snapshot
			if c.times > 0 {
				// Read again, the new version is used.
				if from > 1 && (!s.Used || r.From != 6) || from <= 1 && !s.Verified {
					t.Fatalf("%s, from %d: from %d, snapshot %+v", c.name, from, r.From, s)
				}
				continue
			}
			if js.replaced != 5 || r.From != 1 || r.Inputs != uint64(len(inputs)) || s == nil || s.Used || s.Verified || s.Problem != "" ||
				!strings.Contains(s.Note, "replaced while it was read") || s.InputSeq != 5 || s.DecisionSeq != 6 {
				t.Fatalf("%s, from %d: replaced %d times, from %d, inputs %d, snapshot %+v", c.name, from, js.replaced, r.From, r.Inputs, s)
			}
			if want := "replaying from the first input"; from > 1 && !strings.Contains(s.Note, want) {
				t.Fatalf("%s, from %d: note %q, want %q", c.name, from, s.Note, want)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "replaced while it was read") {
				t.Fatalf("%s, from %d: log:\n%s", c.name, from, logs.String())
			}
			var b bytes.Buffer
			if err := audit.WriteSummary(&b, r, 5); err != nil || !strings.Contains(b.String(), "snapshot: "+s.Note) {
				t.Fatalf("%s, from %d: summary:\n%s", c.name, from, b.String())
			}
		}
	}
}

// A snapshot whose chunks cannot be read (gone, while its metadata stays)
// is not used: the audit replays from the first input, notes it, and is
// otherwise clean. One whose chunks do not match the digest in its
// metadata is a finding.
func TestSnapshotUnreadableOrCorrupt(t *testing.T) {
	e := newEnv(t, memTopology)
	inputs := publishWorkload(t, e, -1, input{})
	e.appendDecisions(t, derive(t, inputs))
	p := projector.New()
	for _, x := range inputs[:5] {
		if _, err := p.Step(events.Raw{Seq: x.seq, Time: x.time, Subject: x.subject, Body: x.data}); err != nil {
			t.Fatal(err)
		}
	}
	good := p.Snapshot()
	ctx := context.Background()
	obj, err := e.js.Stream(ctx, "OBJ_"+e.top.SnapshotBucket())
	if err != nil {
		t.Fatal(err)
	}
	metaSubject := "$O." + e.top.SnapshotBucket() + ".M." + base64.URLEncoding.EncodeToString([]byte(audit.SnapshotObject))

	t.Run("chunks gone", func(t *testing.T) {
		e.putSnapshot(t, good, "5", "6")
		info, err := e.h.Snapshots.GetInfo(ctx, audit.SnapshotObject)
		if err != nil {
			t.Fatal(err)
		}
		if err := obj.Purge(ctx, jetstream.WithPurgeSubject("$O."+e.top.SnapshotBucket()+".C."+info.NUID)); err != nil {
			t.Fatal(err)
		}
		for _, from := range []uint64{0, 6} {
			var logs bytes.Buffer
			t0 := time.Now()
			r, err := audit.Run(ctx, audit.Config{JS: e.js, Topology: e.top, From: from, StallTimeout: time.Second,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("from %d: %v", from, err)
			}
			requireClean(t, r)
			if s := r.Snapshot; r.From != 1 || s == nil || s.Used || s.Problem != "" || !strings.Contains(s.Note, "could not be read") {
				t.Fatalf("from %d: from %d, snapshot %+v", from, r.From, s)
			}
			if !strings.Contains(logs.String(), "level=WARN") || time.Since(t0) > 10*time.Second {
				t.Fatalf("from %d: took %v, log:\n%s", from, time.Since(t0), logs.String())
			}
		}
	})
	// rewrite rewrites the stored object's description, as anyone who may
	// store the snapshot can.
	rewrite := func(t *testing.T, mod func(info *jetstream.ObjectInfo)) {
		t.Helper()
		m, err := obj.GetLastMsgForSubject(ctx, metaSubject)
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
		msg := &nats.Msg{Subject: metaSubject, Data: body, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		if _, err := e.js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		mod     func(info *jetstream.ObjectInfo)
		problem string
	}{
		{"digest mismatch", func(info *jetstream.ObjectInfo) {
			sum := sha256.Sum256(append(slices.Clone(good), 0))
			info.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
		}, "digest"},
		// A description claiming 2^62 bytes: the reader allocated that much
		// before it read a chunk (the audit panicked: makeslice: cap out of
		// range).
		{"a size of 2^62 bytes", func(info *jetstream.ObjectInfo) { info.Size = 1 << 62 }, "its metadata says 4611686018427387904"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.putSnapshot(t, good, "5", "6")
			rewrite(t, c.mod)
			for _, from := range []uint64{0, 6} {
				r := e.audit(t, audit.Config{From: from})
				if s := r.Snapshot; r.OK() || r.Problems() != 1 || s == nil || s.Used || !strings.Contains(s.Problem, c.problem) || r.From != 1 {
					t.Fatalf("from %d: snapshot %+v:\n%s", from, s, summary(r))
				}
			}
		})
	}
}

// Audits of a live log, while a real coordinator decides a stream of
// inputs and stores a snapshot after every one of them, all succeed: a
// snapshot replaced during a read, or stored after the audit took the
// streams' ends, never fails one.
func TestAuditWhileSnapshotsAreStored(t *testing.T) {
	e := newEnv(t, memTopology)
	nc, err := nats.Connect(e.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, Topology: memTopology, LeaderTTL: 5 * time.Second, SnapshotEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = c.Run(ctx) })
	var pubErr error
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			job := "j" + string(rune('a'+i%26))
			if _, err := e.js.Publish(ctx, events.InputPrefix+".worker.w1."+job+".acquire", []byte(`{"v":1,"lease_ms":60000}`)); err != nil && ctx.Err() == nil {
				pubErr = err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	defer func() {
		cancel()
		wg.Wait()
		if runErr != nil || pubErr != nil {
			t.Errorf("coordinator: %v; publisher: %v", runErr, pubErr)
		}
	}()
	testutil.WaitFor(t, 10*time.Second, "a snapshot stored", func() bool { return c.Stats().SnapshotSeq > 0 })
	used, replaced := 0, 0
	for i := range 30 {
		actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := audit.Run(actx, audit.Config{JS: e.js, Topology: e.top, From: 1 << 62})
		acancel()
		if err != nil {
			t.Fatalf("audit %d: %v", i, err)
		}
		if r.Snapshot == nil || r.Snapshot.Problem != "" {
			t.Fatalf("audit %d: snapshot %+v:\n%s", i, r.Snapshot, summary(r))
		}
		if r.Snapshot.Used {
			used++
		}
		if strings.Contains(r.Snapshot.Note, "replaced") {
			replaced++
		}
	}
	t.Logf("%d audits started from the snapshot, %d found it replaced while they read it", used, replaced)
	if used == 0 {
		t.Fatal("no audit started from the snapshot")
	}
}
