package tracing_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/tracing"
	"github.com/maknow/tenure/worker"
)

// deployment is a real embedded server with a live coordinator.
type deployment struct {
	t   *testing.T
	url string
	js  jetstream.JetStream
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	if _, err := streams.Ensure(context.Background(), js, streams.Topology{}, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	// A 10 s leadership: a loaded machine does not lapse it (the test is
	// about what the decisions carry, not about failover).
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator: %v", err)
		}
		nc.Close()
	})
	testutil.WaitFor(t, 30*time.Second, "coordinator live", func() bool { return c.Stats().Live })
	return &deployment{t: t, url: srv.ClientURL(), js: js}
}

func (d *deployment) conn(name string) *nats.Conn {
	d.t.Helper()
	nc, err := nats.Connect(d.url, nats.Name(name))
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(nc.Close)
	return nc
}

// stored is a stored message of a stream.
type stored struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
}

func (d *deployment) read(stream string) []stored {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := d.js.Stream(ctx, stream)
	if err != nil {
		d.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	var out []stored
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			d.t.Fatalf("%s #%d: %v", stream, seq, err)
		}
		out = append(out, stored{seq: m.Sequence, subject: m.Subject, header: m.Header, data: m.Data})
	}
	return out
}

// decisionsOf returns the stored decisions about job, with their messages.
func (d *deployment) decisionsOf(job string) ([]events.Decision, []stored) {
	d.t.Helper()
	var ds []events.Decision
	var ms []stored
	for _, m := range d.read("TENURE_OUT") {
		dec, err := events.DecodeDecision(m.data)
		if err != nil {
			d.t.Fatal(err)
		}
		if dec.Job.ID == job {
			ds, ms = append(ds, dec), append(ms, m)
		}
	}
	return ds, ms
}

// inputsOf returns the stored inputs naming job.
func (d *deployment) inputsOf(job string) []stored {
	var out []stored
	for _, m := range d.read("TENURE_IN") {
		if strings.Split(m.subject, ".")[4] == job {
			out = append(out, m)
		}
	}
	return out
}

func traceParentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// A trace from a submit to a result, through a real coordinator: the
// submitter's span and the worker's span of the run are one trace, the
// stored inputs and decisions carry the context that links them, and no
// span carries a lease id.
func TestTraceFromSubmitToResult(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	prop := propagation.TraceContext{}
	opsRec, workRec := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	opsTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(opsRec))
	workTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(workRec))

	w, err := worker.Connect(d.conn("w1"), "w1", worker.WithTracing(workTP, prop))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var mu sync.Mutex
	var inHandler trace.SpanContext
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() {
		runDone <- w.Run(ctx, "q", func(ctx context.Context, j *worker.Job) error {
			mu.Lock()
			inHandler = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			return j.Lease.Progress(ctx, 50)
		})
	}()
	defer func() {
		cancel()
		<-runDone
	}()

	c, err := ops.New(d.conn("op1"), "op1", ops.WithTracing(opsTP, prop))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rctx, root := opsTP.Tracer("test").Start(context.Background(), "request")
	if _, err := c.Submit(rctx, "j1", "q"); err != nil {
		t.Fatal(err)
	}
	root.End()

	var run sdktrace.ReadOnlySpan
	testutil.WaitFor(t, 30*time.Second, "the run's span ended", func() bool {
		for _, s := range workRec.Ended() {
			if s.Name() == tracing.SpanRun {
				run = s
				return true
			}
		}
		return false
	})
	var submit sdktrace.ReadOnlySpan
	for _, s := range opsRec.Ended() {
		if s.Name() == tracing.SpanSubmit {
			submit = s
		}
	}
	if submit == nil {
		t.Fatalf("no submit span among %d", len(opsRec.Ended()))
	}

	// The submit span: a child of the caller's, producer, with its verdict.
	sc := submit.SpanContext()
	if submit.Parent().SpanID() != root.SpanContext().SpanID() || sc.TraceID() != root.SpanContext().TraceID() || submit.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("submit span %v, parent %v, kind %v; root %v", sc, submit.Parent(), submit.SpanKind(), root.SpanContext())
	}
	wantAttrs(t, "submit", submit.Attributes(), map[attribute.Key]string{
		tracing.AttrJob: "j1", tracing.AttrQueue: "q", tracing.AttrKind: "submitted", tracing.AttrReason: "ok",
	})

	// The run span: a child of the submit's, in the same trace, consumer.
	rsc := run.SpanContext()
	if rsc.TraceID() != sc.TraceID() || run.Parent().SpanID() != sc.SpanID() || !run.Parent().IsRemote() || run.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("run span %v, parent %v, kind %v; submit %v", rsc, run.Parent(), run.SpanKind(), sc)
	}
	mu.Lock()
	if !inHandler.Equal(rsc) {
		t.Errorf("the handler's ctx has span %v, want the run's %v", inHandler, rsc)
	}
	mu.Unlock()

	ds, dms := d.decisionsOf("j1")
	var assigned, completed int = -1, -1
	for i := range ds {
		switch ds[i].Kind {
		case events.KindAssigned:
			assigned = i
		case events.KindCompleted:
			completed = i
		}
	}
	if assigned < 0 || completed < 0 {
		t.Fatalf("decisions of j1: %v", ds)
	}
	lease := ds[assigned].Job.LeaseID
	wantAttrs(t, "run", run.Attributes(), map[attribute.Key]string{
		tracing.AttrJob: "j1", tracing.AttrQueue: "q", tracing.AttrLeaseRef: tracing.LeaseRef(lease),
		tracing.AttrGeneration: "1", tracing.AttrDecisionSeq: strconv.FormatUint(dms[assigned].seq, 10), tracing.AttrOutcome: "SUCCESS",
	})

	// What the log holds: the submit input carries the submit span's
	// context, the offer (derived) carries it on, the worker's progress
	// and result carry the run span's, and so does the completed verdict.
	ins := d.inputsOf("j1")
	byVerb := map[string]string{}
	for _, m := range ins {
		byVerb[m.subject[strings.LastIndexByte(m.subject, '.')+1:]] = m.header.Get(tracing.HeaderTraceParent)
	}
	if got, want := byVerb["submit"], traceParentOf(sc); got != want {
		t.Errorf("the submit input's traceparent %q, want %q", got, want)
	}
	for _, v := range []string{"progress", "result"} {
		if got, want := byVerb[v], traceParentOf(rsc); got != want {
			t.Errorf("the %s input's traceparent %q, want the run span's %q", v, got, want)
		}
	}
	if got, want := dms[assigned].header.Get(tracing.HeaderTraceParent), traceParentOf(sc); got != want {
		t.Errorf("the assigned decision's traceparent %q, want the submit's %q", got, want)
	}
	if got, want := dms[completed].header.Get(tracing.HeaderTraceParent), traceParentOf(rsc); got != want {
		t.Errorf("the completed decision's traceparent %q, want the run's %q", got, want)
	}

	// No span names a lease id.
	for _, s := range append(opsRec.Ended(), workRec.Ended()...) {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), lease) {
				t.Errorf("span %s attribute %s holds the lease id", s.Name(), kv.Key)
			}
		}
	}
}

