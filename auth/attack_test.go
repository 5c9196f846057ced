package auth_test

// The attack suite of the issue "A hostile worker gains nothing": one test
// per attack made by an attacker holding nothing but worker w2's own
// credentials from `tenure auth init`, every subject permission held. Each
// runs against a real embedded nats-server started with the generated
// configuration and a real coordinator, while the honest workers w1 and w3
// and the dispatcher do real work through the SDKs; each checks what the
// attack must not achieve and that the honest side lost nothing
// (attack_helpers_test.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
)

// A worker cannot forge the coordinator's inputs, nor knock it out, by
// aiming messages at its inboxes. The coordinator reads the input stream
// through an ephemeral pull consumer whose inbox is a NUID, predictable
// because nats.go's NUID generator is process-wide (and shared with an
// embedded server). The attacker modelled is the strongest one, whose
// prediction succeeded: the harness hands it the subjects the coordinator's
// connection subscribes to, from the server's monitoring, and from then on
// it uses w2's connection only, aiming again at every new inbox (each hit
// makes the reader replace its consumer, under a new inbox):
//
//   - push consumers of w2's own decisions (tenure.out.w2.>, which w2 may
//     create; the deliver subject is in the request body) delivering to the
//     inbox: the deliveries look like the input consumer's (a $JS.ACK reply
//     subject, delivery sequence 1 for a fresh consumer), from w2's latest
//     decision, which a batch renew of 256 leases put ahead of the input
//     stream's end;
//   - the same, from w2's decision stored at the sequence of the next
//     input, after a first hit that makes the reader replace its consumer;
//   - PubAcks of w2's own inputs and JetStream API answers, published with
//     the inbox as their reply subject;
//   - PubAcks and API answers at the reply subjects of the coordinator's
//     decision appends, which w2 sees on the decisions addressed to it (a
//     core subscription to tenure.out.w2.>), and at the next two.
//
// The coordinator must fold exactly the stored inputs, stay live in its
// session, and the honest side must lose nothing.
func TestAttackForgedInputsViaPredictedInbox(t *testing.T) {
	t.Parallel()
	t.Run("push consumers at the input inbox", func(t *testing.T) {
		t.Parallel()
		e := newAttackEnv(t)
		h := e.startHonest(t, honestConfig{})
		a := e.attacker(t)
		a.inflate(t, events.MaxBatch) // w2's latest decision runs ahead of the input stream
		var errs []error
		n := e.aimLoop(t, 8*time.Second, coordinatorInbox, func(sub string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.pushConsumer(ctx, sub, 0); err != nil {
				errs = append(errs, err)
			}
		})
		t.Logf("w2 aimed push consumers at %d inboxes of the coordinator (%d refused: %v)", n, len(errs), first(errs, 3))
		if n > 0 && len(errs) < n {
			// They reached the coordinator's readers, which dropped them.
			testutil.WaitFor(t, 10*time.Second, "the coordinator to drop the forged deliveries", func() bool { return e.c.Stats().Dropped > 0 })
		}
		e.checkHonest(t, h)
	})
	t.Run("push consumers at the input inbox, aimed at the next input", func(t *testing.T) {
		t.Parallel()
		e := newAttackEnv(t)
		h := e.startHonest(t, honestConfig{})
		a := e.attacker(t)
		a.inflate(t, events.MaxBatch) // w2 has decisions at every sequence of the next 256 inputs
		aimed := map[string]bool{}
		inboxes := func() (fresh []string) {
			for _, sub := range e.coordinatorSubs(t) {
				if coordinatorInbox(sub) && !aimed[sub] {
					aimed[sub] = true
					fresh = append(fresh, sub)
				}
			}
			return fresh
		}
		inboxes()
		rounds := 0
		for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); rounds++ {
			if done, _ := e.run.exited(); done {
				break
			}
			// The input stream's end, as w2 learns it: the sequence of an
			// input of its own, once it has its verdict (folded).
			p := a.verdict(t, "probe.progress", `{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`).Cause
			// A first hit at every inbox (an old decision: delivery 1 of a
			// consumer that delivered more) makes the reader replace its
			// consumer; the second, at the new inbox, is the decision
			// stored at sequence p+1, as the new consumer's delivery 1.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			for _, sub := range e.coordinatorSubs(t) {
				if coordinatorInbox(sub) {
					aimed[sub] = true
					_ = a.pushConsumer(ctx, sub, 1)
				}
			}
			for until := time.Now().Add(time.Second); time.Now().Before(until); time.Sleep(time.Millisecond) {
				if fresh := inboxes(); len(fresh) > 0 {
					for _, sub := range fresh {
						_ = a.pushConsumer(ctx, sub, p+1)
					}
					break
				}
			}
			cancel()
		}
		t.Logf("w2 made %d rounds at the coordinator's inboxes; the coordinator dropped %d messages", rounds, e.c.Stats().Dropped)
		e.checkHonest(t, h)
	})
	t.Run("PubAcks and API answers at the input inbox", func(t *testing.T) {
		t.Parallel()
		e := newAttackEnv(t)
		h := e.startHonest(t, honestConfig{})
		a := e.attacker(t)
		n := e.aimLoop(t, 8*time.Second, coordinatorInbox, func(sub string) {
			if err := errors.Join(a.pubAckTo(sub), a.apiReplyTo(sub)); err != nil {
				t.Errorf("w2 publishing: %v", err)
			}
		})
		t.Logf("w2 aimed PubAcks and API answers at %d inboxes of the coordinator", n)
		e.checkHonest(t, h)
	})
	t.Run("replies aimed at the decision appends", func(t *testing.T) {
		t.Parallel()
		e := newAttackEnv(t)
		h := e.startHonest(t, honestConfig{})
		a := e.attacker(t)
		// w2 sees the coordinator's appends of the decisions addressed to
		// it, reply subjects included (if the server lets it subscribe).
		seen := make(chan *nats.Msg, 1024)
		if _, err := a.nc.ChanSubscribe(events.AddresseeFilter("w2"), seen); err != nil {
			t.Fatal(err)
		}
		// Every 20 ms, w2 publishes an input of its own (its verdict is a
		// decision addressed to w2) and aims at the reply subject of the
		// latest such append it saw, and at the next two.
		provoke := time.NewTicker(20 * time.Millisecond)
		defer provoke.Stop()
		aimed, latest, last := 0, "", ""
	loop:
		for deadline := time.After(8 * time.Second); ; {
			if done, _ := e.run.exited(); done {
				break
			}
			select {
			case <-deadline:
				break loop
			case m := <-seen:
				if m.Reply != "" {
					latest = m.Reply
				}
			case <-provoke.C:
				if err := a.nc.Publish("tenure.in.worker.w2.provoke.progress", []byte(`{"v":1}`)); err != nil {
					t.Fatal(err)
				}
				if latest == last {
					continue
				}
				last = latest
				aimed++
				var errs []error
				errs = append(errs, a.pubAckTo(latest), a.apiReplyTo(latest))
				if i := strings.LastIndexByte(latest, '.'); i > 0 {
					if id, err := strconv.ParseUint(latest[i+1:], 10, 64); err == nil {
						next := fmt.Sprintf("%s.%d", latest[:i], id+1)
						errs = append(errs, a.pubAckTo(next), a.apiReplyTo(next), a.apiReplyTo(fmt.Sprintf("%s.%d", latest[:i], id+2)))
					}
				}
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("w2 publishing: %v", err)
				}
			}
		}
		t.Logf("w2 aimed at the reply subjects of %d decision appends", aimed)
		e.checkHonest(t, h)
	})
}

