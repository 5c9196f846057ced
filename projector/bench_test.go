package projector_test

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// BenchmarkFold measures the fold including the strict decoding of each
// input, on a steady state of 10,000 leases renewed in turn (the hot path).
func BenchmarkFold(b *testing.B) { benchFold(b, false) }

// BenchmarkFoldEncode adds the canonical JSON encoding of every decision,
// as the coordinator does before appending it.
func BenchmarkFoldEncode(b *testing.B) { benchFold(b, true) }

func benchFold(b *testing.B, encode bool) {
	const jobs = 10000
	p := projector.New()
	var seq uint64
	now := testutil.ScenarioBase
	// Grant every lease first.
	for i := 0; i < jobs; i++ {
		seq++
		job := fmt.Sprintf("job-%d", i)
		in := events.Input{Role: events.RoleWorker, Actor: "w" + fmt.Sprint(i%64), Job: job, Verb: events.VerbAcquire, LeaseMS: 3600000}
		if _, err := p.Step(events.Raw{Seq: seq, Time: now, Subject: events.InputSubject(in.Role, in.Actor, in.Job, in.Verb), Body: events.AppendInputBody(nil, &in)}); err != nil {
			b.Fatal(err)
		}
	}
	// Subjects and lease ids per job; bodies are built per input (a few tens
	// of ns, counted in the measurement: conservative).
	subjects := make([]string, jobs)
	leaseIDs := make([]string, jobs)
	for k := range jobs {
		subjects[k] = events.InputSubject(events.RoleWorker, "w"+fmt.Sprint(k%64), fmt.Sprintf("job-%d", k), events.VerbRenew)
		leaseIDs[k] = fmt.Sprintf("L%d", k+1)
	}
	var buf, body []byte
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		k := i % jobs
		body = append(body[:0], `{"v":1,"lease_id":"`...)
		body = append(body, leaseIDs[k]...)
		body = append(body, `","generation":1,"renew_seq":`...)
		body = strconv.AppendInt(body, int64(i/jobs+1), 10)
		body = append(body, '}')
		seq++
		ds, err := p.Step(events.Raw{Seq: seq, Time: now + int64(i)*1000, Subject: subjects[k], Body: body})
		if err != nil {
			b.Fatal(err)
		}
		if ds[0].Kind != events.KindRenewed {
			b.Fatalf("%s %s", ds[0].Kind, ds[0].Reason)
		}
		if encode {
			for k := range ds {
				buf = events.AppendDecision(buf[:0], &ds[k])
			}
		}
	}
	b.StopTimer()
	// Wall-clock rate, and the rate per second of CPU this process used:
	// the latter holds up on a shared, noisy machine.
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "inputs/s")
	b.ReportMetric(float64(b.N)/(cpuTime()-cpu0).Seconds(), "inputs/cpu-s")
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkQueueJob folds one queue job's whole life per op: its submit
// (offered at once to one of 16 workers holding 16 slots each, 100,000 jobs
// already queued behind it), the worker's ACK and its SUCCESS result (which
// frees the slot: the next job is offered in the same input). Compare with
// BenchmarkLeaseJob, the same life through acquire and result.
func BenchmarkQueueJob(b *testing.B) { benchQueueJob(b, false) }

// BenchmarkQueueJobLimited is BenchmarkQueueJob with rules revision 9's
// limits in force: every job names one of 16 concurrency keys, each
// limited to 64 live jobs (never reached: 256 slots, 16 keys), and the
// queue has a rate limit it never reaches (1,000,000 per ms): the cost of
// the checks and of the keys' heaps.
func BenchmarkQueueJobLimited(b *testing.B) { benchQueueJob(b, true) }

