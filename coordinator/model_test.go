package coordinator_test

// Coordinator tests on the model of JetStream (internal/jsmodel) instead
// of a server: standby, fencing, failover, leadership renewal and the
// refusal of a log that diverges, each in a synctest bubble, where a TTL
// takes no time to pass and the faults are exactly the test's (the net's
// Hold, Slow and Cut), not a hook in the coordinator. The model's
// behaviours are checked against the real server by
// internal/jsmodel/conform_test.go; the tests that remain on the server
// here are those of what only a server has (its client, advisories,
// stream configuration, genesis, heads, intake streams) and a few
// end-to-end counterparts (takeover, fencing, crashes).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/jsmodel"
	"github.com/maknow/tenure/streams"
)

// modelEnv is one test's JetStream: the model, its network (no fault but
// those the test injects) and the coordinators on it.
type modelEnv struct {
	t       *testing.T
	net     *jsmodel.Net
	ttl     time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
	netDone chan struct{}
	coords  []*modelCoord
	msgs    int // inputs published (their message ids)
	// appends records every append the decision stream stored: who, when,
	// which sequences.
	mu      sync.Mutex
	appends []modelAppend
}

type modelAppend struct {
	actor       string
	at          time.Time
	first, last uint64
}

type modelCoord struct {
	id     string
	c      *coordinator.Coordinator
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's, once done
}

// newModelEnv starts the model's network; the test must call close before
// its bubble ends.
func newModelEnv(t *testing.T, ttl time.Duration) *modelEnv {
	return newModelEnvFaults(t, ttl, jsmodel.Faults{})
}

// newModelEnvFaults is newModelEnv on a network with faults f.
func newModelEnvFaults(t *testing.T, ttl time.Duration, f jsmodel.Faults) *modelEnv {
	top := streams.Topology{}
	net := jsmodel.NewNet(jsmodel.NewModel(top.InputConfig(), top.DecisionConfig(), ttl), f, 1)
	ctx, cancel := context.WithCancel(context.Background())
	e := &modelEnv{t: t, net: net, ttl: ttl, ctx: ctx, cancel: cancel, netDone: make(chan struct{})}
	net.Appended(func(actor string, first, last uint64) {
		e.mu.Lock()
		e.appends = append(e.appends, modelAppend{actor, time.Now(), first, last})
		e.mu.Unlock()
	})
	go func() {
		defer close(e.netDone)
		for ctx.Err() == nil {
			synctest.Wait()
			if !net.Step() {
				net.Wait(ctx)
			}
		}
	}()
	return e
}

