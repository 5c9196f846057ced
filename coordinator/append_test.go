package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

func TestParsePubAck(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		want pubReply
	}{
		{`{"stream":"TENURE_OUT","seq":12}`, true, pubReply{Stream: "TENURE_OUT", Seq: 12}},
		{`{"stream":"TENURE_OUT","seq":12,"batch":"tb1-2","count":3}`, true, pubReply{Stream: "TENURE_OUT", Seq: 12, Batch: "tb1-2", Count: 3}},
		{`{"stream":"TENURE_OUT","seq":12,"duplicate":true}`, false, pubReply{}},
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"TENURE_OUT","seq":0}`, false, pubReply{}},
		{`{"stream":"TENURE_OUT","seq":}`, false, pubReply{}},
		{`{"stream":"TENURE_OUT","seq":12} `, false, pubReply{}},
		{`{"stream":"TENURE_OUT","seq":99999999999999999999}`, false, pubReply{}},
	} {
		var r pubReply
		ok := parsePubAck([]byte(c.in), &r)
		if ok != c.ok || ok && r != c.want {
			t.Errorf("parsePubAck(%s) = %v %+v, want %v %+v", c.in, ok, r, c.ok, c.want)
		}
	}
}

// The appender keeps appending one by one unless batches achieve a quarter
// more under backlog; it tries the other way again now and then; without
// a backlog it measures nothing.
func TestAppendModeChoice(t *testing.T) {
	now := time.Unix(0, 0)
	a := &appender{now: func() time.Time { return now }, log: testLogger()}
	// run acknowledges decisions at rate per second (one way, the current
	// one) for d, in steps of 10 ms, under backlog.
	run := func(perS [2]float64, d time.Duration) {
		for end := now.Add(d); now.Before(end); {
			now = now.Add(10 * time.Millisecond)
			way := 0
			if a.batching {
				way = 1
			}
			a.measure(uint64(perS[way]/100), true)
		}
	}
	// Sync always: batches win by ten times. The first counted epoch one
	// by one, then a settling one and a trial of batches, which stays.
	run([2]float64{2000, 20000}, 2*time.Second)
	if !a.batching || a.rate[0] < 1900 || a.rate[1] < 19000 {
		t.Fatalf("sync always: batching %v, rates %v", a.batching, a.rate)
	}
	// Long after: a trial one by one, back to batches.
	run([2]float64{2000, 20000}, retrialEpochs*epochLen+2*time.Second)
	if !a.batching {
		t.Fatalf("sync always, after the retrial: batching %v, rates %v", a.batching, a.rate)
	}
	// Sync interval: batches lose.
	a = &appender{now: func() time.Time { return now }, log: testLogger()}
	run([2]float64{30000, 15000}, 2*time.Second)
	if a.batching || a.rate[1] == 0 {
		t.Fatalf("sync interval: batching %v, rates %v", a.batching, a.rate)
	}
	// A tie keeps one by one (less latency).
	a = &appender{now: func() time.Time { return now }, log: testLogger()}
	run([2]float64{30000, 33000}, 2*time.Second)
	if a.batching {
		t.Fatalf("a tie: batching %v, rates %v", a.batching, a.rate)
	}
	// A way given by Config.AppendMode is kept whatever is measured.
	for _, mode := range []AppendMode{AppendBatched, AppendOneByOne} {
		a = &appender{now: func() time.Time { return now }, log: testLogger(), fixed: true, batching: mode == AppendBatched}
		run([2]float64{30000, 15000}, 2*time.Second) // batches lose
		run([2]float64{2000, 20000}, 2*time.Second)  // batches win
		if a.batching != (mode == AppendBatched) || a.rate != [2]float64{} {
			t.Fatalf("%s: batching %v, rates %v", mode, a.batching, a.rate)
		}
	}
	// No backlog: no measurement, no change.
	a = &appender{now: func() time.Time { return now }, log: testLogger()}
	for range 1000 {
		now = now.Add(10 * time.Millisecond)
		a.measure(100, false)
	}
	if a.batching || a.rate != [2]float64{} {
		t.Fatalf("no backlog: batching %v, rates %v", a.batching, a.rate)
	}
}

// Atomic batches on a real server: stored whole, in order, with the headers
// the chain needs; fenced by the expected last sequence on their first
// message (a wrong one refuses the whole batch as lost authority); and
// pipelined, the second batch's expectation counting the first's decisions.
func TestAtomicBatchAppend(t *testing.T) {
	srv := testutil.StartServer(t, testutil.SyncAlways())
	nc, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := streams.Ensure(ctx, js, streams.Topology{}, time.Second); err != nil {
		t.Fatal(err)
	}
	a, err := newAppender(&jsBackend{nc: nc}, streams.Topology{}.DecisionStream(), 16, AppendMeasure, testLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	mk := func(cause uint64, n int) []pending {
		ps := make([]pending, n)
		for i := range ps {
			ps[i] = pending{subject: "tenure.out.w1.j" + strconv.Itoa(i) + ".renewed", n: uint32(i), of: uint32(n), cause: cause,
				body: []byte(`{"cause":` + strconv.FormatUint(cause, 10) + `,"n":` + strconv.Itoa(i) + `}`)}
		}
		return ps
	}
	wait := func() (unit, error) {
		t.Helper()
		select {
		case m := <-a.replies:
			return a.reply(m, false)
		case <-time.After(10 * time.Second):
			t.Fatal("no reply")
			return unit{}, nil
		}
	}
	// Two batches and a single, pipelined.
	if err := a.send(mk(1, 3), 0); err != nil {
		t.Fatal(err)
	}
	if err := a.send(mk(2, 2), 3); err != nil {
		t.Fatal(err)
	}
	if err := a.send(mk(3, 1), 5); err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{3, 5, 6} {
		u, err := wait()
		if err != nil || u.last != want {
			t.Fatalf("unit %d: %+v %v, want last %d", i, u, err, want)
		}
	}
	if a.batches != 0 || len(a.units) != 0 {
		t.Fatalf("%d batches, %d units still in flight", a.batches, len(a.units))
	}
	// A stale expectation: the whole batch is refused, as lost authority.
	if err := a.send(mk(4, 4), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); !errors.Is(err, streams.ErrLostAuthority) {
		t.Fatalf("stale batch: %v, want ErrLostAuthority", err)
	}
	s, err := js.Stream(ctx, streams.Topology{}.DecisionStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 6 {
		t.Fatalf("stream holds %d messages, want 6 (%v)", info.State.Msgs, err)
	}
	want := []string{"1 0/3", "1 1/3", "1 2/3", "2 0/2", "2 1/2", "3 0/1"}
	for seq := uint64(1); seq <= 6; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		got := m.Header.Get(events.HeaderCause) + " " + m.Header.Get(events.HeaderIndex)
		if got != want[seq-1] {
			t.Errorf("message %d: %s, want %s", seq, got, want[seq-1])
		}
		cause, _ := strconv.ParseUint(m.Header.Get(events.HeaderCause), 10, 64)
		n, _ := strconv.Atoi(want[seq-1][2:3])
		if id := m.Header.Get(jetstream.MsgIDHeader); id != events.DecisionMsgID(cause, uint32(n)) {
			t.Errorf("message %d: Msg-Id %q", seq, id)
		}
	}
}

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// streamInfoOnly is a Backend that answers Info and nothing else.
type streamInfoOnly struct{ info *jetstream.StreamInfo }

func (b streamInfoOnly) Info(context.Context, bool) (*jetstream.StreamInfo, error) {
	return b.info, nil
}

// The rest of Backend: a test that calls them is wrong.
func (streamInfoOnly) Setup(context.Context) error      { panic("not for this test") }
func (streamInfoOnly) SetupInfo() *jetstream.StreamInfo { panic("not for this test") }
func (streamInfoOnly) Reconnects() uint64               { panic("not for this test") }
func (streamInfoOnly) Decisions() streams.MsgGetter     { panic("not for this test") }
func (streamInfoOnly) Inputs() streams.MsgGetter        { panic("not for this test") }
func (streamInfoOnly) Read(context.Context, bool, uint64, func(Stored)) Reader {
	panic("not for this test")
}
func (streamInfoOnly) Publish(context.Context, *nats.Msg, string, *uint64) (*jetstream.PubAck, error) {
	panic("not for this test")
}
func (streamInfoOnly) PublishAsync(*nats.Msg, string) (jetstream.PubAckFuture, error) {
	panic("not for this test")
}
func (streamInfoOnly) PublishAsyncComplete() <-chan struct{}      { panic("not for this test") }
func (streamInfoOnly) Appends(chan *nats.Msg) (AppendConn, error) { panic("not for this test") }
func (streamInfoOnly) Leader() LeaderStore                        { panic("not for this test") }
func (streamInfoOnly) Snapshots() SnapshotStore                   { panic("not for this test") }

// An input stream that skips a sequence is ErrInputGap (which Run refuses
// to go live on), not a transient failure to resynchronise from.
func TestFoldRefusesAnInputGap(t *testing.T) {
	// Streams not created for log retention: a hole in them is no removed
	// segment.
	s := &session{c: &Coordinator{be: streamInfoOnly{&jetstream.StreamInfo{State: jetstream.StreamState{FirstSeq: 1, LastSeq: 3}}}}, core: newCore(streams.Topology{})}
	body := `{"v":1,"lease_ms":1000}`
	raw := stored{seq: 1, time: 1, subject: "tenure.in.worker.w1.j1.acquire", data: []byte(body)}
	if err := s.fold(raw); err != nil {
		t.Fatal(err)
	}
	// Input 1 is a valid acquire: its decision is a grant, so the refusal
	// below is the gap's, not the fold of a rejected input.
	if len(s.pend) != 1 || !strings.Contains(string(s.pend[0].body), `"kind":"granted"`) {
		t.Fatalf("input 1 derived %d decisions, the first %q: want one granted", len(s.pend), firstBody(s.pend))
	}
	raw.seq = 3
	if err := s.fold(raw); !errors.Is(err, ErrInputGap) {
		t.Fatalf("fold of input 3 after input 1 = %v, want ErrInputGap", err)
	}
}

// Replies aimed at the appender's inbox by someone else (a PubAck of the
// input stream, a JetStream API response, a reply for a unit that is not in
// flight) are dropped and counted; the stream's own replies still match
// their units, and the inbox is no NUID that could be predicted.
func TestAppenderDropsForgedReplies(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	attacker, _ := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	top := streams.Topology{}
	if _, err := streams.Ensure(ctx, js, top, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.EndGenesis(ctx, js, top); err != nil { // no coordinator runs: the attacker's inputs must be stored
		t.Fatal(err)
	}
	a, err := newAppender(&jsBackend{nc: nc}, top.DecisionStream(), 16, AppendMeasure, testLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if err := nc.Flush(); err != nil { // the inbox subscription is registered
		t.Fatal(err)
	}
	if n := nuid.Next(); strings.Contains(a.inbox, n[:12]) || len(a.inbox) != len("_INBOX.")+32 {
		t.Fatalf("appender inbox %q: want _INBOX.<32 hex digits>, not a NUID (%s...)", a.inbox, n[:12])
	}
	// The attacker knows the inbox (the strongest case) and aims at the
	// reply subject of the unit about to be sent and at others.
	next := a.inbox + "." + strconv.FormatUint(a.next+1, 10)
	forge := func() {
		t.Helper()
		m := nats.NewMsg(events.InputSubject(events.RoleWorker, "w2", "j", events.VerbAcquire))
		m.Data, m.Reply = []byte(`{"v":1}`), next
		if err := attacker.PublishMsg(m); err != nil { // a PubAck of TENURE_IN lands there
			t.Fatal(err)
		}
		if err := attacker.PublishRequest("$JS.API.STREAM.INFO."+top.InputStream(), next, nil); err != nil {
			t.Fatal(err)
		}
		if err := attacker.PublishRequest(events.InputSubject(events.RoleWorker, "w2", "j", events.VerbAcquire), a.inbox+".999", []byte(`{"v":1}`)); err != nil {
			t.Fatal(err)
		}
		if err := attacker.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	forge() // before the unit is sent
	p := []pending{{subject: "tenure.out.w1.j.granted", n: 0, of: 1, cause: 1, body: []byte(`{}`)}}
	if err := a.send(p, 0); err != nil {
		t.Fatal(err)
	}
	forge() // while it is in flight
	var got unit
	for done := false; !done; {
		select {
		case m := <-a.replies:
			u, err := a.reply(m, false)
			switch {
			case errors.Is(err, errForged):
			case err != nil:
				t.Fatalf("a forged reply was taken for the append's outcome: %v", err)
			default:
				got, done = u, true
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no reply from the stream")
		}
	}
	if got.first != 1 || got.last != 1 {
		t.Fatalf("unit %+v, want decision 1", got)
	}
	// Let the rest of the forged replies arrive: each is dropped.
	deadline := time.After(5 * time.Second)
	for a.forged < 6 {
		select {
		case m := <-a.replies:
			if _, err := a.reply(m, false); !errors.Is(err, errForged) {
				t.Fatalf("reply after the unit: %v, want errForged", err)
			}
		case <-deadline:
			t.Fatalf("%d forged replies dropped, want 6", a.forged)
		}
	}
}

// The stream's reply to a later unit means the oldest unit's reply was
// lost (a stream leader change): reply says so at once (a transient error:
// the session resynchronises) instead of dropping the later replies as
// forged and stalling every append until the oldest is overdue (10 s), as
// it did. A reply to no unit in flight is still dropped.
func TestLostReplyDetected(t *testing.T) {
	a := &appender{stream: "TENURE_OUT", inbox: "_INBOX.x", now: time.Now, log: slog.New(slog.DiscardHandler)}
	a.units = []unit{{id: 7, first: 10, last: 10}, {id: 8, first: 11, last: 12}, {id: 9, first: 13, last: 13}}
	a.batches = 1
	for _, id := range []string{"6", "10", "x"} {
		if _, err := a.reply(&nats.Msg{Subject: a.inbox + "." + id, Data: []byte(`{"stream":"TENURE_OUT","seq":13}`)}, false); !errors.Is(err, errForged) {
			t.Fatalf("reply to unit %s: %v, want errForged", id, err)
		}
	}
	// Another stream's reply to a unit in flight: forged, dropped.
	if _, err := a.reply(&nats.Msg{Subject: a.inbox + ".8", Data: []byte(`{"stream":"OTHER","seq":12,"batch":"b","count":2}`)}, false); !errors.Is(err, errForged) {
		t.Fatalf("another stream's reply: %v, want errForged", err)
	}
	u, err := a.reply(&nats.Msg{Subject: a.inbox + ".8", Data: []byte(`{"stream":"TENURE_OUT","seq":12,"batch":"b","count":2}`)}, false)
	if !errors.Is(err, streams.ErrTransient) || errors.Is(err, errForged) || !strings.Contains(err.Error(), "decisions 10 to 10: their reply was lost") || u.id != 7 {
		t.Fatalf("reply to unit 8 while 7 waits: unit %+v, %v; want unit 7's reply lost (transient)", u, err)
	}
}

func firstBody(ps []pending) string {
	if len(ps) == 0 {
		return ""
	}
	return string(ps[0].body)
}
