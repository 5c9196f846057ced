package projector_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// Freeze and Frozen.Encode give, byte for byte, what Snapshot gives at the
// freeze, whatever was folded between freezes (grants, expiries,
// retirements, ids used again), in whatever order the frozen states are
// encoded, and from a restored snapshot as from an empty projector.
func TestFreezeIsSnapshot(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := projector.New()
		step := func(seq uint64, at int64, in events.Input) {
			raw := events.Raw{Seq: seq, Time: at, Subject: events.InputSubject(in.Role, in.Actor, in.Job, in.Verb), Body: events.AppendInputBody(nil, &in)}
			if _, err := p.Step(raw); err != nil {
				t.Fatalf("step %d: %v", seq, err)
			}
		}
		now := testutil.ScenarioBase
		// Revision 3, or the current one with schedules (format 8).
		rev := rapid.SampledFrom([]uint32{events.Revision3, events.CurrentRevision}).Draw(t, "revision")
		step(1, now, events.Input{Role: events.RoleCoord, Actor: "c1", Job: events.NoJob, Verb: events.VerbRules, Revision: rev, LeaseKey: propLeaseKey})
		pol := events.DefaultPolicy()
		pol.MinLease = ms
		pol.Retain = int64(rapid.SampledFrom([]int64{0, 1, 300, 2000}).Draw(t, "retain")) * ms
		step(2, now, events.Input{Role: events.RoleOps, Actor: "admin", Job: events.NoJob, Verb: events.VerbPolicy, Policy: pol})
		if rapid.Bool().Draw(t, "restore") {
			// Start the tracking from a restored snapshot.
			q := projector.New()
			if err := q.Restore(p.Snapshot()); err != nil {
				t.Fatal(err)
			}
			p = q
		}
		p.Track()
		w := &world{issued: map[string][]issued{}, seq: map[string]uint64{}}
		type taken struct {
			f    *projector.Frozen
			want []byte
		}
		var frozen []taken
		steps := rapid.IntRange(1, 120).Draw(t, "steps")
		for seq := uint64(3); seq < 3+uint64(steps); seq++ {
			now += rapid.SampledFrom([]int64{0, 1, 50, 200, 400, 900, 1500, 3000}).Draw(t, "gap") * ms
			var in events.Input
			if rev >= events.Revision10 && rapid.IntRange(0, 4).Draw(t, "schedule") == 0 {
				in = events.Input{Role: events.RoleOps, Actor: "admin", Job: events.NoJob, Verb: events.VerbSchedule,
					Schedule: fmt.Sprintf("s%d", rapid.IntRange(0, 3).Draw(t, "schedule_id"))}
				switch rapid.IntRange(0, 3).Draw(t, "schedule_op") {
				case 0:
					in.Cron, in.Queue = rapid.SampledFrom([]string{"@every 1s", "* * * * *"}).Draw(t, "cron"), "q"
				case 1:
					in.ScheduleOp = events.SchedulePause
				case 2:
					in.ScheduleOp = events.ScheduleDelete
				default:
					in = events.Input{Role: events.RoleCoord, Actor: "c1", Job: events.NoJob, Verb: events.VerbTick}
				}
			} else {
				in = drawInput(t, w)
			}
			step(seq, now, in)
			if rapid.IntRange(0, 9).Draw(t, "freeze") == 0 {
				frozen = append(frozen, taken{p.Freeze(), p.Snapshot()})
			}
			// Encode some of the frozen states now (out of order too).
			if len(frozen) > 0 && rapid.IntRange(0, 5).Draw(t, "encode") == 0 {
				i := rapid.IntRange(0, len(frozen)-1).Draw(t, "which")
				if _, err := frozen[i].f.Encode(); err != nil {
					t.Fatal(err)
				}
			}
		}
		frozen = append(frozen, taken{p.Freeze(), p.Snapshot()})
		for i, fr := range frozen {
			got, err := fr.f.Encode()
			if err != nil {
				t.Fatalf("freeze %d: %v", i, err)
			}
			if !bytes.Equal(got, fr.want) {
				t.Fatalf("freeze %d of %d: Encode gave %d bytes, Snapshot %d", i, len(frozen), len(got), len(fr.want))
			}
		}
	})
}

// A frozen state is encoded on another goroutine while the fold goes on
// (the coordinator's use): no data race (under -race), and the bytes are
// the snapshot at the freeze.
func TestFreezeEncodesConcurrently(t *testing.T) {
	p := projector.New()
	f := &folder{t: t, p: p}
	f.discard = true
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision3, LeaseKey: propLeaseKey})
	pol := events.DefaultPolicy()
	pol.Retain = 1e9
	f.step(0, events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
	p.Track()
	type result struct {
		got []byte
		err error
	}
	for round := range 5 {
		for i := range 2000 {
			f.step(int64(round)*2e9, events.RoleWorker, "w1", fmt.Sprintf("j%d-%d", round, i), events.Input{Verb: events.VerbAcquire, LeaseMS: 1000})
		}
		fr, want := p.Freeze(), p.Snapshot()
		done := make(chan result, 1)
		go func() {
			got, err := fr.Encode()
			done <- result{got, err}
		}()
		for i := range 2000 { // expiries and retirements of earlier rounds meanwhile
			f.step(int64(round)*2e9+1e9, events.RoleWorker, "w2", fmt.Sprintf("k%d-%d", round, i), events.Input{Verb: events.VerbAcquire, LeaseMS: 1000})
		}
		r := <-done
		if r.err != nil || !bytes.Equal(r.got, want) {
			t.Fatalf("round %d: %v, %d bytes, want %d", round, r.err, len(r.got), len(want))
		}
	}
	if p.Len() >= 20000 {
		t.Fatalf("%d jobs: nothing was retired", p.Len())
	}
}

