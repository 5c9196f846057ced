package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

const ms = int64(time.Millisecond)

// folded is a log folded by the real projector, its decisions applied to
// a Model as a Server applies what it reads from the decision stream.
type folded struct {
	t   tb
	p   *projector.Projector
	m   *Model
	r   *Model // nil, or a model restored from a snapshot of p (restore), fed the decisions after it as m is
	now int64
	in  uint64 // input sequence
	out uint64 // decision sequence
}

// tb is what folded needs of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func newFolded(t tb) *folded {
	f := &folded{t: t, p: projector.New(), m: NewModel(0), now: testutil.ScenarioBase}
	f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision4, LeaseKey: [events.LeaseKeyLen]byte{7}})
	pol := events.DefaultPolicy()
	pol.AckTimeout, pol.DefaultLease, pol.MinLease = 300*ms, 600*ms, 100*ms
	f.step(events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
	return f
}

// step folds one input stored now, then the ticks the coordinator would
// append while something is due, and applies every decision to the model.
func (f *folded) step(role events.Role, actor, job string, in events.Input) []events.Decision {
	f.t.Helper()
	in.Role, in.Actor, in.Job = role, actor, job
	var all []events.Decision
	for {
		f.in++
		raw := events.Raw{Seq: f.in, Time: f.now, Subject: events.InputSubject(role, actor, job, in.Verb), Body: events.AppendInputBody(nil, &in)}
		ds, err := f.p.Step(raw)
		if err != nil {
			f.t.Fatalf("input %d: %v", f.in, err)
		}
		for i := range ds {
			f.out++
			// Through the wire form, as a reader gets it.
			d, err := events.DecodeDecision(events.AppendDecision(nil, &ds[i]))
			if err != nil {
				f.t.Fatal(err)
			}
			f.m.Apply(0, f.out, &d)
			if f.r != nil {
				f.r.Apply(0, f.out, &d)
			}
			all = append(all, d)
		}
		if len(ds) == 0 || !f.p.Due() {
			return all
		}
		role, actor, job, in = events.RoleCoord, "c1", events.NoJob, events.Input{Role: events.RoleCoord, Actor: "c1", Job: events.NoJob, Verb: events.VerbTick}
	}
}

func (f *folded) at() time.Time { return time.Unix(0, f.now) }

// restore restores f.r (made if nil) from a snapshot of the projector now,
// as a reader of a decision stream whose first segments were removed
// does (Follow): the projector restored from the snapshot's bytes, at the
// last decision so far.
func (f *folded) restore() {
	f.t.Helper()
	p := projector.New()
	if err := p.Restore(f.p.Snapshot()); err != nil {
		f.t.Fatal(err)
	}
	if f.r == nil {
		f.r = NewModel(0)
	}
	f.r.Restore(0, f.out, p)
	if got := f.r.PositionOf(0); got != f.out {
		f.t.Fatalf("restored at decision %d, position %d", f.out, got)
	}
}

// check compares the model (and the restored one, if any) with the
// projector's own state: every job's projection, the jobs by state, and
// each queue's depth, live leases and announcements.
func (f *folded) check(ids []string) {
	f.t.Helper()
	f.checkModel(f.m, ids)
	if f.r != nil {
		f.checkModel(f.r, ids)
	}
}

func (f *folded) checkModel(m *Model, ids []string) {
	f.t.Helper()
	now := f.at()
	byState := map[string]int{}
	for _, id := range ids {
		j, ok := f.p.Job(id)
		r, got := m.Job(id, now)
		if ok != got {
			f.t.Fatalf("job %s: in the projection %v, in the model %v", id, ok, got)
		}
		if !ok {
			continue
		}
		byState[j.State.String()]++
		if want := events.AppendJob(nil, &j); !bytes.Equal(r.Job, want) {
			f.t.Fatalf("job %s in the model:\n%s\nin the projection:\n%s", id, r.Job, want)
		}
		back, err := r.Projection()
		if err != nil || !bytes.Equal(events.AppendJob(nil, &back), r.Job) {
			f.t.Fatalf("job %s: Projection() does not give back the projection: %v", id, err)
		}
	}
	for st, n := range byState {
		if l := m.List(JobsRequest{State: st, Limit: MaxJobsLimit}, now); l.Total != n {
			f.t.Fatalf("%d jobs %s listed, %d in the projection", l.Total, st, n)
		}
	}
	want := map[string]projector.QueueStats{}
	for _, q := range f.p.Queues() {
		want[q.Name] = q
	}
	got := m.Queues(QueuesRequest{Limit: MaxQueuesLimit}, now)
	for _, q := range got.Queues {
		w := want[q.Queue]
		if q.Queued-q.Blocked != w.Queued || q.Ready != w.Ready || q.InFlight != w.InFlight || q.Workers != w.Workers || q.Slots != w.Slots {
			f.t.Fatalf("queue %s at %s: queued %d (blocked %d), ready %d, in flight %d, workers %d, slots %d; the projection: %+v",
				q.Queue, events.FormatTime(f.now), q.Queued, q.Blocked, q.Ready, q.InFlight, q.Workers, q.Slots, w)
		}
		if q.Queued != q.Ready+q.Waiting+q.Blocked || q.InFlight != q.Offered+q.Active {
			f.t.Fatalf("queue %s: %+v does not add up", q.Queue, q)
		}
	}
	for name, w := range want {
		if w.Queued+w.InFlight+w.Workers > 0 && !slices.ContainsFunc(got.Queues, func(q QueueStats) bool { return q.Queue == name }) {
			f.t.Fatalf("queue %s (%+v) is not listed", name, w)
		}
	}
}

