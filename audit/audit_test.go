package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// Every golden scenario of the fold, decided by a real coordinator on a
// real embedded server, audits clean: every decision verified, no finding,
// equal hashes; the coordinator's own snapshot checks out, both compared
// with the fold during a full replay and as the starting point of --from.
func TestGoldenScenariosAuditClean(t *testing.T) {
	files, err := filepath.Glob("../projector/testdata/*.txt")
	if err != nil || len(files) < 30 {
		t.Fatalf("golden files: %d (%v)", len(files), err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			srv := testutil.StartServer(t)
			nc, js := testutil.Connect(t, srv.ClientURL())
			h, err := streams.Ensure(context.Background(), js, streams.Topology{}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if h.In, err = streams.EndGenesis(context.Background(), js, streams.Topology{}); err != nil { // a log by hand
				t.Fatal(err)
			}
			e := &env{srv: srv, nc: nc, js: js, h: h}
			n := 0
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				if d.Cmd == "in" {
					raw, err := testutil.ScenarioInput(d, uint64(n+1))
					if err != nil {
						t.Fatal(err)
					}
					n++
					if _, err := js.Publish(context.Background(), raw.Subject, raw.Body); err != nil {
						t.Fatalf("publish: %v", err)
					}
				}
				return d.Expected // the fold's expectations are projector's TestGolden's business
			})
			runCoordinator(t, srv.ClientURL(), js)

			rep := e.audit(t, audit.Config{})
			if filepath.Base(path) == "rev2_checkpoint.txt" {
				// Its input 3 claims a made-up state hash for input 2:
				// the fold records the claim; the audit checks it.
				only(t, rep, "checkpoints")
				c := rep.Checkpoints.Mismatches.Items[0]
				if rep.Problems() != 1 || c.Input != 3 || c.InputSeq != 2 || c.Actor != "c1" ||
					c.Claimed.String() != "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff" || rep.Verified != rep.Decisions {
					t.Fatalf("the made-up claim: %+v:\n%s", c, summary(rep))
				}
			} else {
				requireClean(t, rep)
			}
			// The coordinator's own checkpoints (it snapshots after every input).
			if rep.Checkpoints.Verified == 0 {
				t.Fatalf("no checkpoint claim verified:\n%s", summary(rep))
			}
			if rep.Inputs < uint64(n) || rep.Decisions < uint64(n) {
				t.Fatalf("replayed %d inputs and %d decisions for %d published inputs", rep.Inputs, rep.Decisions, n)
			}
			if rep.Snapshot == nil || !rep.Snapshot.Verified {
				t.Fatalf("the coordinator's snapshot was not verified against the fold: %+v", rep.Snapshot)
			}
			// Again, from the snapshot.
			from := rep.Snapshot.InputSeq + 1
			rep2 := e.audit(t, audit.Config{From: from})
			requireClean(t, rep2)
			if !rep2.Snapshot.Used || !rep2.Snapshot.Anchored || rep2.From != from || rep2.Checkpoints.Verified == 0 {
				t.Fatalf("--from %d did not start from the snapshot: %+v, from %d", from, rep2.Snapshot, rep2.From)
			}
			if rep2.StoredHash != rep.StoredHash || rep2.FoldHash != rep.FoldHash {
				t.Fatal("hashes from the snapshot differ from a full replay's")
			}
			// The stored hash takes the projections of verified decisions
			// from the fold (their bytes are equal); decoding every stored
			// body instead gives the same hash.
			if got := decodedHash(t, e); got != rep.StoredHash {
				t.Fatalf("hash of the decoded stored decisions %s, audit's stored hash %s", got, rep.StoredHash)
			}
		})
	}
}

