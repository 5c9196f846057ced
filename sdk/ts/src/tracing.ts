// Tracing (PROTOCOL.md §27): the W3C trace context an input carries in its
// `traceparent` header and an offer carries from the submit, and the span
// run() starts for each handler run. The OpenTelemetry API only: nothing
// is recorded or propagated until the program installs a TracerProvider
// and a propagator (globally, or in WorkerOptions.tracing), as the Go SDK.

import { createHash } from "node:crypto";
import {
  context as otelContext,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  trace,
  type Context,
  type Span,
  type TextMapPropagator,
  type TracerProvider,
} from "@opentelemetry/api";

/** The header a trace context travels in (lowercase: NATS headers are case-sensitive). */
export const TRACEPARENT = "traceparent";

/** Tracing options of a Worker (PROTOCOL.md §27). */
export interface TracingOptions {
  /** Records the spans of run()'s handler runs. Default: OpenTelemetry's global one (records nothing until installed). */
  tracerProvider?: TracerProvider;
  /** Writes inputs' trace context and reads offers'. Default: OpenTelemetry's global one (propagates nothing until set). */
  propagator?: TextMapPropagator;
}

/** Span names and attribute keys, as the Go SDK's package tracing names them. */
export const SPAN_RUN = "tenure.run";
export const ATTR = {
  job: "tenure.job.id",
  queue: "tenure.queue",
  leaseRef: "tenure.lease.ref",
  generation: "tenure.lease.generation",
  decisionSeq: "tenure.decision.seq",
  attempt: "tenure.job.attempt",
  outcome: "tenure.result.outcome",
} as const;

const hex = /^[0-9a-f]+$/;

/**
 * Whether s is a traceparent the coordinator passes on: version 00, exactly
 * "00-<32 hex>-<16 hex>-<2 hex>" in lowercase, trace id and parent id not
 * all zeros.
 */
export function validTraceParent(s: string | undefined): s is string {
  if (s === undefined || s.length !== 55 || !s.startsWith("00-") || s[35] !== "-" || s[52] !== "-") return false;
  const tid = s.slice(3, 35), pid = s.slice(36, 52), fl = s.slice(53);
  return hex.test(tid) && hex.test(pid) && hex.test(fl) && !/^0+$/.test(tid) && !/^0+$/.test(pid);
}

/**
 * A lease's reference in a trace: the first 16 hex digits of SHA-256 of
 * "tenure lease ref", a zero byte and the lease id (the Go SDK's
 * tracing.LeaseRef). Spans carry it, never the lease id, which is what a
 * claim needs.
 */
export function leaseRef(leaseId: string): string {
  if (leaseId === "") return "";
  return createHash("sha256").update("tenure lease ref\0").update(leaseId).digest("hex").slice(0, 16);
}

/** @internal The tracing a Worker does, resolved from its options. */
export class Tracing {
  readonly #tp: TracerProvider | undefined;
  readonly #prop: TextMapPropagator | undefined;

  constructor(o: TracingOptions = {}) {
    this.#tp = o.tracerProvider;
    this.#prop = o.propagator;
  }

  #inject(ctx: Context, carrier: Record<string, string>): void {
    if (this.#prop) this.#prop.inject(ctx, carrier, { set: (c, k, v) => { c[k] = v; } });
    else propagation.inject(ctx, carrier);
  }

  /** The context an offer's traceparent stands for (ROOT_CONTEXT when none, or no propagator reads it). */
  extract(traceparent: string | undefined): Context {
    if (!validTraceParent(traceparent)) return ROOT_CONTEXT;
    const carrier = { [TRACEPARENT]: traceparent };
    const getter = { get: (c: Record<string, string>, k: string) => c[k], keys: (c: Record<string, string>) => Object.keys(c) };
    return this.#prop ? this.#prop.extract(ROOT_CONTEXT, carrier, getter) : propagation.extract(ROOT_CONTEXT, carrier, getter);
  }

  /**
   * The traceparent an input carries: that of the active context's span
   * if it has one, else fallback's (a lease's: its run's), written by the
   * propagator; undefined when none is written.
   */
  traceparent(fallback: Context | undefined): string | undefined {
    let ctx = otelContext.active();
    if (!trace.getSpanContext(ctx) && fallback) ctx = fallback;
    if (!trace.getSpanContext(ctx)) return undefined;
    const carrier: Record<string, string> = {};
    this.#inject(ctx, carrier);
    const tp = carrier[TRACEPARENT];
    return validTraceParent(tp) ? tp : undefined;
  }

  /** Starts the span of one handler run, a child of parent (the offer's context). */
  startRun(parent: Context, attributes: Record<string, string | number>): { span: Span; ctx: Context } {
    const tp = this.#tp ?? trace.getTracerProvider();
    const span = tp.getTracer("github.com/maknow/tenure").startSpan(SPAN_RUN, { kind: SpanKind.CONSUMER, attributes }, parent);
    return { span, ctx: trace.setSpan(parent, span) };
  }
}