// A worker cannot freeze another worker's job by naming its lease: w2 is
// told the honest workers' job ids (as the decision stream's info lists
// them to the harness: a worker cannot list them itself,
// TestAttackDecisionSubjectsEnumerated, but the strongest attacker knows
// them), then claims every lease id up to the input stream's end,
// generation 1, with batch renewals of those jobs. No ownership conflict
// may be recorded on an honest lease, and the honest leases' renewals go on
// being accepted.
func TestAttackJobFrozenByGuessedLeaseID(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	h := e.startHonest(t, honestConfig{})
	a := e.attacker(t)
	ctx := context.Background()
	out := e.stream(t, "TENURE_OUT")
	attacked := map[string]bool{}
	guesses := 0
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline) && len(attacked) < 8; {
		info, err := out.Info(ctx, jetstream.WithSubjectFilter("tenure.out.*.*.*"))
		if err != nil {
			t.Fatalf("w2 reading the decision subjects: %v", err)
		}
		var targets []string
		for subject := range info.State.Subjects {
			tok := strings.Split(subject, ".")
			if len(tok) == 5 && tok[2] != "w2" && tok[2] != events.NoActor && (tok[4] == "granted" || tok[4] == "acked") && !attacked[tok[3]] {
				targets = append(targets, tok[3])
			}
		}
		if len(targets) == 0 {
			time.Sleep(20 * time.Millisecond) // pacing: no new lease granted yet
			continue
		}
		// No lease id names an input after w2's own latest one.
		upto := a.publish(t, "probe.progress", `{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`)
		for _, job := range targets {
			attacked[job] = true
			for from := uint64(1); from <= upto; from += events.MaxBatch {
				var b strings.Builder
				b.WriteString(`{"v":1,"leases":[`)
				for id := from; id < from+events.MaxBatch && id <= upto; id++ {
					if id > from {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, `{"job":%q,"lease_id":"L%d","generation":1,"renew_seq":1}`, job, id)
					guesses++
				}
				b.WriteString(`]}`)
				a.publish(t, "_.renew", b.String())
			}
		}
	}
	t.Logf("w2 claimed %d lease ids on %d honest jobs", guesses, len(attacked))
	if len(attacked) == 0 {
		t.Fatal("w2 found no honest job to aim at")
	}
	e.checkHonest(t, h)
	for _, sd := range e.decisions(t) {
		if d := sd.d; d.Kind == events.KindConflict && d.Job.Holder != "w2" {
			t.Errorf("decision %d: %s/%s on %s's job %s (lease %s, generation %d) caused by input %d",
				sd.seq, d.Kind, d.Reason, d.Job.Holder, d.Job.ID, d.Job.LeaseID, d.Job.Generation, d.Cause)
		}
	}
}