// decodedHash rebuilds the state hash from every stored decision, decoded.
func decodedHash(t *testing.T, e *env) audit.Hash {
	t.Helper()
	var r projector.Rebuilder
	var rules *projector.Rules
	for _, m := range e.readStream(t, "TENURE_OUT") {
		d, err := events.DecodeDecision(m.data)
		if err != nil {
			t.Fatal(err)
		}
		r.Add(&d)
		if d.Kind == events.KindRulesSet {
			// The key is in the rules input that caused it, never in a decision.
			var in events.Input
			for _, m := range e.readStream(t, "TENURE_IN") {
				if m.seq == d.Cause {
					if err := events.DecodeInput(m.subject, m.data, &in); err != nil {
						t.Fatal(err)
					}
				}
			}
			rules = &projector.Rules{Revision: d.Revision, LeaseKey: in.LeaseKey}
		}
	}
	h, err := r.Hash(nil, rules)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// runCoordinator runs a real coordinator (snapshots after every input) until it
// has decided every stored input, then stops it.
func runCoordinator(t *testing.T, url string, js jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 5 * time.Second, SnapshotEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator: %v", err)
		}
	}()
	testutil.WaitFor(t, 60*time.Second, "the coordinator to catch up and snapshot", func() bool {
		in, err1 := js.Stream(ctx, "TENURE_IN")
		out, err2 := js.Stream(ctx, "TENURE_OUT")
		if err1 != nil || err2 != nil {
			return false
		}
		ii, err1 := in.Info(ctx)
		oi, err2 := out.Info(ctx)
		st := c.Stats()
		return err1 == nil && err2 == nil && st.Live && st.InputsFolded == ii.State.LastSeq &&
			st.DecisionsStored == oi.State.LastSeq && st.SnapshotSeq > 0
	})
}

// workload is a small log touching three jobs: input 5 fires the expiry of
// j1 (its lease ran out during a pause) before renewing j2, so it causes
// two decisions. That needs inputs 2 to 4 stored before j1's lease runs
// out and input 5 after: publishWorkload checks the first with the stored
// times (and starts again on fresh streams when a loaded machine was too
// slow), and waits for the second.
var workload = []input{
	in("worker.w1.j1.acquire", `{"v":1,"lease_ms":400}`), // workloadLease
	in("worker.w2.j2.acquire", `{"v":1,"lease_ms":60000}`),
	in("ops.d1.j3.offer", `{"v":1,"holder":"w3"}`),
	in("worker.w3.j3.ack", `{"v":1,"lease_id":"L3","generation":1}`),
	in("worker.w2.j2.renew", `{"v":1,"lease_id":"L2","generation":1,"renew_seq":1}`),
	in("worker.w2.j2.progress", `{"v":1,"lease_id":"L2","generation":1,"progress_seq":1,"value":50}`),
	in("worker.w1.j1.renew", `{"v":1,"lease_id":"L1","generation":1,"renew_seq":1}`),
	in("worker.w3.j3.result", `{"v":1,"lease_id":"L3","generation":1,"outcome":"SUCCESS"}`),
	in("worker.w2.j2.result", `{"v":1,"lease_id":"L2","generation":1,"outcome":"SUCCESS"}`),
}

// The decisions of the workload, by index: the stored sequence is index+1.
var workloadKinds = []string{"1.0 granted", "2.0 granted", "3.0 offered", "4.0 acked", "5.0 expired",
	"5.1 renewed", "6.0 progressed", "7.0 lost_authority", "8.0 completed", "9.0 completed"}

// workloadLease is j1's lease in the workload.
const workloadLease = 400 * time.Millisecond

// publishWorkload stores the workload, with extra stored before workload
// input extraAt (0-based; -1 for none), and returns the stored inputs.
// Inputs 2 to 4 must be stored within j1's lease: if the stored times say
// they were not (a loaded machine), the streams are made again and the
// workload published again, up to five times. Input 5 is published once
// the lease has run out by the clock that stamps the stored times (the
// embedded server runs in this process).
func publishWorkload(t *testing.T, e *env, extraAt int, extra input) []stored {
	t.Helper()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if i == extraAt {
				e.publish(t, extra)
			}
			e.publish(t, workload[i])
		}
	}
	for attempt := 1; ; attempt++ {
		publish(0, 4)
		ins := e.readStream(t, e.top.InputStream())
		var acquired int64 // j1's acquire
		for _, x := range ins {
			if strings.HasSuffix(x.subject, ".j1.acquire") {
				acquired = x.time
			}
		}
		expiry := time.Unix(0, acquired).Add(workloadLease)
		if last := time.Unix(0, ins[len(ins)-1].time); last.Before(expiry) {
			time.Sleep(time.Until(expiry) + time.Millisecond) // j1's lease runs out
			publish(4, len(workload))
			return e.readStream(t, e.top.InputStream())
		}
		if attempt == 5 {
			t.Fatalf("inputs 1 to 4 took longer than j1's lease of %v to store, five times", workloadLease)
		}
		t.Logf("inputs 1 to 4 took %v to store, j1's lease is %v: again on new streams", time.Unix(0, ins[len(ins)-1].time).Sub(time.Unix(0, acquired)), workloadLease)
		e.remakeStreams(t)
	}
}

