package audit_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/bench"
	"github.com/maknow/tenure/projector"
)

// A small log audited at speed on every run (no timing is asserted: the
// rate is logged, with a raw in-order read of the same streams for scale).
func TestAuditThroughput(t *testing.T) {
	measureAudit(t, 20_000)
}

// The audit of a log of a million inputs completes; its rate is logged.
// Opt in with TENURE_AUDIT_1M=1 (TENURE_AUDIT_N overrides the size):
//
//	TENURE_AUDIT_1M=1 go test -run TestAudit1M -v ./audit/
func TestAudit1M(t *testing.T) {
	if os.Getenv("TENURE_AUDIT_1M") == "" || testing.Short() {
		t.Skip("set TENURE_AUDIT_1M=1 to audit a log of 1,000,000 inputs")
	}
	n := 1_000_000
	if s := os.Getenv("TENURE_AUDIT_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	measureAudit(t, n)
}

func measureAudit(t *testing.T, n int) {
	e := newEnv(t, memTopology)
	t0 := time.Now()
	inputs, decisions := buildLargeLog(t, e, n)
	t.Logf("built a log of %d inputs and %d decisions in %v", inputs, decisions, time.Since(t0).Round(time.Millisecond))

	// Alternate raw reads and audits, keeping the best of each: the machine
	// may be busy with other work.
	var raw time.Duration
	var rep *audit.Report
	for i := range 2 {
		runtime.GC()
		if d := rawRead(t, e); i == 0 || d < raw {
			raw = d
		}
		runtime.GC()
		r := e.audit(t, audit.Config{})
		requireClean(t, r)
		if r.Inputs != inputs || r.Decisions != decisions {
			t.Fatalf("audit read %d inputs and %d decisions:\n%s", r.Inputs, r.Decisions, summary(r))
		}
		if rep == nil || r.Elapsed < rep.Elapsed {
			rep = r
		}
	}
	rawRate := float64(inputs) / raw.Seconds()
	t.Logf("raw in-order read of both streams (%d + %d messages), best of two: %v, %.0f inputs/s", inputs, decisions, raw.Round(time.Millisecond), rawRate)
	t.Logf("audit (replay and verify), best of two: %v, %.0f inputs/s: %.2fx the raw read", rep.Elapsed.Round(time.Millisecond), rep.Rate(), rep.Rate()/rawRate)
}

// buildLargeLog writes bench.WriteLog's synthetic log of the policy and n
// inputs to e's streams; it returns the inputs and decisions written.
func buildLargeLog(t *testing.T, e *env, n int) (inputs, decisions uint64) {
	t.Helper()
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		t.Fatal(err)
	}
	inputs, decisions, err = bench.WriteLog(context.Background(), js, e.top, nil, n)
	if err != nil {
		t.Fatal(err)
	}
	return inputs, decisions
}

// rawRead reads both streams in order, concurrently, through plain ordered
// consumers, touching each message's sequence and time: the baseline.
func rawRead(t *testing.T, e *env) time.Duration {
	t.Helper()
	ctx := context.Background()
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, name := range []string{e.top.InputStream(), e.top.DecisionStream()} {
		s, err := e.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		last := s.CachedInfo().State.LastSeq
		wg.Go(func() {
			cons, err := e.js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
			if err != nil {
				errs <- err
				return
			}
			done := make(chan struct{})
			var sum int64
			cc, err := cons.Consume(func(m jetstream.Msg) {
				meta, err := m.Metadata()
				if err != nil {
					return
				}
				sum += meta.Timestamp.UnixNano() + int64(len(m.Data()))
				if meta.Sequence.Stream == last {
					close(done)
				}
			}, jetstream.PullMaxMessages(8192))
			if err != nil {
				errs <- err
				return
			}
			<-done
			cc.Stop()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return time.Since(t0)
}

// memInputs and memDecisions feed Check from memory.
type memInputs struct {
	in []events.Raw
	i  int
}

func (s *memInputs) NextInput() (events.Raw, bool) {
	if s.i == len(s.in) {
		return events.Raw{}, false
	}
	s.i++
	return s.in[s.i-1], true
}

type memDecisions struct {
	ds []audit.StoredDecision
	i  int
}

func (s *memDecisions) NextDecision() (audit.StoredDecision, bool) {
	if s.i == len(s.ds) {
		return audit.StoredDecision{}, false
	}
	s.i++
	return s.ds[s.i-1], true
}

// BenchmarkCheck is the audit's own work per input, without I/O: the
// fold, the encoding of every derived decision, the byte-for-byte
// comparison and the bookkeeping, over the log `tenure bench` builds (jobs
// acquired, renewed and reporting progress in turn; 20,000 jobs).
func BenchmarkCheck(b *testing.B) {
	const n = 200_000
	jobs := n / 10
	p := projector.New()
	ins := make([]events.Raw, 0, n)
	var ds []audit.StoredDecision
	now := int64(1_700_000_000_000_000_000)
	for i := range n {
		k, round := i%jobs, i/jobs
		job, w := "job-"+strconv.Itoa(k), "w"+strconv.Itoa(k%64)
		var subject, body string
		switch {
		case round == 0:
			subject, body = events.InputSubject(events.RoleWorker, w, job, events.VerbAcquire), `{"v":1,"lease_ms":3600000}`
		case round%2 == 1:
			subject = events.InputSubject(events.RoleWorker, w, job, events.VerbRenew)
			body = fmt.Sprintf(`{"v":1,"lease_id":"L%d","generation":1,"renew_seq":%d}`, k+1, round)
		default:
			subject = events.InputSubject(events.RoleWorker, w, job, events.VerbProgress)
			body = fmt.Sprintf(`{"v":1,"lease_id":"L%d","generation":1,"progress_seq":%d,"value":%d}`, k+1, round, round%100)
		}
		raw := events.Raw{Seq: uint64(i + 1), Time: now + int64(i)*1000, Subject: subject, Body: []byte(body)}
		ins = append(ins, raw)
		out, err := p.Step(raw)
		if err != nil {
			b.Fatal(err)
		}
		for j := range out {
			d := &out[j]
			ds = append(ds, audit.StoredDecision{Seq: uint64(len(ds) + 1), Subject: events.DecisionSubject(d), Body: events.AppendDecision(nil, d),
				Cause: strconv.FormatUint(d.Cause, 10), Index: strconv.Itoa(int(d.N)) + "/" + strconv.Itoa(int(d.Of))})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rep := audit.Check(&memInputs{in: ins}, &memDecisions{ds: ds}, audit.Start{InputEnd: uint64(n), DecisionEnd: uint64(len(ds))}, audit.Options{})
		if !rep.OK() || rep.Verified != uint64(len(ds)) {
			b.Fatalf("not clean: %d of %d verified", rep.Verified, len(ds))
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "inputs/s")
}
