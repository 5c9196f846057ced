// Tracing (PROTOCOL.md §27) against a real `tenure serve`: run() starts a
// span per handler run, a child of the trace context its offer carried
// (the submit's), and the lease's inputs carry the run's context; the
// lease reference is the Go SDK's. The TracerProvider and the propagator
// are minimal ones written here (the SDK depends on the OpenTelemetry API
// only).

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import {
  trace, TraceFlags, type Context, type Span, type SpanContext, type SpanOptions, type TextMapPropagator, type Tracer, type TracerProvider,
} from "@opentelemetry/api";

import { connect, leaseRef, validTraceParent, type Job } from "@tenure/worker";

import { Decisions, Ops, Serve, uniq } from "./harness.js";

let serve: Serve;
let nc: NatsConnection;
let ops: Ops;

before(async () => {
  serve = await Serve.start();
  nc = await serve.connect("tracing-test");
  ops = new Ops(nc);
});

after(async () => {
  await nc?.close();
  await serve?.stop();
});

/** A span that records what the SDK tells it. */
class RecSpan {
  attributes: Record<string, unknown> = {};
  ended = 0;
  constructor(readonly name: string, readonly sc: SpanContext, readonly parent: SpanContext | undefined, readonly kind: number | undefined) {}
  spanContext(): SpanContext { return this.sc; }
  setAttribute(k: string, v: unknown): this { this.attributes[k] = v; return this; }
  setAttributes(a: Record<string, unknown>): this { Object.assign(this.attributes, a); return this; }
  addEvent(): this { return this; }
  addLink(): this { return this; }
  addLinks(): this { return this; }
  setStatus(): this { return this; }
  updateName(): this { return this; }
  end(): void { this.ended++; }
  isRecording(): boolean { return this.ended === 0; }
  recordException(): void {}
}

class RecProvider implements TracerProvider {
  readonly spans: RecSpan[] = [];
  getTracer(): Tracer {
    const spans = this.spans;
    return {
      startSpan(name: string, opts: SpanOptions = {}, ctx?: Context): Span {
        const parent = ctx ? trace.getSpanContext(ctx) : undefined;
        const sc: SpanContext = {
          traceId: parent?.traceId ?? randomBytes(16).toString("hex"), spanId: randomBytes(8).toString("hex"), traceFlags: TraceFlags.SAMPLED,
        };
        const s = new RecSpan(name, sc, parent, opts.kind);
        s.setAttributes(opts.attributes ?? {});
        spans.push(s);
        return s as unknown as Span;
      },
      startActiveSpan(): never { throw new Error("not used"); },
    } as Tracer;
  }
}

/** W3C traceparent, version 00 only. */
const w3c: TextMapPropagator = {
  inject(ctx, carrier: Record<string, string>, setter) {
    const sc = trace.getSpanContext(ctx);
    if (sc) setter.set(carrier, "traceparent", `00-${sc.traceId}-${sc.spanId}-0${sc.traceFlags & 1}`);
  },
  extract(ctx, carrier, getter) {
    const v = getter.get(carrier, "traceparent");
    const tp = Array.isArray(v) ? v[0] : v;
    if (!tp || !validTraceParent(tp)) return ctx;
    const [, traceId, spanId, flags] = tp.split("-");
    return trace.setSpanContext(ctx, { traceId: traceId!, spanId: spanId!, traceFlags: parseInt(flags!, 16), isRemote: true });
  },
  fields: () => ["traceparent"],
};

describe("tracing", () => {
  test("the lease reference is the Go SDK's", () => {
    assert.equal(leaseRef("L5-e7Vi7Cy4b54XAXvFv0z1hg"), "240fda6d5336be15");
    assert.equal(leaseRef(""), "");
    const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    assert.ok(validTraceParent(tp));
    for (const bad of [tp + "0", tp.toUpperCase(), "01" + tp.slice(2), `00-${"0".repeat(32)}-00f067aa0ba902b7-01`, `00-4bf92f3577b34da6a3ce929d0e0e4736-${"0".repeat(16)}-01`, ""]) {
      assert.ok(!validTraceParent(bad), bad);
    }
  });

  test("a run's span continues the submit's trace, and the lease's inputs carry it", async () => {
    const queue = uniq("q");
    const job = uniq("j");
    const tp = new RecProvider();
    const errors: Error[] = [];
    const w = await connect(nc, uniq("w"), { onError: (e) => errors.push(e), tracing: { tracerProvider: tp, propagator: w3c } });
    const stop = new AbortController();
    let seen: Job | undefined;
    const done = w.run(queue, async (j) => {
      seen = j;
      await j.lease.progress(50);
    }, { signal: stop.signal });
    const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
    const submitTrace = "4bf92f3577b34da6a3ce929d0e0e4736", submitSpan = "00f067aa0ba902b7";
    await ops.submit(job, queue, {}, { traceparent: `00-${submitTrace}-${submitSpan}-01` });
    await watch.waitFor((d) => d.kind === "completed");
    stop.abort();
    await done;
    await w.close();
    await watch.close();
    assert.deepEqual(errors, []);

    const runs = tp.spans.filter((s) => s.name === "tenure.run");
    assert.equal(runs.length, 1);
    const run = runs[0]!;
    assert.equal(run.ended, 1, "ended once");
    assert.equal(run.parent?.traceId, submitTrace);
    assert.equal(run.parent?.spanId, submitSpan);
    assert.equal(run.sc.traceId, submitTrace);
    assert.equal(seen && trace.getSpanContext(seen.traceContext)?.spanId, run.sc.spanId, "the handler's job.traceContext holds the run's span");

    const jsm = await jetstreamManager(nc);
    const assigned = await jsm.streams.getMessage("TENURE_OUT", { last_by_subj: `tenure.out.${w.id}.${job}.assigned` });
    assert.ok(assigned);
    assert.equal(assigned.header.get("traceparent"), `00-${submitTrace}-${submitSpan}-01`, "the queue's offer carries the submit's trace context");
    const lease = assigned.json<{ job: { lease_id: string } }>().job.lease_id;
    assert.deepEqual(run.attributes, {
      "tenure.job.id": job, "tenure.queue": queue, "tenure.lease.ref": leaseRef(lease), "tenure.lease.generation": 1,
      "tenure.decision.seq": assigned.seq, "tenure.job.attempt": 1, "tenure.result.outcome": "SUCCESS",
    });
    const runTP = `00-${run.sc.traceId}-${run.sc.spanId}-01`;
    for (const verb of ["ack", "progress", "result"]) {
      const m = await jsm.streams.getMessage("TENURE_IN", { last_by_subj: `tenure.in.worker.${w.id}.${job}.${verb}` });
      assert.ok(m, verb);
      assert.equal(m.header.get("traceparent"), runTP, `the ${verb} input carries the run's context`);
    }
    const completed = await jsm.streams.getMessage("TENURE_OUT", { last_by_subj: `tenure.out.${w.id}.${job}.completed` });
    assert.equal(completed?.header.get("traceparent"), runTP, "the completed verdict carries the result's context");
    for (const s of tp.spans) for (const v of Object.values(s.attributes)) assert.ok(!String(v).includes(lease), "no span holds the lease id");
  });
});
