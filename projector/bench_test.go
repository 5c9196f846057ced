package projector_test

import (
	"fmt"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/testutil"
)

// BenchmarkFold measures the fold including decoding of each input and
// encoding of each decision, on a steady state of many leases renewed in
// turn (the hot path: renewals). Reports inputs/s.
func BenchmarkFold(b *testing.B) {
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
	raws := steadyRenewals(jobs, b.N)
	var buf []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := raws[i]
		seq++
		r.Seq = seq
		r.Time = now + int64(i)*1000
		ds, err := p.Step(r)
		if err != nil {
			b.Fatal(err)
		}
		for k := range ds {
			buf = events.AppendDecision(buf[:0], &ds[k])
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "inputs/s")
}

// steadyRenewals returns n renew inputs cycling over jobs leases granted as
// L1..Ljobs (acquire inputs 1..jobs), each with an advancing renew sequence.
func steadyRenewals(jobs, n int) []events.Raw {
	raws := make([]events.Raw, n)
	for i := range raws {
		k := i % jobs
		in := events.Input{
			Role: events.RoleWorker, Actor: "w" + fmt.Sprint(k%64), Job: fmt.Sprintf("job-%d", k), Verb: events.VerbRenew,
			LeaseID: fmt.Sprintf("L%d", k+1), Generation: 1, RenewSeq: uint64(i/jobs + 1),
		}
		raws[i] = events.Raw{Subject: events.InputSubject(in.Role, in.Actor, in.Job, in.Verb), Body: events.AppendInputBody(nil, &in)}
	}
	return raws
}
