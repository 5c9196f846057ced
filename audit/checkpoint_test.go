package audit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// coord is a real coordinator deciding e's log.
type coord struct {
	e    *env
	c    *coordinator.Coordinator
	stop func()
}

// startCoord runs a coordinator (id c1, snapshots every few inputs and
// never on a timer, so that the stored snapshot only changes with inputs)
// on e's log; stop ends it (the test's cleanup does too).
func startCoord(t *testing.T, e *env, every int) *coord {
	t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, Topology: e.top, LeaderTTL: 5 * time.Second,
		SnapshotEvery: every, SnapshotInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	co := &coord{e: e, c: c}
	co.stop = func() {
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
	t.Cleanup(co.stop)
	return co
}

// settle waits until the coordinator has decided every stored input and
// the stored snapshot is the one its last checkpoint claims, and that
// stays so for a while (a checkpoint is appended asynchronously, right
// after the input that made a snapshot due).
func (co *coord) settle(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	settled := func() bool {
		ii, err1 := co.e.h.In.Info(ctx)
		oi, err2 := co.e.h.Out.Info(ctx)
		st := co.c.Stats()
		if err1 != nil || err2 != nil || !st.Live || st.InputsFolded != ii.State.LastSeq || st.DecisionsStored != oi.State.LastSeq {
			return false
		}
		claims := checkpointed(t, co.e, "c1")
		return len(claims) == 0 || st.SnapshotSeq == claims[len(claims)-1].d.Checkpoint.InputSeq
	}
	deadline := time.Now().Add(30 * time.Second)
	for stable := 0; stable < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator did not settle: %+v", co.c.Stats())
		}
		if settled() {
			stable++
		} else {
			stable = 0
		}
	}
}

// checkpointedDecision is a checkpointed decision as stored.
type checkpointedDecision struct {
	seq uint64
	d   events.Decision
}

// checkpointed returns the checkpointed decisions of actor in the
// decision stream ("" for every actor's).
func checkpointed(t *testing.T, e *env, actor string) []checkpointedDecision {
	t.Helper()
	var out []checkpointedDecision
	for _, m := range e.readStream(t, e.top.DecisionStream()) {
		d, err := events.DecodeDecision(m.data)
		if err != nil {
			t.Fatal(err)
		}
		if d.Kind == events.KindCheckpointed && (actor == "" || d.Actor == actor) {
			out = append(out, checkpointedDecision{m.seq, d})
		}
	}
	return out
}

// stateAfter folds the stored inputs up to input s with a fresh projector,
// changing each raw input with mod first (nil: none), and returns the
// state's snapshot bytes.
func stateAfter(t *testing.T, e *env, s uint64, mod func(raw *events.Raw)) []byte {
	t.Helper()
	p := projector.NewPartition(e.top.Partition)
	for _, m := range e.readStream(t, e.top.InputStream()) {
		if m.seq > s {
			break
		}
		raw := events.Raw{Seq: m.seq, Time: m.time, Subject: m.subject, Body: m.data}
		if mod != nil {
			mod(&raw)
		}
		if _, err := p.Step(raw); err != nil {
			t.Fatal(err)
		}
	}
	return p.Snapshot()
}

// acquires publishes acquires of jobs j0, j1... by w1, three at a time,
// each time waiting for co to settle, until the log holds at least claims
// checkpoints of co (a snapshot is due every three inputs), and returns
// their sequences.
func acquires(t *testing.T, co *coord, claims int) []uint64 {
	t.Helper()
	co.settle(t) // live: the rules and the policy are inputs 1 and 2
	var seqs []uint64
	for len(checkpointed(t, co.e, "c1")) < claims {
		if len(seqs) > 30 {
			t.Fatalf("%d acquires, %d checkpoints", len(seqs), len(checkpointed(t, co.e, "c1")))
		}
		for range 3 {
			body := `{"v":1,"lease_ms":600000}`
			seqs = append(seqs, co.e.publish(t, in(fmt.Sprintf("worker.w1.j%d.acquire", len(seqs)), body))...)
		}
		co.settle(t)
	}
	return seqs
}