// A worker cannot use up the consumers others need: w2 creates consumers of
// its own decisions on TENURE_OUT, 1,100 in a few seconds (the server's
// default limit is 1,000 consumers per stream). Afterwards a worker still
// connects (the SDK reads its decisions through a consumer), the
// dispatcher's calls still get their verdicts (each reads through a
// consumer), and a restarted coordinator (whose standby reads the decision
// stream through a consumer) still goes live.
func TestAttackConsumersExhausted(t *testing.T) {
	t.Parallel()
	// No snapshots: the restarted coordinator verifies the decision stream.
	e := newAttackEnvWith(t, true)
	// Leases long enough to outlive the coordinator's restart below.
	h := e.startHonest(t, honestConfig{Workers: []string{"w1"}, Lease: 6 * time.Second})
	a := e.attacker(t)
	t0 := time.Now()
	made, refused := a.hogConsumers(1100)
	t.Logf("w2 created %d consumers on TENURE_OUT in %v; refused: %v", made, time.Since(t0).Round(time.Millisecond), refused)
	if made > events.WorkerConsumers {
		t.Errorf("w2 created %d consumers, more than the %d names a worker has", made, events.WorkerConsumers)
	}

	if err := h.join(t, "w3"); err != nil {
		t.Errorf("w3 cannot connect after w2's consumers: %v", err)
	}
	d := connect(t, e.b, e.url, "disp")
	dc, err := ops.New(d.nc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), honestVerdictTimeout)
	defer cancel()
	if v, err := dc.Offer(ctx, "after-hogs", "w1", 6000, honestAckTimeout.Milliseconds()); err != nil {
		t.Errorf("the dispatcher's offer after w2's consumers: %v", err)
	} else if v.Kind != events.KindOffered {
		t.Errorf("the dispatcher's offer after w2's consumers: %s/%s", v.Kind, v.Reason)
	}
	if e.restartCoordinator(t) {
		h.waitProgress(t, 1, 15*time.Second)
	}
	e.checkHonest(t, h)
}