// The model derived from the decisions is the projector's state: each
// job's projection byte for byte, the jobs by state, and each queue's
// depth, readiness, live leases and announcements, after every input of
// random logs of queues (submits, pulls, ACKs, results, releases,
// cancels, retries, discards, retention, time passing). So is a model
// restored from a snapshot of the projector at any point (again and again:
// each restore replaces what it held) and fed the decisions after it.
func TestModelIsTheFold(t *testing.T) {
	jobs := []string{"j0", "j1", "j2", "j3", "j4", "j5", "p0"}
	rapid.Check(t, func(rt *rapid.T) {
		f := newFolded(rt)
		pol := events.DefaultPolicy()
		pol.AckTimeout, pol.DefaultLease, pol.MinLease = 300*ms, 600*ms, 100*ms
		for range rapid.IntRange(1, 80).Draw(rt, "steps") {
			f.now += rapid.SampledFrom([]int64{0, 1, 50, 200, 400, 900, 2500}).Draw(rt, "gap") * ms
			job := rapid.SampledFrom(jobs).Draw(rt, "job")
			worker := rapid.SampledFrom([]string{"w1", "w2"}).Draw(rt, "worker")
			j, _ := f.p.Job(job)
			holder := j.Holder // the lease's holder, or another worker (a claim: an ownership conflict)
			if holder == "" || rapid.IntRange(0, 9).Draw(rt, "claim") == 0 {
				holder = worker
			}
			switch rapid.IntRange(0, 12).Draw(rt, "op") {
			case 0, 1:
				f.step(events.RoleOps, "d1", job, events.Input{Verb: events.VerbSubmit, Queue: rapid.SampledFrom([]string{"q1", "q2"}).Draw(rt, "queue"),
					MaxAttempts: uint64(rapid.IntRange(0, 3).Draw(rt, "attempts")), BackoffMS: int64(rapid.SampledFrom([]int{0, 100, 1000}).Draw(rt, "backoff"))})
			case 2, 3:
				f.step(events.RoleWorker, worker, events.NoJob, events.Input{Verb: events.VerbPull, Queue: rapid.SampledFrom([]string{"q1", "q2"}).Draw(rt, "queue"),
					Slots: uint64(rapid.IntRange(0, 3).Draw(rt, "slots")), TTLMS: int64(rapid.SampledFrom([]int{500, 3000}).Draw(rt, "ttl"))})
			case 4, 5:
				f.step(events.RoleWorker, holder, job, events.Input{Verb: events.VerbAck, LeaseID: j.LeaseID, Generation: j.Generation})
			case 6, 7:
				out := rapid.SampledFrom([]events.Outcome{events.OutcomeSuccess, events.OutcomeFailed, events.OutcomeCancelled}).Draw(rt, "outcome")
				f.step(events.RoleWorker, holder, job, events.Input{Verb: events.VerbResult, LeaseID: j.LeaseID, Generation: j.Generation, Outcome: out,
					Permanent: out == events.OutcomeFailed && rapid.Bool().Draw(rt, "permanent")})
			case 8:
				f.step(events.RoleWorker, holder, job, events.Input{Verb: events.VerbRelease, LeaseID: j.LeaseID, Generation: j.Generation})
			case 9:
				act := rapid.SampledFrom([]events.Action{events.ActionRetry, events.ActionDiscard, events.ActionRevoke}).Draw(rt, "action")
				f.step(events.RoleOps, "admin", job, events.Input{Verb: events.VerbResolve, Action: act})
			case 10:
				if rapid.Bool().Draw(rt, "cancel") {
					f.step(events.RoleOps, "admin", job, events.Input{Verb: events.VerbCancel})
				} else if job == "p0" {
					f.step(events.RoleWorker, worker, job, events.Input{Verb: events.VerbAcquire}) // a job outside any queue
				} else {
					pol.Retain = rapid.SampledFrom([]int64{0, 1000 * ms}).Draw(rt, "retain")
					f.step(events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
				}
			case 11:
				f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
			default:
				// A reader starting (or starting again) from the stored
				// snapshot, the decisions before it removed: from here
				// on it must hold what the fold holds too.
				f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
				f.restore()
			}
			f.check(jobs)
		}
	})
}

// A queue's stats through a job's life: ready, offered, requeued after a
// backoff (waiting, then ready when its time comes), dead; the workers'
// announcements and free slots, which lapse; the rates over the last
// minute and the totals.
func TestQueueStats(t *testing.T) {
	f := newFolded(t)
	for i := range 3 {
		f.step(events.RoleOps, "d1", fmt.Sprintf("m%d", i), events.Input{Verb: events.VerbSubmit, Queue: "emails", MaxAttempts: 2, BackoffMS: 10_000})
	}
	stats := func() QueueStats {
		t.Helper()
		r, ok := f.m.Queue("emails", f.at())
		if !ok {
			t.Fatal("no queue emails")
		}
		return r.Queue
	}
	if s := stats(); s.Jobs != 3 || s.Queued != 3 || s.Ready != 3 || s.Waiting != 0 || s.Workers != 0 || s.Totals.Submitted != 3 {
		t.Fatalf("after three submits: %+v", s)
	}
	f.now += int64(time.Second)
	f.step(events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "emails", Slots: 2, TTLMS: 20_000})
	s := stats()
	if s.Offered != 2 || s.InFlight != 2 || s.Ready != 1 || s.Workers != 1 || s.Slots != 2 || s.FreeSlots != 0 ||
		len(s.WorkerList) != 1 || s.WorkerList[0] != (WorkerCapacity{Worker: "w1", Slots: 2, Held: 2, Until: events.FormatTime(f.now + 20*int64(time.Second)),
		WorkerCounts: WorkerCounts{Offers: 2}}) {
		t.Fatalf("after w1's pull of 2 slots: %+v", s)
	}
	// w1 fails m0: requeued, waiting out its backoff of about 10 s.
	j, _ := f.p.Job("m0")
	f.step(events.RoleWorker, "w1", "m0", events.Input{Verb: events.VerbAck, LeaseID: j.LeaseID, Generation: j.Generation})
	f.step(events.RoleWorker, "w1", "m0", events.Input{Verb: events.VerbResult, LeaseID: j.LeaseID, Generation: j.Generation, Outcome: events.OutcomeFailed})
	j, _ = f.p.Job("m0")
	if j.State != events.StateQueued {
		t.Fatalf("m0 after a failure: %s", j.State)
	}
	// m2 was offered in m0's freed slot.
	s = stats()
	if s.Waiting != 1 || s.Ready != 0 || s.InFlight != 2 || s.Totals.Requeued != 1 || s.Totals.Offered != 3 || s.Rates.Offered != 3.0/60 {
		t.Fatalf("after m0 failed: %+v", s)
	}
	l := f.m.List(JobsRequest{Queue: "emails", State: "QUEUED", Limit: 10}, f.at())
	if len(l.Jobs) != 1 || l.Jobs[0].ID != "m0" || l.Jobs[0].Attempt != 1 || l.Jobs[0].LastReason != "attempt_failed" ||
		l.Jobs[0].ReadyAt != events.FormatTime(j.ReadyAt) || l.Jobs[0].ScheduledFor != "" {
		t.Fatalf("the queued jobs: %+v", l.Jobs)
	}
	// w1 completes m1: counted, in the rates too.
	j1, _ := f.p.Job("m1")
	f.step(events.RoleWorker, "w1", "m1", events.Input{Verb: events.VerbAck, LeaseID: j1.LeaseID, Generation: j1.Generation})
	f.step(events.RoleWorker, "w1", "m1", events.Input{Verb: events.VerbResult, LeaseID: j1.LeaseID, Generation: j1.Generation, Outcome: events.OutcomeSuccess})
	if s := stats(); s.Completed != 1 || s.Totals.Completed != 1 || s.Rates.Completed != 1.0/60 || s.Totals.Failed != 0 || s.InFlight != 1 {
		t.Fatalf("after m1 completed: %+v", s)
	}
	// m0's backoff passes on the server's clock, with no decision: ready.
	if r, _ := f.m.Queue("emails", time.Unix(0, j.ReadyAt)); r.Queue.Ready != 1 || r.Queue.Waiting != 0 {
		t.Fatalf("at m0's ready_at: %+v", r.Queue)
	}
	// A minute later nothing happened within the window, and w1's
	// announcement has lapsed; the list still has what w1 did.
	r, _ := f.m.Queue("emails", f.at().Add(time.Minute+time.Second))
	if r.Queue.Rates != (Rates{WindowS: 60}) || r.Queue.Workers != 0 || r.Queue.Totals.Offered != 3 || len(r.Queue.WorkerList) != 1 ||
		r.Queue.WorkerList[0] != (WorkerCapacity{Worker: "w1", Held: 1, WorkerCounts: WorkerCounts{Offers: 3, Completions: 1, Failures: 1}}) {
		t.Fatalf("a minute later: %+v", r.Queue)
	}
	if _, ok := f.m.Queue("nothing", f.at()); ok {
		t.Fatal("a queue nobody named")
	}
}

