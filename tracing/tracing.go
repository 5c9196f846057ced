// Package tracing is Tenure's OpenTelemetry glue (PROTOCOL.md §27): the
// W3C trace context an input carries in its NATS headers, which the
// coordinator passes on to the decisions about the same job; the names
// and attributes of the spans the Go SDKs start; and the lease reference
// that names a lease in a trace without revealing its id.
//
// It uses the OpenTelemetry API only. Nothing is recorded or exported
// unless the program installs a TracerProvider, and no trace context
// travels unless it installs a propagator (OpenTelemetry's global
// propagator propagates nothing until otel.SetTextMapPropagator), or
// hands both to the SDK's options.
//
// A trace context is a correlation hint, never authority: the coordinator
// judges every input by its body, and passes on only a well-formed
// traceparent (ValidTraceParent), so that no publisher can make it copy
// arbitrary bytes into decisions.
package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HeaderTraceParent is the W3C Trace Context header an input or a
// decision carries its trace context in (lowercase: NATS header names are
// case-sensitive). The coordinator passes on no tracestate.
const HeaderTraceParent = "traceparent"

// TraceParentLen is the length of a version 00 traceparent.
const TraceParentLen = 55

// ValidTraceParent reports whether s is a traceparent the coordinator
// passes on: version 00, exactly "00-<32 hex>-<16 hex>-<2 hex>" in
// lowercase, with a trace id and a parent id that are not all zeros (W3C
// Trace Context, level 1). Anything else (another version, a longer
// value, uppercase) is dropped, never copied.
func ValidTraceParent(s string) bool {
	if len(s) != TraceParentLen || s[0] != '0' || s[1] != '0' || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	return lowHex(s[3:35]) && lowHex(s[36:52]) && lowHex(s[53:55]) && !zeros(s[3:35]) && !zeros(s[36:52])
}

func lowHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func zeros(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

// TraceParent returns h's traceparent if it is one ValidTraceParent
// accepts (exactly one value), else "".
func TraceParent(h nats.Header) string {
	if v := h[HeaderTraceParent]; len(v) == 1 && ValidTraceParent(v[0]) {
		return v[0]
	}
	return ""
}

// Carrier is a NATS message's header as a propagation.TextMapCarrier. Its
// keys are case-sensitive, as NATS headers are; Set allocates the header
// when the message has none, so that a message carries a header only when
// a propagator writes one.
type Carrier struct{ H *nats.Header }

// Get returns the first value of key.
func (c Carrier) Get(key string) string { return c.H.Get(key) }

// Set sets key to value.
func (c Carrier) Set(key, value string) {
	if *c.H == nil {
		*c.H = nats.Header{}
	}
	(*c.H)[key] = []string{value}
}

// Keys lists the header's keys.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(*c.H))
	for k := range *c.H {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes ctx's trace context into msg's header with prop (nil:
// OpenTelemetry's global propagator); a context with no span context adds
// nothing.
func Inject(ctx context.Context, prop propagation.TextMapPropagator, msg *nats.Msg) {
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	prop.Inject(ctx, Carrier{&msg.Header})
}

// Extract returns ctx with the trace context h carries, read with prop
// (nil: OpenTelemetry's global propagator).
func Extract(ctx context.Context, prop propagation.TextMapPropagator, h nats.Header) context.Context {
	if prop == nil {
		prop = otel.GetTextMapPropagator()
	}
	if len(h) == 0 {
		return ctx
	}
	return prop.Extract(ctx, Carrier{&h})
}

// ScopeName is the instrumentation scope of Tenure's spans.
const ScopeName = "github.com/maknow/tenure"

// Tracer returns tp's tracer of Tenure's spans (tp nil: OpenTelemetry's
// global TracerProvider, which records nothing until one is installed).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Span names.
const (
	SpanSubmit = "tenure.submit" // ops: a submit, from publish to its verdict
	SpanRun    = "tenure.run"    // worker: one attempt of a queue job, from its ACK to its result's verdict
)

// Attribute keys of Tenure's spans.
const (
	AttrJob         = attribute.Key("tenure.job.id")
	AttrQueue       = attribute.Key("tenure.queue")
	AttrLeaseRef    = attribute.Key("tenure.lease.ref") // LeaseRef of the lease id, never the id
	AttrGeneration  = attribute.Key("tenure.lease.generation")
	AttrDecisionSeq = attribute.Key("tenure.decision.seq") // the decision the span starts from (the offer) or ends with (the verdict)
	AttrInputSeq    = attribute.Key("tenure.input.seq")    // the stored input the span's verdict answers
	AttrKind        = attribute.Key("tenure.decision.kind")
	AttrReason      = attribute.Key("tenure.decision.reason")
	AttrOutcome     = attribute.Key("tenure.result.outcome")
	AttrAttempt     = attribute.Key("tenure.job.attempt")
)

// LeaseRef names a lease in a trace: the first 16 hex digits of the
// SHA-256 of "tenure lease ref", a zero byte and the lease id. Lease ids
// are unguessable, and no decision tells a worker the id of a lease it
// does not hold (PROTOCOL.md §4.1: an id is what a claim needs, so a
// worker that learns one can freeze the lease in a conflict); a tracing
// backend is read by more people than hold credentials, so spans carry
// the reference, which correlates the spans of one lease without giving
// its id away. Every SDK computes the same one.
func LeaseRef(leaseID string) string {
	if leaseID == "" {
		return ""
	}
	h := sha256.New()
	h.Write([]byte("tenure lease ref\x00"))
	h.Write([]byte(leaseID))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:8])
}