// A worker cannot drown the coordinator, the server or the audit in
// payload: w2 publishes, as fast as it can (512 PubAcks outstanding), bodies
// of the largest size the server accepts (1 MiB, max_payload), which the
// protocol refuses (events.MaxInputBytes is 64 KiB), then, on another
// server, bodies of the largest size the protocol allows, in number. The
// coordinator must stay live, honest verdicts must keep arriving within
// their leases, every stored input must get its verdict (an oversized one
// rejected/too_large), and the audit must read the whole log clean. The
// server may refuse w2's publishes, but w2 must be told (an error answer),
// not left without an answer.
//
// The floods, 250 MiB of 1 MiB bodies and 1,500 bodies of 64 KiB (94 MiB),
// are about the smallest that break the code of the issue reliably on two
// cores under the race detector (with honest leases of 3 s and 5 s; the
// second now has 8 s); the environment variables FLOOD_BIG and FLOOD_SMALL
// set other counts. Not parallel: it would take the CPU and the disk from the other tests.
func TestAttackPayloadFlood(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		size  int           // 0: the server's max_payload
		lease time.Duration // of the honest leases
	}{
		{"1MiB bodies", floodCount(t, "FLOOD_BIG", 250), 0, defaultHonestLease},
		// Bodies the protocol allows are stored and folded: the honest
		// verdicts queued behind them wait for them, hence longer leases
		// (8 s: with 5 s, 11 honest leases expired on two cores loaded by
		// another suite; a flood that costs only the flooder is issue 29).
		{"64KiB bodies", floodCount(t, "FLOOD_SMALL", 1500), events.MaxInputBytes, 8 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The leadership lasts 10 s, not 3: on two cores loaded by
			// another suite, under -race, the process that holds the
			// server, the coordinator and the flood stalled for seconds
			// (the log's timestamps lag the times its lines report), the
			// leadership lapsed, and the honest verdicts waited for the
			// resynchronisation. The renewal's own path is pinned by
			// coordinator's TestModelSlowInputCheck.
			e := newAttackEnvOpts(t, attackOpts{coord: func(c *coordinator.Config) { c.LeaderTTL = 10 * time.Second }})
			h := e.startHonest(t, honestConfig{Lease: c.lease})
			a := e.attacker(t)
			size := c.size
			if size == 0 {
				size = int(a.nc.MaxPayload())
			}
			t0 := time.Now()
			res := a.flood(t, "flood", c.n, size)
			// An answer that never came is a silent drop, unless the server
			// told w2 why on its connection (an error that closed it).
			connErr := a.nc.LastError()
			var stored []uint64
			var refused, silent []string
			for i, r := range res {
				timeout := errors.Is(r.err, jetstream.ErrAsyncPublishTimeout) || errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, nats.ErrTimeout)
				switch {
				case r.err == nil:
					stored = append(stored, r.seq)
				case timeout && connErr == nil:
					silent = append(silent, fmt.Sprintf("#%d: %v", i, r.err))
				case timeout:
					refused = append(refused, fmt.Sprintf("#%d: %v (connection: %v)", i, r.err, connErr))
				default:
					refused = append(refused, fmt.Sprintf("#%d: %v", i, r.err))
				}
			}
			t.Logf("w2 published %d bodies of %d bytes (%d MiB) in %v: %d stored, %d refused (e.g. %v), %d without an answer",
				c.n, size, c.n*size>>20, time.Since(t0).Round(time.Millisecond), len(stored), len(refused), first(refused, 2), len(silent))
			if len(silent) > 0 {
				t.Errorf("%d of w2's publishes got no answer at all, e.g. %v: dropped silently", len(silent), first(silent, 3))
			}
			// The honest work goes on after the flood.
			h.waitProgress(t, 1, 15*time.Second)
			e.checkHonest(t, h)
			by := e.checkEveryInputDecided(t)
			if size > events.MaxInputBytes {
				bad := 0
				for _, seq := range stored {
					if vs := by[seq]; len(vs) > 0 && (vs[0].d.Kind != events.KindRejected || vs[0].d.Reason != events.ReasonTooLarge) {
						if bad++; bad <= 3 {
							t.Errorf("w2's %d-byte input %d: verdict %s/%s, want rejected/too_large", size, seq, vs[0].d.Kind, vs[0].d.Reason)
						}
					}
				}
			}
		})
	}
}

