package coordinator_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// intakeVerdict publishes an input as worker w1 (to its intake stream) and
// waits for its verdict: the decision addressed to w1 whose
// Tenure-Source-Seq header names the intake sequence the PubAck gave.
func intakeVerdict(t *testing.T, js jetstream.JetStream, job string, verb events.Verb, body string) events.Decision {
	t.Helper()
	ack, err := js.Publish(context.Background(), events.InputSubject(events.RoleWorker, "w1", job, verb), []byte(body))
	if err != nil {
		t.Fatalf("publish %s %s: %v", verb, job, err)
	}
	if ack.Stream != "TENURE_INTAKE_w1" {
		t.Fatalf("publish %s %s: stored by %s, want TENURE_INTAKE_w1", verb, job, ack.Stream)
	}
	var v events.Decision
	src := strconv.FormatUint(ack.Sequence, 10)
	testutil.WaitFor(t, 20*time.Second, fmt.Sprintf("the verdict of w1's intake input %d", ack.Sequence), func() bool {
		for _, m := range readStream(t, js, "TENURE_OUT") {
			if m.header.Get(events.HeaderSourceSeq) != src {
				continue
			}
			d, err := events.DecodeDecision(m.data)
			if err != nil {
				t.Fatal(err)
			}
			if d.Addressee != "w1" || d.Actor != "w1" {
				t.Fatalf("decision %d with %s %s is addressed to %s, caused by %s", m.seq, events.HeaderSourceSeq, src, d.Addressee, d.Actor)
			}
			if !d.Kind.Derived() {
				v = d
				return true
			}
		}
		return false
	})
	return v
}

// With quotas, a worker's inputs go through its intake stream and its
// verdicts name the intake sequence; when free storage falls below the
// reserve (here: another stream of the account takes the room) the
// coordinator stays live, keeps deciding what is stored, expiries
// included, and empties no intake; when the room comes back it empties
// them again, without a restart.
func TestStorageShortStaysLiveAndResumes(t *testing.T) {
	srv, _, js := newServer(t)
	const limit = 96 << 20
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) {
		c.Genesis = coordinator.GenesisAdmin
		c.StorageLimit, c.StorageReserve, c.StorageWarn = limit, 48<<20, 64<<20
		// The test counts its sessions (one): 3 s of leadership, not the
		// tests' 600 ms, which two loaded cores can miss.
		c.LeaderTTL = coordinator.DefaultLeaderTTL
	})
	q := streams.Quotas{Workers: []string{"w1"}, MaxBytes: 1 << 20, MaxMsgs: 1000, BytesPerS: 1 << 20, MsgsPerS: 1000}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := coordinator.EndGenesisQuotas(ctx, js, streams.Topology{}, &q, nil, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "coordinator live with its intake", func() bool {
		st := r.c.Stats()
		return st.Live && st.Storage != nil && st.Storage.Intakes == 1 && st.Storage.State == coordinator.StorageOK
	})
	if v := intakeVerdict(t, js, "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`); v.Kind != events.KindGranted {
		t.Fatalf("acquire j1: %s/%s", v.Kind, v.Reason)
	}
	testutil.WaitFor(t, 10*time.Second, "the acquire emptied from the intake", func() bool { s := r.c.Stats().Storage; return s != nil && s.Purged >= 1 })

	// Another stream of the account takes 56 MiB: 40 free, below the
	// 48 MiB reserve.
	ballast, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "BALLAST", Subjects: []string{"ballast.>"}})
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("b"), 512<<10)
	for i := range 112 {
		if _, err := js.Publish(context.Background(), "ballast."+strconv.Itoa(i), chunk); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "storage short", func() bool { s := r.c.Stats().Storage; return s != nil && s.State == coordinator.StorageShort })
	purged := r.c.Stats().Storage.Purged

	// Short: what is stored is still decided, expiries too, and nothing
	// is emptied from the intake.
	if v := intakeVerdict(t, js, "j2", events.VerbAcquire, `{"v":1,"lease_ms":1000}`); v.Kind != events.KindGranted {
		t.Fatalf("acquire j2 while storage is short: %s/%s", v.Kind, v.Reason)
	}
	waitDecision(t, js, "j2 expired while storage is short", func(d events.Decision) bool {
		return d.Job.ID == "j2" && d.Kind == events.KindExpired
	})
	time.Sleep(300 * time.Millisecond) // several turns of the gate (50 ms each)
	st := r.c.Stats()
	if !st.Live || st.Storage.State != coordinator.StorageShort || st.Storage.Purged != purged || st.Storage.Held != 1 {
		t.Fatalf("while short: live %v, storage %+v; want live, short, nothing more purged than %d, w1 held", st.Live, st.Storage, purged)
	}

	// The room comes back: the intake is emptied again, no restart.
	if err := js.DeleteStream(context.Background(), ballast.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "storage ok and the intake emptied", func() bool {
		s := r.c.Stats().Storage // (nil while no session is live)
		return s != nil && s.State == coordinator.StorageOK && s.Purged > purged && s.Held == 0
	})
	if st := r.c.Stats(); st.Sessions != 1 || !st.Live {
		t.Fatalf("after the storage came back: %+v; want the first session, live", st)
	}
	info, err := js.Stream(context.Background(), "TENURE_INTAKE_w1")
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("the intake holds %d inputs after the coordinator emptied it, want 0", n)
	}
	checkChain(t, js)
}
