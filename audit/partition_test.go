package audit_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// partitioned is a real embedded server with the input partition mapping,
// holding a deployment of count partitions decided by a coordinator Group,
// stopped once every partition has decided every input.
type partitioned struct {
	srv   *embedded.Server
	js    jetstream.JetStream
	topos []streams.Topology
	hs    []*streams.Handles
	jobs  []string
	wrong uint64 // input sequence, in partition wrongIn, of an input about another partition's job
	// wrongIn is the partition the wrong input was published to.
	wrongIn uint32
}

const partitions = 4

// newPartitioned publishes a workload over 24 jobs through the server's
// subject mapping (six-token subjects, as a partition-unaware client), one
// input addressed to the wrong partition, and runs a coordinator Group
// (snapshots after every input) until every partition is decided.
func newPartitioned(t *testing.T) *partitioned {
	t.Helper()
	ctx := context.Background()
	srv := testutil.StartServer(t, testutil.Partitions(partitions))
	_, js := testutil.Connect(t, srv.ClientURL())
	hs, err := streams.EnsureAll(ctx, js, memTopology, partitions, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, pt := range memTopology.Partitions(partitions) { // the inputs come before the coordinators
		if hs[i].In, err = streams.EndGenesis(ctx, js, pt); err != nil {
			t.Fatal(err)
		}
	}
	d := &partitioned{srv: srv, js: js, topos: memTopology.Partitions(partitions), hs: hs}
	publish := func(subject, body string) *jetstream.PubAck {
		t.Helper()
		ack, err := js.Publish(ctx, subject, []byte(body))
		if err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
		return ack
	}
	for i := range 24 {
		job := fmt.Sprintf("job-%d", i)
		d.jobs = append(d.jobs, job)
		if i%3 == 2 {
			publish(events.InputSubject(events.RoleOps, "d1", job, events.VerbOffer), `{"v":1,"holder":"w3"}`)
			continue
		}
		ack := publish(events.InputSubject(events.RoleWorker, "w1", job, events.VerbAcquire), `{"v":1,"lease_ms":60000}`)
		if want := d.topos[events.PartitionOf(job, partitions)].InputStream(); ack.Stream != want {
			t.Fatalf("%s stored in %s, want %s", job, ack.Stream, want)
		}
		publish(events.InputSubject(events.RoleWorker, "w2", job, events.VerbAcquire), `{"v":1,"lease_ms":60000}`) // lease_held
	}
	// A client computing the wrong partition: rejected by the fold.
	d.wrongIn = (events.PartitionOf("job-0", partitions) + 1) % partitions
	wrong := events.Partition{Index: d.wrongIn, Count: partitions}
	d.wrong = publish(wrong.InputSubject(events.RoleWorker, "w1", "job-0", events.VerbRelease), `{"v":1,"lease_id":"L1","generation":1}`).Sequence

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	g, err := coordinator.NewGroup(coordinator.Config{ID: "c1", Conn: nc, Topology: memTopology, LeaderTTL: 5 * time.Second, SnapshotEvery: 1}, partitions)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("group: %v", err)
		}
	}()
	testutil.WaitFor(t, 60*time.Second, "the group to decide every partition", func() bool { return d.caughtUp(t, g) })
	return d
}

func (d *partitioned) caughtUp(t *testing.T, g *coordinator.Group) bool {
	ctx := context.Background()
	for k, st := range g.Stats() {
		ii, err1 := d.hs[k].In.Info(ctx)
		oi, err2 := d.hs[k].Out.Info(ctx)
		if err1 != nil || err2 != nil || !st.Live || st.InputsFolded != ii.State.LastSeq ||
			st.DecisionsStored != oi.State.LastSeq || st.SnapshotSeq == 0 {
			return false
		}
	}
	return true
}

// audit audits partition k.
func (d *partitioned) audit(t *testing.T, k int, cfg audit.Config) *audit.Report {
	t.Helper()
	cfg.JS = d.js
	cfg.Topology = d.topos[k]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := audit.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("audit of partition %d: %v", k, err)
	}
	if rep.Partition != d.topos[k].Partition {
		t.Fatalf("report of %s, want %s", rep.Partition, d.topos[k].Partition)
	}
	return rep
}

