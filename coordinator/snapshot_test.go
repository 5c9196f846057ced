package coordinator_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
	"github.com/maknow/tenure/streams"
)

// storedSnapshot reads the coordinator's stored snapshot: its bytes and
// headers.
func storedSnapshot(t *testing.T, js jetstream.JetStream) ([]byte, nats.Header) {
	t.Helper()
	ctx := context.Background()
	obs, err := js.ObjectStore(ctx, streams.Topology{}.SnapshotBucket())
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, streams.SnapshotObject)
	if err != nil {
		t.Fatal(err)
	}
	data, err := obs.GetBytes(ctx, streams.SnapshotObject)
	if err != nil {
		t.Fatal(err)
	}
	return data, info.Headers
}

func putSnapshot(t *testing.T, js jetstream.JetStream, data []byte, h nats.Header) {
	t.Helper()
	ctx := context.Background()
	obs, err := js.ObjectStore(ctx, streams.Topology{}.SnapshotBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: streams.SnapshotObject, Headers: h}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// A snapshot is checked, not trusted (issue "Nothing bricks a deployment"):
// one rewritten with a valid checksum but another state (holder w2 changed
// to w1) is refused by a restarting coordinator, whatever its headers
// claim, and so is one without an anchor in the decision stream (as an
// older Tenure stored them); the coordinator folds from the start, so w2
// keeps its lease and w1 cannot renew it. Before snapshots were anchored,
// the tampered one was restored and w1's renewal was accepted.
func TestTamperedSnapshotRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		tamper func(h nats.Header, fake []byte)
	}{
		// The fake state under the real headers: its bytes do not hash to
		// the anchored hash.
		{"bytes", func(h nats.Header, fake []byte) {}},
		// Headers claiming the fake state's hash: the anchor decision
		// claims another.
		{"hash", func(h nats.Header, fake []byte) {
			sum := sha256.Sum256(fake)
			h.Set(streams.HeaderSnapshotHash, hex.EncodeToString(sum[:]))
		}},
		// No anchor at all: a snapshot of an older Tenure.
		{"no-anchor", func(h nats.Header, fake []byte) {
			h.Del(streams.HeaderSnapshotAnchor)
			h.Del(streams.HeaderSnapshotHash)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv, _, js := newServer(t)
			snapEvery := func(c *coordinator.Config) { c.SnapshotEvery = 2; c.SnapshotInterval = time.Hour }
			r := startCoordinator(t, srv.ClientURL(), "c1", snapEvery)
			acq := publish(t, js, events.RoleWorker, "w2", "job", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
			lease := verdict(decisionsFor(t, js, acq)).Job.LeaseID
			for i := range 3 {
				publish(t, js, events.RoleWorker, "w3", fmt.Sprintf("other-%d", i), events.VerbAcquire, `{"v":1}`)
			}
			testutil.WaitFor(t, 10*time.Second, "a snapshot after the acquire", func() bool { return r.c.Stats().SnapshotSeq > acq })
			waitCaughtUp(t, js, r)
			r.stop()

			// The fake state: the same log up to the snapshot, with the
			// acquire made by w1 instead of w2 (same lease id: it does
			// not depend on the holder), encoded with a valid checksum.
			data, h := storedSnapshot(t, js)
			var real projector.Projector
			if err := real.Restore(data); err != nil {
				t.Fatal(err)
			}
			fake := projector.New()
			for _, m := range readStream(t, js, "TENURE_IN") {
				if m.seq > real.LastSeq() {
					break
				}
				if m.seq == acq {
					m.subject = strings.Replace(m.subject, ".w2.", ".w1.", 1)
				}
				if _, err := fake.Step(events.Raw{Seq: m.seq, Time: m.time, Subject: m.subject, Body: m.data}); err != nil {
					t.Fatal(err)
				}
			}
			if j, _ := fake.Job("job"); j.Holder != "w1" || j.LeaseID != lease {
				t.Fatalf("fake state: %+v", j)
			}
			fakeBytes := fake.Snapshot()
			if err := new(projector.Projector).Restore(fakeBytes); err != nil {
				t.Fatalf("the fake snapshot has a valid checksum: %v", err)
			}
			c.tamper(h, fakeBytes)
			putSnapshot(t, js, fakeBytes, h)

			r = startCoordinator(t, srv.ClientURL(), "c1", snapEvery)
			testutil.WaitFor(t, 10*time.Second, "live", func() bool { return r.c.Stats().Live })
			mine := publish(t, js, events.RoleWorker, "w2", "job", events.VerbRenew, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"renew_seq":1}`, lease))
			if v := verdict(decisionsFor(t, js, mine)); v.Kind != events.KindRenewed {
				t.Fatalf("w2 renewing its own lease: %s/%s", v.Kind, v.Reason)
			}
			theirs := publish(t, js, events.RoleWorker, "w1", "job", events.VerbRenew, fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":1,"renew_seq":2}`, lease))
			if v := verdict(decisionsFor(t, js, theirs)); v.Kind == events.KindRenewed {
				t.Fatalf("w1 renewed w2's lease: the tampered snapshot was trusted")
			}
			if st := r.c.Stats(); st.SnapshotsRefused != 1 {
				t.Errorf("%d snapshots refused, want 1 (stats %+v)", st.SnapshotsRefused, st)
			}
			waitCaughtUp(t, js, r)
			checkChain(t, js)
		})
	}
}

