package follow_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// collector gathers what a Follower hands over.
type collector struct {
	mu   sync.Mutex
	msgs []follow.Msg
}

func (c *collector) handle(_ context.Context, m follow.Msg) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
}

func (c *collector) snapshot() []follow.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]follow.Msg(nil), c.msgs...)
}

// waitCount waits until c has n messages.
func (c *collector) waitCount(t *testing.T, n int, within time.Duration) []follow.Msg {
	t.Helper()
	var got []follow.Msg
	testutil.WaitFor(t, within, fmt.Sprintf("%d messages", n), func() bool {
		got = c.snapshot()
		return len(got) >= n
	})
	return got
}

// setup starts a server and connects to it; with stream, it creates the
// stream F (subjects f.>). ctx ends with the test, a minute at the most.
func setup(t *testing.T, stream bool) (context.Context, jetstream.JetStream) {
	t.Helper()
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if stream {
		newStream(t, ctx, js)
	}
	return ctx, js
}

func newStream(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}}); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, ctx context.Context, js jetstream.JetStream, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		subj := "f.even"
		if i%2 == 1 {
			subj = "f.odd"
		}
		if _, err := js.Publish(ctx, subj, []byte(strconv.Itoa(i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// checkRun fails unless msgs are the stream's messages first, first+step,
// ... in order, each with its stored body and a stored time.
func checkRun(t *testing.T, msgs []follow.Msg, first, step int) {
	t.Helper()
	for i, m := range msgs {
		want := first + i*step
		if m.Seq != uint64(want) || string(m.Data) != strconv.Itoa(want) || m.Time == 0 {
			t.Fatalf("message %d: seq %d body %q time %d, want seq and body %d", i, m.Seq, m.Data, m.Time, want)
		}
	}
}

func TestReadsInOrderFromStartSeq(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 100)

	var c collector
	f := follow.Start(ctx, js, follow.Config{Stream: "F", StartSeq: 41, PullAhead: 7}, c.handle)
	defer f.Stop()
	select {
	case <-f.Ready():
	case <-ctx.Done():
		t.Fatal("no consumer")
	}
	publish(t, ctx, js, 101, 150) // stored after it started: read too
	got := c.waitCount(t, 110, 10*time.Second)
	checkRun(t, got, 41, 1)
	if last := got[len(got)-1]; last.Pending != 0 {
		t.Errorf("the last message stored has Pending %d", last.Pending)
	}
	if first := got[0]; first.Pending == 0 || first.Pending > 109 {
		t.Errorf("message 41 of 150 has Pending %d", first.Pending)
	}
	if got := f.Next(); got != 151 {
		t.Errorf("Next = %d, want 151", got)
	}
	f.Stop()
	n := len(c.snapshot())
	// Stop returned once the Follower's goroutine, the only caller of the
	// handler, was done: whatever is stored now, it calls nothing more.
	// (The count is taken once the server stored them, so a goroutine
	// Stop failed to end had them to hand over.)
	publish(t, ctx, js, 151, 160)
	if got := len(c.snapshot()); got != n {
		t.Errorf("%d messages handed over after Stop returned", got-n)
	}
	select {
	case <-f.Done():
	default:
		t.Error("Done not closed after Stop")
	}
}

func TestFilters(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 60)

	var c collector
	f := follow.Start(ctx, js, follow.Config{Stream: "F", Filters: []string{"f.odd"}}, c.handle)
	defer f.Stop()
	checkRun(t, c.waitCount(t, 30, 10*time.Second), 1, 2)
}

// TestReplacesALostConsumer deletes the consumer under the Follower, again
// and again while messages are stored: every message is handed over once,
// in order, none skipped.
func TestReplacesALostConsumer(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 50)

	var c collector
	var errs sync.Map
	f := follow.Start(ctx, js, follow.Config{Stream: "F", PullAhead: 10, Heartbeat: 500 * time.Millisecond,
		OnError: func(err error) { errs.Store(err.Error(), errors.Is(err, follow.ErrReplacing)) }}, c.handle)
	defer f.Stop()
	c.waitCount(t, 50, 10*time.Second)
	stream, err := js.Stream(ctx, "F")
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 5
	for round := range rounds {
		names := stream.ConsumerNames(ctx)
		deleted := 0
		for name := range names.Name() {
			if err := stream.DeleteConsumer(ctx, name); err != nil {
				t.Fatalf("round %d: delete %s: %v", round, name, err)
			}
			deleted++
		}
		if deleted == 0 {
			t.Fatalf("round %d: no consumer to delete", round)
		}
		publish(t, ctx, js, 51+round*20, 70+round*20)
		checkRun(t, c.waitCount(t, 70+round*20, 15*time.Second), 1, 1)
	}
	if got := f.Replaced(); got < rounds {
		t.Errorf("Replaced = %d after %d deleted consumers", got, rounds)
	}
	n := 0
	errs.Range(func(msg, replacing any) bool {
		n++
		if !replacing.(bool) {
			t.Errorf("a report of a replaced consumer that does not match ErrReplacing: %s", msg)
		}
		return true
	})
	if n == 0 {
		t.Error("OnError was never told of a lost consumer")
	}
	checkRun(t, c.snapshot(), 1, 1)
}