// start runs a coordinator on the model until stopped.
func (e *modelEnv) start(id string, mod ...func(*coordinator.Config)) *modelCoord {
	cfg := coordinator.Config{ID: id, Backend: e.net.Backend(id, streams.Topology{}), LeaderTTL: e.ttl, SnapshotEvery: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	mc := &modelCoord{id: id, c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(mc.done)
		mc.err = c.Run(ctx)
	}()
	e.coords = append(e.coords, mc)
	return mc
}

// stop stops a coordinator gracefully (it releases the leadership).
func (c *modelCoord) stop() {
	c.cancel()
	<-c.done
}

// crash stops a coordinator as a dead process does: nothing it sends
// from now on reaches the model (the leadership entry stays until it
// expires).
func (e *modelEnv) crash(c *modelCoord) {
	e.net.Cut(c.id, time.Now().Add(time.Hour))
	c.stop()
}

// close stops every coordinator and the network.
func (e *modelEnv) close() {
	for _, c := range e.coords {
		c.cancel()
		<-c.done
	}
	e.cancel()
	<-e.netDone
}

// publish stores an input (a worker's client on the model) and returns
// its sequence.
func (e *modelEnv) publish(role events.Role, actor, job string, verb events.Verb, body string) uint64 {
	e.t.Helper()
	e.msgs++
	seq, err := e.net.Client(actor).Publish(e.ctx, events.InputSubject(role, actor, job, verb), []byte(body), fmt.Sprintf("%s-%d", actor, e.msgs))
	if err != nil {
		e.t.Fatalf("publish: %v", err)
	}
	return seq
}

// waitFor waits (on the bubble's clock) until cond holds, for at most d.
func (e *modelEnv) waitFor(d time.Duration, what string, cond func() bool) {
	e.t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			e.t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// streams returns the model's streams as the server tests read them.
func (e *modelEnv) streams() (inputs, decisions []msg) {
	e.net.Lock()
	defer e.net.Unlock()
	conv := func(s *jsmodel.Stream) []msg {
		out := make([]msg, len(s.Msgs))
		for i, m := range s.Msgs {
			out[i] = msg{seq: m.Seq, time: m.Time.UnixNano(), subject: m.Subject, data: m.Data, header: m.Header}
		}
		return out
	}
	return conv(e.net.Model().In), conv(e.net.Model().Out)
}

// caughtUp reports whether c is live with every input stored decided.
func (e *modelEnv) caughtUp(c *modelCoord) bool {
	in, out := e.streams()
	st := c.c.Stats()
	return st.Live && st.InputsFolded == uint64(len(in)) && st.DecisionsStored == uint64(len(out))
}

// checkFold requires the decision stream to be exactly the fold of the
// input stream, with its chain (no decision lost, duplicated or extra).
func (e *modelEnv) checkFold() {
	e.t.Helper()
	in, out := e.streams()
	checkFold(e.t, in, out, foldStoredIn(e.t, events.Partition{}, in))
}

// verdictOf returns the first decision of input seq.
func (e *modelEnv) verdictOf(seq uint64) (events.Decision, bool) {
	_, out := e.streams()
	for _, m := range out {
		if m.header.Get(events.HeaderCause) == fmt.Sprint(seq) {
			d, err := events.DecodeDecision(m.data)
			return d, err == nil
		}
	}
	return events.Decision{}, false
}

// appendDecision stores msg in the decision stream by hand (no
// coordinator may be reading it).
func (e *modelEnv) appendDecision(m *nats.Msg) {
	e.t.Helper()
	e.net.Lock()
	defer e.net.Unlock()
	if a, _ := e.net.Model().Out.Publish(time.Now(), m); a.Error != nil || a.Duplicate {
		e.t.Fatalf("the decision written by hand was not stored: %+v", a)
	}
}

// A standby takes over from a crashed leader, its projection warm, with no
// gap and nothing appended twice; the takeover waits for the leadership
// entry to expire, and no longer than its TTL and a renewal interval.
func TestModelFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 2 * time.Second
		e := newModelEnv(t, ttl)
		defer e.close()
		a := e.start("ca")
		e.waitFor(10*time.Second, "ca live", func() bool { return a.c.Stats().Live })
		b := e.start("cb")
		for i := range 30 {
			e.publish(events.RoleWorker, "w1", fmt.Sprintf("j%d", i%5), events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
		}
		e.waitFor(10*time.Second, "ca caught up", func() bool { return e.caughtUp(a) })
		e.waitFor(10*time.Second, "cb following", func() bool { return b.c.Stats().InputsFolded == a.c.Stats().InputsFolded })
		if b.c.Stats().Live {
			t.Fatal("both coordinators are live")
		}
		crashed := time.Now()
		e.crash(a)
		seq := e.publish(events.RoleWorker, "w2", "k1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
		e.waitFor(30*time.Second, "cb live", func() bool { return b.c.Stats().Live })
		if took := time.Since(crashed); took > ttl+ttl/2 {
			t.Fatalf("cb took over %v after the crash, TTL %v", took, ttl)
		}
		e.waitFor(10*time.Second, "cb caught up", func() bool { return e.caughtUp(b) })
		if v, ok := e.verdictOf(seq); !ok || v.Kind != events.KindGranted {
			t.Fatalf("input after the takeover: %+v, want granted", v)
		}
		if st := b.c.Stats(); st.Sessions != 1 {
			t.Fatalf("cb: %d sessions, want its warm first one", st.Sessions)
		}
		e.checkFold()
	})
}

// A cron schedule (rules revision 10) across a failover: the leader fires
// it every second, crashes, and the standby, warm, goes on firing from
// where the log says. Every due time from the set to the end is fired
// once or recorded missed once (the leaderless seconds: reached over the
// grace late, recorded, the latest fired), never twice, in due order,
// and the decision stream is exactly the fold of the inputs.
func TestModelScheduleFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second // longer than the period: due times pass leaderless
		e := newModelEnv(t, ttl)
		defer e.close()
		a := e.start("ca")
		e.waitFor(10*time.Second, "ca live", func() bool { return a.c.Stats().Live })
		b := e.start("cb")
		set := e.publish(events.RoleOps, "admin", events.NoJob, events.VerbSchedule, `{"v":1,"schedule":"s","cron":"@every 1s","queue":"q"}`)
		e.waitFor(10*time.Second, "the schedule set", func() bool {
			v, ok := e.verdictOf(set)
			return ok && v.Kind == events.KindScheduleSet
		})
		time.Sleep(5 * time.Second)
		e.crash(a)
		e.waitFor(30*time.Second, "cb live", func() bool { return b.c.Stats().Live })
		time.Sleep(5 * time.Second)
		e.waitFor(10*time.Second, "cb caught up", func() bool { return e.caughtUp(b) })
		_, out := e.streams()
		var setAt, lastTick int64
		seen := map[int64]string{}
		byWhom := map[string]int{}
		last := int64(0)
		for _, m := range out {
			d, err := events.DecodeDecision(m.data)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case d.Kind == events.KindScheduleSet:
				setAt = d.At
			case d.Kind == events.KindTicked:
				lastTick = d.At
			case d.Kind == events.KindFired:
				if d.Reason != events.ReasonOk || d.Schedule.Due <= last || seen[d.Schedule.Due] != "" {
					t.Fatalf("fire %s/%s due %d after %d (seen: %q)", d.Kind, d.Reason, d.Schedule.Due, last, seen[d.Schedule.Due])
				}
				last = d.Schedule.Due
				seen[d.Schedule.Due] = "fired"
				byWhom[d.Actor]++
			case d.Kind == events.KindScheduleMissed:
				for t0 := d.Schedule.MissedFrom; t0 <= d.Schedule.MissedTo; t0 += int64(time.Second) {
					if seen[t0] != "" {
						t.Fatalf("due time %d fired and missed", t0)
					}
					seen[t0] = "missed"
				}
			}
		}
		n := 0
		for due := setAt + int64(time.Second); due <= lastTick; due += int64(time.Second) {
			if seen[due] == "" {
				t.Fatalf("due time +%v neither fired nor recorded missed", time.Duration(due-setAt))
			}
			n++
		}
		missed := n - byWhom["ca"] - byWhom["cb"]
		if len(seen) != n || byWhom["ca"] == 0 || byWhom["cb"] == 0 || missed == 0 {
			t.Fatalf("%d due times handled, %d due; fires by coordinator %v, %d missed (want fires by both, and missed ones)", len(seen), n, byWhom, missed)
		}
		t.Logf("%d due times: fires by coordinator %v, the rest recorded missed", n, byWhom)
		e.checkFold()
	})
}