// floodCount is the size of a flood: def, or the value of the environment
// variable name (to try other sizes by hand).
func floodCount(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		return n
	}
	return def
}

// A worker cannot delay the expiry of leases: the coordinator's tick inputs
// have predictable Nats-Msg-Ids (tick-<coordinator>-<deadline ns>-<attempt>),
// so w2 acquires a short lease, reads its expires_at from the verdict and
// publishes, on its own subject and before the expiry, messages carrying
// the tick ids of that deadline for many attempts; the input stream's
// duplicate window then drops the coordinator's ticks. With nobody else
// publishing, the expired decision must still be stored within seconds of
// expires_at. (Honest work runs before and after: while it runs, its own
// inputs advance time and the attack shows nothing.)
func TestAttackExpiryDelayedByTickMsgIDs(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	before := e.startHonest(t, honestConfig{Prefix: "before"})
	before.stop(t)
	a := e.attacker(t)
	coord := a.coordinatorID(t)
	const lease = 3 * time.Second
	g := a.verdict(t, "slow.acquire", fmt.Sprintf(`{"v":1,"lease_ms":%d}`, lease.Milliseconds()))
	if g.Kind != events.KindGranted {
		t.Fatalf("w2's acquire: %s/%s", g.Kind, g.Reason)
	}
	expires := g.Job.ExpiresAt
	const attempts = 40
	ctx, cancel := context.WithTimeout(context.Background(), lease)
	defer cancel()
	for i := range attempts {
		id := fmt.Sprintf("tick-%s-%d-%d", coord, expires, i)
		if _, err := a.js.Publish(ctx, "tenure.in.worker.w2.slow.progress", []byte(`{"v":1}`), jetstream.WithMsgID(id)); err != nil {
			t.Fatalf("w2 publishing %s: %v", id, err)
		}
	}
	if now := time.Now().UnixNano(); now >= expires {
		t.Fatalf("the tick ids were not all published before the lease's expiry (%s, now %s): machine too slow for this test",
			events.FormatTime(expires), events.FormatTime(now))
	}
	// Nobody publishes now: only the coordinator's ticks can fire the expiry.
	const grace = 5 * time.Second
	wait := time.Until(time.Unix(0, expires)) + grace
	_, ok := e.awaitDecisions(t, wait, func(ds []storedDecision) bool {
		for _, sd := range ds {
			if d := sd.d; d.Kind == events.KindExpired && d.Job.ID == "slow" && d.Job.LeaseID == g.Job.LeaseID {
				if late := time.Duration(d.At - expires); late > grace {
					t.Errorf("w2's lease expired at %s, %v after its expires_at", events.FormatTime(d.At), late)
				}
				return true
			}
		}
		return false
	})
	if !ok {
		t.Errorf("no expired decision for w2's lease %s %v after its expires_at %s: the coordinator's ticks were dropped as duplicates of w2's messages",
			g.Job.LeaseID, grace, events.FormatTime(expires))
	}
	after := e.startHonest(t, honestConfig{Prefix: "after"})
	e.checkHonest(t, after)
}