// TestSurvivesAServerRestart: the server stops (its memory consumers with
// it) and comes back on the same port and store; the Follower resumes after
// the last message it handed over.
func TestSurvivesAServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv := testutil.StartServerIn(t, dir)
	port := srv.Port()
	nc, js := testutil.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newStream(t, ctx, js)
	publish(t, ctx, js, 1, 30)

	var c collector
	f := follow.Start(ctx, js, follow.Config{Stream: "F", Heartbeat: 500 * time.Millisecond}, c.handle)
	defer f.Stop()
	c.waitCount(t, 30, 10*time.Second)
	srv.Shutdown()
	testutil.StartServerIn(t, dir, testutil.Port(port))
	testutil.WaitFor(t, 10*time.Second, "the client to reconnect", nc.IsConnected)
	publish(t, ctx, js, 31, 60)
	checkRun(t, c.waitCount(t, 60, 20*time.Second), 1, 1)
	if f.Replaced() == 0 {
		t.Error("the consumer lost with the server was not replaced")
	}
}

// TestStopWhileHandlerBlocks: a handler blocked on its consumer (here: a
// full channel nobody reads) returns when the Follower stops, and Stop
// returns.
func TestStopWhileHandlerBlocks(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 20)

	ch := make(chan follow.Msg, 3)
	f := follow.Start(ctx, js, follow.Config{Stream: "F"}, func(ctx context.Context, m follow.Msg) {
		select {
		case ch <- m:
		case <-ctx.Done():
		}
	})
	testutil.WaitFor(t, 10*time.Second, "the channel to fill", func() bool { return len(ch) == cap(ch) })
	stopped := make(chan struct{})
	go func() { f.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return while the handler was blocked")
	}
	for i := 1; i <= cap(ch); i++ {
		if m := <-ch; m.Seq != uint64(i) {
			t.Fatalf("message %d has seq %d", i, m.Seq)
		}
	}
}

// TestRetriesCreationUntilTheStreamExists: the stream does not exist yet;
// the Follower reports why it has no consumer (once), and reads once the
// stream is created.
func TestRetriesCreationUntilTheStreamExists(t *testing.T) {
	ctx, js := setup(t, false)

	var c collector
	var mu sync.Mutex
	var reported []error
	f := follow.Start(ctx, js, follow.Config{Stream: "F", Retry: 20 * time.Millisecond, OnError: func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}}, c.handle)
	defer f.Stop()
	// Left alone to fail, retried every 20 ms: the subject is what many
	// failures report (OnError once per streak).
	testutil.WaitFor(t, 10*time.Second, "15 failed creations", func() bool { return f.FailedCreates() >= 15 })
	if f.Err() == nil {
		t.Fatal("Err is nil while the stream does not exist")
	}
	select {
	case <-f.Ready():
		t.Fatal("Ready before any consumer exists")
	default:
	}
	newStream(t, ctx, js)
	publish(t, ctx, js, 1, 10)
	select {
	case <-f.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("not Ready after the stream was created")
	}
	checkRun(t, c.waitCount(t, 10, 10*time.Second), 1, 1)
	if err := f.Err(); err != nil {
		t.Errorf("Err = %v after a consumer was created", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 1 {
		t.Errorf("OnError told %d times of one streak of failed creations: %v", len(reported), fmt.Sprint(reported))
	}
}

// TestStopDeletesItsConsumer: Stop deletes the consumer from the server,
// unless KeepConsumers (for clients not allowed to delete consumers).
func TestStopDeletesItsConsumer(t *testing.T) {
	ctx, js := setup(t, true)
	stream, err := js.Stream(ctx, "F")
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		names := stream.ConsumerNames(ctx)
		for range names.Name() {
			n++
		}
		return n
	}
	for _, keep := range []bool{false, true} {
		before := count()
		var c collector
		f := follow.Start(ctx, js, follow.Config{Stream: "F", KeepConsumers: keep}, c.handle)
		<-f.Ready()
		if got := count(); got != before+1 {
			t.Fatalf("keep=%v: %d consumers while following, want %d", keep, got, before+1)
		}
		f.Stop()
		// Stop returns once the Follower's goroutine is done: a deletion
		// it will make has been begun (in the background) by then.
		if n := f.Deletes(); keep && n != 0 || !keep && n != 1 {
			t.Fatalf("keep=%v: %d deletions begun by Stop", keep, n)
		}
		want := before
		if keep {
			want = before + 1
		}
		testutil.WaitFor(t, 5*time.Second, fmt.Sprintf("%d consumers after Stop", want), func() bool { return count() == want })
	}
}

// TestReadyWhileTheHandlerBlocks: a caller that waits for Ready before it
// reads what the handler hands over (tenure watch, ops) gets Ready even
// when the first messages arrive, and block the handler, before the
// Follower has recorded its consumer (it used to wait for the handler's
// lock there, and the caller for Ready: a deadlock).
func TestReadyWhileTheHandlerBlocks(t *testing.T) {
	ctx, js := setup(t, true)
	publish(t, ctx, js, 1, 20)
	for round := range 30 {
		ch := make(chan follow.Msg) // unbuffered: the first delivery blocks
		f := follow.Start(ctx, js, follow.Config{Stream: "F"}, func(ctx context.Context, m follow.Msg) {
			select {
			case ch <- m:
			case <-ctx.Done():
			}
		})
		select {
		case <-f.Ready():
		case <-time.After(5 * time.Second):
			f.Stop()
			t.Fatalf("round %d: not Ready while the handler blocks", round)
		}
		for i := 1; i <= 20; i++ {
			if m := <-ch; m.Seq != uint64(i) {
				t.Fatalf("round %d: message %d has seq %d", round, i, m.Seq)
			}
		}
		f.Stop()
	}
}
