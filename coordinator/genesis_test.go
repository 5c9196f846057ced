package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// checkGenesisLog requires inputs 1 and 2 of the log to be a coordinator's
// rules input of the current revision and its default policy.
func checkGenesisLog(t *testing.T, inputs []msg) {
	t.Helper()
	if len(inputs) < 2 {
		t.Fatalf("the log holds %d inputs, want the rules and the default policy first", len(inputs))
	}
	for i, want := range []events.Verb{events.VerbRules, events.VerbPolicy} {
		var in events.Input
		if err := events.DecodeInput(inputs[i].subject, inputs[i].data, &in); err != nil {
			t.Fatalf("input %d (%s): %v", i+1, inputs[i].subject, err)
		}
		if in.Role != events.RoleCoord || in.Verb != want {
			t.Fatalf("input %d is %s %s (%s), want the coordinator's %s", i+1, in.Role, in.Verb, inputs[i].subject, want)
		}
		if want == events.VerbRules && in.Revision != events.CurrentRevision {
			t.Fatalf("input 1 sets revision %d, want %d", in.Revision, events.CurrentRevision)
		}
	}
}

// A brand-new deployment's input stream takes no input but the
// coordinators' rules and policy until the coordinator has stored them:
// a worker's acquire published in that moment (here: between Ensure and
// the coordinator's start, which is the same window, only wider) is
// refused with no responders and stored nowhere, so the log starts with
// the rules and the default policy, and the acquire, sent again once the
// coordinator is live, is granted under the lease key. (Before genesis
// existed, the acquire was stored as input 1, judged by revision 1: lease
// id L1, which anyone can name.)
func TestGenesisRefusesInputsBeforeTheRules(t *testing.T) {
	srv, _, js := newServer(t) // streams.Ensure, as a coordinator or tenure serve would
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	acquire := `{"v":1,"lease_ms":60000}`
	subj := events.InputSubject(events.RoleWorker, "w1", "j1", events.VerbAcquire)
	ack, err := js.Publish(ctx, subj, []byte(acquire))
	if err == nil {
		t.Fatalf("an acquire published before the rules was stored as input %d", ack.Sequence)
	}
	if !errors.Is(streams.Classify(err), streams.ErrNoResponders) || !errors.Is(streams.Classify(err), streams.ErrTransient) {
		t.Fatalf("acquire before the rules: %v, want no responders (a transient error)", err)
	}
	// Another coordinator's policy may be stored in genesis; an ops input
	// may not, nor a subject under tenure.in.coord that is not a rules or
	// a policy input.
	for _, s := range []string{
		events.InputSubject(events.RoleOps, "op1", "j1", events.VerbOffer),
		events.InputSubject(events.RoleCoord, "c9", events.NoJob, events.VerbTick),
		events.InputSubject(events.RoleCoord, "c9", "j1", events.VerbRules),
	} {
		if _, err := js.Publish(ctx, s, []byte(`{"v":1}`)); !errors.Is(streams.Classify(err), streams.ErrNoResponders) {
			t.Fatalf("publish %s in genesis: %v, want no responders", s, err)
		}
	}
	if info, err := js.Stream(ctx, "TENURE_IN"); err != nil || info.CachedInfo().State.Msgs != 0 {
		t.Fatalf("input stream in genesis: %v, %+v", err, info.CachedInfo().State)
	}

	r := startCoordinator(t, srv.ClientURL(), "c1")
	testutil.WaitFor(t, 10*time.Second, "coordinator live", func() bool { return r.c.Stats().Live })
	// Live means open: no wait between the live state and the first input.
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, acquire)
	d := verdict(decisionsFor(t, js, seq))
	if d.Kind != events.KindGranted {
		t.Fatalf("acquire after genesis: %s %s", d.Kind, d.Reason)
	}
	if !strings.Contains(d.Job.LeaseID, "-") {
		t.Fatalf("lease id %q: want one derived from the lease key (revision 2 on)", d.Job.LeaseID)
	}
	inputs, _ := checkChain(t, js)
	checkGenesisLog(t, inputs)
	if seq != 3 {
		t.Fatalf("the acquire is input %d, want 3 (after the rules and the policy)", seq)
	}
	s, err := js.Stream(ctx, "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Subjects; len(got) != 1 || got[0] != events.InputFilter {
		t.Fatalf("input stream subjects after genesis: %v, want [%s]", got, events.InputFilter)
	}
	// The rules and the default policy of an empty log are fenced by
	// their expected last sequence (0, then 1), not deduplicated: they
	// carry no Nats-Msg-Id (PROTOCOL.md §14).
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
			t.Errorf("input %d carries Nats-Msg-Id %q, want none", seq, id)
		}
	}
}

