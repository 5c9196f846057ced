package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// foldCoord is a coordinator in memory behind the worker's transport: the
// real fold (package projector) under a rules revision of the test's
// choice, each input stored and folded at once, the decisions addressed to
// the worker handed to its dispatch. It lets a test choose the revision a
// coordinator implements, which a real one never lets (it moves its log
// to the current revision).
type foldCoord struct {
	t    testing.TB
	w    *Worker
	mu   sync.Mutex
	p    *projector.Projector
	seq  uint64
	subj []string // the subjects stored, in order
}

func newFoldCoord(t testing.TB, rev uint32) *foldCoord {
	f := &foldCoord{t: t, p: projector.New()}
	var key [events.LeaseKeyLen]byte
	f.store(events.InputSubject(events.RoleCoord, "c1", events.NoJob, events.VerbRules),
		events.AppendInputBody(nil, &events.Input{Verb: events.VerbRules, Revision: rev, LeaseKey: key}))
	pol := events.DefaultPolicy()
	f.store(events.InputSubject(events.RoleCoord, "c1", events.NoJob, events.VerbPolicy),
		events.AppendInputBody(nil, &events.Input{Verb: events.VerbPolicy, Policy: pol}))
	return f
}

// store folds one input and returns its decisions.
func (f *foldCoord) store(subject string, body []byte) []events.Decision {
	f.seq++
	f.subj = append(f.subj, subject)
	ds, err := f.p.Step(events.Raw{Seq: f.seq, Time: time.Unix(1_800_000_000, int64(f.seq)*1e6).UnixNano(), Subject: subject, Body: body})
	if err != nil {
		f.t.Fatalf("fold coordinator: %v", err)
	}
	return append([]events.Decision(nil), ds...)
}

// Follow is never called: the test starts no decision reader.
func (f *foldCoord) Follow(context.Context, follow.Config, func(follow.Msg)) Follower {
	panic("foldCoord.Follow")
}

func (f *foldCoord) Publish(_ context.Context, msg *nats.Msg, _, _ string) (*jetstream.PubAck, error) {
	f.mu.Lock()
	ds := f.store(msg.Subject, msg.Data)
	seq := f.seq
	f.mu.Unlock()
	for _, d := range ds {
		if d.Addressee == f.w.id {
			f.w.dispatch(d) // before the PubAck: the worker stashes it
		}
	}
	return &jetstream.PubAck{Stream: "TENURE_IN", Sequence: seq}, nil
}

// offer offers jobs to the worker as a dispatcher would, and returns the
// offers (their ACK elements).
func (f *foldCoord) offer(jobs ...string) []events.Input {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []events.Input
	for _, j := range jobs {
		ds := f.store(events.InputSubject(events.RoleOps, "disp", j, events.VerbOffer),
			events.AppendInputBody(nil, &events.Input{Verb: events.VerbOffer, Holder: f.w.id, AckTimeoutMS: 60000}))
		if len(ds) != 1 || ds[0].Kind != events.KindOffered {
			f.t.Fatalf("offer of %s: %+v", j, ds)
		}
		out = append(out, events.Input{Job: j, LeaseID: ds[0].Job.LeaseID, Generation: ds[0].Job.Generation})
	}
	return out
}

func (f *foldCoord) subjects() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.subj[2:]...)
}

// A batch of three ACKs goes as one batch ack to a coordinator of rules
// revision 7, each element acked on its own. One of revision 6 refuses
// the batch as a subject it does not know (bad_subject): the batcher then
// sends each ACK alone, every one is acked, and every later batch of the
// worker's goes as single inputs too.
func TestBatcherRevisions(t *testing.T) {
	for _, rev := range []uint32{events.Revision6, events.Revision7} {
		t.Run(fmt.Sprint("revision ", rev), func(t *testing.T) {
			f := newFoldCoord(t, rev)
			o := Options{StreamPrefix: DefaultStreamPrefix, VerdictTimeout: 5 * time.Second, PublishTimeout: DefaultPublishTimeout, OfferBuffer: DefaultOfferBuffer}
			w := newWorker("w1", o, f, streams.Topology{}.Partitions(0))
			f.w = w
			defer w.Close()
			deadline := time.Now().Add(time.Minute)
			send := func(elems []events.Input) {
				t.Helper()
				reqs := make([]*batchReq, len(elems))
				for i, e := range elems {
					reqs[i] = &batchReq{in: e, deadline: deadline, done: make(chan batchResult, 1)}
				}
				w.acks.send(reqs)
				for i, r := range reqs {
					res := <-r.done
					if res.err != nil || res.d.Kind != events.KindAcked || res.d.Job.ID != elems[i].Job {
						t.Fatalf("ACK of %s: %v %s/%s %s", elems[i].Job, res.err, res.d.Kind, res.d.Reason, res.d.Job.ID)
					}
				}
			}
			send(f.offer("a", "b", "c"))
			var want []string
			if rev < events.Revision7 {
				want = []string{"tenure.in.worker.w1._.ack", "tenure.in.worker.w1.a.ack", "tenure.in.worker.w1.b.ack", "tenure.in.worker.w1.c.ack"}
			} else {
				want = []string{"tenure.in.worker.w1._.ack"}
			}
			got := f.subjects()[3:] // after the three offers
			if fmt.Sprint(sortedIfSingles(got, rev)) != fmt.Sprint(want) {
				t.Fatalf("inputs stored %v, want %v", got, want)
			}
			// The next batch: singles at once under revision 6, a batch under 7.
			n := len(f.subjects())
			send(f.offer("d", "e"))
			got = f.subjects()[n+2:]
			if rev < events.Revision7 && len(got) != 2 || rev >= events.Revision7 && (len(got) != 1 || got[0] != "tenure.in.worker.w1._.ack") {
				t.Fatalf("the second batch: inputs stored %v", got)
			}
		})
	}
}

// sortedIfSingles sorts the single ACKs after the refused batch (they are
// sent at once, in any order).
func sortedIfSingles(s []string, rev uint32) []string {
	if rev >= events.Revision7 || len(s) < 2 {
		return s
	}
	rest := append([]string(nil), s[1:]...)
	for i := range rest {
		for j := i + 1; j < len(rest); j++ {
			if rest[j] < rest[i] {
				rest[i], rest[j] = rest[j], rest[i]
			}
		}
	}
	return append(s[:1:1], rest...)
}