// With no tracing set up (OpenTelemetry's global propagator propagates
// nothing), no input and no decision carries a trace context: the
// default costs nothing on the wire.
func TestNoTraceByDefault(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	w, err := worker.Connect(d.conn("w1"), "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() {
		runDone <- w.Run(ctx, "q", func(ctx context.Context, j *worker.Job) error { return nil })
	}()
	defer func() {
		cancel()
		<-runDone
	}()
	c, err := ops.New(d.conn("op1"), "op1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A span in the caller's ctx: still nothing, with no propagator set.
	tp := sdktrace.NewTracerProvider()
	sctx, span := tp.Tracer("test").Start(context.Background(), "request")
	if _, err := c.Submit(sctx, "j1", "q"); err != nil {
		t.Fatal(err)
	}
	span.End()
	testutil.WaitFor(t, 30*time.Second, "j1 completed", func() bool {
		ds, _ := d.decisionsOf("j1")
		return len(ds) > 0 && ds[len(ds)-1].Job.State == events.StateCompleted
	})
	for _, s := range []string{"TENURE_IN", "TENURE_OUT"} {
		for _, m := range d.read(s) {
			if _, ok := m.header[tracing.HeaderTraceParent]; ok {
				t.Errorf("%s #%d (%s) carries a traceparent: %v", s, m.seq, m.subject, m.header)
			}
		}
	}
}

func wantAttrs(t *testing.T, span string, kvs []attribute.KeyValue, want map[attribute.Key]string) {
	t.Helper()
	got := map[attribute.Key]string{}
	for _, kv := range kvs {
		got[kv.Key] = kv.Value.String()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s span: %s = %q, want %q (all: %v)", span, k, got[k], v, got)
		}
	}
}

// A dispatcher's offer outside any queue: the worker reads the offer's
// trace context (Offer.TraceContext), and the lease's inputs carry it on
// when their ctx has none.
func TestTraceOfADispatchersOffer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	prop := propagation.TraceContext{}
	w, err := worker.Connect(d.conn("w2"), "w2", worker.WithTracing(nil, prop))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c, err := ops.New(d.conn("op1"), "op1", ops.WithTracing(nil, prop))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tp := sdktrace.NewTracerProvider()
	octx, span := tp.Tracer("test").Start(context.Background(), "dispatch")
	if _, err := c.Offer(octx, "j2", "w2", 30_000, 10_000); err != nil {
		t.Fatal(err)
	}
	span.End()
	var o worker.Offer
	select {
	case o = <-w.Offers():
	case <-time.After(30 * time.Second):
		t.Fatal("no offer")
	}
	got := trace.SpanContextFromContext(o.TraceContext(context.Background()))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("the offer's trace context %v, want the dispatcher's %v", got, span.SpanContext())
	}
	l, err := o.Accept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(context.Background(), events.OutcomeSuccess, ""); err != nil {
		t.Fatal(err)
	}
	want := traceParentOf(span.SpanContext())
	verbs := 0
	for _, m := range d.inputsOf("j2") {
		if got := m.header.Get(tracing.HeaderTraceParent); got != want {
			t.Errorf("input %d (%s): traceparent %q, want %q", m.seq, m.subject, got, want)
		}
		verbs++
	}
	if verbs != 3 { // offer, ack, result
		t.Errorf("%d inputs about j2, want 3", verbs)
	}
	// Without a propagator, the offer carries nothing the worker reads.
	w3, err := worker.Connect(d.conn("w3"), "w3")
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close()
	if _, err := c.Offer(octx, "j3", "w3", 30_000, 10_000); err != nil {
		t.Fatal(err)
	}
	select {
	case o = <-w3.Offers():
	case <-time.After(30 * time.Second):
		t.Fatal("no offer")
	}
	if sc := trace.SpanContextFromContext(o.TraceContext(context.Background())); sc.IsValid() {
		t.Errorf("a worker without a propagator read %v", sc)
	}
}