func benchQueueJob(b *testing.B, limited bool) {
	p := projector.New()
	seq := uint64(0)
	now := testutil.ScenarioBase
	step := func(role events.Role, actor, job string, in events.Input) []events.Decision {
		seq++
		in.Role, in.Actor, in.Job = role, actor, job
		ds, err := p.Step(events.Raw{Seq: seq, Time: now, Subject: events.InputSubject(role, actor, job, in.Verb), Body: events.AppendInputBody(nil, &in)})
		if err != nil {
			b.Fatal(err)
		}
		return ds
	}
	step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.CurrentRevision, LeaseKey: propLeaseKey})
	key := func(int) string { return "" }
	if limited {
		key = func(i int) string { return fmt.Sprintf("k%02d", i%16) }
		for k := range 16 {
			step(events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", ConcurrencyKey: key(k), MaxActive: 64, HasMaxActive: true})
		}
		step(events.RoleOps, "admin", events.NoJob, events.Input{Verb: events.VerbLimit, Queue: "q", Rate: events.MaxRate, PeriodMS: 1})
	}
	const backlog = 100_000
	for i := range backlog {
		step(events.RoleOps, fmt.Sprintf("d%d", i%4), fmt.Sprintf("pre-%06d", i), events.Input{Verb: events.VerbSubmit, Queue: "q", LeaseMS: 60000, AckTimeoutMS: 60000, ConcurrencyKey: key(i)})
	}
	type offer struct{ job, lease, worker string }
	var offers []offer
	collect := func(ds []events.Decision) {
		for _, d := range ds {
			if d.Kind == events.KindAssigned {
				offers = append(offers, offer{d.Job.ID, d.Job.LeaseID, d.Job.Holder})
			}
		}
	}
	for w := range 16 {
		collect(step(events.RoleWorker, fmt.Sprintf("w%02d", w), events.NoJob, events.Input{Verb: events.VerbPull, Queue: "q", Slots: 16, TTLMS: events.MaxCapacityTTL}))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		step(events.RoleOps, "d0", fmt.Sprintf("job-%09d", i), events.Input{Verb: events.VerbSubmit, Queue: "q", LeaseMS: 60000, AckTimeoutMS: 60000, ConcurrencyKey: key(i)})
		o := offers[0]
		offers = offers[1:]
		step(events.RoleWorker, o.worker, o.job, events.Input{Verb: events.VerbAck, LeaseID: o.lease, Generation: 1})
		collect(step(events.RoleWorker, o.worker, o.job, events.Input{Verb: events.VerbResult, LeaseID: o.lease, Generation: 1, Outcome: events.OutcomeSuccess}))
		now += 1000
	}
}

// BenchmarkLeaseJob folds one job's life through acquire and result, with
// 100,000 jobs in the projection: the baseline of BenchmarkQueueJob.
func BenchmarkLeaseJob(b *testing.B) {
	p := projector.New()
	seq := uint64(0)
	now := testutil.ScenarioBase
	step := func(role events.Role, actor, job string, in events.Input) []events.Decision {
		seq++
		in.Role, in.Actor, in.Job = role, actor, job
		ds, err := p.Step(events.Raw{Seq: seq, Time: now, Subject: events.InputSubject(role, actor, job, in.Verb), Body: events.AppendInputBody(nil, &in)})
		if err != nil {
			b.Fatal(err)
		}
		return ds
	}
	step(events.RoleCoord, "c1", events.NoJob, events.Input{Verb: events.VerbRules, Revision: events.CurrentRevision, LeaseKey: propLeaseKey})
	for i := range 100_000 {
		step(events.RoleWorker, "w00", fmt.Sprintf("pre-%06d", i), events.Input{Verb: events.VerbAcquire, LeaseMS: 600000})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		job := fmt.Sprintf("job-%09d", i)
		ds := step(events.RoleWorker, "w01", job, events.Input{Verb: events.VerbAcquire, LeaseMS: 60000})
		step(events.RoleWorker, "w01", job, events.Input{Verb: events.VerbResult, LeaseID: ds[len(ds)-1].Job.LeaseID, Generation: 1, Outcome: events.OutcomeSuccess})
		now += 1000
	}
}