// Restore accepts only the canonical encoding of a state (the shortest
// varints, no stray flag bits): the base later snapshots are built on.
func TestRestoreRefusesNonCanonical(t *testing.T) {
	p := projector.New()
	f := &folder{t: t, p: p}
	f.step(0, events.RoleWorker, "w1", "j1", events.Input{Verb: events.VerbAcquire})
	snap := p.Snapshot()
	q := projector.New()
	if err := q.Restore(snap); err != nil {
		t.Fatal(err)
	}
	// The last sequence (1) written as two bytes, 0x81 0x00.
	magic := len("TNRSNAP1")
	long := append(append(append([]byte{}, snap[:magic]...), 0x81, 0x00), snap[magic+1:len(snap)-4]...)
	long = binary.BigEndian.AppendUint32(long, crc32.Checksum(long, crc32.MakeTable(crc32.Castagnoli)))
	if err := q.Restore(long); err == nil {
		t.Fatal("a non-minimal varint was restored")
	}
}

// A large projection (200,000 jobs; TENURE_SNAPSHOT_JOBS for more, e.g.
// 5000000) is frozen while inputs keep coming: the freeze and every step
// after it stay short (reported: the pause the live loop would see), and
// the encoding, done meanwhile on another goroutine, is the whole state at
// the freeze, byte for byte.
func TestFreezeLargeProjection(t *testing.T) {
	if testing.Short() {
		t.Skip("a large projection")
	}
	n := 200_000
	if v := os.Getenv("TENURE_SNAPSHOT_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("TENURE_SNAPSHOT_JOBS=%q", v)
		}
	}
	p := projector.New()
	f := &folder{t: t, p: p, discard: true}
	f.step(0, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision3, LeaseKey: propLeaseKey})
	p.Track()
	for i := range n {
		f.step(0, events.RoleWorker, "w1", fmt.Sprintf("job-%08d", i), events.Input{Verb: events.VerbAcquire, LeaseMS: 3_600_000})
		if i%500_000 == 499_999 {
			if _, err := p.Freeze().Encode(); err != nil { // as the coordinator compacts while catching up
				t.Fatal(err)
			}
		}
	}
	if _, err := p.Freeze().Encode(); err != nil { // the base: the previous snapshot
		t.Fatal(err)
	}
	for i := range 10_000 { // changes since it
		f.step(1e9, events.RoleWorker, "w2", fmt.Sprintf("new-%06d", i), events.Input{Verb: events.VerbAcquire, LeaseMS: 3_600_000})
	}
	start := time.Now()
	fr := p.Freeze()
	freeze := time.Since(start)
	want := p.Snapshot() // the check's reference, not timed
	done := make(chan error, 1)
	var took time.Duration
	go func() {
		s := time.Now()
		got, err := fr.Encode()
		took = time.Since(s)
		if err == nil && !bytes.Equal(got, want) {
			err = fmt.Errorf("encoded %d bytes, the snapshot at the freeze is %d", len(got), len(want))
		}
		done <- err
	}()
	longest, steps, slow := freeze, 0, 0
	for i := 0; ; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d jobs, %d MB: freeze %v, encoding %v off the fold, %d steps meanwhile (%d over 50 ms), the longest (or the freeze) %v",
				p.Len(), len(want)>>20, freeze, took, steps, slow, longest)
			return
		default:
		}
		s := time.Now()
		f.step(2e9, events.RoleWorker, "w3", fmt.Sprintf("more-%07d", i), events.Input{Verb: events.VerbAcquire, LeaseMS: 3_600_000})
		d := time.Since(s)
		if d > 50*time.Millisecond {
			slow++
		}
		longest = max(longest, d)
		steps++
	}
}

// Untrack and Track start the tracking again from the state now: later
// freezes encode to the snapshot at their freeze.
func TestUntrackTrackAgain(t *testing.T) {
	p := projector.New()
	f := &folder{t: t, p: p, discard: true}
	p.Track()
	for i := range 100 {
		f.step(0, events.RoleWorker, "w1", fmt.Sprintf("a%d", i), events.Input{Verb: events.VerbAcquire})
	}
	lost := p.Freeze() // never encoded: dropped by Untrack
	if p.Changes() != 0 {
		t.Fatalf("%d changes after a freeze", p.Changes())
	}
	f.step(0, events.RoleWorker, "w1", "b", events.Input{Verb: events.VerbAcquire})
	if p.Changes() != 1 {
		t.Fatalf("%d changes, want 1", p.Changes())
	}
	p.Untrack()
	if p.Tracking() {
		t.Fatal("still tracking")
	}
	p.Track()
	f.step(0, events.RoleWorker, "w1", "c", events.Input{Verb: events.VerbAcquire})
	fr, want := p.Freeze(), p.Snapshot()
	got, err := fr.Encode()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%v: %d bytes, want %d", err, len(got), len(want))
	}
	_ = lost
}