// A snapshot names the chain value of the decision at its position
// (PROTOCOL.md §20); a coordinator restores it only if that decision
// carries the same value, and continues the chain from it. The snapshot
// untouched is restored; with another chain value (its bytes and anchor
// intact) or none, it is refused and the coordinator folds from the start.
func TestSnapshotChainChecked(t *testing.T) {
	for _, c := range []struct {
		name    string
		tamper  func(h nats.Header)
		refused uint64
	}{
		{"untouched", func(nats.Header) {}, 0},
		{"other value", func(h nats.Header) {
			v := []byte(h.Get(streams.HeaderSnapshotChain))
			if v[0] == '0' {
				v[0] = '1'
			} else {
				v[0] = '0'
			}
			h.Set(streams.HeaderSnapshotChain, string(v))
		}, 1},
		{"none", func(h nats.Header) { h.Del(streams.HeaderSnapshotChain) }, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv, _, js := newServer(t)
			snapEvery := func(c *coordinator.Config) { c.SnapshotEvery = 2; c.SnapshotInterval = time.Hour }
			r := startCoordinator(t, srv.ClientURL(), "c1", snapEvery)
			for i := range 4 {
				publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j-%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
			}
			testutil.WaitFor(t, 10*time.Second, "a snapshot", func() bool { return r.c.Stats().SnapshotSeq > 0 })
			waitCaughtUp(t, js, r)
			r.stop()
			data, h := storedSnapshot(t, js)
			c.tamper(h)
			putSnapshot(t, js, data, h)

			// No snapshot of its own: SnapshotSeq is the restored one's.
			r = startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.SnapshotEvery = 1000; c.SnapshotInterval = time.Hour })
			testutil.WaitFor(t, 10*time.Second, "live", func() bool { return r.c.Stats().Live })
			if st := r.c.Stats(); st.SnapshotsRefused != c.refused || (c.refused == 0) != (st.SnapshotSeq != 0) {
				t.Fatalf("%d snapshots refused, want %d; restored the snapshot of input %d", st.SnapshotsRefused, c.refused, st.SnapshotSeq)
			}
			// The chain continues from the right value either way.
			publish(t, js, events.RoleWorker, "w1", "after", events.VerbAcquire, `{"v":1}`)
			waitCaughtUp(t, js, r)
			checkChain(t, js)
		})
	}
}