func checkWorkload(t *testing.T, ds []decision) {
	t.Helper()
	var got []string
	for _, d := range ds {
		got = append(got, strconv.FormatUint(d.d.Cause, 10)+"."+strconv.Itoa(int(d.d.N))+" "+d.d.Kind.String())
	}
	if !slices.Equal(got, workloadKinds) {
		t.Fatalf("workload decisions:\n got %q\nwant %q", got, workloadKinds)
	}
}

func forge(d decision, old, new string) decision {
	d.body = bytes.Replace(d.body, []byte(old), []byte(new), 1)
	d.msgID = "forged-" + d.msgID
	return d
}

// Tampering: the test appends the decisions itself, each case with one
// tampering, and the audit must report it with the right sequences.
func TestTampering(t *testing.T) {
	type tc struct {
		name   string
		tamper func(ds []decision) []decision
		check  func(t *testing.T, r *audit.Report)
		ok     bool // the log still counts as reproduced
	}
	cases := []tc{
		{
			name: "clean",
			ok:   true,
			check: func(t *testing.T, r *audit.Report) {
				requireClean(t, r)
				if r.Inputs != 9 || r.Decisions != 10 || r.Verified != 10 || r.Pending.Count != 0 {
					t.Fatalf("counts:\n%s", summary(r))
				}
			},
		},
		{
			name: "decision altered",
			tamper: func(ds []decision) []decision {
				ds[7] = forge(ds[7], `"kind":"lost_authority"`, `"kind":"renewed"`)
				return ds
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "mismatches")
				m := r.Mismatches.Items[0]
				if m.Seq != 8 || m.Cause != 7 || m.N != 0 || len(m.Diffs) != 1 || m.Diffs[0].Field != "kind" ||
					m.Diffs[0].Stored != "renewed" || m.Diffs[0].Derived != "lost_authority" {
					t.Fatalf("mismatch %+v", m)
				}
				if !r.HashesEqual() {
					t.Fatal("a kind alone is no state: hashes should be equal")
				}
			},
		},
		{
			name: "projection altered",
			tamper: func(ds []decision) []decision {
				ds[9] = forge(ds[9], `"state":"COMPLETED"`, `"state":"ACTIVE"`)
				return ds
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "mismatches", "hash")
				m := r.Mismatches.Items[0]
				if m.Seq != 10 || m.Cause != 9 || m.Diffs[0].Field != "job.state" || !strings.Contains(m.Summary(), "job.state ACTIVE≠COMPLETED") {
					t.Fatalf("mismatch %+v: %s", m, m.Summary())
				}
			},
		},
		{
			// The content is reproduced; the chain value of decision 6
			// names another history: a break at 6 and, since the chain goes
			// on from the stored value, at 7 (chained from the right one).
			name: "chain value altered",
			tamper: func(ds []decision) []decision {
				ds[5].chain = func(right events.Chain) string { right[31] ^= 1; return right.String() }
				return ds
			},
			check: func(t *testing.T, r *audit.Report) {
				onlyCounts(t, r, map[string]int{"chain": 2}, false)
				for i, seq := range []uint64{6, 7} {
					if b := r.Chain.Items[i]; b.Kind != audit.BreakLink || b.Seq != seq || !strings.Contains(b.Detail, "the chain breaks") {
						t.Fatalf("chain %+v", b)
					}
				}
				if r.Verified != 10 {
					t.Fatalf("verified %d, want 10", r.Verified)
				}
			},
		},
		{
			name: "chain value dropped",
			tamper: func(ds []decision) []decision {
				ds[5].chain = func(events.Chain) string { return "" }
				return ds
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "chain")
				if b := r.Chain.Items[0]; b.Kind != audit.BreakLink || b.Seq != 6 || !strings.Contains(b.Detail, "no Tenure-Chain header") {
					t.Fatalf("chain %+v", b)
				}
			},
		},
		{
			name: "one decision of two removed",
			tamper: func(ds []decision) []decision {
				return slices.Delete(ds, 5, 6)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "missing")
				if m := r.Missing.Items[0]; m.Cause != 5 || m.N != 1 || m.Of != 2 || m.Kind != "renewed" || m.Job != "j2" || m.Before != 6 {
					t.Fatalf("missing %+v", m)
				}
			},
		},
		{
			name: "the only decision of an input removed",
			tamper: func(ds []decision) []decision {
				return slices.Delete(ds, 7, 8)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "missing", "holes", "hash") // the lost renewal counted as late for j1
				if m := r.Missing.Items[0]; m.Cause != 7 || m.N != 0 || m.Before != 8 {
					t.Fatalf("missing %+v", m)
				}
				if h := r.Holes.Items[0]; h.Input != 7 || h.Subject != "tenure.in.worker.w1.j1.renew" || h.Decisions != 1 {
					t.Fatalf("hole %+v", h)
				}
			},
		},
		{
			name: "decision duplicated",
			tamper: func(ds []decision) []decision {
				dup := ds[3]
				dup.msgID = "again"
				return slices.Insert(ds, 4, dup)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "extra")
				if x := r.Extra.Items[0]; x.Seq != 5 || x.Cause != 4 || x.N != 0 || x.Why != audit.ExtraDuplicate || !strings.Contains(x.Detail, "at 4, with the same body") {
					t.Fatalf("extra %+v", x)
				}
				if r.Verified != 10 {
					t.Fatalf("verified %d", r.Verified)
				}
			},
		},
		{
			name: "fork: a decision of an earlier input appended again later",
			tamper: func(ds []decision) []decision {
				f := ds[1]
				f.msgID = "forged"
				return slices.Insert(ds, 6, f)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "extra")
				if x := r.Extra.Items[0]; x.Seq != 7 || x.Cause != 2 || x.N != 0 || x.Why != audit.ExtraFork || !strings.Contains(x.Detail, "after decision 5.1 (at 6)") {
					t.Fatalf("extra %+v", x)
				}
			},
		},
		{
			name: "foreign decision before the genuine one",
			tamper: func(ds []decision) []decision {
				f := forge(ds[6], `"kind":"progressed"`, `"kind":"completed"`)
				return slices.Insert(ds, 6, f)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "extra")
				if x := r.Extra.Items[0]; x.Seq != 7 || x.Cause != 6 || x.Why != audit.ExtraInjected || !strings.Contains(x.Detail, "at 8") {
					t.Fatalf("extra %+v", x)
				}
				if r.Verified != 10 {
					t.Fatalf("verified %d", r.Verified)
				}
			},
		},
		{
			name: "foreign decision jumping ahead",
			tamper: func(ds []decision) []decision {
				f := ds[9]
				f.msgID = "forged"
				return slices.Insert(ds, 3, f)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "extra")
				if x := r.Extra.Items[0]; x.Seq != 4 || x.Cause != 9 || x.Why != audit.ExtraOutOfOrder {
					t.Fatalf("extra %+v", x)
				}
				if r.Verified != 10 {
					t.Fatalf("verified %d", r.Verified)
				}
			},
		},
		{
			name: "foreign decision with no headers",
			tamper: func(ds []decision) []decision {
				f := decision{subject: "tenure.out.w9.j9.granted", body: []byte(`{"v":1,"hello":"world"}`)}
				return slices.Insert(ds, 2, f)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "extra", "chain")
				if x := r.Extra.Items[0]; x.Seq != 3 || x.Why != audit.ExtraUnkeyed {
					t.Fatalf("extra %+v", x)
				}
				if b := r.Chain.Items[0]; b.Seq != 3 || b.Kind != audit.BreakIndex || b.Stream != "decision" {
					t.Fatalf("chain %+v", b)
				}
				if r.Undecodable != 1 {
					t.Fatalf("undecodable %d", r.Undecodable)
				}
			},
		},
		{
			name: "decision naming an input beyond the stream",
			tamper: func(ds []decision) []decision {
				f := forge(ds[1], `"cause":2,`, `"cause":99,`)
				f.cause = "99"
				return slices.Insert(ds, 2, f)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "orphans")
				if o := r.Orphans.Items[0]; o.Seq != 3 || o.Cause != 99 || o.BodyCause != 99 {
					t.Fatalf("orphan %+v", o)
				}
				if r.Verified != 10 {
					t.Fatalf("verified %d", r.Verified)
				}
			},
		},
		{
			name: "decision naming an input beyond the stream at the end",
			tamper: func(ds []decision) []decision {
				f := forge(ds[9], `"cause":9,`, `"cause":50,`)
				f.cause = "50"
				return append(ds, f)
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "orphans", "hash")
				if o := r.Orphans.Items[0]; o.Seq != 11 || o.Cause != 50 {
					t.Fatalf("orphan %+v", o)
				}
			},
		},
		{
			name: "cause header and body disagree",
			tamper: func(ds []decision) []decision {
				ds[2].cause = "4"
				return ds
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "orphans", "missing", "holes")
				if o := r.Orphans.Items[0]; o.Seq != 3 || o.Cause != 4 || o.BodyCause != 3 {
					t.Fatalf("orphan %+v", o)
				}
				if h := r.Holes.Items[0]; h.Input != 3 {
					t.Fatalf("hole %+v", h)
				}
			},
		},
		{
			name: "n/of header altered",
			tamper: func(ds []decision) []decision {
				ds[4].index = "0/3"
				return ds
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "mismatches")
				m := r.Mismatches.Items[0]
				if m.Seq != 5 || m.Cause != 5 || m.Of != 2 || len(m.Diffs) != 1 || m.Diffs[0].Field != "header Tenure-N" || m.Diffs[0].Stored != "0/3" {
					t.Fatalf("mismatch %+v", m)
				}
			},
		},
		{
			name: "headers stripped",
			tamper: func(ds []decision) []decision {
				ds[8].cause, ds[8].index = "", ""
				return ds
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r, "mismatches", "chain")
				if m := r.Mismatches.Items[0]; m.Seq != 9 || m.Cause != 8 {
					t.Fatalf("mismatch %+v", m)
				}
				if b := r.Chain.Items[0]; b.Seq != 9 || b.Kind != audit.BreakIndex {
					t.Fatalf("chain %+v", b)
				}
			},
		},
		{
			name: "last input partly decided",
			ok:   true,
			tamper: func(ds []decision) []decision {
				return ds[:5] // input 5: 1 of its 2 decisions stored
			},
			check: func(t *testing.T, r *audit.Report) {
				only(t, r)
				p := r.Pending
				if p.Partial == nil || *p.Partial != (audit.Partial{Input: 5, Stored: 1, Of: 2}) || p.From != 6 || p.To != 9 || p.Count != 4 {
					t.Fatalf("pending %+v %+v", p, p.Partial)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, memTopology)
			inputs := publishWorkload(t, e, -1, input{})
			ds := derive(t, inputs)
			checkWorkload(t, ds)
			if c.tamper != nil {
				ds = c.tamper(ds)
			}
			e.appendDecisions(t, ds)
			r := e.audit(t, audit.Config{})
			if r.OK() != c.ok {
				t.Fatalf("OK() = %v, want %v:\n%s", r.OK(), c.ok, summary(r))
			}
			c.check(t, r)
		})
	}
}

