package audit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
	if !r.Snapshot.Verified || snapAt <= 4 {
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