// job.list pages through the index: in id order, from the cursor, by
// queue and state, with the total of the selection; a retired job leaves
// the model, and a queue with nothing left is forgotten.
func TestListPages(t *testing.T) {
	f := newFolded(t)
	var ids []string
	for i := range 25 {
		id := fmt.Sprintf("job-%02d", i)
		ids = append(ids, id)
		q := "a"
		if i%5 == 0 {
			q = "b"
		}
		f.step(events.RoleOps, "d1", id, events.Input{Verb: events.VerbSubmit, Queue: q})
	}
	f.step(events.RoleWorker, "w1", "plain", events.Input{Verb: events.VerbAcquire})
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("no end to the pages")
		}
		r := f.m.List(JobsRequest{After: after, Limit: 7}, f.at())
		if r.Total != 26 || len(r.Jobs) > 7 {
			t.Fatalf("a page: total %d, %d jobs", r.Total, len(r.Jobs))
		}
		for _, j := range r.Jobs {
			got = append(got, j.ID)
		}
		if r.Next == "" {
			break
		}
		after = r.Next
	}
	if want := append(slices.Clone(ids), "plain"); !slices.Equal(got, want) {
		t.Fatalf("every page: %v", got)
	}
	r := f.m.List(JobsRequest{Queue: "b", Limit: 50}, f.at())
	if r.Total != 5 || len(r.Jobs) != 5 || r.Jobs[0].ID != "job-00" || r.Jobs[4].ID != "job-20" || r.Jobs[0].Queue != "b" || r.Jobs[0].State != "QUEUED" {
		t.Fatalf("queue b: %+v", r)
	}
	if r := f.m.List(JobsRequest{State: "ACTIVE", Limit: 50}, f.at()); r.Total != 1 || r.Jobs[0].ID != "plain" || r.Jobs[0].Queue != "" || r.Jobs[0].Deadline == "" {
		t.Fatalf("the active jobs: %+v", r)
	}
	if r := f.m.List(JobsRequest{Queue: "zzz", Limit: 50}, f.at()); r.Total != 0 || len(r.Jobs) != 0 || r.Jobs == nil {
		t.Fatalf("an unknown queue: %+v", r)
	}
	// Cancelled and retired (retain 1 s): they leave the model.
	for i := 0; i < 25; i += 5 {
		f.step(events.RoleOps, "admin", ids[i], events.Input{Verb: events.VerbCancel})
	}
	pol := events.DefaultPolicy()
	pol.AckTimeout, pol.DefaultLease, pol.MinLease, pol.Retain = 300*ms, 600*ms, 100*ms, 1000*ms
	f.step(events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbPolicy, Policy: pol})
	f.now += 2 * int64(time.Second)
	f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
	if _, ok := f.m.Job("job-00", f.at()); ok {
		t.Fatal("a retired job is still in the model")
	}
	if _, ok := f.m.Queue("b", f.at()); ok {
		t.Fatal("queue b, all of whose jobs were retired, is still known")
	}
	if r := f.m.Queues(QueuesRequest{Limit: 10}, f.at()); r.Total != 1 || len(r.Queues) != 1 || r.Queues[0].Queue != "a" || r.Queues[0].Jobs != 20 {
		t.Fatalf("the queues: %+v", r)
	}
	f.check(append(ids, "plain"))
}