// A leader whose appends are held in the network (a process paused, a
// partition) while its leadership expires: the standby takes over and
// appends; the held appends reach the stream after it, and after the
// duplicate window (their message ids, the same as the new leader's for
// the same decisions, no longer stop them), and are refused by the fence
// (the expected last sequence), so nothing is stored twice or out of
// order, and the old leader stands by. Without the fence, this test
// fails: the held decisions are stored again after the new leader's.
func TestModelPausedLeaderFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		e := newModelEnv(t, ttl)
		defer e.close()
		a := e.start("ca")
		e.waitFor(10*time.Second, "ca live", func() bool { return a.c.Stats().Live })
		b := e.start("cb")
		e.publish(events.RoleWorker, "w1", "j0", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
		e.waitFor(10*time.Second, "ca caught up", func() bool { return e.caughtUp(a) })
		// ca's appends and renewals are held from now on, past the
		// decision stream's duplicate window.
		held := time.Now().Add(streams.DefaultDupeWindow + 5*ttl)
		e.net.Hold("ca>out", held)
		e.net.Hold("ca>kv", held)
		for i := range 5 {
			e.publish(events.RoleWorker, "w1", fmt.Sprintf("j%d", i+1), events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
		}
		e.waitFor(10*time.Second, "cb live", func() bool { return b.c.Stats().Live })
		e.waitFor(10*time.Second, "cb caught up", func() bool { return e.caughtUp(b) })
		time.Sleep(time.Until(held) + ttl) // ca's held appends reach the stream
		e.waitFor(10*time.Second, "one live coordinator caught up", func() bool {
			return (e.caughtUp(a) || e.caughtUp(b)) && a.c.Stats().Live != b.c.Stats().Live
		})
		e.mu.Lock()
		var firstB time.Time
		for _, ap := range e.appends {
			if ap.actor == "cb" && firstB.IsZero() {
				firstB = ap.at
			}
			if ap.actor == "ca" && !firstB.IsZero() && ap.at.Before(held) {
				t.Errorf("ca's append of decisions %d-%d stored at %v, after cb's first (%v)", ap.first, ap.last, ap.at, firstB)
			}
		}
		e.mu.Unlock()
		if firstB.IsZero() {
			t.Fatal("cb appended nothing")
		}
		if st := a.c.Stats(); st.Sessions < 2 {
			t.Fatalf("ca: %d sessions, want it to have left live", st.Sessions)
		}
		e.checkFold()
	})
}

