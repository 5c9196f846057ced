package coordinator_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/heads"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// headLog collects the chain heads published on the head subjects.
type headLog struct {
	t    *testing.T
	mu   sync.Mutex
	all  []heads.Head
	errs []string
}

func collectHeads(t *testing.T, nc *nats.Conn) *headLog {
	t.Helper()
	l := &headLog{t: t}
	for _, f := range streams.HeadFilters() {
		sub, err := nc.Subscribe(f, func(m *nats.Msg) {
			h, err := heads.Parse(m.Data)
			if err == nil {
				err = heads.Verify(h)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if err != nil {
				l.errs = append(l.errs, fmt.Sprintf("%s: %v: %s", m.Subject, err, m.Data))
				return
			}
			want := "tenure.heads"
			if p, ok := strings.CutPrefix(h.Stream, "TENURE_P"); ok {
				want += "." + strings.TrimSuffix(p, "_OUT")
			}
			if m.Subject != want {
				l.errs = append(l.errs, fmt.Sprintf("head of %s on %s, want %s", h.Stream, m.Subject, want))
			}
			l.all = append(l.all, h)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *headLog) snapshot() []heads.Head {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		l.t.Fatalf("bad heads: %v", l.errs)
	}
	return append([]heads.Head(nil), l.all...)
}

// waitHead waits for a head of decision seq of stream signed by
// coordinator id.
func (l *headLog) waitHead(stream, id string, seq uint64) heads.Head {
	l.t.Helper()
	var got heads.Head
	testutil.WaitFor(l.t, 10*time.Second, fmt.Sprintf("a head of %s decision %d by %s", stream, seq, id), func() bool {
		for _, h := range l.snapshot() {
			if h.Stream == stream && h.Coordinator == id && h.Seq == seq {
				got = h
				return true
			}
		}
		return false
	})
	return got
}

// checkHeads requires every head collected to carry the chain value and
// cause of its decision as stored, to be signed by the key of its
// coordinator, and no decision to be the subject of two heads of one
// coordinator (no head repeats before HeadRefresh, resynchronisations
// included) within interval/2 of HeadRefresh of each other.
func checkHeads(t *testing.T, js jetstream.JetStream, all []heads.Head, keys map[string]string) {
	t.Helper()
	ctx := context.Background()
	seen := map[string]time.Time{}
	for _, h := range all {
		if keys[h.Coordinator] != h.Key {
			t.Errorf("head of %s decision %d by %s signed with %s, want %s", h.Stream, h.Seq, h.Coordinator, h.Key, keys[h.Coordinator])
		}
		k := h.Coordinator + "/" + h.Stream + "/" + strconv.FormatUint(h.Seq, 10)
		if at, ok := seen[k]; ok && h.At.Sub(at) < coordinator.HeadRefresh-headInterval {
			t.Errorf("two heads of %s decision %d by %s, %v apart", h.Stream, h.Seq, h.Coordinator, h.At.Sub(at))
		}
		seen[k] = h.At
		s, err := js.Stream(ctx, h.Stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetMsg(ctx, h.Seq)
		if err != nil {
			t.Fatalf("head of %s decision %d: %v", h.Stream, h.Seq, err)
		}
		if got := m.Header.Get(events.HeaderChain); got != h.Chain.String() {
			t.Errorf("head of %s decision %d: chain %s, the stored decision carries %s", h.Stream, h.Seq, h.Chain, got)
		}
		if got := m.Header.Get(events.HeaderCause); got != strconv.FormatUint(h.InputSeq, 10) {
			t.Errorf("head of %s decision %d: input_seq %d, the stored decision answers %s", h.Stream, h.Seq, h.InputSeq, got)
		}
	}
}

func headKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// headInterval is the HeadInterval of the tests' coordinators.
const headInterval = 2 * time.Millisecond

func withHeads(kp nkeys.KeyPair) func(*coordinator.Config) {
	return func(c *coordinator.Config) { c.HeadSigner, c.HeadInterval = kp, headInterval }
}

// A live coordinator with a HeadSigner publishes signed heads of the last
// acknowledged decision, carrying its stored chain value, each decision
// once; a standby publishes none; the coordinator that takes over
// publishes its own. Stats shows the last head.
func TestChainHeads(t *testing.T) {
	srv, nc, js := newServer(t)
	log := collectHeads(t, nc)
	k1, pub1 := headKey(t)
	k2, pub2 := headKey(t)
	// A lifetime of 3 s, not the tests' 600 ms: c1 must stay live through
	// the burst (on two cores loaded by another suite it lost the
	// leadership to c2 and never caught up); c1.stop() hands over at once.
	steady := func(c *coordinator.Config) { c.LeaderTTL = coordinator.DefaultLeaderTTL }
	c1 := startCoordinator(t, srv.ClientURL(), "c1", withHeads(k1), steady)
	testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return c1.c.Stats().Live })
	c2 := startCoordinator(t, srv.ClientURL(), "c2", withHeads(k2), steady)

	// A burst, so that heads are taken while appends are in flight.
	for i := range 500 {
		if _, err := js.PublishAsync(events.InputSubject(events.RoleWorker, "w1", "burst-"+strconv.Itoa(i), events.VerbAcquire), []byte(`{"v":1,"lease_ms":60000}`)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("burst not stored")
	}
	publish(t, js, events.RoleWorker, "w2", "j2", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	last := publish(t, js, events.RoleWorker, "w1", "j3", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	decisionsFor(t, js, last)
	waitCaughtUp(t, js, c1)
	st := c1.c.Stats()
	h := log.waitHead("TENURE_OUT", "c1", st.DecisionsStored)
	if h.InputSeq != last {
		t.Errorf("head of the last decision answers input %d, want %d", h.InputSeq, last)
	}
	testutil.WaitFor(t, 5*time.Second, "c1's Stats to show its head", func() bool {
		sh := c1.c.Stats().Head
		return sh != nil && sh.Seq == st.DecisionsStored
	})
	if sh := c1.c.Stats().Head; sh.Chain != h.Chain || sh.Key != pub1 {
		t.Errorf("Stats head %+v, published %+v", sh, h)
	}
	testutil.WaitFor(t, 10*time.Second, "c2 to verify every decision", func() bool { return c2.c.Stats().DecisionsStored == st.DecisionsStored })
	for _, h := range log.snapshot() {
		if h.Coordinator == "c2" {
			t.Fatalf("standby c2 published a head: %+v", h)
		}
	}
	if c2.c.Stats().Head != nil {
		t.Fatal("standby c2 shows a head")
	}

	// c2 takes over; its heads carry its key and go on from the log c1 left.
	c1.stop()
	testutil.WaitFor(t, 10*time.Second, "c2 live", func() bool { return c2.c.Stats().Live })
	next := publish(t, js, events.RoleWorker, "w2", "j4", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	decisionsFor(t, js, next)
	waitCaughtUp(t, js, c2)
	h2 := log.waitHead("TENURE_OUT", "c2", c2.c.Stats().DecisionsStored)
	if h2.InputSeq != next || h2.Seq <= h.Seq {
		t.Errorf("c2's head %+v after c1's %+v", h2, h)
	}
	all := log.snapshot()
	t.Logf("%d heads checked", len(all))
	checkHeads(t, js, all, map[string]string{"c1": pub1, "c2": pub2})
}

// A coordinator that leaves live and comes back (a new session: here its
// leadership entry is deleted under it, its next renewal finds it gone)
// does not publish the head of the same decision again before HeadRefresh:
// under load a resynchronisation made TestChainHeads see "two heads of
// TENURE_OUT decision 504". (This test replaced a hook that made a renewal
// stall.)
func TestChainHeadsAcrossSessions(t *testing.T) {
	srv, nc, js := newServer(t)
	log := collectHeads(t, nc)
	k1, pub1 := headKey(t)
	r := startCoordinator(t, srv.ClientURL(), "c1", withHeads(k1), func(c *coordinator.Config) {
		c.LeaderTTL = time.Second
	})
	testutil.WaitFor(t, 10*time.Second, "c1 live", func() bool { return r.c.Stats().Live })
	seq := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	decisionsFor(t, js, seq)
	waitCaughtUp(t, js, r)
	before := r.c.Stats().DecisionsStored
	log.waitHead("TENURE_OUT", "c1", before)
	kv, err := js.KeyValue(context.Background(), streams.Topology{}.LeaderBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), coordinator.LeaderKey); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, "c1 live in a second session", func() bool {
		st := r.c.Stats()
		return st.Live && st.Sessions >= 2
	})
	// Heads go out in order on one connection: once the head of a later
	// decision is here, a second head of the first would be too.
	next := publish(t, js, events.RoleWorker, "w1", "j2", events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
	decisionsFor(t, js, next)
	waitCaughtUp(t, js, r)
	log.waitHead("TENURE_OUT", "c1", r.c.Stats().DecisionsStored)
	checkHeads(t, js, log.snapshot(), map[string]string{"c1": pub1})
}

// Without a HeadSigner, no heads; a key that cannot sign heads is refused.
func TestChainHeadsOff(t *testing.T) {
	srv, nc, js := newServer(t)
	log := collectHeads(t, nc)
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.HeadInterval = 10 * time.Millisecond })
	last := publish(t, js, events.RoleWorker, "w1", "j1", events.VerbAcquire, `{"v":1,"lease_ms":60000}`)
	decisionsFor(t, js, last)
	waitCaughtUp(t, js, r)
	// A round trip to the server after the decisions are stored: a head
	// published before it would have reached the subscription by then.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := log.snapshot(); len(got) != 0 || r.c.Stats().Head != nil {
		t.Fatalf("heads without a signer: %+v", got)
	}

	user, _ := nkeys.CreateUser()
	pubOnly, _ := nkeys.FromPublicKey(mustPub(t, user))
	for name, kp := range map[string]nkeys.KeyPair{"user nkey": user, "public key": pubOnly} {
		if _, err := coordinator.New(coordinator.Config{ID: "c2", Conn: nc, HeadSigner: kp}); err == nil {
			t.Errorf("%s accepted as head signer", name)
		}
	}
	kp, _ := headKey(t)
	if _, err := coordinator.New(coordinator.Config{ID: "c2", Conn: nc, HeadSigner: kp, HeadInterval: -time.Second}); err == nil {
		t.Error("negative head interval accepted")
	}
}

func mustPub(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// Each partition's coordinator publishes the heads of its own decision
// stream on its own subject.
func TestChainHeadsPartitioned(t *testing.T) {
	const count = 2
	srv := testutil.StartServer(t, testutil.Partitions(count))
	nc, js := testutil.Connect(t, srv.ClientURL())
	topos := streams.Topology{}.Partitions(count)
	if _, err := streams.EnsureAll(context.Background(), js, streams.Topology{}, count, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	log := collectHeads(t, nc)
	kp, pub := headKey(t)
	var rs []*running
	for _, topo := range topos {
		rs = append(rs, startCoordinator(t, srv.ClientURL(), "c1", withHeads(kp), func(c *coordinator.Config) { c.Topology = topo }))
	}
	// One job in each partition.
	jobs := map[uint32]string{}
	for i := 0; len(jobs) < count; i++ {
		job := "job-" + strconv.Itoa(i)
		if _, ok := jobs[events.PartitionOf(job, count)]; !ok {
			jobs[events.PartitionOf(job, count)] = job
		}
	}
	for k, topo := range topos {
		ack, err := js.Publish(context.Background(), events.InputSubject(events.RoleWorker, "w1", jobs[uint32(k)], events.VerbAcquire), []byte(`{"v":1,"lease_ms":60000}`))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Stream != topo.InputStream() {
			t.Fatalf("input of partition %d stored in %s", k, ack.Stream)
		}
		testutil.WaitFor(t, 10*time.Second, "partition caught up", func() bool {
			out, err := js.Stream(context.Background(), topo.DecisionStream())
			if err != nil {
				return false
			}
			info, err := out.Info(context.Background())
			st := rs[k].c.Stats()
			return err == nil && st.InputsFolded >= ack.Sequence && st.DecisionsStored == info.State.LastSeq
		})
		log.waitHead(topo.DecisionStream(), "c1", rs[k].c.Stats().DecisionsStored)
	}
	checkHeads(t, js, log.snapshot(), map[string]string{"c1": pub})
}
