package audit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// memTopology keeps test logs in memory: fast, and the lock-down is the same.
var memTopology = streams.Topology{Storage: jetstream.MemoryStorage}

// env is a real embedded server with the topology created.
type env struct {
	srv *embedded.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	h   *streams.Handles
	top streams.Topology
}

func newEnv(t testing.TB, top streams.Topology, opts ...testutil.Option) *env {
	t.Helper()
	srv := testutil.StartServer(t, opts...)
	nc, js := testutil.Connect(t, srv.ClientURL())
	h, err := streams.Ensure(context.Background(), js, top, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The tests write their logs by hand, no coordinator ends the genesis.
	if h.In, err = streams.EndGenesis(context.Background(), js, top); err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, nc: nc, js: js, h: h, top: top}
}

// remakeStreams deletes the input and decision streams and makes them
// again, empty.
func (e *env) remakeStreams(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{e.top.InputStream(), e.top.DecisionStream()} {
		if err := e.js.DeleteStream(ctx, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	h, err := streams.Ensure(ctx, e.js, e.top, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if h.In, err = streams.EndGenesis(ctx, e.js, e.top); err != nil {
		t.Fatal(err)
	}
	e.h = h
}

// input is one input to publish: subject tail (after tenure.in.) and body.
type input struct {
	subject, body string
}

func in(subject, body string) input { return input{subject, body} }

// publish stores inputs one by one and returns their sequences.
func (e *env) publish(t testing.TB, ins ...input) []uint64 {
	t.Helper()
	var seqs []uint64
	for _, x := range ins {
		ack, err := e.js.Publish(context.Background(), events.InputPrefix+"."+x.subject, []byte(x.body))
		if err != nil {
			t.Fatalf("publish %s: %v", x.subject, err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	return seqs
}

// stored is a message read back from a stream.
type stored struct {
	seq     uint64
	time    int64
	subject string
	data    []byte
	header  nats.Header
}

// readStream reads every message of a stream with direct gets (small streams).
func (e *env) readStream(t testing.TB, name string) []stored {
	t.Helper()
	ctx := context.Background()
	s, err := e.js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []stored
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, stored{seq: m.Sequence, time: m.Time.UnixNano(), subject: m.Subject, data: m.Data, header: m.Header})
	}
	return out
}

// decision is a decision to append, as the coordinator would.
type decision struct {
	subject string
	body    []byte
	cause   string // Tenure-Cause ("" to omit the headers)
	index   string // Tenure-N
	msgID   string
	d       events.Decision
	// chain, when set, gives the Tenure-Chain header from the right value
	// ("": none); appendDecisions chains the next decision from the right
	// value regardless.
	chain func(right events.Chain) string
}

// derive folds stored inputs (skipping those in skip) and returns the
// decisions a coordinator would append.
func derive(t testing.TB, inputs []stored, skip ...uint64) []decision {
	t.Helper()
	p := projector.New()
	var out []decision
outer:
	for _, x := range inputs {
		for _, s := range skip {
			if x.seq == s {
				continue outer
			}
		}
		ds, err := p.Step(events.Raw{Seq: x.seq, Time: x.time, Subject: x.subject, Body: x.data})
		if err != nil {
			t.Fatal(err)
		}
		for i := range ds {
			d := &ds[i]
			out = append(out, decision{
				subject: events.DecisionSubject(d), body: events.AppendDecision(nil, d),
				cause: strconv.FormatUint(d.Cause, 10), index: fmt.Sprintf("%d/%d", d.N, d.Of),
				msgID: events.DecisionMsgID(d.Cause, d.N), d: *d,
			})
		}
	}
	return out
}

func (d decision) msg() *nats.Msg {
	m := &nats.Msg{Subject: d.subject, Data: d.body, Header: nats.Header{}}
	if d.cause != "" || d.index != "" {
		m.Header.Set(events.HeaderCause, d.cause)
		m.Header.Set(events.HeaderIndex, d.index)
	}
	if d.msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, d.msgID)
	}
	return m
}

// appendDecisions writes decisions to the decision stream, bypassing any
// coordinator, and returns their sequences.
func (e *env) appendDecisions(t testing.TB, ds []decision) []uint64 {
	t.Helper()
	var seqs []uint64
	prev, last := e.chainHead(t)
	for _, d := range ds {
		m := d.msg()
		// Chained as the coordinator chains (PROTOCOL.md §20), after the
		// decisions the stream holds.
		cause, n, of := headerIndex(m.Header)
		prev = events.NextChain(prev, last+1, cause, n, of, d.subject, d.body)
		m.Header.Set(events.HeaderChain, prev.String())
		if d.chain != nil {
			m.Header.Del(events.HeaderChain)
			if v := d.chain(prev); v != "" {
				m.Header.Set(events.HeaderChain, v)
			}
		}
		ack, err := e.js.PublishMsg(context.Background(), m)
		if err != nil {
			t.Fatalf("append decision %s: %v", d.subject, err)
		}
		if ack.Duplicate {
			t.Fatalf("decision %s deduplicated", d.subject)
		}
		if ack.Sequence != last+1 {
			t.Fatalf("decision %s stored at %d, want %d", d.subject, ack.Sequence, last+1)
		}
		last = ack.Sequence
		seqs = append(seqs, ack.Sequence)
	}
	return seqs
}

// chainHead returns the chain value of the decision stream's last decision
// and its sequence, computed over every stored decision.
func (e *env) chainHead(t testing.TB) (events.Chain, uint64) {
	t.Helper()
	var c events.Chain
	var last uint64
	for _, m := range e.readStream(t, e.top.DecisionStream()) {
		cause, n, of := headerIndex(m.header)
		c, last = events.NextChain(c, m.seq, cause, n, of, m.subject, m.data), m.seq
	}
	return c, last
}

// headerIndex reads the Tenure-Cause and Tenure-N headers as the chain
// hashes them (zero when they do not parse).
func headerIndex(h nats.Header) (cause uint64, n, of uint32) {
	c, err1 := strconv.ParseUint(h.Get(events.HeaderCause), 10, 64)
	var n64, of64 uint64
	a, b, _ := strings.Cut(h.Get(events.HeaderIndex), "/")
	n64, err2 := strconv.ParseUint(a, 10, 32)
	of64, err3 := strconv.ParseUint(b, 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || n64 >= of64 {
		return 0, 0, 0
	}
	return c, uint32(n64), uint32(of64)
}

// audit runs an audit and fails the test on error.
func (e *env) audit(t testing.TB, cfg audit.Config) *audit.Report {
	t.Helper()
	cfg.JS = e.js
	cfg.Topology = e.top
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := audit.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	return rep
}

// putSnapshot stores a snapshot object as an older Tenure did: without an
// anchor.
func (e *env) putSnapshot(t testing.TB, data []byte, inputSeq, decisionSeq string) {
	t.Helper()
	meta := jetstream.ObjectMeta{Name: audit.SnapshotObject, Headers: nats.Header{}}
	meta.Headers.Set(audit.HeaderSnapshotInput, inputSeq)
	meta.Headers.Set(audit.HeaderSnapshotDecision, decisionSeq)
	if _, err := e.h.Snapshots.Put(context.Background(), meta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// anchor appends to e's revision-1 log the rules input moving it to
// revision 2 and a checkpoint input claiming that the state after input s
// hashes to the hash of data, as a coordinator does before it stores a
// snapshot (PROTOCOL.md §19), and returns the stored inputs.
func (e *env) anchor(t testing.TB, s uint64, data []byte) []stored {
	t.Helper()
	sum := sha256.Sum256(data)
	e.publish(t,
		in("coord.c1._.rules", `{"v":1,"revision":2,"lease_key":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"}`),
		in("coord.c1._.checkpoint", fmt.Sprintf(`{"v":1,"input_seq":%d,"state_hash":"%x"}`, s, sum)))
	return e.readStream(t, e.top.InputStream())
}

// putAnchoredSnapshot stores a snapshot object as the coordinator does,
// anchored at decision anchorSeq (the checkpointed decision claiming its
// state hash).
func (e *env) putAnchoredSnapshot(t testing.TB, data []byte, inputSeq, decisionSeq string, anchorSeq uint64) {
	t.Helper()
	sum := sha256.Sum256(data)
	meta := jetstream.ObjectMeta{Name: audit.SnapshotObject, Headers: nats.Header{}}
	meta.Headers.Set(audit.HeaderSnapshotInput, inputSeq)
	meta.Headers.Set(audit.HeaderSnapshotDecision, decisionSeq)
	meta.Headers.Set(audit.HeaderSnapshotAnchor, strconv.FormatUint(anchorSeq, 10))
	meta.Headers.Set(audit.HeaderSnapshotHash, fmt.Sprintf("%x", sum))
	// The chain value of its decision, as stored (none if it is not).
	if seq, err := strconv.ParseUint(decisionSeq, 10, 64); err == nil {
		if m, err := e.h.Out.GetMsg(context.Background(), seq); err == nil {
			meta.Headers.Set(audit.HeaderSnapshotChain, m.Header.Get(events.HeaderChain))
		}
	}
	if _, err := e.h.Snapshots.Put(context.Background(), meta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// summary renders a report for failure messages.
func summary(r *audit.Report) string {
	var b bytes.Buffer
	_ = audit.WriteSummary(&b, r, 20)
	return b.String()
}

// requireClean fails unless r found nothing wrong.
func requireClean(t testing.TB, r *audit.Report) {
	t.Helper()
	if !r.OK() || r.Mismatches.Count+r.Missing.Count+r.Extra.Count+r.Orphans.Count+r.Holes.Count+r.Chain.Count != 0 || !r.HashesEqual() {
		t.Fatalf("audit of a clean log found problems:\n%s", summary(r))
	}
	if r.Verified != r.Decisions {
		t.Fatalf("verified %d of %d decisions:\n%s", r.Verified, r.Decisions, summary(r))
	}
	if cp := r.Checkpoints; cp.Mismatches.Count != 0 || cp.Verified+uint64(cp.Unchecked.Count) != cp.Claims {
		t.Fatalf("checkpoint claims: %+v:\n%s", cp, summary(r))
	}
}

// treeState describes every file under dir: path, size, modification time
// and content hash.
func treeState(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d", path, info.Mode(), info.Size(), info.ModTime().UnixNano())
		if !d.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
