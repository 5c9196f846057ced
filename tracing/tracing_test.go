package tracing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/tracing"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

const (
	tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	pid = "00f067aa0ba902b7"
)

func TestValidTraceParent(t *testing.T) {
	for _, c := range []struct {
		tp   string
		want bool
	}{
		{"00-" + tid + "-" + pid + "-01", true},
		{"00-" + tid + "-" + pid + "-00", true},
		{"00-" + tid + "-" + pid + "-ff", true},
		{"", false},
		{"00-" + tid + "-" + pid + "-01-", false},                 // longer
		{"00-" + tid + "-" + pid + "-01-00", false},               // a future version's extra field: only 00 passes
		{"00-" + tid + "-" + pid + "-1", false},                   // shorter
		{"01-" + tid + "-" + pid + "-01", false},                  // another version
		{"ff-" + tid + "-" + pid + "-01", false},                  // the invalid version
		{"00-" + strings.ToUpper(tid) + "-" + pid + "-01", false}, // uppercase
		{"00-" + strings.Repeat("0", 32) + "-" + pid + "-01", false},
		{"00-" + tid + "-" + strings.Repeat("0", 16) + "-01", false},
		{"00_" + tid + "-" + pid + "-01", false},
		{"00-" + tid + "_" + pid + "-01", false},
		{"00-" + tid + "-" + pid + "_01", false},
		{"00-" + tid[:31] + "g-" + pid + "-01", false},
		{"00-" + tid + "-" + pid[:15] + "\x00-01", false},
		{"00-" + tid + "-" + pid + "-0\n", false},
		{strings.Repeat("0", 4096), false},
	} {
		if got := tracing.ValidTraceParent(c.tp); got != c.want {
			t.Errorf("ValidTraceParent(%q) = %v, want %v", c.tp, got, c.want)
		}
	}
}

func TestTraceParentOfHeader(t *testing.T) {
	tp := "00-" + tid + "-" + pid + "-01"
	for _, c := range []struct {
		h    nats.Header
		want string
	}{
		{nil, ""},
		{nats.Header{}, ""},
		{nats.Header{"traceparent": {tp}}, tp},
		{nats.Header{"Traceparent": {tp}}, ""}, // NATS header names are case-sensitive
		{nats.Header{"traceparent": {tp, tp}}, ""},
		{nats.Header{"traceparent": {tp + "0"}}, ""},
	} {
		if got := tracing.TraceParent(c.h); got != c.want {
			t.Errorf("TraceParent(%v) = %q, want %q", c.h, got, c.want)
		}
	}
}

// Inject writes the W3C header a propagator makes, Extract reads it back,
// and a context with no span context adds no header at all.
func TestInjectExtract(t *testing.T) {
	prop := propagation.TraceContext{}
	var msg nats.Msg
	tracing.Inject(context.Background(), prop, &msg)
	if msg.Header != nil {
		t.Fatalf("no span context, header %v", msg.Header)
	}
	tidb, _ := trace.TraceIDFromHex(tid)
	pidb, _ := trace.SpanIDFromHex(pid)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tidb, SpanID: pidb, TraceFlags: trace.FlagsSampled})
	tracing.Inject(trace.ContextWithSpanContext(context.Background(), sc), prop, &msg)
	if got := msg.Header.Get(tracing.HeaderTraceParent); got != "00-"+tid+"-"+pid+"-01" || !tracing.ValidTraceParent(got) {
		t.Fatalf("traceparent %q", got)
	}
	back := trace.SpanContextFromContext(tracing.Extract(context.Background(), prop, msg.Header))
	if back.TraceID() != tidb || back.SpanID() != pidb || !back.IsRemote() || !back.IsSampled() {
		t.Fatalf("extracted %+v", back)
	}
	// The global propagator propagates nothing until one is set.
	var msg2 nats.Msg
	tracing.Inject(trace.ContextWithSpanContext(context.Background(), sc), nil, &msg2)
	if msg2.Header != nil {
		t.Fatalf("global propagator wrote %v", msg2.Header)
	}
}

// The lease reference is stable (every SDK computes the same: the
// TypeScript SDK's test holds it to this value), short, and not the id.
func TestLeaseRef(t *testing.T) {
	id := "L5-e7Vi7Cy4b54XAXvFv0z1hg"
	got := tracing.LeaseRef(id)
	if got != "240fda6d5336be15" { // sha256("tenure lease ref\x00" + id)[:8], hex
		t.Fatalf("LeaseRef = %q", got)
	}
	if got != tracing.LeaseRef(id) || got == tracing.LeaseRef(id+"x") || strings.Contains(got, id) {
		t.Fatalf("LeaseRef %q: not stable, or not distinct", got)
	}
	if tracing.LeaseRef("") != "" {
		t.Fatal("the reference of no lease")
	}
}