// Every checkpoint claim in the log is checked by the audit (PROTOCOL.md
// §19 point 5): a clean log with several checkpoints of a real coordinator
// audits clean with every claim verified, from the first input and from
// the stored snapshot. A claim forged by a coordinator-role publisher (a
// wrong state hash for an earlier input), which the fold records as it
// records any claim, is exactly one finding naming it; from a snapshot
// taken after the input it names, it cannot be checked and is a note.
func TestCheckpointClaimsChecked(t *testing.T) {
	e := newEnv(t, memTopology)
	co := startCoord(t, e, 3)
	acquires(t, co, 3)

	claims := checkpointed(t, e, "c1")
	r := e.audit(t, audit.Config{})
	requireClean(t, r)
	if n := uint64(len(claims)); n < 3 || r.Checkpoints.Claims != n || r.Checkpoints.Verified != n || r.Checkpoints.Unchecked.Count != 0 {
		t.Fatalf("%d claims in the log; checkpoints %+v:\n%s", n, r.Checkpoints, summary(r))
	}
	if want := fmt.Sprintf("checkpoints: 0 (%d claims, %d verified)\n", len(claims), len(claims)); !strings.Contains(summary(r), want) {
		t.Fatalf("no %q in the summary:\n%s", want, summary(r))
	}
	snapAt := r.Snapshot.InputSeq
	if !r.Snapshot.Anchored || !r.Snapshot.Verified || snapAt <= 4 {
		t.Fatalf("snapshot %+v", r.Snapshot)
	}
	// From the stored snapshot: the claim anchoring it comes after it,
	// and is checked against the restored state.
	r2 := e.audit(t, audit.Config{From: snapAt + 1})
	requireClean(t, r2)
	if !r2.Snapshot.Used || r2.From != snapAt+1 || r2.Checkpoints.Verified < 1 || r2.Checkpoints.Verified != r2.Checkpoints.Claims {
		t.Fatalf("from %d: snapshot %+v, checkpoints %+v", snapAt+1, r2.Snapshot, r2.Checkpoints)
	}

	// A forged claim: a wrong hash for input 4 (the right one with a bit
	// flipped), from another coordinator id.
	right := sha256.Sum256(stateAfter(t, e, 4, nil))
	wrong := right
	wrong[0] ^= 1
	forged := e.publish(t, in("coord.c9._.checkpoint", fmt.Sprintf(`{"v":1,"input_seq":4,"state_hash":%q}`, hex.EncodeToString(wrong[:]))))[0]
	co.settle(t)
	co.stop()
	// The fold recorded it, as it records every claim.
	var recorded bool
	for _, c := range checkpointed(t, e, "c9") {
		recorded = recorded || c.d.Cause == forged && c.d.Checkpoint.InputSeq == 4 && c.d.Checkpoint.StateHash == wrong
	}
	if !recorded {
		t.Fatalf("no checkpointed decision for the forged checkpoint %d", forged)
	}

	r = e.audit(t, audit.Config{})
	only(t, r, "checkpoints")
	if r.OK() || r.Problems() != 1 || r.Verified != r.Decisions || r.Checkpoints.Claims != uint64(len(claims)+1) ||
		r.Checkpoints.Verified != uint64(len(claims)) {
		t.Fatalf("forged claim: problems %d, checkpoints %+v:\n%s", r.Problems(), r.Checkpoints, summary(r))
	}
	want := audit.CheckpointClaim{Input: forged, Actor: "c9", InputSeq: 4, Claimed: wrong, Replayed: right}
	if got := r.Checkpoints.Mismatches.Items[0]; got != want {
		t.Fatalf("finding %+v, want %+v", got, want)
	}
	line := fmt.Sprintf("  checkpoint at input %d (c9) claims state hash %x for input 4; the replay gives %x\n", forged, wrong, right)
	if s := summary(r); !strings.Contains(s, line) || !strings.Contains(s, "result:      FAILED: 1 problems") {
		t.Fatalf("no %q in the summary:\n%s", line, s)
	}
	var js struct {
		Checkpoints struct {
			Claims, Verified uint64
			Mismatches       struct {
				Count int
				Items []struct {
					Input    uint64 `json:"input"`
					InputSeq uint64 `json:"input_seq"`
					Claimed  string `json:"claimed"`
					Replayed string `json:"replayed"`
				}
			}
		}
	}
	b, err := json.Marshal(r)
	if err != nil || json.Unmarshal(b, &js) != nil {
		t.Fatalf("json: %v", err)
	}
	if m := js.Checkpoints.Mismatches; m.Count != 1 || len(m.Items) != 1 || m.Items[0].Input != forged || m.Items[0].InputSeq != 4 ||
		m.Items[0].Claimed != hex.EncodeToString(wrong[:]) || m.Items[0].Replayed != hex.EncodeToString(right[:]) {
		t.Fatalf("json report: %s", b)
	}

	// From the snapshot (after input snapAt > 4): the forged checkpoint is
	// replayed, the input it names is not: a note, not a finding.
	r2 = e.audit(t, audit.Config{From: snapAt + 1})
	requireClean(t, r2)
	if u := r2.Checkpoints.Unchecked; !r2.Snapshot.Used || u.Count != 1 || u.Items[0].Input != forged ||
		!strings.Contains(u.Items[0].Note, fmt.Sprintf("did not replay input 4 (it starts after input %d)", snapAt)) {
		t.Fatalf("from %d: snapshot %+v, checkpoints %+v", snapAt+1, r2.Snapshot, r2.Checkpoints)
	}
	if s := summary(r2); !strings.Contains(s, fmt.Sprintf("  note: checkpoint at input %d (c9) claims state hash %x for input 4: not checked", forged, wrong)) {
		t.Fatalf("summary:\n%s", s)
	}
}