// only fails unless exactly the named classes of findings (and, with
// "hash", unequal hashes) are present, each with one item.
func only(t *testing.T, r *audit.Report, classes ...string) {
	t.Helper()
	want := map[string]int{}
	for _, c := range classes {
		want[c] = 1
	}
	onlyCounts(t, r, want, slices.Contains(classes, "hash"))
}

// onlyCounts fails unless r's findings are exactly want's counts, and its
// hashes differ only if hash.
func onlyCounts(t *testing.T, r *audit.Report, want map[string]int, hash bool) {
	t.Helper()
	counts := map[string]int{
		"mismatches": r.Mismatches.Count, "missing": r.Missing.Count, "extra": r.Extra.Count,
		"orphans": r.Orphans.Count, "holes": r.Holes.Count, "chain": r.Chain.Count,
		"checkpoints": r.Checkpoints.Mismatches.Count,
	}
	for name, n := range counts {
		if n != want[name] {
			t.Fatalf("%s: %d, want %d:\n%s", name, n, want[name], summary(r))
		}
	}
	if want := !hash; r.HashesEqual() != want && r.Pending.Partial == nil {
		t.Fatalf("hashes equal: %v, want %v:\n%s", r.HashesEqual(), want, summary(r))
	}
}

// An input stored out of band after the decisions were written is pending
// (not a problem, unless strict); one stored in the middle, between decided
// inputs, is a hole.
func TestInputInjected(t *testing.T) {
	t.Run("at the tail", func(t *testing.T) {
		e := newEnv(t, memTopology)
		inputs := publishWorkload(t, e, -1, input{})
		e.appendDecisions(t, derive(t, inputs))
		seq := e.publish(t, in("worker.w9.jx.acquire", `{"v":1}`))[0]
		r := e.audit(t, audit.Config{})
		only(t, r)
		if !r.OK() || r.Pending.Count != 1 || r.Pending.From != seq || r.Pending.To != seq || seq != 10 {
			t.Fatalf("input %d:\n%s", seq, summary(r))
		}
		strict := e.audit(t, audit.Config{Options: audit.Options{Strict: true}})
		if strict.OK() || strict.Problems() != 1 {
			t.Fatalf("strict audit with a pending input:\n%s", summary(strict))
		}
	})
	t.Run("in the middle", func(t *testing.T) {
		e := newEnv(t, memTopology)
		inputs := publishWorkload(t, e, 2, in("worker.w9.jx.acquire", `{"v":1}`))
		e.appendDecisions(t, derive(t, inputs, 3)) // the injected input is 3: never decided
		r := e.audit(t, audit.Config{})
		only(t, r, "missing", "holes", "hash")
		if h := r.Holes.Items[0]; h.Input != 3 || h.Subject != "tenure.in.worker.w9.jx.acquire" {
			t.Fatalf("hole %+v", h)
		}
		if m := r.Missing.Items[0]; m.Cause != 3 || m.Kind != "granted" || m.Job != "jx" || m.Before != 3 {
			t.Fatalf("missing %+v", m)
		}
		if r.Pending.Count != 0 {
			t.Fatalf("pending %+v", r.Pending)
		}
	})
}

