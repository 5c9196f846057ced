package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/jsmodel"
	"github.com/maknow/tenure/worker"
)

// sdkWorker is a worker of the Go SDK (package worker, unchanged) on the
// model's transport: it acquires jobs, lets the SDK renew them, reports
// progress, writes effects to the fenced resource while its lease holds
// (its context not cancelled, and before its Expires, as a careful
// handler checks), answers cancellations, and completes. Its transport
// journals every input and PubAck.
type sdkWorker struct {
	id       string
	p        Plan
	net      *jsmodel.Net
	rng      *rand.Rand
	res      *resource
	mu       sync.Mutex
	journal  []chaos.Entry
	findings []string
	calls    *calls // its transport, with the calls the wrong-waiter oracle checks
}

func newSDKWorker(id string, net *jsmodel.Net, p Plan, res *resource, seed uint64) *sdkWorker {
	return &sdkWorker{id: id, p: p, net: net, rng: rand.New(rand.NewPCG(seed, 4)), res: res}
}

func (s *sdkWorker) record(sent bool, subject, msgID string, body []byte, stream string, seq uint64) {
	e := chaos.Entry{Kind: chaos.EntrySent, At: time.Now().UnixNano(), Subject: subject, MsgID: msgID, BodySHA: chaos.BodySHA(body), Len: len(body)}
	if !sent {
		e.Kind, e.Stream, e.Seq = chaos.EntryAck, stream, seq
	}
	s.mu.Lock()
	s.journal = append(s.journal, e)
	s.mu.Unlock()
}

func (s *sdkWorker) run(ctx context.Context, jobs []string, stop <-chan struct{}) {
	tr := s.net.Client(s.id).Transport()
	tr.Journal = s.record
	s.calls = newCalls(tr, s.id)
	w, err := worker.NewWithTransport(s.calls, s.id, worker.WithVerdictTimeout(2*s.p.Lease+time.Second))
	if err != nil {
		s.findings = append(s.findings, "worker.NewWithTransport: "+err.Error())
		return
	}
	defer w.Close()
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for !stopped() && ctx.Err() == nil {
		sleep(ctx, stop, time.Duration(20+s.rng.IntN(300))*time.Millisecond)
		if stopped() {
			return
		}
		job := jobs[s.rng.IntN(len(jobs))]
		cctx, k := s.calls.tag(ctx, "acquire", job)
		l, err := w.Acquire(cctx, job, worker.WithLeaseDuration(s.p.Lease))
		s.calls.done(k, err, l)
		if err != nil {
			continue // held by another, or no verdict: try another later
		}
		s.work(ctx, l, stop)
	}
}

// work holds lease l until it is done, lost or the run stops.
func (s *sdkWorker) work(ctx context.Context, l *worker.Lease, stop <-chan struct{}) {
	steps := 3 + s.rng.IntN(4)
	tok := l.Token()
	for i := 0; i < steps; i++ {
		sleep(ctx, stop, time.Duration(20+s.rng.IntN(300))*time.Millisecond)
		select {
		case <-stop:
			i = steps // finish now
			continue
		default:
		}
		if l.Context().Err() != nil {
			return // authority lost: stop, as the SDK says
		}
		select {
		case <-l.CancelRequested():
			if s.call(ctx, "cancel_ack", tok.Job, func(ctx context.Context) error { return l.AckCancel(ctx) }) == nil {
				_ = s.call(ctx, "complete", tok.Job, func(ctx context.Context) error { return l.Complete(ctx, events.OutcomeCancelled, "cancelled") })
			}
			return
		default:
		}
		if s.p.Progress && s.rng.IntN(3) == 0 {
			_ = s.call(ctx, "progress", tok.Job, func(ctx context.Context) error { return l.Progress(ctx, (i+1)*100/steps) })
			continue
		}
		// An effect, while the lease holds.
		if now := time.Now(); l.Context().Err() == nil && now.Before(l.Expires()) {
			s.res.write(tok.Job, tok.Generation, s.id, now)
		}
	}
	if l.Context().Err() == nil {
		err := s.call(ctx, "complete", tok.Job, func(ctx context.Context) error { return l.Complete(ctx, events.OutcomeSuccess, "") })
		if err != nil && !errors.Is(err, worker.ErrNoVerdict) {
			return
		}
	}
}

// call makes one call of the SDK about job, tagged for the wrong-waiter
// oracle (checkCalls).
func (s *sdkWorker) call(ctx context.Context, op, job string, f func(context.Context) error) error {
	cctx, k := s.calls.tag(ctx, op, job)
	err := f(cctx)
	s.calls.done(k, err, nil)
	return err
}

// sleep waits d, or until stop or ctx.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	case <-ctx.Done():
	}
}