// A decision about a job of another partition (wrong_partition) is not
// its projection: the model of a partitioned deployment keeps each job's
// own partition's.
func TestModelPartitionOwnership(t *testing.T) {
	m := NewModel(4)
	j := events.Job{ID: "x", Queue: "q", State: events.StateQueued, Submitter: "d"}
	own := events.PartitionOf("x", 4)
	other := (own + 1) % 4
	m.Apply(other, 1, &events.Decision{Cause: 1, Kind: events.KindRejected, Reason: events.ReasonWrongPartition, Job: j})
	if _, ok := m.Job("x", time.Now()); ok {
		t.Fatal("a job taken from another partition's decision")
	}
	m.Apply(own, 1, &events.Decision{Cause: 1, Kind: events.KindSubmitted, Reason: events.ReasonOk, Job: j})
	r, ok := m.Job("x", time.Now())
	if !ok || r.Partition != fmt.Sprint(own) || len(r.Seqs) != 4 {
		t.Fatalf("the job of its own partition: %v %+v", ok, r)
	}
}

// The largest answers stay far below NATS's default payload limit (1 MiB;
// PROTOCOL.md §23.1 says under 200 KB): a page of MaxJobsLimit jobs whose
// ids, holders, queues and reasons are as long as tokens get, a job whose
// payload is 4096 control characters (escaped six bytes each), a page of
// MaxQueuesLimit queues, a queue with MaxWorkersListed workers.
func TestAnswerSizes(t *testing.T) {
	const count = 1024
	m := NewModel(count)
	long := func(prefix string, i int) string {
		s := fmt.Sprintf("%s%d-", prefix, i)
		return s + string(bytes.Repeat([]byte{'x'}, events.MaxTokenLen-len(s)))
	}
	now := time.Unix(1<<31, 0)
	seq := uint64(1 << 52)
	for i := range MaxJobsLimit + 1 {
		j := events.Job{ID: long("j", i), LeaseID: long("L", i), Generation: 1 << 52, Holder: long("w", i), State: events.StateUnresolved,
			Result: events.OutcomeCancelled, Conflict: true, ConflictWith: long("c", i), Queue: long("q", i%MaxQueuesLimit), Submitter: long("d", i),
			Priority: 9, Attempt: 1000, MaxAttempts: 1000, ReadyAt: now.UnixNano() + 123456789, LastReason: events.ReasonAckDeadlinePassed,
			HasPayload: true, Payload: string(bytes.Repeat([]byte{1}, events.MaxPayloadBytes)), ExpiresAt: now.UnixNano() + 1}
		seq++
		m.Apply(events.PartitionOf(j.ID, count), seq, &events.Decision{Cause: seq, At: now.UnixNano() + 987654321, Kind: events.KindUnresolved, Reason: events.ReasonCancelTimeout, Job: j})
	}
	for i := range MaxWorkersListed {
		m.Apply(uint32(i%count), seq, &events.Decision{Kind: events.KindCapacitySet, Actor: long("w", i), Job: events.Job{ID: events.NoJob},
			Capacity: &events.Capacity{Queue: long("q", 0), Slots: events.MaxSlots, Until: now.UnixNano() + int64(time.Hour)}})
	}
	size := func(what string, v any, most int) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes", what, len(b))
		if len(b) > most {
			t.Errorf("%s: %d bytes, over %d", what, len(b), most)
		}
	}
	size("a page of jobs", m.List(JobsRequest{Limit: MaxJobsLimit}, now), 200_000)
	r, _ := m.Job(long("j", 0), now)
	size("a job with the largest payload", r, 40_000)
	size("a page of queues", m.Queues(QueuesRequest{Limit: MaxQueuesLimit}, now), 200_000)
	q, _ := m.Queue(long("q", 0), now)
	if len(q.Queue.WorkerList) != MaxWorkersListed {
		t.Fatalf("%d workers listed", len(q.Queue.WorkerList))
	}
	size("a queue with its workers", q, 200_000)
}