// A decision removed from a stream that is not locked down: a gap in the
// chain, the missing decision, and the unsafe configuration.
func TestGapInDecisionStream(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	top := memTopology
	for _, cfg := range []jetstream.StreamConfig{top.InputConfig(), top.DecisionConfig()} {
		cfg.DenyDelete = false
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: top.LeaderBucket(), Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: top.SnapshotBucket(), Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, nc: nc, js: js, top: top, h: &streams.Handles{Snapshots: obs}}
	inputs := publishWorkload(t, e, -1, input{})
	e.appendDecisions(t, derive(t, inputs))
	out, err := js.Stream(ctx, top.DecisionStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := out.DeleteMsg(ctx, 6); err != nil {
		t.Fatal(err)
	}
	r := e.audit(t, audit.Config{})
	// Decision 7's chain value commits to decision 6, which is gone: a
	// gap and a broken link.
	onlyCounts(t, r, map[string]int{"chain": 2, "missing": 1}, false)
	if b := r.Chain.Items[0]; b.Stream != "decision" || b.Kind != audit.BreakGap || b.Seq != 7 || b.Prev != 5 {
		t.Fatalf("chain %+v", b)
	}
	if b := r.Chain.Items[1]; b.Kind != audit.BreakLink || b.Seq != 7 || !strings.Contains(b.Detail, "the chain breaks") {
		t.Fatalf("chain %+v", b)
	}
	if m := r.Missing.Items[0]; m.Cause != 5 || m.N != 1 || m.Before != 7 {
		t.Fatalf("missing %+v", m)
	}
	if !strings.Contains(r.Lockdown, "DenyDelete") {
		t.Fatalf("lockdown %q", r.Lockdown)
	}
}

// The stored snapshot: used by --from once it checks out, compared with the
// fold on a full replay, and reported when it does not check out.
func TestSnapshot(t *testing.T) {
	e := newEnv(t, memTopology)
	inputs := publishWorkload(t, e, -1, input{})
	fold := func(n int, mod func(raw *events.Raw)) []byte {
		p := projector.New()
		for _, x := range inputs[:n] {
			raw := events.Raw{Seq: x.seq, Time: x.time, Subject: x.subject, Body: x.data}
			if mod != nil {
				mod(&raw)
			}
			if _, err := p.Step(raw); err != nil {
				t.Fatal(err)
			}
		}
		return p.Snapshot()
	}
	good := fold(5, nil) // inputs 1..5; decision 6 is the last of input 5
	// Inputs 10 (rules) and 11 (a checkpoint claiming good's hash for
	// input 5), decisions 11 and 12: the checkpointed decision anchors it.
	inputs = e.anchor(t, 5, good)
	ds := derive(t, inputs)
	e.appendDecisions(t, ds)
	const anchor = 12
	if ds[anchor-1].d.Kind != events.KindCheckpointed {
		t.Fatalf("decision %d: %s", anchor, ds[anchor-1].d.Kind)
	}

	t.Run("none", func(t *testing.T) {
		r := e.audit(t, audit.Config{From: 6})
		requireClean(t, r)
		if r.From != 1 || r.Snapshot == nil || !strings.Contains(r.Snapshot.Note, "no stored snapshot") {
			t.Fatalf("from %d, snapshot %+v", r.From, r.Snapshot)
		}
	})
	e.putAnchoredSnapshot(t, good, "5", "6", anchor)
	t.Run("used", func(t *testing.T) {
		r := e.audit(t, audit.Config{From: 6})
		requireClean(t, r)
		if !r.Snapshot.Used || !r.Snapshot.Anchored || r.From != 6 || r.Inputs != 6 || r.Decisions != 6 || r.Checkpoints.Verified != 1 {
			t.Fatalf("snapshot %+v, from %d, inputs %d, decisions %d, checkpoints %+v", r.Snapshot, r.From, r.Inputs, r.Decisions, r.Checkpoints)
		}
		full := e.audit(t, audit.Config{})
		if full.FoldHash != r.FoldHash || full.StoredHash != r.StoredHash {
			t.Fatal("hashes from the snapshot differ from a full replay's")
		}
	})
	t.Run("compared on a full replay", func(t *testing.T) {
		r := e.audit(t, audit.Config{})
		requireClean(t, r)
		if !r.Snapshot.Verified || !r.Snapshot.Anchored || r.Snapshot.Used || r.Checkpoints.Verified != 1 {
			t.Fatalf("snapshot %+v, checkpoints %+v", r.Snapshot, r.Checkpoints)
		}
	})
	t.Run("newer than --from", func(t *testing.T) {
		r := e.audit(t, audit.Config{From: 3})
		requireClean(t, r)
		if r.From != 1 || r.Snapshot.Used || !strings.Contains(r.Snapshot.Note, "replaying from the first input") {
			t.Fatalf("from %d, snapshot %+v", r.From, r.Snapshot)
		}
	})
	bad := []struct {
		name, in, dec string
		data          []byte
		problem       string
	}{
		{"corrupted", "5", "6", append(slices.Clone(good[:20]), append([]byte{good[20] ^ 1}, good[21:]...)...), "checksum"},
		{"not the last decision of its input", "5", "5", good, "is not the last decision of input 5"},
		{"headers disagree with the content", "4", "4", good, "the snapshot holds input 5"},
		{"decision beyond the stream", "5", "60", good, "decision 60 is not in the decision stream"},
		{"another history", "5", "6", fold(5, func(raw *events.Raw) {
			if raw.Seq == 2 {
				raw.Body = []byte(`{"v":1,"lease_ms":30000}`)
			}
		}), "differs from the stored snapshot"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			e.putSnapshot(t, b.data, b.in, b.dec)
			for _, from := range []uint64{0, 6} {
				r := e.audit(t, audit.Config{From: from})
				if r.OK() || r.Problems() != 1 || r.Snapshot == nil || !strings.Contains(r.Snapshot.Problem, b.problem) || r.Snapshot.Used || r.From != 1 {
					t.Fatalf("from %d: snapshot %+v:\n%s", from, r.Snapshot, summary(r))
				}
				if b.name == "another history" {
					break // a consistent position: only a full replay can tell
				}
			}
		})
	}
}