// lastDecision reads the last stored decision of partition k.
func (d *partitioned) lastDecision(t *testing.T, k int) (*jetstream.RawStreamMsg, events.Decision) {
	t.Helper()
	ctx := context.Background()
	info, err := d.hs[k].Out.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.hs[k].Out.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := events.DecodeDecision(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	return m, dec
}

// A partitioned deployment decided by a real coordinator Group audits clean,
// partition by partition: every decision verified with the partition's
// subjects and fold (the input about another partition's job included),
// every partition's snapshot checked against the fold and usable as the
// start of --from.
func TestPartitionedAuditClean(t *testing.T) {
	d := newPartitioned(t)
	count, err := streams.Discover(context.Background(), d.js, memTopology)
	if err != nil || count != partitions {
		t.Fatalf("discover: %d, %v", count, err)
	}
	var audits []audit.PartitionAudit
	jobs := 0
	for k := range d.topos {
		rep := d.audit(t, k, audit.Config{Options: audit.Options{Matrix: true}})
		requireClean(t, rep)
		if rep.Inputs == 0 || rep.Verified == 0 {
			t.Fatalf("partition %d: nothing audited:\n%s", k, summary(rep))
		}
		if rep.Snapshot == nil || !rep.Snapshot.Verified || !rep.Snapshot.Anchored {
			t.Fatalf("partition %d: snapshot not verified: %+v", k, rep.Snapshot)
		}
		// The partition's checkpoints (tenure.in.coord.c1._.checkpoint.<k>)
		// are read ahead and their claims checked.
		if rep.Checkpoints.Claims == 0 || rep.Checkpoints.Verified != rep.Checkpoints.Claims {
			t.Fatalf("partition %d: checkpoints %+v", k, rep.Checkpoints)
		}
		for _, l := range rep.Latest {
			if !rep.Partition.Owns(l.Job.ID) && l.Reason != events.ReasonWrongPartition {
				t.Errorf("partition %d holds a decision about %s: %s/%s", k, l.Job.ID, l.Kind, l.Reason)
			}
			if rep.Partition.Owns(l.Job.ID) {
				jobs++
			}
		}
		audits = append(audits, audit.PartitionAudit{Partition: rep.Partition, Report: rep})

		from := rep.Snapshot.InputSeq + 1
		rep2 := d.audit(t, k, audit.Config{From: from})
		requireClean(t, rep2)
		if !rep2.Snapshot.Used || rep2.From != from || rep2.FoldHash != rep.FoldHash || rep2.StoredHash != rep.StoredHash || rep2.Checkpoints.Verified == 0 {
			t.Fatalf("partition %d from the snapshot (input %d): %+v, from %d", k, from-1, rep2.Snapshot, rep2.From)
		}
	}
	if jobs != len(d.jobs) {
		t.Fatalf("%d jobs in the partitions' matrices, want %d", jobs, len(d.jobs))
	}
	// The wrong-partition input was judged by its partition's fold.
	rep := d.audit(t, int(d.wrongIn), audit.Config{Options: audit.Options{Job: "job-0"}})
	if len(rep.History) != 1 || rep.History[0].Cause != d.wrong || rep.History[0].Reason != events.ReasonWrongPartition {
		t.Fatalf("job-0 in partition %d: %+v", d.wrongIn, rep.History)
	}
	tot := audit.Sum(audits)
	if !tot.AllOK() || tot.Partitions != partitions || tot.Problems != 0 || tot.Verified != tot.Decisions {
		t.Fatalf("totals %+v", tot)
	}
}

// Tampering in one partition is reported for that partition, with its own
// sequence numbers, and for no other: a decision appended to TENURE_P2_OUT
// by a writer that is not the coordinator, and an input about another
// partition's job moved into partition 3's stream, with a forged verdict
// granting it.
func TestPartitionedAuditTampering(t *testing.T) {
	d := newPartitioned(t)
	ctx := context.Background()

	// Partition 2: a foreign writer appends another verdict for the last input.
	last, dec := d.lastDecision(t, 2)
	dec.Kind, dec.Reason = events.KindRejected, events.ReasonLeaseHeld
	foreign := &nats.Msg{Subject: d.topos[2].Partition.DecisionSubject(&dec), Data: events.AppendDecision(nil, &dec), Header: nats.Header{}}
	foreign.Header.Set(events.HeaderCause, last.Header.Get(events.HeaderCause))
	foreign.Header.Set(events.HeaderIndex, last.Header.Get(events.HeaderIndex))
	foreign.Header.Set(jetstream.MsgIDHeader, "foreign-1")
	ack, err := d.js.PublishMsg(ctx, foreign)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != "TENURE_P2_OUT" || ack.Sequence != last.Sequence+1 {
		t.Fatalf("foreign decision stored in %s at %d", ack.Stream, ack.Sequence)
	}

	// Partition 3: an input about a job of partition 0 stored in its
	// stream, and a forged verdict granting it instead of the fold's
	// rejection (wrong_partition).
	var moved string
	for _, j := range d.jobs {
		if events.PartitionOf(j, partitions) != 3 {
			moved = j
			break
		}
	}
	p3 := d.topos[3].Partition
	inAck, err := d.js.Publish(ctx, p3.InputSubject(events.RoleWorker, "w9", moved, events.VerbAcquire), []byte(`{"v":1,"lease_ms":60000}`))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := d.hs[3].In.GetMsg(ctx, inAck.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	// The fold's verdict, for comparison: partition 3's projector rejects it.
	p := projector.NewPartition(p3)
	for _, m := range readAll(t, d.hs[3].In, inAck.Sequence) {
		if _, err := p.Step(m); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := p.Step(events.Raw{Seq: stored.Sequence, Time: stored.Time.UnixNano(), Subject: stored.Subject, Body: stored.Data})
	if err != nil || len(ds) != 1 || ds[0].Reason != events.ReasonWrongPartition {
		t.Fatalf("fold of the moved input: %+v %v", ds, err)
	}
	forged := ds[0]
	forged.Kind, forged.Reason = events.KindGranted, events.ReasonOk
	fm := &nats.Msg{Subject: p3.DecisionSubject(&forged), Data: events.AppendDecision(nil, &forged), Header: nats.Header{}}
	fm.Header.Set(events.HeaderCause, strconv.FormatUint(forged.Cause, 10))
	fm.Header.Set(events.HeaderIndex, "0/1")
	fm.Header.Set(jetstream.MsgIDHeader, events.DecisionMsgID(forged.Cause, 0))
	fAck, err := d.js.PublishMsg(ctx, fm)
	if err != nil {
		t.Fatal(err)
	}

	var audits []audit.PartitionAudit
	for k := range d.topos {
		rep := d.audit(t, k, audit.Config{})
		audits = append(audits, audit.PartitionAudit{Partition: rep.Partition, Report: rep})
		switch k {
		case 2:
			only(t, rep, "extra", "chain")
			x := rep.Extra.Items[0]
			if x.Seq != ack.Sequence || strconv.FormatUint(x.Cause, 10) != last.Header.Get(events.HeaderCause) || x.Why != audit.ExtraDuplicate {
				t.Fatalf("partition 2: extra %+v", x)
			}
			// Appended behind the coordinator's back, it carries no chain value.
			if b := rep.Chain.Items[0]; rep.Chain.Count != 1 || b.Kind != audit.BreakLink || b.Seq != ack.Sequence {
				t.Fatalf("partition 2: chain %+v", rep.Chain.Items)
			}
		case 3:
			only(t, rep, "mismatches", "chain") // the forged decision carries no chain value
			m := rep.Mismatches.Items[0]
			if m.Seq != fAck.Sequence || m.Cause != inAck.Sequence || !strings.Contains(m.Summary(), "kind granted≠rejected, reason ok≠wrong_partition") {
				t.Fatalf("partition 3: mismatch %+v", m)
			}
		default:
			requireClean(t, rep)
		}
	}
	tot := audit.Sum(audits)
	// The stored snapshot of partition 2, when it covers its last input,
	// is followed by the foreign decision: one more problem there. Each
	// forged decision also breaks its partition's chain.
	want := 4
	if sn := audits[2].Report.Snapshot; sn != nil && sn.Problem != "" {
		if !strings.Contains(sn.Problem, fmt.Sprintf("decision %d after the snapshot's position", ack.Sequence)) {
			t.Fatalf("partition 2: snapshot %+v", sn)
		}
		want++
	}
	if tot.AllOK() || tot.OK != 2 || len(tot.Failed) != 2 || tot.Problems != want || tot.Failed[0] != 2 || tot.Failed[1] != 3 {
		t.Fatalf("totals %+v\n%s\n%s", tot, summary(audits[2].Report), summary(audits[3].Report))
	}
}

// A decision whose subject lacks its partition token, or carries another
// partition's, is a mismatch on the subject alone.
func TestPartitionedSubject(t *testing.T) {
	part := events.Partition{Index: 1, Count: 4}
	job := ""
	for i := 0; job == "" || events.PartitionOf(job, 4) != 1; i++ {
		job = "j" + strconv.Itoa(i)
	}
	raw := events.Raw{Seq: 1, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(),
		Subject: part.InputSubject(events.RoleWorker, "w1", job, events.VerbAcquire), Body: []byte(`{"v":1,"lease_ms":60000}`)}
	ds, err := projector.NewPartition(part).Step(raw)
	if err != nil || len(ds) != 1 || ds[0].Kind != events.KindGranted {
		t.Fatalf("fold: %+v %v", ds, err)
	}
	body := events.AppendDecision(nil, &ds[0])
	for _, c := range []struct {
		subject string
		ok      bool
	}{
		{part.DecisionSubject(&ds[0]), true},
		{events.DecisionSubject(&ds[0]), false},
		{events.DecisionSubject(&ds[0]) + ".2", false},
		{events.DecisionSubject(&ds[0]) + ".11", false},
	} {
		s := audit.StoredDecision{Seq: 1, Subject: c.subject, Body: body, Cause: "1", Index: "0/1"}
		rep := audit.Check(&sliceInputs{raws: []events.Raw{raw}}, &sliceDecisions{ds: []audit.StoredDecision{s}},
			audit.Start{InputEnd: 1, DecisionEnd: 1, Partition: part}, audit.Options{})
		if rep.OK() != c.ok {
			t.Fatalf("%s: OK %v, want %v:\n%s", c.subject, rep.OK(), c.ok, summary(rep))
		}
		if !c.ok {
			m := rep.Mismatches.Items[0]
			if len(m.Diffs) != 1 || m.Diffs[0].Field != "subject" || m.Diffs[0].Derived != part.DecisionSubject(&ds[0]) {
				t.Fatalf("%s: %+v", c.subject, m)
			}
		}
	}
}

type sliceInputs struct {
	raws []events.Raw
	i    int
}

func (s *sliceInputs) NextInput() (events.Raw, bool) {
	if s.i == len(s.raws) {
		return events.Raw{}, false
	}
	s.i++
	return s.raws[s.i-1], true
}

type sliceDecisions struct {
	ds []audit.StoredDecision
	i  int
}

func (s *sliceDecisions) NextDecision() (audit.StoredDecision, bool) {
	if s.i == len(s.ds) {
		return audit.StoredDecision{}, false
	}
	s.i++
	return s.ds[s.i-1], true
}

// readAll reads the inputs of a stream before sequence end.
func readAll(t *testing.T, s jetstream.Stream, end uint64) []events.Raw {
	t.Helper()
	var out []events.Raw
	for seq := uint64(1); seq < end; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, events.Raw{Seq: m.Sequence, Time: m.Time.UnixNano(), Subject: m.Subject, Body: m.Data})
	}
	return out
}
