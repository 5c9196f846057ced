package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/maknow/tenure/api"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/worker"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// startTenure runs a real embedded server and a live coordinator, both
// stopped with the test.
func startTenure(t *testing.T) *embedded.Server {
	t.Helper()
	srv := testutil.StartServer(t)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	testutil.WaitFor(t, 10*time.Second, "the coordinator live", func() bool { return c.Stats().Live })
	return srv
}

// startAPI runs an API server on its own connection, its endpoints on a
// micro service "tenure" as tenure serve registers them, until the test
// ends.
func startAPI(t *testing.T, url string) *api.Server {
	t.Helper()
	nc, _ := testutil.Connect(t, url)
	s, err := api.New(api.Config{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := micro.AddService(nc, micro.Config{Name: "tenure", Version: "0.0.1", StatsHandler: s.EndpointStats})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddEndpoints(svc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = svc.Stop()
	})
	return s
}

// The API against a real coordinator: jobs submitted through ops and
// pulled by a worker are answered from the read model (the projection,
// pages of jobs, a queue's stats with its workers, the queues); a read
// model started later rebuilds the same from the decision stream; bad
// requests are refused with their code, and messages that are no request
// are dropped unanswered.
func TestAPI(t *testing.T) {
	srv := startTenure(t)
	onc, js := testutil.Connect(t, srv.ClientURL())
	disp, err := ops.New(onc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disp.Close() })
	ctx := context.Background()
	s := startAPI(t, srv.ClientURL())
	cl := api.NewClient(onc, 5*time.Second)

	for _, id := range []string{"mail-1", "mail-2", "mail-3"} {
		if _, err := disp.Submit(ctx, id, "emails", ops.WithMaxAttempts(2), ops.WithPayload("to "+id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := disp.Submit(ctx, "rep-1", "reports", ops.WithPriority(3)); err != nil {
		t.Fatal(err)
	}
	// Worker w1 announces two slots on emails: two offers.
	if _, err := js.Publish(ctx, "tenure.in.worker.w1._.pull", []byte(`{"v":1,"queue":"emails","slots":2,"ttl_ms":600000}`)); err != nil {
		t.Fatal(err)
	}
	var q api.QueueReply
	testutil.WaitFor(t, 10*time.Second, "two offers in queue emails", func() bool {
		q, err = cl.Queue(ctx, "emails")
		return err == nil && q.Queue.InFlight == 2 && q.CaughtUp
	})
	if st := q.Queue; st.Jobs != 3 || st.Queued != 1 || st.Ready != 1 || st.Workers != 1 || st.Slots != 2 || st.FreeSlots != 0 ||
		len(st.WorkerList) != 1 || st.WorkerList[0].Worker != "w1" || st.WorkerList[0].Held != 2 || st.Totals.Submitted != 3 ||
		st.Rates.Offered <= 0 || !q.CaughtUp || q.Seq == 0 {
		t.Fatalf("queue emails: %+v", q)
	}

	// A job's projection, exactly as its last decision carries it.
	j, err := cl.Job(ctx, "mail-1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := js.Stream(ctx, "TENURE_OUT")
	if err != nil {
		t.Fatal(err)
	}
	m, err := out.GetMsg(ctx, j.Last.Seq)
	if err != nil {
		t.Fatal(err)
	}
	d, err := events.DecodeDecision(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if string(j.Job) != string(events.AppendJob(nil, &d.Job)) || j.Last.Kind != "assigned" || j.Last.Reason != "ok" || d.Job.ID != "mail-1" {
		t.Fatalf("job mail-1: %+v, its last decision %s", j, m.Data)
	}
	pj, err := j.Projection()
	if err != nil || pj.Holder != "w1" || pj.Payload != "to mail-1" || pj.Attempt != 1 {
		t.Fatalf("mail-1's projection: %v %+v", err, pj)
	}

	// Pages of jobs, by queue and state.
	l, err := cl.Jobs(ctx, api.JobsRequest{Queue: "emails", Limit: 2})
	if err != nil || l.Total != 3 || len(l.Jobs) != 2 || l.Next != "mail-2" || l.Limit != 2 {
		t.Fatalf("the first page of emails: %v %+v", err, l)
	}
	l, err = cl.Jobs(ctx, api.JobsRequest{Queue: "emails", After: l.Next, Limit: 2})
	if err != nil || len(l.Jobs) != 1 || l.Jobs[0].ID != "mail-3" || l.Next != "" || l.Jobs[0].State != "QUEUED" || l.Jobs[0].ReadyAt == "" {
		t.Fatalf("the second page of emails: %v %+v", err, l)
	}
	l, err = cl.Jobs(ctx, api.JobsRequest{State: "OFFERED", Limit: 1000})
	if err != nil || l.Total != 2 || l.Limit != api.MaxJobsLimit || l.Jobs[0].Holder != "w1" || l.Jobs[0].Deadline == "" {
		t.Fatalf("the offered jobs: %v %+v", err, l)
	}
	qs, err := cl.Queues(ctx, api.QueuesRequest{})
	if err != nil || qs.Total != 2 || len(qs.Queues) != 2 || qs.Queues[0].Queue != "emails" || qs.Queues[1].Queue != "reports" ||
		qs.Queues[1].Ready != 1 || qs.Queues[0].WorkerList != nil {
		t.Fatalf("the queues: %v %+v", err, qs)
	}

	// Errors: not found, bad requests, a request too large.
	if _, err := cl.Job(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an unknown job: %v", err)
	}
	if _, err := cl.Queue(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("an unknown queue: %v", err)
	}
	for _, c := range []struct {
		subject, body string
		code          int
		says          string
	}{
		{api.SubjectJob, `{"job":"a.b"}`, 400, "job"},
		{api.SubjectJob, `{}`, 400, "job"},
		{api.SubjectJob, `{"job":"x","extra":1}`, 400, "unknown field"},
		{api.SubjectJob, `{"job":"x"} {"job":"y"}`, 400, "more than one"},
		{api.SubjectJob, `[1]`, 400, "not a request"},
		{api.SubjectJobs, `{"state":"SLEEPING"}`, 400, "state"},
		{api.SubjectJobs, `{"limit":-1}`, 400, "limit"},
		{api.SubjectJobs, `{"queue":"*"}`, 400, "queue"},
		{api.SubjectQueues, `{"after":">"}`, 400, "after"},
		{api.SubjectQueue, `{"queue":"` + strings.Repeat("q", api.MaxRequestBytes) + `"}`, 413, "at most 1024"},
	} {
		msg, err := onc.Request(c.subject, []byte(c.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", c.subject, c.body, err)
		}
		var e api.ErrorReply
		if json.Unmarshal(msg.Data, &e) != nil || e.Error.Code != c.code || !strings.Contains(e.Error.Description, c.says) ||
			msg.Header.Get(micro.ErrorCodeHeader) != itoa(c.code) || msg.Header.Get(micro.ErrorHeader) != e.Error.Description {
			t.Errorf("%s %s: %s %v, want code %d saying %q", c.subject, c.body, msg.Data, msg.Header, c.code, c.says)
		}
	}
	// An empty body is {} for the listings.
	if msg, err := onc.Request(api.SubjectQueues, nil, 5*time.Second); err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("queue.list with no body: %v %v", err, msg)
	}

	// A consumer's deliveries aimed at the API (any client allowed a
	// consumer can do it, in the micro service's queue group "q") are no
	// requests: dropped, unanswered.
	before := s.Stats().Dropped
	if _, err := js.CreateConsumer(ctx, "TENURE_OUT", jetstream.ConsumerConfig{
		DeliverSubject: api.SubjectJob, DeliverGroup: "q", AckPolicy: jetstream.AckExplicitPolicy, InactiveThreshold: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the deliveries dropped", func() bool { return s.Stats().Dropped > before })
	if err := onc.Publish(api.SubjectJob, []byte(`{"job":"mail-1"}`)); err != nil { // no reply subject
		t.Fatal(err)
	}

	// A read model started now rebuilds the same from the decision stream.
	s2 := startAPI(t, srv.ClientURL())
	testutil.WaitFor(t, 10*time.Second, "the second read model caught up", func() bool {
		st := s2.Stats()
		return st.CaughtUp && st.Seq == s.Stats().Seq
	})
	now := time.Now()
	for _, id := range []string{"mail-1", "mail-2", "mail-3", "rep-1"} {
		a, _ := s.Model().Job(id, now)
		b, ok := s2.Model().Job(id, now)
		if !ok || string(a.Job) != string(b.Job) || a.Last != b.Last {
			t.Fatalf("job %s rebuilt: %s, want %s", id, b.Job, a.Job)
		}
	}
	a, _ := s.Model().Queue("emails", now)
	b, _ := s2.Model().Queue("emails", now)
	a.Queue.Rates, b.Queue.Rates = api.Rates{}, api.Rates{}
	if ja, jb := mustJSON(t, a.Queue), mustJSON(t, b.Queue); ja != jb {
		t.Fatalf("queue emails rebuilt:\n%s\nwant\n%s", jb, ja)
	}
}

// Without a server answering, a request says so.
func TestNoServer(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	if _, err := api.NewClient(nc, time.Second).Job(context.Background(), "x"); !errors.Is(err, api.ErrNoServer) {
		t.Fatalf("no server: %v", err)
	}
	if _, err := api.New(api.Config{}); err == nil {
		t.Fatal("a Server without a connection")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A partitioned deployment: the API follows every partition's decision
// stream into one model; a job is answered with its partition, a queue's
// stats add up its jobs of every partition, and a worker announcing to
// each partition is listed once per partition.
func TestAPIPartitioned(t *testing.T) {
	const count = 4
	srv := testutil.StartServer(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 600 * time.Millisecond}, count, 15*time.Second)
	onc, js := testutil.Connect(t, srv.ClientURL())
	disp, err := ops.New(onc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disp.Close() })
	anc, _ := testutil.Connect(t, srv.ClientURL())
	s, err := api.New(api.Config{Conn: anc, Partitions: count})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := micro.AddService(anc, micro.Config{Name: "tenure", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddEndpoints(svc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = svc.Stop() })

	covered := map[uint32]bool{}
	var ids []string
	for i := 0; len(covered) < count; i++ {
		id := "pj-" + itoa(i)
		ids = append(ids, id)
		covered[events.PartitionOf(id, count)] = true
		if _, err := disp.Submit(ctx, id, "emails"); err != nil {
			t.Fatal(err)
		}
	}
	for k := range uint32(count) {
		subject := events.Partition{Index: k, Count: count}.InputSubject(events.RoleWorker, "w1", events.NoJob, events.VerbPull)
		if _, err := js.Publish(ctx, subject, []byte(`{"v":1,"queue":"emails","slots":1,"ttl_ms":600000}`)); err != nil {
			t.Fatal(err)
		}
	}
	cl := api.NewClient(onc, 5*time.Second)
	var q api.QueueReply
	testutil.WaitFor(t, 10*time.Second, "one offer per partition", func() bool {
		q, err = cl.Queue(ctx, "emails")
		return err == nil && q.Queue.InFlight == count && q.CaughtUp
	})
	if st := q.Queue; st.Jobs != len(ids) || st.Queued != len(ids)-count || st.Workers != count || st.Slots != count ||
		len(st.WorkerList) != count || st.WorkerList[3].Partition != "3" || st.WorkerList[0].Held != 1 || len(q.Seqs) != count {
		t.Fatalf("queue emails across %d partitions: %+v", count, q)
	}
	for _, id := range ids {
		j, err := cl.Job(ctx, id)
		if err != nil || j.Partition != itoa(int(events.PartitionOf(id, count))) {
			t.Fatalf("job %s: %v, partition %q", id, err, j.Partition)
		}
	}
	l, err := cl.Jobs(ctx, api.JobsRequest{Queue: "emails", State: "OFFERED"})
	if err != nil || l.Total != count || len(l.Jobs) != count || l.Jobs[0].Partition == "" {
		t.Fatalf("the offered jobs: %v %+v", err, l)
	}
}

// A FAILED result reads as one (issue 34): its completed decision's
// outcome is in last.outcome, and the worker's detail, which only the
// result input holds, is in job.get (worker_result), job.list
// (result_detail) and job.result, by the job or by the input; job.result
// answers nothing of an input that is not a result about the job (the
// rules input carries the lease key; a submit, its payload).
func TestFailureDetails(t *testing.T) {
	srv := startTenure(t)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	startAPI(t, srv.ClientURL())
	cl := api.NewClient(nc, 5*time.Second)
	ctx := context.Background()
	w, err := worker.Connect(nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const why = "connect: connection refused (smtp.example.com:25)"
	fail, err := w.Acquire(ctx, "fail-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := fail.Complete(ctx, events.OutcomeFailed, why); err != nil {
		t.Fatal(err)
	}
	ok, err := w.Acquire(ctx, "ok-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
		t.Fatal(err)
	}
	var j api.JobReply
	testutil.WaitFor(t, 10*time.Second, "fail-1 FAILED in the read model", func() bool {
		j, err = cl.Job(ctx, "fail-1")
		return err == nil && j.Last.Kind == "completed"
	})
	if j.Last.Outcome != "FAILED" || j.Last.Label() != "failed" || j.WorkerResult == nil ||
		j.WorkerResult.Detail != why || j.WorkerResult.Worker != "w1" || j.WorkerResult.Outcome != "FAILED" || j.WorkerResult.Input != j.Last.Cause {
		t.Fatalf("fail-1: last %+v, worker result %+v", j.Last, j.WorkerResult)
	}
	testutil.WaitFor(t, 10*time.Second, "ok-1 COMPLETED in the read model", func() bool {
		j, err = cl.Job(ctx, "ok-1")
		return err == nil && j.Last.Kind == "completed"
	})
	if j.Last.Outcome != "SUCCESS" || j.Last.Label() != "succeeded" || j.WorkerResult == nil || j.WorkerResult.Detail != "" {
		t.Fatalf("ok-1: last %+v, worker result %+v", j.Last, j.WorkerResult)
	}
	l, err := cl.Jobs(ctx, api.JobsRequest{State: "FAILED"})
	if err != nil || len(l.Jobs) != 1 || l.Jobs[0].ResultDetail != why || l.Jobs[0].Last.Label() != "failed" {
		t.Fatalf("the FAILED jobs: %v %+v", err, l)
	}
	r, err := cl.Result(ctx, "fail-1", 0)
	if err != nil || r.Result.Detail != why || r.Job != "fail-1" {
		t.Fatalf("job.result of fail-1: %v %+v", err, r)
	}
	f, _ := cl.Job(ctx, "fail-1")
	if r, err = cl.Result(ctx, "fail-1", f.Last.Cause); err != nil || r.Result.Detail != why {
		t.Fatalf("job.result of fail-1 by its input: %v %+v", err, r)
	}
	// Inputs that are no result about the job: the rules input (1), the
	// acquire of fail-1, ok-1's result, an input beyond the stream.
	for _, in := range []uint64{1, f.Last.Cause - 1, f.Last.Cause + 2, 1 << 40} {
		r, err := cl.Result(ctx, "fail-1", in)
		if !errors.Is(err, api.ErrNotFound) || r.Result.Detail != "" || r.Result.Worker != "" {
			t.Errorf("job.result of fail-1 at input %d: %v %+v, want 404", in, err, r)
		}
	}
	if _, err := cl.Result(ctx, "nope", 0); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("job.result of an unknown job: %v", err)
	}
}

// schedule.list against a real coordinator: the schedules set through
// ops, with the fires the read model counted, by page and by queue; bad
// requests refused.
func TestAPISchedules(t *testing.T) {
	srv := startTenure(t)
	onc, _ := testutil.Connect(t, srv.ClientURL())
	disp, err := ops.New(onc, "admin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disp.Close() })
	ctx := context.Background()
	startAPI(t, srv.ClientURL())
	cl := api.NewClient(onc, 5*time.Second)
	for _, s := range []struct{ id, cron, queue string }{{"a-nightly", "30 2 * * *", "reports"}, {"b-every", "@every 1s", "pings"}, {"c-hourly", "@hourly", "reports"}} {
		if _, err := disp.SetSchedule(ctx, s.id, ops.Schedule{Cron: s.cron, Queue: s.queue, Zone: "Europe/Berlin"}); err != nil {
			t.Fatal(err)
		}
	}
	var r api.SchedulesReply
	testutil.WaitFor(t, 10*time.Second, "b-every fired twice", func() bool {
		r, err = cl.Schedules(ctx, api.SchedulesRequest{})
		return err == nil && len(r.Schedules) == 3 && r.Schedules[1].Fires >= 2
	})
	b := r.Schedules[1]
	if r.Total != 3 || b.ID != "b-every" || b.Actor != "admin" || b.Queue != "pings" || b.Zone != "Europe/Berlin" || b.TZ == "" ||
		b.Next == "" || b.LastDue == "" || !strings.HasPrefix(b.LastJob, "b-every-") || b.LastReason != "ok" || b.Missed != "skip" {
		t.Fatalf("b-every: %+v", b)
	}
	if _, err := disp.PauseSchedule(ctx, "a-nightly"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a-nightly paused", func() bool {
		r, err = cl.Schedules(ctx, api.SchedulesRequest{Queue: "reports", Limit: 1})
		return err == nil && len(r.Schedules) == 1 && r.Schedules[0].Paused
	})
	if a := r.Schedules[0]; a.ID != "a-nightly" || a.Next != "" || r.Next != "a-nightly" || r.Total != 2 {
		t.Fatalf("the first page of reports: %+v", r)
	}
	if r, err = cl.Schedules(ctx, api.SchedulesRequest{Queue: "reports", After: r.Next}); err != nil || len(r.Schedules) != 1 || r.Schedules[0].ID != "c-hourly" || r.Next != "" {
		t.Fatalf("the second page: %+v, %v", r, err)
	}
	for _, q := range []api.SchedulesRequest{{Queue: "a.b"}, {After: "x y"}, {Limit: -1}} {
		if _, err := cl.Schedules(ctx, q); err == nil || !strings.Contains(err.Error(), "400") {
			t.Errorf("%+v: %v, want a 400", q, err)
		}
	}
}