// Rules revision 5: queue.get lists each worker with its standing and what
// it did with the queue's jobs, from the decisions alone: an operator finds
// the worker that declines what it is offered, even after its refusal
// withdrew its announcement. And a job's projection in the read model has
// its lease id and payload though the last decision about it, a verdict to
// another worker, withheld them.
func TestQueueStandings(t *testing.T) {
	f := newFolded(t)
	f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision5, LeaseKey: [events.LeaseKeyLen]byte{7}})
	f.step(events.RoleOps, "d1", "m0", events.Input{Verb: events.VerbSubmit, Queue: "emails", Payload: "secret", HasPayload: true})
	f.step(events.RoleWorker, "bad", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "emails", Slots: 4, TTLMS: 20_000})
	j, _ := f.p.Job("m0")
	f.step(events.RoleWorker, "bad", "m0", events.Input{Verb: events.VerbRelease, LeaseID: j.LeaseID, Generation: j.Generation})
	f.step(events.RoleWorker, "good", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "emails", Slots: 4, TTLMS: 20_000})
	j, _ = f.p.Job("m0")
	if j.Holder != "good" {
		t.Fatalf("m0 offered to %s", j.Holder)
	}
	// The decliner asks for the job: its verdict withholds the lease id.
	ds := f.step(events.RoleWorker, "bad", "m0", events.Input{Verb: events.VerbAcquire})
	if !ds[0].Job.Withheld {
		t.Fatalf("the decliner's verdict: %+v", ds[0].Job)
	}
	r, ok := f.m.Job("m0", f.at())
	rj, err := events.DecodeJob(r.Job)
	if !ok || err != nil || rj.LeaseID != j.LeaseID || rj.Payload != "secret" || rj.Withheld {
		t.Fatalf("m0 in the read model: %v %s", err, r.Job)
	}
	f.step(events.RoleWorker, "good", "m0", events.Input{Verb: events.VerbAck, LeaseID: j.LeaseID, Generation: j.Generation})
	f.step(events.RoleWorker, "good", "m0", events.Input{Verb: events.VerbResult, LeaseID: j.LeaseID, Generation: j.Generation, Outcome: events.OutcomeSuccess})
	q, _ := f.m.Queue("emails", f.at())
	byName := map[string]WorkerCapacity{}
	for _, w := range q.Queue.WorkerList {
		byName[w.Worker] = w
	}
	bad, good := byName["bad"], byName["good"]
	if bad.Slots != 0 || bad.Until != "" || bad.Declines != 1 || bad.Offers != 1 || bad.Standing == nil || bad.Standing.Strikes != 1 || bad.Standing.Window != 4 || bad.Standing.HeldUntil == "" {
		t.Errorf("the decliner: %+v (standing %+v)", bad, bad.Standing)
	}
	if good.Slots != 4 || good.Offers != 1 || good.Completions != 1 || good.Standing == nil || good.Standing.Strikes != 0 || good.Standing.Window != events.InitialWindow+1 {
		t.Errorf("the honest worker: %+v (standing %+v)", good, good.Standing)
	}
}