// A leadership renewal held in the network does not stop the live loop:
// inputs stored while it is in flight get their decisions before it
// returns, and once it returns the coordinator is still live in its first
// session. (This test replaced a hook in the renewer.)
func TestModelSlowRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		e := newModelEnv(t, ttl)
		defer e.close()
		a := e.start("c1")
		e.waitFor(10*time.Second, "live", func() bool { return a.c.Stats().Live })
		e.waitFor(10*time.Second, "caught up", func() bool { return e.caughtUp(a) })
		// Renewals run every TTL/3 and time out after TTL/3: held for
		// less than a timeout, one renewal is slow and succeeds.
		release := time.Now().Add(ttl / 4)
		e.net.Hold("c1>kv", release)
		var last uint64
		for i := range 20 {
			last = e.publish(events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		}
		e.waitFor(ttl, "the decisions of inputs stored while a renewal is held", func() bool {
			_, ok := e.verdictOf(last)
			return ok
		})
		if time.Now().After(release) {
			t.Fatalf("the decisions came %v after the renewal was released: the loop waited for it", time.Since(release))
		}
		time.Sleep(2 * ttl)
		seq := e.publish(events.RoleWorker, "w1", "after", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		e.waitFor(10*time.Second, "caught up", func() bool { return e.caughtUp(a) })
		if v, ok := e.verdictOf(seq); !ok || v.Kind != events.KindGranted {
			t.Fatalf("input after the slow renewal: %+v, want granted", v)
		}
		if st := a.c.Stats(); !st.Live || st.Sessions != 1 {
			t.Fatalf("after a slow renewal: live %v, %d sessions (%s); want live in its first session", st.Live, st.Sessions, st.Reason)
		}
		e.checkFold()
	})
}

// A renewal that succeeds is reported to the loop before the renewer
// checks that the input stream still holds what the session folded
// (inputKept, a second request): here every renewal takes TTL/6 and every
// check its whole timeout (TTL/3), so a report sent after the check came
// TTL/2 after its renewal started, past the leadership the loop counted
// from the one before (5/6 of the TTL from its start), and the session
// ended while it held the entry. Before 2c2a0cc it did (cmd/tenure's
// expiry storm, on two loaded cores); this test fails on that code.
func TestModelSlowInputCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		e := newModelEnv(t, ttl)
		defer e.close()
		a := e.start("c1")
		e.waitFor(10*time.Second, "live", func() bool { return a.c.Stats().Live })
		e.publish(events.RoleWorker, "w1", "j0", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		e.waitFor(10*time.Second, "caught up", func() bool { return e.caughtUp(a) })
		e.net.Slow("c1>kv", ttl/6)
		e.net.Slow("c1>get", ttl)
		time.Sleep(5 * ttl)
		e.net.Slow("c1>kv", 0)
		e.net.Slow("c1>get", 0)
		seq := e.publish(events.RoleWorker, "w1", "after", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		e.waitFor(10*time.Second, "caught up", func() bool { return e.caughtUp(a) })
		if v, ok := e.verdictOf(seq); !ok || v.Kind != events.KindGranted {
			t.Fatalf("input after the slow checks: %+v, want granted", v)
		}
		if st := a.c.Stats(); !st.Live || st.Sessions != 1 {
			t.Fatalf("after slow input checks: live %v, %d sessions (%s); want live in its first session", st.Live, st.Sessions, st.Reason)
		}
		e.checkFold()
	})
}

// When renewals stop being answered (held in the network), the loop
// leaves live by itself before the leadership could have expired, and
// appends nothing after that; once renewals go through again it takes
// leadership back and carries on. (This test replaced a hook in the
// renewer.)
func TestModelStuckRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 1800 * time.Millisecond
		e := newModelEnv(t, ttl)
		defer e.close()
		a := e.start("c1")
		e.waitFor(10*time.Second, "live", func() bool { return a.c.Stats().Live })
		e.publish(events.RoleWorker, "w1", "j0", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		e.waitFor(10*time.Second, "caught up", func() bool { return e.caughtUp(a) })
		// The last renewal that can succeed started before now.
		stuck := time.Now()
		e.net.Hold("c1>kv", stuck.Add(4*ttl))
		// Inputs keep coming while the leadership runs out.
		var left time.Time
		for i := 0; left.IsZero(); i++ {
			e.publish(events.RoleWorker, "w1", fmt.Sprintf("j%d", i+1), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
			time.Sleep(50 * time.Millisecond)
			if st := a.c.Stats(); !st.Live {
				left = time.Now()
				if !strings.Contains(st.Reason, "no renewal confirmed") && !strings.Contains(st.Reason, "leadership") {
					t.Fatalf("left live: %s, want a lost leadership", st.Reason)
				}
			}
			if time.Since(stuck) > 3*ttl {
				t.Fatalf("still live %v after renewals stopped (TTL %v)", time.Since(stuck), ttl)
			}
		}
		if left.After(stuck.Add(ttl)) {
			t.Fatalf("left live %v after renewals stopped, past the TTL (%v)", left.Sub(stuck), ttl)
		}
		e.mu.Lock()
		for _, ap := range e.appends {
			if ap.at.After(stuck.Add(ttl)) && ap.at.Before(stuck.Add(4*ttl)) {
				t.Errorf("decisions %d-%d stored %v after renewals stopped: past the leadership's lifetime", ap.first, ap.last, ap.at.Sub(stuck))
			}
		}
		e.mu.Unlock()
		// Renewals go through again: it takes leadership back.
		e.waitFor(10*ttl, "live again", func() bool { return a.c.Stats().Live })
		seq := e.publish(events.RoleWorker, "w1", "after", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		e.waitFor(10*time.Second, "caught up", func() bool { return e.caughtUp(a) })
		if v, ok := e.verdictOf(seq); !ok || v.Kind != events.KindGranted {
			t.Fatalf("input after taking leadership back: %+v, want granted", v)
		}
		if st := a.c.Stats(); st.Sessions < 2 {
			t.Fatalf("%d sessions, want a second one after leaving live", st.Sessions)
		}
		e.checkFold()
	})
}