// A coordinator stopped in the middle of genesis, at each point (the
// stream created, the rules stored, the rules and the policy stored, none
// widened), leaves a stream that the next coordinator widens before it
// goes live, with the log of an uninterrupted genesis: rules, then policy,
// and nothing appended twice.
func TestGenesisResumesAfterACrash(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored []events.Verb // what the stopped coordinator stored
	}{
		{"created", nil},
		{"rules", []events.Verb{events.VerbRules}},
		{"rules and policy", []events.Verb{events.VerbRules, events.VerbPolicy}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _, js := newServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			top := streams.Topology{}
			for i, v := range tc.stored {
				in := events.Input{Verb: v, Revision: events.CurrentRevision, Policy: events.DefaultPolicy()}
				if v == events.VerbRules {
					in.Policy = events.Policy{}
					in.LeaseKey[0] = 7
				} else {
					in.Revision = 0
				}
				m := &nats.Msg{Subject: top.Partition.InputSubject(events.RoleCoord, "c0", events.NoJob, v), Data: events.AppendInputBody(nil, &in)}
				if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(uint64(i))); err != nil {
					t.Fatalf("the stopped coordinator's %s: %v", v, err)
				}
			}
			// Ensure again (a restarted serve, a standby): the stream in
			// genesis is accepted and left as it is.
			h, err := streams.Ensure(ctx, js, top, 600*time.Millisecond)
			if err != nil {
				t.Fatalf("Ensure on a stream in genesis: %v", err)
			}
			if !top.InGenesis(h.In.CachedInfo().Config) {
				t.Fatalf("Ensure changed the subjects of the stream in genesis: %v", h.In.CachedInfo().Config.Subjects)
			}
			r := startCoordinator(t, srv.ClientURL(), "c1")
			testutil.WaitFor(t, 10*time.Second, "coordinator live", func() bool { return r.c.Stats().Live })
			seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
			if d := verdict(decisionsFor(t, js, seq)); d.Kind != events.KindGranted {
				t.Fatalf("acquire after genesis: %s %s", d.Kind, d.Reason)
			}
			inputs, _ := checkChain(t, js)
			checkGenesisLog(t, inputs)
			if seq != 3 {
				t.Fatalf("the acquire is input %d, want 3: the log is %d inputs before it", seq, seq-1)
			}
			if len(tc.stored) > 0 {
				var in events.Input
				if err := events.DecodeInput(inputs[0].subject, inputs[0].data, &in); err != nil || in.Actor != "c0" || in.LeaseKey[0] != 7 {
					t.Fatalf("input 1 is not the stopped coordinator's rules: %s %s", inputs[0].subject, inputs[0].data)
				}
			}
		})
	}
}

// Two coordinators starting together on a brand-new deployment: the rules
// and the policy are stored once, the stream is widened, and one goes live.
func TestGenesisTwoCoordinatorsAtOnce(t *testing.T) {
	srv, _, js := newServer(t)
	a := startCoordinator(t, srv.ClientURL(), "c1")
	b := startCoordinator(t, srv.ClientURL(), "c2")
	testutil.WaitFor(t, 10*time.Second, "a coordinator live", func() bool { return a.c.Stats().Live || b.c.Stats().Live })
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	if d := verdict(decisionsFor(t, js, seq)); d.Kind != events.KindGranted {
		t.Fatalf("acquire after genesis: %s %s", d.Kind, d.Reason)
	}
	inputs, _ := checkChain(t, js)
	checkGenesisLog(t, inputs)
	if seq != 3 {
		t.Fatalf("the acquire is input %d, want 3", seq)
	}
}

// A sealed input stream (anyone who may update it can seal it, and
// JetStream cannot unseal it) is refused before going live, with a remedy
// that does not send the operator to `nats stream edit`.
func TestSealedInputStreamRefused(t *testing.T) {
	srv, _, js := newServer(t)
	ctx := context.Background()
	r := startCoordinator(t, srv.ClientURL(), "c1")
	testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return r.c.Stats().Live })
	r.stop()

	s, err := js.Stream(ctx, "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Sealed = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("seal: %v", err)
	}

	c2 := startCoordinator(t, srv.ClientURL(), "c2")
	var err2 error
	select {
	case err2 = <-c2.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a coordinator on a sealed input stream did not stop")
	}
	c2.done <- nil // for the cleanup's stop
	var mm *streams.ConfigMismatchError
	if !errors.As(err2, &mm) || mm.Stream != "TENURE_IN" || mm.Field != "Sealed" {
		t.Fatalf("Run = %v, want a Sealed mismatch on TENURE_IN", err2)
	}
	if st := c2.c.Stats(); st.State != coordinator.StateRefused || st.Live {
		t.Errorf("state %q (live %v), want refused", st.State, st.Live)
	}
	if rem := coordinator.Remedy(err2); !strings.Contains(rem, "sealed") || strings.Contains(rem, "nats stream edit") {
		t.Errorf("remedy %q", rem)
	}
}