// Restoring one partition from its snapshot (Model.Restore) replaces
// that partition's jobs, queue counts and announcements and nothing of
// another partition's; a second restore replaces the first.
func TestModelRestorePartition(t *testing.T) {
	const count = 2
	m := NewModel(count)
	var ps [count]*projector.Projector
	var in, out [count]uint64
	step := func(k uint32, role events.Role, actor, job string, input events.Input) {
		t.Helper()
		in[k]++
		input.Role, input.Actor, input.Job = role, actor, job
		p := events.Partition{Index: k, Count: count}
		raw := events.Raw{Seq: in[k], Time: testutil.ScenarioBase + int64(in[k])*ms, Subject: p.InputSubject(role, actor, job, input.Verb),
			Body: events.AppendInputBody(nil, &input)}
		ds, err := ps[k].Step(raw)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ds {
			out[k]++
			m.Apply(k, out[k], &ds[i])
		}
	}
	// Jobs of each partition, in queue q.
	jobsOf := [count][]string{}
	for i := 0; len(jobsOf[0]) < 3 || len(jobsOf[1]) < 3; i++ {
		id := fmt.Sprintf("j%d", i)
		k := events.PartitionOf(id, count)
		jobsOf[k] = append(jobsOf[k], id)
	}
	for k := range uint32(count) {
		ps[k] = projector.NewPartition(events.Partition{Index: k, Count: count})
		step(k, events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision5, LeaseKey: [events.LeaseKeyLen]byte{byte(k)}})
		for _, id := range jobsOf[k][:2] {
			step(k, events.RoleOps, "d1", id, events.Input{Verb: events.VerbSubmit, Queue: "q"})
		}
		step(k, events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 1, TTLMS: 600000})
	}
	now := time.Unix(0, testutil.ScenarioBase+100*ms)
	// Partition 1 goes on (its third job), and its model is restored from
	// a snapshot taken then, twice.
	step(1, events.RoleOps, "d1", jobsOf[1][2], events.Input{Verb: events.VerbSubmit, Queue: "q"})
	snap := projector.NewPartition(events.Partition{Index: 1, Count: count})
	if err := snap.Restore(ps[1].Snapshot()); err != nil {
		t.Fatal(err)
	}
	at := out[1]
	m.Restore(1, at, snap)
	m.Restore(1, at, snap) // again: the same
	if got := m.PositionOf(1); got != at {
		t.Fatalf("partition 1 restored at %d, position %d", at, got)
	}
	for k, ids := range jobsOf {
		for _, id := range ids {
			_, inModel := m.Job(id, now)
			_, inFold := ps[k].Job(id)
			if inModel != inFold {
				t.Errorf("job %s of partition %d: in the model %v, in the fold %v", id, k, inModel, inFold)
			}
		}
	}
	r, _ := m.Job(jobsOf[1][2], now)
	if r.Last.Snapshot != at || r.Last.Seq != 0 || r.Last.Label() != "snapshot" {
		t.Errorf("a restored job's last decision: %+v", r.Last)
	}
	if r, _ := m.Job(jobsOf[0][0], now); r.Last.Snapshot != 0 || r.Last.Seq == 0 {
		t.Errorf("partition 0's job after partition 1's restore: %+v", r.Last)
	}
	q, ok := m.Queue("q", now)
	// Each partition offered one job to w1 (one slot each): the other
	// two of partition 1 and one of partition 0 are ready.
	if !ok || q.Queue.Jobs != 5 || q.Queue.Offered != 2 || q.Queue.Ready != 3 || q.Queue.Workers != 2 || q.Queue.Slots != 2 || q.Queue.FreeSlots != 0 {
		t.Fatalf("queue q after partition 1's restore: %+v", q.Queue)
	}
	if l := m.List(JobsRequest{Limit: MaxJobsLimit}, now); l.Total != 5 {
		t.Fatalf("%d jobs listed after the restore, want 5", l.Total)
	}
}

// ScheduledFor (rules revision 8): a job's run_at, or its submit's time
// plus its delay; 0 for a job to run at once.
func TestScheduledFor(t *testing.T) {
	for _, c := range []struct {
		j    events.Job
		want int64
	}{
		{events.Job{SubmittedAt: 5, RunAt: 100}, 100},
		{events.Job{SubmittedAt: 5, Delay: 100}, 105},
		{events.Job{SubmittedAt: 5}, 0},
	} {
		if got := ScheduledFor(&c.j); got != c.want {
			t.Errorf("ScheduledFor(%+v) = %d, want %d", c.j, got, c.want)
		}
	}
}

