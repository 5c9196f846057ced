package projector_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strconv"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

func limitIn(queue, key string, n int) events.Input {
	in := events.Input{Verb: events.VerbLimit, Queue: queue, ConcurrencyKey: key}
	if n >= 0 {
		in.MaxActive, in.HasMaxActive = uint64(n), true
	}
	return in
}

// TestLimitsFull: at most events.MaxLimits limits are in force; one more
// is rejected (limits_full) and changes nothing, while changing or
// lifting one in force is accepted; once one is lifted another may be
// set. A state with every limit in force snapshots and restores to the
// same bytes.
func TestLimitsFull(t *testing.T) {
	f := &folder{t: t, p: projector.New(), discard: true}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9, LeaseKey: propLeaseKey})
	for i := range events.MaxLimits {
		q := "q" + strconv.Itoa(i%3)
		ds := f.step(0, events.RoleOps, "admin", events.NoJob, limitIn(q, "k"+strconv.Itoa(i), i%4))
		if len(ds) != 1 || ds[0].Kind != events.KindLimitSet {
			t.Fatalf("limit %d: %s", i, describeAll(ds))
		}
	}
	ds := f.step(0, events.RoleOps, "admin", events.NoJob, limitIn("q0", "one-more", 1))
	if len(ds) != 1 || ds[0].Kind != events.KindRejected || ds[0].Reason != events.ReasonLimitsFull {
		t.Fatalf("limit %d: %s", events.MaxLimits+1, describeAll(ds))
	}
	if n := len(f.p.Limits()); n != events.MaxLimits {
		t.Fatalf("%d limits in force, want %d", n, events.MaxLimits)
	}
	if ds := f.step(0, events.RoleOps, "admin", events.NoJob, limitIn("q0", "k0", events.MaxActive)); ds[0].Kind != events.KindLimitSet {
		t.Fatalf("change at the bound: %s", describeAll(ds))
	}
	snap := f.p.Snapshot()
	r := new(projector.Projector)
	if err := r.Restore(snap); err != nil {
		t.Fatalf("restore with %d limits: %v", events.MaxLimits, err)
	}
	if !bytes.Equal(r.Snapshot(), snap) {
		t.Fatal("the restored state snapshots otherwise")
	}
	if ds := f.step(0, events.RoleOps, "admin", events.NoJob, limitIn("q0", "k0", -1)); ds[0].Kind != events.KindLimitSet || ds[0].Limit.HasMaxActive {
		t.Fatalf("lift: %s", describeAll(ds))
	}
	if ds := f.step(0, events.RoleOps, "admin", events.NoJob, limitIn("q0", "one-more", 1)); ds[0].Kind != events.KindLimitSet {
		t.Fatalf("after a lift: %s", describeAll(ds))
	}
	// Lifting a key that has no limit is accepted and changes nothing.
	before := f.p.StateHash()
	if ds := f.step(0, events.RoleOps, "admin", events.NoJob, limitIn("q9", "none", -1)); ds[0].Kind != events.KindLimitSet {
		t.Fatalf("lift of nothing: %s", describeAll(ds))
	}
	if f.p.StateHash() == before {
		t.Fatal("the state hash did not move with the input sequence")
	}
	if n := len(f.p.Limits()); n != events.MaxLimits {
		t.Fatalf("%d limits in force, want %d", n, events.MaxLimits)
	}
}

// TestRestoreRefusesBadLimits: a format-7 snapshot whose limit is above
// events.MaxActive, or whose job names a concurrency key that is not a
// token, is refused.
func TestRestoreRefusesBadLimits(t *testing.T) {
	f := &folder{t: t, p: projector.New()}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9, LeaseKey: propLeaseKey})
	f.step(0, events.RoleOps, "admin", events.NoJob, limitIn("q", "kk", events.MaxActive))
	f.step(0, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbSubmit, Queue: "q", ConcurrencyKey: "zz"})
	snap := f.p.Snapshot()
	if err := new(projector.Projector).Restore(snap); err != nil {
		t.Fatalf("a valid state: %v", err)
	}
	resum := func(b []byte) []byte {
		b = b[:len(b)-4]
		return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	}
	for _, c := range []struct{ name, old, new string }{
		{"limit above the bound", "\x02kk\x01" + string(binary.AppendUvarint(nil, events.MaxActive)), "\x02kk\x01" + string(binary.AppendUvarint(nil, events.MaxActive+1))},
		{"unknown limit flag", "\x02kk\x01", "\x02kk\x05"},
		{"no limit flag", "\x02kk\x01" + string(binary.AppendUvarint(nil, events.MaxActive)), "\x02kk\x00"},
		{"key not a token", "\x02zz", "\x02z."},
		{"limit key not a token", "\x02kk", "\x02k*"},
	} {
		if !bytes.Contains(snap, []byte(c.old)) {
			t.Fatalf("%s: %q not in the snapshot", c.name, c.old)
		}
		bad := resum(bytes.Replace(bytes.Clone(snap), []byte(c.old), []byte(c.new), 1))
		if err := new(projector.Projector).Restore(bad); !errors.Is(err, projector.ErrBadSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrBadSnapshot", c.name, err)
		}
	}
}