// A worker publishing on a subject of its own with too many or too few
// tokens learns that it was rejected: the rejected/bad_subject verdict is
// addressed to the subject's actor whenever the actor token is a valid
// token, not to "_" where nobody reads it.
func TestAttackMalformedSubjectVerdictLost(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	h := e.startHonest(t, honestConfig{})
	a := e.attacker(t)
	tails := []string{
		"acquire",         // five tokens
		"j",               // five tokens
		"j.x.acquire",     // seven tokens
		"a.b.c.d.acquire", // nine tokens
		"j.frobnicate",    // six tokens, an unknown verb
		"_.acquire",       // six tokens, no job for a verb that needs one
	}
	seqs := make([]uint64, len(tails))
	for i, tail := range tails {
		seqs[i] = a.publish(t, tail, `{"v":1,"lease_ms":60000}`)
	}
	by := e.awaitVerdicts(t, 15*time.Second, seqs...)
	for i, tail := range tails {
		subject := "tenure.in.worker.w2." + tail
		vs := by[seqs[i]]
		if len(vs) != 1 {
			t.Errorf("input %d on %s: %d verdicts, want 1", seqs[i], subject, len(vs))
			continue
		}
		v := vs[0]
		if v.d.Kind != events.KindRejected || v.d.Reason != events.ReasonBadSubject {
			t.Errorf("input %d on %s: verdict %s/%s, want rejected/bad_subject", seqs[i], subject, v.d.Kind, v.d.Reason)
		}
		if !strings.HasPrefix(v.subject, "tenure.out.w2.") || v.d.Addressee != "w2" {
			t.Errorf("input %d on %s: its verdict %s/%s is stored on %s, addressed to %q: w2, whose subject it was, never learns it",
				seqs[i], subject, v.d.Kind, v.d.Reason, v.subject, v.d.Addressee)
		}
	}
	e.checkHonest(t, h)
}

