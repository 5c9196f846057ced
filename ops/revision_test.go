package ops_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// startFoldCoordinator runs a real embedded server with Tenure's streams
// and, in place of the coordinator, the real fold (package projector)
// under rules revision rev: each input stored is folded and its decisions
// stored on the decision stream. A real coordinator moves its log to the
// current revision; this one stays at the test's, as a deployment not yet
// upgraded does.
func startFoldCoordinator(t *testing.T, rev uint32) jetstream.JetStream {
	t.Helper()
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	ctx := context.Background()
	top := streams.Topology{}
	if _, err := streams.EnsureAll(ctx, js, top, 0, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var key [events.LeaseKeyLen]byte
	for _, in := range []events.Input{{Verb: events.VerbRules, Revision: rev, LeaseKey: key}, {Verb: events.VerbPolicy, Policy: events.DefaultPolicy()}} {
		if _, err := js.Publish(ctx, events.InputSubject(events.RoleCoord, "c1", events.NoJob, in.Verb), events.AppendInputBody(nil, &in)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := streams.EndGenesis(ctx, js, top); err != nil { // open to every input
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, top.InputStream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	p := projector.New()
	var once sync.Once
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			once.Do(func() { t.Errorf("fold coordinator: %v", err) })
			return
		}
		ds, err := p.Step(events.Raw{Seq: md.Sequence.Stream, Time: md.Timestamp.UnixNano(), Subject: m.Subject(), Body: m.Data()})
		if err != nil {
			once.Do(func() { t.Errorf("fold coordinator: input %d: %v", md.Sequence.Stream, err) })
			return
		}
		for i := range ds {
			if _, err := js.Publish(ctx, events.DecisionSubject(&ds[i]), events.AppendDecision(nil, &ds[i])); err != nil {
				once.Do(func() { t.Errorf("fold coordinator: decision of input %d: %v", md.Sequence.Stream, err) })
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return js
}

// Against a log of rules revision 6, which knows no batch submit (the
// subject is rejected/bad_subject), SubmitMany submits each job with an
// input of its own, every job gets its own submitted verdict, and the
// client's later calls send single submits at once. Under revision 7 the
// same calls are one batch submit each.
func TestSubmitManyBelowRevision7(t *testing.T) {
	for _, rev := range []uint32{events.Revision6, events.Revision7} {
		t.Run(fmt.Sprint("revision ", rev), func(t *testing.T) {
			js := startFoldCoordinator(t, rev)
			nc := js.Conn()
			c, err := ops.New(nc, "disp", ops.WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			ctx := context.Background()
			for call, ids := range [][]string{{"a", "b", "c"}, {"d", "e"}} {
				before, _ := lastSeqs(t, js)
				var jobs []ops.SubmitJob
				for _, id := range ids {
					jobs = append(jobs, ops.SubmitJob{ID: id, Queue: "q", Options: ops.SubmitOptions{Payload: "p-" + id, HasPayload: true}})
				}
				res, err := c.SubmitMany(ctx, jobs)
				if err != nil {
					t.Fatalf("call %d: %v", call, err)
				}
				for i, r := range res {
					if r.Err != nil || r.Decision.Kind != events.KindSubmitted || r.Decision.Job.ID != ids[i] || r.Decision.Job.Payload != "p-"+ids[i] {
						t.Fatalf("call %d, job %s: %v %s/%s %s", call, ids[i], r.Err, r.Decision.Kind, r.Decision.Reason, r.Decision.Job.ID)
					}
				}
				var subjects []string
				for _, m := range inputsAfter(t, js, before) {
					subjects = append(subjects, m.Subject)
				}
				var want []string
				switch {
				case rev >= events.Revision7:
					want = []string{"tenure.in.ops.disp._.submit"}
				case call == 0: // the batch refused, then each job alone
					want = append(want, "tenure.in.ops.disp._.submit")
					fallthrough
				default:
					for _, id := range ids {
						want = append(want, "tenure.in.ops.disp."+id+".submit")
					}
				}
				if fmt.Sprint(subjects) != fmt.Sprint(want) {
					t.Fatalf("call %d stored %v, want %v", call, subjects, want)
				}
			}
		})
	}
}