// A coordinator that takes leadership and then needs longer than the
// leadership entry lives to verify the stored decisions (a cold restart
// after a million inputs; here its readers are slow) renews the entry
// while it catches up, and stays live in its first session. Before the
// fix, the entry expired during catch-up and the coordinator
// resynchronised for ever. (This test replaced a hook in the standby
// loop.)
func TestModelLongCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 600 * time.Millisecond
		e := newModelEnv(t, ttl)
		defer e.close()
		a := e.start("ca")
		for i := range 40 {
			e.publish(events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		}
		e.waitFor(10*time.Second, "ca caught up", func() bool { return e.caughtUp(a) })
		a.stop()
		// 40+ decisions and inputs at 50 ms each: over three TTLs.
		e.net.Slow("~cb#", 50*time.Millisecond)
		started := time.Now()
		b := e.start("cb")
		e.waitFor(time.Minute, "cb live", func() bool { return b.c.Stats().Live })
		if took := time.Since(started); took < 3*ttl {
			t.Fatalf("catching up took %v, want over three TTLs (%v) for the test to mean anything", took, ttl)
		}
		e.net.Slow("~cb#", 0)
		time.Sleep(5 * ttl)
		seq := e.publish(events.RoleWorker, "w1", "after", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		e.waitFor(10*time.Second, "cb caught up", func() bool { return e.caughtUp(b) })
		if v, ok := e.verdictOf(seq); !ok || v.Kind != events.KindGranted {
			t.Fatalf("input after the catch-up: %+v, want granted", v)
		}
		if st := b.c.Stats(); !st.Live || st.Sessions != 1 {
			t.Fatalf("after catching up for longer than the leadership TTL: live %v, %d sessions (%s); want live in its first session", st.Live, st.Sessions, st.Reason)
		}
	})
}

// TestModelSnapshotRefusedAfterReadingAhead: a session starts its readers
// at a snapshot's anchor before it reads the snapshot (reading overlaps
// the restore), then refuses the snapshot (its bytes are not what its
// anchor says) and stops the readers to fold from the start. With more
// inputs after the anchor than a reader buffers, the reader's handler was
// blocked handing a message to the loop, which was waiting for the reader
// to stop: the coordinator hung for ever, silent, in standby (the chaos
// suite's cluster saw both coordinators do it after a node kill).
func TestModelSnapshotRefusedAfterReadingAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 600 * time.Millisecond
		e := newModelEnvFaults(t, ttl, jsmodel.Faults{StaleSnapshot: 1})
		defer e.close()
		snap := e.snapshotted()
		// More inputs than a reader buffers ahead (4,096) while no
		// coordinator runs.
		for i := range 5000 {
			e.publish(events.RoleWorker, "w1", fmt.Sprintf("k%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		}
		// The snapshot's reads take long enough for the readers to fill
		// their buffers meanwhile.
		e.net.Slow("cb>obj", 3*time.Second)
		b := e.start("cb", snap)
		e.waitFor(5*time.Minute, "cb caught up", func() bool { return e.caughtUp(b) })
		if st := b.c.Stats(); st.SnapshotsRefused == 0 {
			t.Fatalf("no snapshot refused (%+v): the test means nothing", st)
		}
		e.checkFold()
	})
}

// TestModelSnapshotAnchorUnreadable: a snapshot whose anchor the session
// cannot read at first (the decision stream does not answer for 7 s, as a
// cluster electing its leader) is checked again and restored, not counted
// as refused with the log folded from the start (the chaos suite's
// cluster logged "snapshot refused, folding from the start ...: transient
// jetstream error: context deadline exceeded").
func TestModelSnapshotAnchorUnreadable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 600 * time.Millisecond
		e := newModelEnv(t, ttl)
		defer e.close()
		snap := e.snapshotted()
		e.net.Hold("cb>get", time.Now().Add(7*time.Second))
		b := e.start("cb", snap)
		e.waitFor(time.Minute, "cb caught up", func() bool { return e.caughtUp(b) })
		st := b.c.Stats()
		if st.SnapshotsRefused != 0 || st.SnapshotSeq == 0 {
			t.Fatalf("snapshots refused %d, restored at input %d: want the snapshot checked again and restored", st.SnapshotsRefused, st.SnapshotSeq)
		}
		e.checkFold()
	})
}