// --from checks the snapshot it starts from as a coordinator does (issue
// "Nothing bricks a deployment"): a snapshot rewritten with a valid
// checksum but another state (the acquire of job j1 made by w2 instead of
// w1), under its original headers or under headers claiming the fake
// state's hash, is a finding with the reason, and the audit replays from
// the first input, where the log is otherwise clean. A snapshot without an
// anchor is not used either, but is no finding. The genuine snapshot is
// used.
func TestFromChecksSnapshotAnchor(t *testing.T) {
	e := newEnv(t, memTopology)
	co := startCoord(t, e, 3)
	acq := acquires(t, co, 2)
	co.stop()

	ctx := context.Background()
	info, err := e.h.Snapshots.GetInfo(ctx, audit.SnapshotObject)
	if err != nil {
		t.Fatal(err)
	}
	data, err := e.h.Snapshots.GetBytes(ctx, audit.SnapshotObject)
	if err != nil {
		t.Fatal(err)
	}
	headers := info.Headers
	var snap projector.Projector
	if err := snap.Restore(data); err != nil {
		t.Fatal(err)
	}
	s := snap.LastSeq()
	if s <= acq[1] {
		t.Fatalf("the snapshot covers input %d, not the acquire of j1 (input %d)", s, acq[1])
	}
	fake := stateAfter(t, e, s, func(raw *events.Raw) {
		if raw.Seq == acq[1] {
			raw.Subject = strings.Replace(raw.Subject, ".w1.", ".w2.", 1)
		}
	})
	if err := new(projector.Projector).Restore(fake); err != nil || bytes.Equal(fake, data) {
		t.Fatalf("the fake state restores (%v) and differs from the real one", err)
	}
	fakeSum := sha256.Sum256(fake)
	from := s + 1

	// The genuine snapshot, anchored: used.
	r := e.audit(t, audit.Config{From: from})
	requireClean(t, r)
	if sc := r.Snapshot; !sc.Used || !sc.Anchored || sc.AnchorSeq == 0 || r.From != from ||
		!strings.Contains(summary(r), fmt.Sprintf("snapshot (input %d, decision %d, anchor %d, %d bytes): its anchor and position checked, audit started after it", s, sc.DecisionSeq, sc.AnchorSeq, len(data))) {
		t.Fatalf("genuine snapshot: %+v:\n%s", sc, summary(r))
	}
	anchor := r.Snapshot.AnchorSeq

	put := func(t *testing.T, data []byte, mod func(h nats.Header)) {
		t.Helper()
		h := nats.Header{}
		for k, v := range headers {
			h[k] = append([]string(nil), v...)
		}
		mod(h)
		if _, err := e.h.Snapshots.Put(ctx, jetstream.ObjectMeta{Name: audit.SnapshotObject, Headers: h}, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		headers func(h nats.Header)
		problem string
	}{
		// The fake state under the real headers: its bytes do not hash to
		// the anchored hash.
		{"bytes", func(nats.Header) {}, fmt.Sprintf("its bytes do not hash to the state hash anchored at decision %d (they hash to %x", anchor, fakeSum)},
		// Headers claiming the fake state's hash: the anchor claims another.
		{"hash", func(h nats.Header) { h.Set(audit.HeaderSnapshotHash, hex.EncodeToString(fakeSum[:])) },
			fmt.Sprintf("its anchor, decision %d, claims input %d with state hash %x; the snapshot says input %d with %x", anchor, s, sha256.Sum256(data), s, fakeSum)},
		// An anchor that is no checkpointed decision.
		{"anchor", func(h nats.Header) { h.Set(audit.HeaderSnapshotAnchor, "1") },
			"its anchor, decision 1, is a rules_set decision, not a checkpointed one"}, // the coordinator's rules input is input 1
	} {
		t.Run(c.name, func(t *testing.T) {
			put(t, fake, c.headers)
			for _, from := range []uint64{0, from} {
				r := e.audit(t, audit.Config{From: from})
				only(t, r)
				sc := r.Snapshot
				if r.OK() || r.Problems() != 1 || sc.Used || sc.Anchored || sc.Verified || r.From != 1 || !strings.Contains(sc.Problem, c.problem) ||
					!strings.Contains(sc.Problem, fmt.Sprintf("the fold's state after input %d differs from the stored snapshot", s)) ||
					r.Checkpoints.Verified != r.Checkpoints.Claims || r.Verified != r.Decisions {
					t.Fatalf("from %d: snapshot %+v:\n%s", from, sc, summary(r))
				}
				if want := "not used: replaying from the first input"; from > 1 && !strings.Contains(sc.Note, want) {
					t.Fatalf("from %d: note %q, want %q", from, sc.Note, want)
				}
				if !strings.Contains(summary(r), "PROBLEM: "+c.problem) {
					t.Fatalf("from %d: summary:\n%s", from, summary(r))
				}
			}
		})
	}
	// The genuine state and anchor under another chain value: the chain
	// after it would continue from a value the log does not hold.
	t.Run("chain", func(t *testing.T) {
		put(t, data, func(h nats.Header) {
			h.Set(audit.HeaderSnapshotChain, strings.Repeat("ab", 32))
		})
		r := e.audit(t, audit.Config{From: from})
		only(t, r)
		sc := r.Snapshot
		if r.Problems() != 1 || sc.Used || r.From != 1 || !strings.Contains(sc.Problem, fmt.Sprintf("decision %d, its position, has chain value", sc.DecisionSeq)) ||
			!strings.Contains(sc.Problem, "the snapshot says "+strings.Repeat("ab", 32)) {
			t.Fatalf("snapshot with another chain value: %+v:\n%s", sc, summary(r))
		}
	})
	t.Run("no anchor", func(t *testing.T) {
		put(t, data, func(h nats.Header) {
			h.Del(audit.HeaderSnapshotAnchor)
			h.Del(audit.HeaderSnapshotHash)
		})
		r := e.audit(t, audit.Config{From: from})
		requireClean(t, r)
		if sc := r.Snapshot; sc.Used || sc.Anchored || !sc.Verified || sc.Problem != "" || r.From != 1 ||
			!strings.Contains(sc.Note, "no state hash anchored in the decision stream") || !strings.Contains(sc.Note, "not used: replaying from the first input") {
			t.Fatalf("unanchored snapshot: %+v", sc)
		}
	})
}