// A worker cannot read the state API (tenure.api.>, PROTOCOL.md §23),
// whose job projections carry lease ids: told an honest worker's live
// lease id, w2 could claim it and freeze the job in an ownership conflict,
// the attack above that unguessable lease ids defeat. The API runs as
// tenure serve runs it, on the coordinator user's connection in the
// coordinators' micro service; the dispatcher and the coordinator user
// read an honest live lease through it. w2 asks every endpoint (refused
// by the server: its publish permissions name none of them, and its
// account imports none), tries to subscribe to the API's subjects (to take
// requests or answers; refused), and aims its consumers' deliveries at the
// endpoints, in the service's queue group (possible: the deliver subject
// is in the request body), which the API drops unanswered. The honest
// side loses nothing.
func TestAttackStateAPIRead(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	h := e.startHonest(t, honestConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serving := connect(t, e.b, e.url, "coord")
	s, err := api.New(api.Config{Conn: serving.nc})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := micro.AddService(serving.nc, micro.Config{Name: auth.ServiceName, Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	if err := s.AddEndpoints(svc); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// What w2 is after: an honest live lease id, which the roles trusted
	// with the deployment's account read.
	disp := connect(t, e.b, e.url, "disp")
	var live api.JobReply
	testutil.WaitFor(t, 20*time.Second, "the dispatcher to read an honest live lease through the API", func() bool {
		l, err := api.NewClient(disp.nc, 2*time.Second).Jobs(ctx, api.JobsRequest{State: "ACTIVE", Limit: 1})
		if err != nil || len(l.Jobs) == 0 {
			return false
		}
		live, err = api.NewClient(disp.nc, 2*time.Second).Job(ctx, l.Jobs[0].ID)
		return err == nil && strings.Contains(string(live.Job), `"lease_id":"L`)
	})
	if _, err := api.NewClient(e.reader.nc, 2*time.Second).Queues(ctx, api.QueuesRequest{}); err != nil {
		t.Fatalf("the coordinator user's request: %v", err)
	}
	disp.noViolations(t, "disp")

	target, err := live.Projection()
	if err != nil {
		t.Fatal(err)
	}
	a := e.attacker(t)
	subjects := []string{api.SubjectJob, api.SubjectJobs, api.SubjectQueue, api.SubjectQueues}
	for _, subject := range subjects {
		a.errs.reset()
		m, err := a.nc.Request(subject, []byte(`{"job":"`+target.ID+`"}`), 500*time.Millisecond)
		if err == nil {
			t.Fatalf("w2's request on %s was answered: %s", subject, m.Data)
		}
		a.errs.expectViolation(t, "w2 requesting "+subject, `Publish to "`+subject+`"`)
	}
	refused(t, a.client, "w2", subjects...)
	refusedSub(t, a.client, "w2", "tenure.api.>", api.SubjectJob, "tenure.api.*.*")

	dropped := s.Stats().Dropped
	for i, subject := range subjects[:events.WorkerConsumers-1] {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := a.js.CreateConsumer(cctx, "TENURE_OUT", jetstream.ConsumerConfig{
			Name: events.WorkerConsumerName("w2", i), FilterSubject: events.AddresseeFilter("w2"),
			DeliverSubject: subject, DeliverGroup: "q", DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute, MemoryStorage: true,
		})
		ccancel()
		if err != nil {
			t.Fatalf("w2's push consumer to %s: %v", subject, err)
		}
	}
	// w2's own decisions: give it some.
	a.inflate(t, 8)
	testutil.WaitFor(t, 10*time.Second, "the API to drop w2's deliveries", func() bool { return s.Stats().Dropped > dropped })
	t.Logf("the API dropped %d deliveries aimed at it; refused %d requests", s.Stats().Dropped-dropped, s.Stats().Refused)
	e.checkHonest(t, h)
}

// A worker cannot list the deployment's job ids and worker names. A stream
// info request with a subjects filter answers every subject of the stream
// with its message count, and a decision's subject is
// tenure.out.<addressee>.<job>.<kind>: NATS cannot restrict a request's
// body, so a worker may not ask for stream info at all. w2 asks for the
// decision stream's, with the filter tenure.out.>, under its API prefix
// (refused: a permissions violation, no answer) and under the plain one
// (likewise); the honest workers' SDKs, under the same permissions, work
// end to end without it.
func TestAttackDecisionSubjectsEnumerated(t *testing.T) {
	t.Parallel()
	e := newAttackEnv(t)
	h := e.startHonest(t, honestConfig{})
	h.waitProgress(t, 2, 20*time.Second) // the honest workers hold and complete leases
	a := e.attacker(t)
	for _, s := range []string{"TENURE_OUT", "TENURE_IN"} {
		listsNoSubjects(t, a.client, "w2", s, "JS.TENURE.API.", "$JS.API.")
	}
	e.checkHonest(t, h)
}

// listsNoSubjects asks, as c, for stream's info with a subjects filter
// under each API prefix, and fails unless each request is refused by the
// server (a permissions violation) and gets no answer.
func listsNoSubjects(t *testing.T, c *client, who, stream string, prefixes ...string) {
	t.Helper()
	for _, p := range prefixes {
		c.errs.reset()
		subject := p + "STREAM.INFO." + stream
		m, err := c.nc.Request(subject, []byte(`{"subjects_filter":"tenure.>"}`), time.Second)
		if err == nil {
			var info struct {
				State struct {
					Subjects map[string]uint64 `json:"subjects"`
				} `json:"state"`
			}
			_ = json.Unmarshal(m.Data, &info)
			t.Fatalf("%s asked for %s: answered, listing %d subjects: %v", who, subject, len(info.State.Subjects), first(slices.Sorted(maps.Keys(info.State.Subjects)), 6))
		}
		c.errs.expectViolation(t, who+" asking for "+subject, `Publish to "`+subject+`"`)
	}
}