// A queue job's summary names its concurrency key (rules revision 9).
func TestJobSummaryConcurrencyKey(t *testing.T) {
	f := newFolded(t)
	f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9, LeaseKey: [events.LeaseKeyLen]byte{7}})
	f.step(events.RoleOps, "d1", "c1", events.Input{Verb: events.VerbSubmit, Queue: "exports", ConcurrencyKey: "acct-42"})
	l := f.m.List(JobsRequest{Queue: "exports", Limit: 10}, f.at())
	if l.Total != 1 || len(l.Jobs) != 1 || l.Jobs[0].ConcurrencyKey != "acct-42" {
		t.Fatalf("the jobs of exports: %+v", l)
	}
}

// A queue job's summary names its unique key (rules revision 8); a submit
// refused for the key (its job NONE) lists no job.
func TestJobSummaryUniqueKey(t *testing.T) {
	f := newFolded(t)
	f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision8, LeaseKey: [events.LeaseKeyLen]byte{7}})
	f.step(events.RoleOps, "d1", "u1", events.Input{Verb: events.VerbSubmit, Queue: "exports", UniqueKey: "user-42"})
	if ds := f.step(events.RoleOps, "d2", "u2", events.Input{Verb: events.VerbSubmit, Queue: "exports", UniqueKey: "user-42"}); len(ds) != 1 || ds[0].DuplicateOf != "u1" {
		t.Fatalf("u2: %+v", ds)
	}
	l := f.m.List(JobsRequest{Queue: "exports", Limit: 10}, f.at())
	if l.Total != 1 || len(l.Jobs) != 1 || l.Jobs[0].ID != "u1" || l.Jobs[0].UniqueKey != "user-42" {
		t.Fatalf("the jobs of exports: %+v", l)
	}
}

// The limits a queue's stats list (rules revision 9) are the fold's:
// after every input of random logs of keyed jobs, limits set, changed and
// lifted, and time passing, each queue's limit_list is projector.Limits()
// of the queue (its key, max_active, rate and period), with the live
// leases of each key's jobs as the projection has them; so is a model
// restored from a snapshot at any point and fed the decisions after it.
func TestModelLimitsAreTheFold(t *testing.T) {
	jobs := []string{"j0", "j1", "j2", "j3", "j4", "j5"}
	rapid.Check(t, func(rt *rapid.T) {
		f := newFolded(rt)
		f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision9, LeaseKey: [events.LeaseKeyLen]byte{7}})
		queues, keys := []string{"q1", "q2"}, []string{"", "k1", "k2"}
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			f.now += rapid.SampledFrom([]int64{0, 1, 50, 400, 2500}).Draw(rt, "gap") * ms
			job := rapid.SampledFrom(jobs).Draw(rt, "job")
			j, _ := f.p.Job(job)
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1:
				f.step(events.RoleOps, "d1", job, events.Input{Verb: events.VerbSubmit, Queue: rapid.SampledFrom(queues).Draw(rt, "queue"),
					ConcurrencyKey: rapid.SampledFrom(keys).Draw(rt, "key")})
			case 2:
				f.step(events.RoleWorker, "w1", events.NoJob, events.Input{Verb: events.VerbPull, Queue: rapid.SampledFrom(queues).Draw(rt, "queue"),
					Slots: uint64(rapid.IntRange(0, 4).Draw(rt, "slots")), TTLMS: 3000})
			case 3:
				f.step(events.RoleWorker, j.Holder, job, events.Input{Verb: events.VerbAck, LeaseID: j.LeaseID, Generation: j.Generation})
			case 4:
				f.step(events.RoleWorker, j.Holder, job, events.Input{Verb: events.VerbResult, LeaseID: j.LeaseID, Generation: j.Generation, Outcome: events.OutcomeSuccess})
			case 5, 6:
				in := events.Input{Verb: events.VerbLimit, Queue: rapid.SampledFrom(queues).Draw(rt, "queue"), ConcurrencyKey: rapid.SampledFrom(keys).Draw(rt, "key")}
				if in.ConcurrencyKey != "" && rapid.Bool().Draw(rt, "max") {
					in.MaxActive, in.HasMaxActive = uint64(rapid.IntRange(0, 2).Draw(rt, "max_active")), true
				}
				if rapid.Bool().Draw(rt, "rate") {
					in.Rate, in.PeriodMS = uint64(rapid.IntRange(1, 3).Draw(rt, "rate_n")), int64(rapid.SampledFrom([]int{100, 1000}).Draw(rt, "period"))
				}
				f.step(events.RoleOps, "admin", events.NoJob, in) // neither: lifted
			case 7:
				f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
			default:
				f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
				f.restore()
			}
			f.checkLimits(f.m)
			if f.r != nil {
				f.checkLimits(f.r)
			}
		}
	})
}