// TestModelClockLeadershipExpiry: the leadership-expiry timer is on the
// coordinator's clock: with every renewal stuck, the loop leaves live once
// the fake clock reaches the end of what it counts on of the leadership's
// lifetime (the TTL less a sixth, leaderMargin), although the entry still
// lives (on the model's clock, which has not moved that far). The clock
// goes exactly there and no further: the pause before the next session is
// on the same clock. (This test replaced one on the server that needed a
// hook to make renewals stuck.)
func TestModelClockLeadershipExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Minute
		e := newModelEnv(t, ttl)
		defer e.close()
		fc := clock.NewFake(time.Now())
		a := e.start("ca", withClock(fc))
		e.waitFor(10*time.Second, "ca live", func() bool { return e.caughtUp(a) })
		e.net.Hold("ca>kv", time.Now().Add(time.Hour)) // every renewal stuck
		fc.Advance(ttl - ttl/6)
		var st coordinator.Stats
		e.waitFor(10*time.Second, "ca out of live once the fake clock passed its leadership's lifetime", func() bool {
			st = a.c.Stats()
			return !st.Live && strings.Contains(st.Reason, "no renewal confirmed")
		})
		e.net.Lock()
		_, _, err := e.net.Model().Leader.Get(time.Now(), coordinator.LeaderKey)
		e.net.Unlock()
		if err != nil {
			t.Fatalf("the leadership entry: %v, want it still there", err)
		}
	})
}

// TestModelSnapshotReplacedAfterItsAnchor: a snapshot replaced by a newer
// one after the session checked its anchor and before it read its bytes
// (a standby starting while the leader stores snapshots) is read again,
// the newer one checked and restored. Before the one snapshot reader, the
// session folded the whole log from the start ("replaced since its anchor
// was checked").
func TestModelSnapshotReplacedAfterItsAnchor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 600 * time.Millisecond
		e := newModelEnv(t, ttl)
		defer e.close()
		stored := func() jsmodel.Object {
			e.net.Lock()
			defer e.net.Unlock()
			return *e.net.Model().Snap
		}
		snap := func(c *coordinator.Config) { c.SnapshotEvery = 50 }
		a := e.start("ca", snap)
		for i := range 100 {
			e.publish(events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		}
		e.waitFor(10*time.Second, "ca caught up with a snapshot stored", func() bool { return e.caughtUp(a) && a.c.Stats().SnapshotSeq > 0 })
		older := stored()
		olderAt, err := streams.ParseSnapshotHeaders(older.Info.Headers)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			e.publish(events.RoleWorker, "w1", fmt.Sprintf("k%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		}
		e.waitFor(10*time.Second, "ca caught up with a newer snapshot stored", func() bool {
			return e.caughtUp(a) && a.c.Stats().SnapshotSeq > olderAt.InputSeq
		})
		a.stop()
		newer := stored()
		newerAt, err := streams.ParseSnapshotHeaders(newer.Info.Headers)
		if err != nil || newer.Info.NUID == older.Info.NUID {
			t.Fatalf("the newer snapshot: %v, %s and %s", err, newer.Info.NUID, older.Info.NUID)
		}
		// The older one is stored when cb starts; the newer replaces it
		// once cb has checked the older one's anchor and reads its bytes.
		put := func(o jsmodel.Object) {
			e.net.Lock()
			defer e.net.Unlock()
			e.net.Model().PutSnapshot(time.Now(), streams.SnapshotObject, o.Info.Headers, o.Data)
		}
		put(older)
		var once sync.Once
		b := e.start("cb", snap, func(c *coordinator.Config) {
			c.Backend = &replacingBackend{Backend: c.Backend, replace: func() { once.Do(func() { put(newer) }) }}
		})
		e.waitFor(time.Minute, "cb caught up", func() bool { return e.caughtUp(b) })
		if st := b.c.Stats(); st.SnapshotSeq != newerAt.InputSeq || st.SnapshotsRefused != 0 {
			t.Fatalf("restored the snapshot of input %d (%d refused), want the newer one's, input %d", st.SnapshotSeq, st.SnapshotsRefused, newerAt.InputSeq)
		}
		e.checkFold()
	})
}

// replacingBackend is a coordinator's port whose snapshot store calls
// replace before it reads the snapshot's bytes.
type replacingBackend struct {
	coordinator.Backend
	replace func()
}