// TestConcurrencyKeyNoHeadOfLine: a submitter's thousand jobs of a key
// limited to 1 hold back none of its jobs behind them, of another key or
// of none; and as each of the key's jobs ends, the next one is offered,
// one at a time.
func TestConcurrencyKeyNoHeadOfLine(t *testing.T) {
	f := &folder{t: t, p: projector.New(), discard: true}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9, LeaseKey: propLeaseKey})
	f.step(0, events.RoleOps, "admin", events.NoJob, limitIn("q", "hot", 1))
	for i := range 1000 {
		f.step(0, events.RoleOps, "d1", "h"+strconv.Itoa(i), events.Input{Verb: events.VerbSubmit, Queue: "q", ConcurrencyKey: "hot"})
	}
	f.step(0, events.RoleOps, "d1", "cold", events.Input{Verb: events.VerbSubmit, Queue: "q", ConcurrencyKey: "cold"})
	f.step(0, events.RoleOps, "d1", "plain", events.Input{Verb: events.VerbSubmit, Queue: "q"})
	ds := f.step(0, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 8, TTLMS: 600000})
	var offered []string
	for _, d := range ds {
		if d.Kind == events.KindAssigned {
			offered = append(offered, d.Job.ID)
		}
	}
	if len(offered) != 3 || offered[0] != "h0" || offered[1] != "cold" || offered[2] != "plain" {
		t.Fatalf("offered %v, want [h0 cold plain]", offered)
	}
	for i := range 5 {
		id := "h" + strconv.Itoa(i)
		j, _ := f.p.Job(id)
		f.step(0, events.RoleWorker, "w1", id, events.Input{Verb: events.VerbAck, LeaseID: j.LeaseID, Generation: j.Generation})
		ds := f.step(0, events.RoleWorker, "w1", id, events.Input{Verb: events.VerbResult, LeaseID: j.LeaseID, Generation: j.Generation, Outcome: events.OutcomeSuccess})
		if n := len(ds); n != 2 || ds[1].Kind != events.KindAssigned || ds[1].Job.ID != "h"+strconv.Itoa(i+1) {
			t.Fatalf("the end of %s: %s", id, describeAll(ds))
		}
		if got := f.p.KeyActive("q", "hot"); got != 1 {
			t.Fatalf("%d live jobs of the key, want 1", got)
		}
	}
}

// TestRateAtTheEndOfTime: a rate limit's bucket at the end of int64
// nanoseconds saturates: after the one start its longest period allows,
// no later input offers another (a plain sum would wrap into the past
// and refill the bucket), and the state snapshots and restores.
func TestRateAtTheEndOfTime(t *testing.T) {
	f := &folder{t: t, p: projector.New()}
	at := projector.MaxTime - 1000 - testutil.ScenarioBase
	f.step(at, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9, LeaseKey: propLeaseKey})
	f.step(at, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", Rate: 1, PeriodMS: events.MaxDurationMS})
	f.step(at, events.RoleOps, "d1", "a", events.Input{Verb: events.VerbSubmit, Queue: "q"})
	f.step(at, events.RoleOps, "d1", "b", events.Input{Verb: events.VerbSubmit, Queue: "q"})
	ds := f.step(at, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 4, TTLMS: 600000})
	if len(ds) != 2 || ds[1].Kind != events.KindAssigned || ds[1].Job.ID != "a" {
		t.Fatalf("pull: %s", describeAll(ds))
	}
	if next, ok := f.p.NextDeadline(); !ok || next != projector.MaxTime {
		t.Fatalf("next deadline %d %v, want the end of time", next, ok)
	}
	ds = f.step(at+999, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
	for _, d := range ds {
		if d.Kind == events.KindAssigned {
			t.Fatalf("b offered at the end of time: %s", describeAll(ds))
		}
	}
	snap := f.p.Snapshot()
	r := new(projector.Projector)
	if err := r.Restore(snap); err != nil {
		t.Fatalf("restore at the end of time: %v", err)
	}
	if !bytes.Equal(r.Snapshot(), snap) {
		t.Fatal("the restored state snapshots otherwise")
	}
}