// checkLimits compares m's limits of every queue with the projector's.
func (f *folded) checkLimits(m *Model) {
	f.t.Helper()
	live := map[[2]string]int{}
	for _, j := range f.p.Jobs() {
		if j.State.Live() && j.ConcurrencyKey != "" {
			live[[2]string{j.Queue, j.ConcurrencyKey}]++
		}
	}
	want := map[string][]LimitInForce{}
	for _, l := range f.p.Limits() {
		x := LimitInForce{Key: l.ConcurrencyKey, Rate: l.Rate, PeriodMS: l.PeriodMS}
		if l.HasMaxActive {
			x.MaxActive = &l.MaxActive
		}
		if l.ConcurrencyKey != "" {
			x.Live = live[[2]string{l.Queue, l.ConcurrencyKey}]
		}
		want[l.Queue] = append(want[l.Queue], x)
	}
	for _, name := range []string{"q1", "q2"} {
		st, ok := m.Queue(name, f.at())
		if len(want[name]) > 0 && !ok {
			f.t.Fatalf("queue %s with %d limits in force is not known", name, len(want[name]))
		}
		got, _ := json.Marshal(st.Queue.LimitList)
		w, _ := json.Marshal(want[name])
		if want[name] == nil {
			w = []byte("null")
		}
		if len(st.Queue.LimitList) == 0 {
			got = []byte("null")
		}
		if !bytes.Equal(got, w) || st.Queue.Limits != len(want[name]) {
			f.t.Fatalf("queue %s at %s: %d limits listed %s; the fold's: %s", name, events.FormatTime(f.now), st.Queue.Limits, got, w)
		}
	}
}

// The model's schedules are the fold's (revision 10): definitions, paused,
// next due times (carried by each schedule's decisions) and the operator,
// whatever was set, paused, resumed, deleted and fired, and so are those
// of a model restored from a snapshot; the fires, refusals and missed due
// times it counts are the decisions'.
func TestModelSchedulesAreTheFold(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := newFolded(rt)
		f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.Revision10, LeaseKey: [events.LeaseKeyLen]byte{7}})
		ids := []string{"s0", "s1", "s2"}
		counts := map[string][3]uint64{}
		for range rapid.IntRange(1, 50).Draw(rt, "steps") {
			f.now += rapid.SampledFrom([]int64{0, 1, 400, 2500, 61000, 3600000}).Draw(rt, "gap") * ms
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			in := events.Input{Verb: events.VerbSchedule, Schedule: id}
			var ds []events.Decision
			switch rapid.IntRange(0, 7).Draw(rt, "op") {
			case 0, 1:
				in.Cron = rapid.SampledFrom([]string{"@every 1s", "@every 5m", "* * * * *", "0 * * * *"}).Draw(rt, "cron")
				in.Queue = rapid.SampledFrom([]string{"q1", "q2"}).Draw(rt, "queue")
				in.Missed = events.Missed(rapid.IntRange(0, 1).Draw(rt, "missed"))
				in.UniqueKey = rapid.SampledFrom([]string{"", "k"}).Draw(rt, "unique_key")
				ds = f.step(events.RoleOps, rapid.SampledFrom([]string{"admin", "ops2"}).Draw(rt, "actor"), events.NoJob, in)
			case 2:
				in.ScheduleOp = events.SchedulePause
				ds = f.step(events.RoleOps, "admin", events.NoJob, in)
			case 3:
				in.ScheduleOp = events.ScheduleResume
				ds = f.step(events.RoleOps, "admin", events.NoJob, in)
			case 4:
				in.ScheduleOp = events.ScheduleDelete
				ds = f.step(events.RoleOps, "admin", events.NoJob, in)
			case 5:
				ds = f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
				f.restore()
			default:
				ds = f.step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbTick})
			}
			for _, d := range ds {
				if d.Schedule == nil {
					continue
				}
				c := counts[d.Schedule.ID]
				switch {
				case d.Kind == events.KindScheduleDeleted:
					c = [3]uint64{}
				case d.Kind == events.KindFired && d.Reason == events.ReasonOk:
					c[0]++
				case d.Kind == events.KindFired:
					c[1]++
				case d.Kind == events.KindScheduleMissed:
					c[2] += d.Schedule.MissedCount
				}
				counts[d.Schedule.ID] = c
			}
			want := f.p.Schedules()
			for _, m := range []*Model{f.m, f.r} {
				if m == nil {
					continue
				}
				got := m.Schedules(SchedulesRequest{Limit: MaxSchedulesLimit}, f.at()).Schedules
				if len(got) != len(want) {
					rt.Fatalf("%d schedules listed, the fold has %d", len(got), len(want))
				}
				for i, w := range want {
					g := got[i]
					next := ""
					if w.Next != 0 && !w.Paused { // (the list shows no next while paused)
						next = events.FormatTime(w.Next)
					}
					if g.ID != w.ID || g.Cron != w.Cron || g.Queue != w.Queue || g.Missed != w.Missed.String() || g.Paused != w.Paused ||
						g.Next != next || g.Actor != w.Actor {
						rt.Fatalf("schedule %s: listed %+v, the fold's %+v", w.ID, g, w)
					}
					if c := counts[w.ID]; m == f.m && (g.Fires != c[0] || g.Refused != c[1] || g.Skipped != c[2]) {
						rt.Fatalf("schedule %s: counts %d/%d/%d, the decisions' %v", w.ID, g.Fires, g.Refused, g.Skipped, c)
					}
				}
			}
		}
	})
}
