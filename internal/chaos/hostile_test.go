package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/ui"
	"github.com/maknow/tenure/worker"
)

// The hostile worker end to end, on a real server running the generated
// accounts with a real coordinator and its web board: six rounds of
// attacks (every attack type) while an honest worker holds a lease of the
// chaos dispatcher's naming and runs the queue the dispatcher submits 30
// jobs to each round; then the checks of a chaos run, on the streams, the
// journals and the records, find nothing, every attack type ran and was
// aimed at the honest job (the board refused every request the hostile
// worker made without its token, which opens it; no verdict of the
// learned-lease attack told it the lease id or a payload), the honest
// lease was never lost, and every queue job was completed once by the
// honest worker while the queue modes' refusals cost the hostile worker
// strikes.
func TestChaosHostileRounds(t *testing.T) {
	dir := t.TempDir()
	a, err := newEnvAuth(dir, auth.DefaultURL, []auth.Actor{
		{Name: "c1", Role: auth.RoleCoordinator}, {Name: "w1", Role: auth.RoleWorker}, {Name: "h1", Role: auth.RoleWorker}, {Name: "disp", Role: auth.RoleDispatcher},
		{Name: boardActor, Role: auth.RoleOperator}})
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte(a.accounts), 0o600); err != nil {
		t.Fatal(err)
	}
	url := testutil.StartServer(t, testutil.ConfigFile(conf)).ClientURL()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cnc, _, err := connectCredential(a.credentialPath("c1"), url)
	if err != nil {
		t.Fatal(err)
	}
	defer cnc.Close()
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: cnc, LeaderTTL: time.Second, Genesis: coordinator.GenesisAdmin})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	// The administrator ends the genesis (tenure genesis, in process),
	// with the quotas tenure auth init writes: every worker through an
	// intake stream of its own.
	gnc, _, err := connectCredential(a.credentialPath(adminName), url)
	if err != nil {
		t.Fatal(err)
	}
	ajs, err := jetstream.New(gnc)
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithTimeout(ctx, 20*time.Second)
	if _, err := coordinator.EndGenesisQuotas(gctx, ajs, streams.Topology{}, a.b.Quotas, nil, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	gcancel()
	gnc.Close()
	testutil.WaitFor(t, 20*time.Second, "the coordinator live", func() bool { return c.Stats().Live })

	// The honest worker, journaled like the chaos workers.
	j, err := OpenJournal(journalPath(dir, "w1"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	wnc, _, err := connectCredential(a.credentialPath("w1"), url, NewTap(j).Option())
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	w, err := worker.Connect(wnc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := w.Acquire(ctx, "s-b1-j0", worker.WithLeaseDuration(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// It runs the queue too, as the chaos workers do: 100 ms a job.
	var completed atomic.Int64
	qran := make(chan error, 1)
	go func() {
		qran <- w.Run(ctx, ChaosQueue, func(jctx context.Context, _ *worker.Job) error {
			select {
			case <-jctx.Done():
				return context.Cause(jctx)
			case <-time.After(100 * time.Millisecond):
			}
			completed.Add(1)
			return nil
		}, worker.WithConcurrency(2))
	}()
	// The dispatcher, journaled: it submits each round's queue jobs.
	dj, err := OpenJournal(journalPath(dir, "disp"))
	if err != nil {
		t.Fatal(err)
	}
	defer dj.Close()
	dnc, _, err := connectCredential(a.credentialPath("disp"), url, NewTap(dj).Option())
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	djs, err := jetstream.New(dnc)
	if err != nil {
		t.Fatal(err)
	}
	var queueJobs []string
	submit := func(round int) []string {
		var jobs []string
		for i := range 30 {
			job := fmt.Sprintf("s-q%d-j%d", round, i)
			in := events.Input{Role: events.RoleOps, Actor: "disp", Job: job, Verb: events.VerbSubmit, Queue: ChaosQueue,
				MaxAttempts: 3, BackoffMS: 100, BackoffMax: 1000, LeaseMS: 1000, AckTimeoutMS: 300, Payload: "secret-" + job, HasPayload: true}
			msg := nats.NewMsg(events.InputSubject(in.Role, in.Actor, in.Job, in.Verb))
			msg.Data = events.AppendInputBody(nil, &in)
			if _, err := djs.PublishMsg(ctx, msg, jetstream.WithMsgID("disp-"+job)); err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, job)
		}
		queueJobs = append(queueJobs, jobs...)
		return jobs
	}

	// The coordinator's web board, as the chaos coordinators serve it:
	// on loopback, operator actions published as the board's ops user.
	bnc, _, err := connectCredential(a.credentialPath(boardActor), url)
	if err != nil {
		t.Fatal(err)
	}
	defer bnc.Close()
	tok, err := ui.NewToken(ui.Operator)
	if err != nil {
		t.Fatal(err)
	}
	board, err := ui.New(ui.Config{Conn: cnc, Tokens: []ui.Token{tok}, Actions: true, ActorID: boardActor, ActionsConn: bnc,
		Status: func(context.Context) ([]ui.CoordinatorStatus, error) {
			return []ui.CoordinatorStatus{{Stats: c.Stats()}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- board.Serve(ctx, ln) }()
	boardURL := "http://" + ln.Addr().String()
	// With the token, the board shows the honest lease: what the hostile
	// worker, without it, must not see.
	if err := testutil.Poll(10*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, boardURL+"/api/jobs/s-b1-j0", nil)
		req.Header.Set("Authorization", "Bearer "+tok.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), lease.Token().LeaseID) {
			return fmt.Errorf("%d %.200s", resp.StatusCode, b)
		}
		return nil
	}); err != nil {
		t.Fatalf("the board with its token: %v", err)
	}

	hctx, hstop := context.WithCancel(ctx)
	control, records := filepath.Join(dir, "hostile.json"), recordsPath(dir, "h1")
	hran := make(chan error, 1)
	go func() {
		hran <- RunHostile(hctx, HostileConfig{Credential: a.credentialPath("h1"), URL: url, ID: "h1", Journal: journalPath(dir, "h1"),
			Control: control, Records: records, Lease: 300 * time.Millisecond, Seed: 1, Boards: []string{boardURL}})
	}()
	// Six rounds of two or three attacks: the first twelve are a whole
	// deck, every type once.
	for round := 1; round <= 6; round++ {
		// What the orchestrator tells it of the others, as a chaos run does.
		qjobs := submit(round)
		ctl := HostileControl{Round: round, Until: time.Now().Add(600 * time.Millisecond).UnixNano(),
			Coordinators: []string{"c1"}, Workers: []string{"w1", "h1"}, Jobs: []string{"s-b1-j0"}, Queue: ChaosQueue, QueueJobs: qjobs}
		if err := writeJSON(control, ctl); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 60*time.Second, "the round's attacks", func() bool {
			var d HostileDone
			return readJSON(records+".done", &d) == nil && d.Round >= round
		})
	}
	hstop()
	if err := <-hran; err != nil {
		t.Errorf("RunHostile: %v", err)
	}
	if err := lease.Context().Err(); err != nil {
		t.Errorf("the honest lease was lost: %v", context.Cause(lease.Context()))
	}
	if err := lease.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
		t.Errorf("the honest lease's result: %v", err)
	}
	// Every queue job done by the honest worker (a handler's result is
	// sent after it returns: the last ones may be on their way).
	testutil.WaitFor(t, 60*time.Second, "every queue job run", func() bool { return completed.Load() >= int64(len(queueJobs)) })
	time.Sleep(500 * time.Millisecond)
	_ = w.Close()
	<-qran

	// The checks of a chaos run, as the orchestrator reads the streams.
	anc, err := nats.Connect(url, a.adminOption())
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	js, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	top := streams.Topology{}
	testutil.WaitFor(t, 20*time.Second, "the coordinator to catch up", func() bool {
		in, err1 := js.Stream(ctx, top.InputStream())
		out, err2 := js.Stream(ctx, top.DecisionStream())
		st := c.Stats()
		return err1 == nil && err2 == nil && st.InputsFolded == in.CachedInfo().State.LastSeq && st.DecisionsStored == out.CachedInfo().State.LastSeq
	})
	l, err := ReadLog(ctx, js, nil)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := NewJournals(dir).Read()
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ReadAttackRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(l, &Clients{Entries: entries, Coordinators: []string{"c1"}, Hostile: []string{"h1"}, Attacks: recs, Drained: true})
	wantClean(t, r)
	h := r.Hostile
	if !h.OK() {
		t.Errorf("hostile findings: %q", h.Findings.Items)
	}
	st := h.Stats
	for _, typ := range AttackTypes {
		if st.ByType[typ] == nil {
			t.Errorf("attack %s not run", typ)
		}
	}
	if st.Inputs == 0 || st.OnOthers == 0 || st.Cases == 0 || st.CasesAsExpected+st.CasesRefused+st.CasesNotStored != st.Cases || st.OwnLeases == 0 {
		t.Errorf("hostile stats: %+v", st)
	}
	if b := st.ByType[AttackBoard]; b == nil || st.BoardReached == 0 || st.BoardAnswered != 0 || st.BoardOpen == 0 || b.Refused == 0 {
		t.Errorf("the board attack: %+v, %d requests reached the board, %d answered, %d open answers", b, st.BoardReached, st.BoardAnswered, st.BoardOpen)
	}
	if f := st.ByType[AttackFlood]; f == nil || f.Quota == 0 {
		t.Errorf("the flood: %+v: never refused over its quota", f)
	}
	if hog := st.ByType[AttackConsumerHog]; hog != nil && (hog.Consumers == 0 || hog.Refused == 0) {
		t.Errorf("consumer hogging: %d consumers created, %d refused: the server should have let it make its own and refused the others", hog.Consumers, hog.Refused)
	}
	if st.LearnInputs == 0 || st.LearnLeaks != 0 || st.LearnVerdicts == 0 || st.LearnedIDs+st.LearnedPayloads+st.LearnClaims != 0 {
		t.Errorf("the learned-lease attack: %d inputs, %d leaks; its records: %d verdicts read, %d lease ids and %d payloads learned, %d claims",
			st.LearnInputs, st.LearnLeaks, st.LearnVerdicts, st.LearnedIDs, st.LearnedPayloads, st.LearnClaims)
	}
	if st.QueueJobs != len(queueJobs) || st.QueueCompleted != len(queueJobs) || st.QueueDead+st.QueueFailed != 0 {
		t.Errorf("queue jobs: %d submitted of %d, %d completed, %d DEAD, %d FAILED", st.QueueJobs, len(queueJobs), st.QueueCompleted, st.QueueDead, st.QueueFailed)
	}
	if st.HostileOffers == 0 || st.HostileWithdrawn == 0 || st.HostileMaxStrikes == 0 || st.HostileMaxHeld > events.InitialWindow {
		t.Errorf("the queue modes: %d offers to the hostile worker, %d withdrawals, strikes up to %d, at most %d held at once",
			st.HostileOffers, st.HostileWithdrawn, st.HostileMaxStrikes, st.HostileMaxHeld)
	}
	t.Logf("%d attacks, %d hostile inputs stored, %d on the honest job; catalogue cases %d (%d as expected, %d refused by the server, %d not stored); verdicts %v",
		len(recs), st.Inputs, st.OnOthers, st.Cases, st.CasesAsExpected, st.CasesRefused, st.CasesNotStored, st.Verdicts)
	t.Logf("learned-lease: %d inputs, %d verdicts read; queue: %d jobs, %d completed; the hostile worker got %d offers, %d withdrawals, strikes up to %d, held at most %d",
		st.LearnInputs, st.LearnVerdicts, st.QueueJobs, st.QueueCompleted, st.HostileOffers, st.HostileWithdrawn, st.HostileMaxStrikes, st.HostileMaxHeld)
	for _, typ := range []string{AttackQueueDecline, AttackQueueRelease, AttackQueueNoAck, AttackQueueExpire} {
		if q := st.ByType[typ]; q != nil {
			t.Logf("%s: %+v", typ, q.Queue)
		}
	}
	cancel()
	if err := <-ran; err != nil && ctx.Err() == nil {
		t.Errorf("coordinator: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("board: %v", err)
	}
}