// A timeline and the evidence matrix of a job, and the matrix of all jobs.
func TestJobEvidence(t *testing.T) {
	e := newEnv(t, memTopology)
	inputs := publishWorkload(t, e, -1, input{})
	ds := derive(t, inputs)
	ds[5] = forge(ds[5], `"reason":"ok"`, `"reason":"late_renew"`)
	e.appendDecisions(t, ds)
	e.publish(t, in("worker.w2.j2.release", `{"v":1,"lease_id":"L2","generation":1}`))
	r := e.audit(t, audit.Config{Options: audit.Options{Job: "j2", Matrix: true}})
	var seqs []uint64
	for _, s := range r.Timeline {
		seqs = append(seqs, s.Input.Seq)
	}
	if !slices.Equal(seqs, []uint64{2, 5, 6, 9, 10}) {
		t.Fatalf("timeline inputs %v", seqs)
	}
	if s := r.Timeline[1]; len(s.Decisions) != 1 || s.Decisions[0].Kind != events.KindRenewed || len(s.Notes) != 1 || !strings.Contains(s.Notes[0], "stored decision 6 (5.1) differs: reason late_renew≠ok") {
		t.Fatalf("step of input 5: %+v", s)
	}
	if s := r.Timeline[4]; !s.Pending || len(s.Decisions) != 0 {
		t.Fatalf("pending step: %+v", s)
	}
	if len(r.History) != 4 || r.History[3].Kind != events.KindCompleted {
		t.Fatalf("history of j2: %d decisions", len(r.History))
	}
	var ids []string
	for _, d := range r.Latest {
		ids = append(ids, d.Job.ID+" "+d.Kind.String())
	}
	if !slices.Equal(ids, []string{"j1 lost_authority", "j2 completed", "j3 completed"}) {
		t.Fatalf("latest %q", ids)
	}
	var b bytes.Buffer
	if err := audit.WriteTimeline(&b, r, 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"input 5  ", "tenure.in.worker.w2.j2.renew  {\"v\":1,", "    #5.1 renewed ok worker/w2 renew -> j2 g1 L2 w2 ACTIVE",
		"    !! stored decision 6 (5.1) differs", "input 10  ", "(pending: no verdict stored yet)"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("timeline lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := projector.WriteMatrix(&b, projector.FormatCSV, r.History, projector.MatrixOptions{}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 5 || !strings.HasPrefix(lines[0], "Job ID,Lease ID,Generation") {
		t.Fatalf("csv matrix:\n%s", b.String())
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(`"mismatches":{"count":1,"items":[{"seq":6,"cause":5,"n":1,"of":2,"diffs":[{"field":"reason","stored":"late_renew","derived":"ok"}]}]}`)) {
		t.Fatalf("json report: %s", js)
	}
}

// An audit of a copy of a stopped data directory leaves the original
// untouched; the directory of a running server is refused.
func TestDataDir(t *testing.T) {
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir)
	nc, js := testutil.Connect(t, srv.ClientURL())
	h, err := streams.Ensure(context.Background(), js, streams.Topology{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if h.In, err = streams.EndGenesis(context.Background(), js, streams.Topology{}); err != nil { // a log by hand
		t.Fatal(err)
	}
	e := &env{srv: srv, nc: nc, js: js, h: h}
	inputs := publishWorkload(t, e, -1, input{})
	e.appendDecisions(t, derive(t, inputs))
	if _, err := audit.OpenDataDir(dir, audit.DataDirConfig{TempDir: t.TempDir()}); !errors.As(err, new(*streams.LockedError)) {
		t.Fatalf("OpenDataDir of a running server's directory: %v, want a *streams.LockedError", err)
	}
	nc.Close()
	srv.Shutdown()
	// A coordinator's head key beside the store is a secret: not copied.
	if err := os.WriteFile(filepath.Join(dir, "head.nk"), []byte("SN...\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := treeState(t, dir)

	d, err := audit.OpenDataDir(dir, audit.DataDirConfig{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Dir, "data", "head.nk")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the head key was copied: %v", err)
	}
	nc2, js2 := testutil.Connect(t, d.Server.ClientURL())
	rep, err := audit.Run(context.Background(), audit.Config{JS: js2})
	if err != nil {
		t.Fatal(err)
	}
	requireClean(t, rep)
	if rep.Inputs != 9 || rep.Verified != 10 {
		t.Fatalf("inputs %d verified %d", rep.Inputs, rep.Verified)
	}
	nc2.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if after := treeState(t, dir); after != before {
		t.Fatalf("the original data directory changed:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := audit.OpenDataDir(t.TempDir(), audit.DataDirConfig{}); err == nil {
		t.Fatal("an empty directory is not a data directory")
	}
}