// An input stored before the coordinator ever ran (seq 1) cannot keep the
// log at rules revision 1: the coordinator's fenced rules input fails and
// it appends them after it. The early lease keeps its revision-1 id; every
// later one is keyed.
func TestRulesAfterAnEarlyInput(t *testing.T) {
	// An input stream made before genesis existed (streams.EndGenesis):
	// a new one takes no early input (TestGenesisRefusesInputsBeforeTheRules).
	srv, _, js := newOpenServer(t)
	early := publish(t, js, events.RoleWorker, "w1", "early", events.VerbAcquire, `{"v":1}`)
	if early != 1 {
		t.Fatalf("early input stored as %d", early)
	}
	r := startCoordinator(t, srv.ClientURL(), "c1")
	if v := verdict(decisionsFor(t, js, early)); v.Job.LeaseID != "L1" {
		t.Fatalf("early lease %q, want the revision-1 id L1", v.Job.LeaseID)
	}
	later := publish(t, js, events.RoleWorker, "w1", "later", events.VerbAcquire, `{"v":1}`)
	v := verdict(decisionsFor(t, js, later))
	if want := fmt.Sprintf("L%d-", later); !strings.HasPrefix(v.Job.LeaseID, want) || len(v.Job.LeaseID) != len(want)+22 {
		t.Fatalf("later lease %q, want a keyed id %s<22 characters>", v.Job.LeaseID, want)
	}
	waitCaughtUp(t, js, r)
	checkChain(t, js)
}

// A snapshot is encoded off the live loop: while its encoding is held, the
// coordinator goes on deciding inputs; once released, the snapshot stored is
// exactly the state the fold of the stored inputs gives at its position,
// and a restarted coordinator restores it.
func TestSnapshotEncodedOffTheLoop(t *testing.T) {
	srv, _, js := newServer(t)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) {
		c.SnapshotEvery, c.SnapshotInterval = 10, time.Hour
		coordinator.SetEncodeHook(c, func(ctx context.Context) {
			first := false
			once.Do(func() { first = true })
			if !first {
				return
			}
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	})
	for i := range 10 {
		publish(t, js, events.RoleWorker, "w1", fmt.Sprintf("j-%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot taken after 10 inputs")
	}
	// The encoding is held: inputs are still decided, one by one.
	for i := range 30 {
		seq := publish(t, js, events.RoleWorker, "w2", fmt.Sprintf("k-%d", i), events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
		if v := verdict(decisionsFor(t, js, seq)); v.Kind != events.KindGranted {
			t.Fatalf("input %d while a snapshot is being encoded: %s/%s", seq, v.Kind, v.Reason)
		}
	}
	if st := r.c.Stats(); st.SnapshotSeq != 0 {
		t.Fatalf("a snapshot of input %d stored while its encoding is held", st.SnapshotSeq)
	}
	close(release)
	testutil.WaitFor(t, 10*time.Second, "the snapshot stored", func() bool { return r.c.Stats().SnapshotSeq > 0 })
	waitCaughtUp(t, js, r)
	r.stop()

	data, h := storedSnapshot(t, js)
	pos, err := streams.ParseSnapshotHeaders(h)
	if err != nil {
		t.Fatal(err)
	}
	p := projector.New()
	for _, m := range readStream(t, js, "TENURE_IN") {
		if m.seq > pos.InputSeq {
			break
		}
		if _, err := p.Step(events.Raw{Seq: m.seq, Time: m.time, Subject: m.subject, Body: m.data}); err != nil {
			t.Fatal(err)
		}
	}
	if want := p.Snapshot(); !bytes.Equal(data, want) {
		t.Fatalf("the snapshot of input %d (%d bytes) is not the fold's state there (%d bytes)", pos.InputSeq, len(data), len(want))
	}
	// Taken after 10 inputs, the coordinator's two genesis inputs among
	// them: at least 8 of w1's acquires (the bytes above are the proof of
	// its content; this only says it is not of an empty state).
	if p.Len() < 8 {
		t.Fatalf("the snapshot of input %d holds %d jobs", pos.InputSeq, p.Len())
	}
	r = startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.SnapshotEvery, c.SnapshotInterval = 1000, time.Hour })
	testutil.WaitFor(t, 10*time.Second, "live", func() bool { return r.c.Stats().Live })
	if st := r.c.Stats(); st.SnapshotSeq != pos.InputSeq || st.SnapshotsRefused != 0 {
		t.Fatalf("restarted on the snapshot of input %d (%d refused), want input %d", st.SnapshotSeq, st.SnapshotsRefused, pos.InputSeq)
	}
	checkChain(t, js)
}