func (b *replacingBackend) Snapshots() coordinator.SnapshotStore {
	return replacingStore{b.Backend.Snapshots(), b.replace}
}

type replacingStore struct {
	coordinator.SnapshotStore
	replace func()
}

func (s replacingStore) GetBytes(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) ([]byte, error) {
	s.replace()
	return s.SnapshotStore.GetBytes(ctx, name, opts...)
}

// snapshotted runs coordinator ca with a snapshot every 50 inputs over 200
// acquires until it has decided them all and stored a snapshot, then stops
// it; it returns the configuration to start the next one with.
func (e *modelEnv) snapshotted() func(*coordinator.Config) {
	e.t.Helper()
	snap := func(c *coordinator.Config) { c.SnapshotEvery = 50 }
	a := e.start("ca", snap)
	for i := range 200 {
		e.publish(events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	}
	e.waitFor(10*time.Second, "ca caught up with a snapshot stored", func() bool { return e.caughtUp(a) && a.c.Stats().SnapshotSeq > 0 })
	a.stop()
	return snap
}

// runRefused runs a coordinator on a log written by hand and requires it to
// refuse with ErrDivergence, the error containing each of want, having
// written nothing.
func (e *modelEnv) runRefused(want ...string) {
	e.t.Helper()
	_, before := e.streams()
	c := e.start("c1")
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		e.t.Fatal("the coordinator did not refuse the log")
	}
	if !errors.Is(c.err, coordinator.ErrDivergence) {
		e.t.Fatalf("Run returned %v, want ErrDivergence", c.err)
	}
	for _, w := range want {
		if !strings.Contains(c.err.Error(), w) {
			e.t.Fatalf("Run returned %v, want it to say %q", c.err, w)
		}
	}
	if _, after := e.streams(); len(after) != len(before) {
		e.t.Fatalf("the coordinator wrote to a diverging log: %d decisions, had %d", len(after), len(before))
	}
}

// decide runs a coordinator until it is live, publishes an acquire,
// waits until it has decided every input stored, then stops it.
func (e *modelEnv) decide() {
	e.t.Helper()
	c := e.start("c0")
	e.waitFor(10*time.Second, "live", func() bool { return c.c.Stats().Live })
	e.publish(events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	e.waitFor(10*time.Second, "caught up", func() bool { return e.caughtUp(c) })
	c.stop()
}

// handDecision returns the decision the fold derives as the last of the
// decision stream plus one (for input cause, the last stored), with its
// right chain value, for a test to store as is or changed.
func (e *modelEnv) handDecision() (*nats.Msg, events.Chain) {
	e.t.Helper()
	in, out := e.streams()
	want := foldStoredIn(e.t, events.Partition{}, in)
	if len(want) != len(out)+1 {
		e.t.Fatalf("the fold gives %d decisions, %d are stored: want one more", len(want), len(out))
	}
	var prev events.Chain
	if len(out) > 0 {
		prev, _ = events.ParseChain(out[len(out)-1].header.Get(events.HeaderChain))
	}
	d := want[len(want)-1]
	cause := in[len(in)-1].seq
	right := events.NextChain(prev, uint64(len(out)+1), cause, 0, 1, d.subject, d.data)
	m := nats.NewMsg(d.subject)
	m.Data = d.data
	m.Header.Set(events.HeaderCause, fmt.Sprint(cause))
	m.Header.Set(events.HeaderIndex, "0/1")
	m.Header.Set(events.HeaderChain, right.String())
	return m, right
}

// A decision stream that does not match the fold of the input stream makes
// the coordinator refuse to go live (Run returns ErrDivergence naming the
// decision) and write nothing: a decision another writer stored that says
// otherwise, an exact copy of the last decision, one naming an input never
// stored, a chain value of another history, none, or an unreadable one.
// With the right decision it goes live.
func TestModelRefusesDivergence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(m *nats.Msg, right events.Chain, lastCause uint64)
		want   []string // none: goes live
		copy   bool     // no new input: the decision is the last one's, changed
	}{
		{"right decision", func(*nats.Msg, events.Chain, uint64) {}, nil, false},
		{"another verdict", func(m *nats.Msg, _ events.Chain, _ uint64) {
			m.Data = []byte(strings.Replace(string(m.Data), `"kind":"granted","accepted":true,"reason":"ok"`, `"kind":"rejected","accepted":false,"reason":"lease_held"`, 1))
		}, []string{"(cause input"}, false},
		{"copy of the last decision", func(m *nats.Msg, _ events.Chain, lastCause uint64) {
			m.Header.Set(events.HeaderCause, fmt.Sprint(lastCause))
		}, []string{"an extra decision"}, true},
		{"names an input never stored", func(m *nats.Msg, _ events.Chain, lastCause uint64) {
			m.Header.Set(events.HeaderCause, fmt.Sprint(lastCause+5))
		}, []string{"the input stream ends at"}, true},
		{"another history", func(m *nats.Msg, right events.Chain, _ uint64) {
			right[0] ^= 1
			m.Header.Set(events.HeaderChain, right.String())
		}, []string{"the chain breaks"}, false},
		{"no chain value", func(m *nats.Msg, _ events.Chain, _ uint64) { m.Header.Del(events.HeaderChain) }, []string{"no Tenure-Chain header"}, false},
		{"unreadable chain value", func(m *nats.Msg, right events.Chain, _ uint64) {
			m.Header.Set(events.HeaderChain, strings.ToUpper(right.String()))
		}, []string{"unreadable Tenure-Chain header"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newModelEnv(t, 600*time.Millisecond)
				defer e.close()
				e.decide() // the rules and the default policy, then an acquire
				in, out := e.streams()
				lastCause := in[len(in)-1].seq
				// An input stored while no coordinator runs, its decision
				// appended by someone else.
				var m *nats.Msg
				var right events.Chain
				if tc.copy {
					last := out[len(out)-1]
					m = nats.NewMsg(last.subject)
					m.Data = last.data
					m.Header.Set(events.HeaderCause, last.header.Get(events.HeaderCause))
					m.Header.Set(events.HeaderIndex, last.header.Get(events.HeaderIndex))
				} else {
					e.publish(events.RoleWorker, "w1", "j2", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
					m, right = e.handDecision()
				}
				tc.change(m, right, lastCause)
				e.appendDecision(m)
				if tc.want == nil {
					c := e.start("c1")
					e.waitFor(10*time.Second, "live", func() bool { return e.caughtUp(c) })
					e.checkFold()
					return
				}
				e.runRefused(append(tc.want, fmt.Sprintf("decision %d", len(out)+1))...)
			})
		})
	}
}

// A log at rules revision 1 need not carry chain values, but once a
// decision carried one every later one must (PROTOCOL.md §20): a log
// whose chain headers stop part way was changed, and the coordinator
// refuses it as the audit does. (Before the coordinator and the audit
// shared one check, the coordinator went live on such a log.)
func TestModelChainHeadersStopPartWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newModelEnv(t, 600*time.Millisecond)
		defer e.close()
		// Inputs stored before any coordinator ran: judged at revision 1.
		e.publish(events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
		m, _ := e.handDecision()
		e.appendDecision(m) // with its chain value
		e.publish(events.RoleWorker, "w1", "j2", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
		m, _ = e.handDecision()
		m.Header.Del(events.HeaderChain)
		e.appendDecision(m) // without
		e.runRefused("decision 2: no Tenure-Chain header")
	})
}

// A server that loses the unsynced tails of both streams in a crash (the
// last two inputs and their decisions; --sync interval) while the leader
// is idle: its readers wait past the streams' new ends, and the inputs
// stored next, at the sequences lost, never reached it. The leader finds
// at its next leadership renewal that the input it folded last is gone
// (errInputsLost), reads the streams again and decides them. Before, it
// stayed live and never decided them (the simulator's seed 12 with
// SIM_LOST=1: three acknowledged acquires without a verdict).
func TestModelInputsLostInACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 900 * time.Millisecond
		e := newModelEnv(t, ttl)
		defer e.close()
		a := e.start("c1")
		e.waitFor(10*time.Second, "live", func() bool { return a.c.Stats().Live })
		for i := range 5 {
			e.publish(events.RoleWorker, "w1", fmt.Sprintf("j%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		}
		e.waitFor(10*time.Second, "caught up", func() bool { return e.caughtUp(a) })
		e.net.Lock()
		lostIn := e.net.Model().In.LoseTail(2)
		lostOut := e.net.Model().Out.LoseTail(2)
		e.net.Unlock()
		if len(lostIn) != 2 || len(lostOut) != 2 {
			t.Fatalf("lost %d inputs and %d decisions, want 2 and 2", len(lostIn), len(lostOut))
		}
		seq := e.publish(events.RoleWorker, "w2", "k1", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		if seq != lostIn[0].Seq {
			t.Fatalf("the input after the crash is stored at %d, want %d (a sequence lost, used again)", seq, lostIn[0].Seq)
		}
		e.waitFor(10*time.Second, "the input stored after the crash decided", func() bool {
			v, ok := e.verdictOf(seq)
			return ok && v.Job.ID == "k1" && e.caughtUp(a)
		})
		if st := a.c.Stats(); st.Sessions < 2 {
			t.Fatalf("%d sessions, want a second one after the loss", st.Sessions)
		}
		e.checkFold()
	})
}
