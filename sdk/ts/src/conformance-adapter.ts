// The conformance adapter of this SDK: conformance/ADAPTER.md, adapter
// protocol 1. JSON lines on stdin (commands) and stdout (replies and
// events); it does what an application would do with the SDK's public API
// and reports what the SDK told it, nothing of its own.
//
//   node sdk/ts/dist/conformance-adapter.js
//
// with TENURE_NATS_URL, TENURE_WORKER_ID, TENURE_STREAM_PREFIX set (and
// TENURE_NATS_USER, TENURE_NATS_PASSWORD, TENURE_NATS_INBOX_PREFIX for a
// scenario under tenure auth init's configuration).

import { createInterface } from "node:readline";

import { connect as natsConnect, type NatsConnection } from "@nats-io/transport-node";

import {
  connect, ErrorCode, formatFencingToken, isError, permanent, TenureError, VerdictError,
  type Job, type Lease, type Offer, type Worker,
} from "./index.js";

const PROTOCOL = 1;
const VERSION = "@tenure/worker 0.1.0";

type Obj = Record<string, unknown>;

/** The sentinel names of ADAPTER.md §2.3, by the SDK's codes. */
const names: Array<[ErrorCode, string]> = [
  [ErrorCode.LostAuthority, "lost_authority"], [ErrorCode.StaleGeneration, "stale_generation"],
  [ErrorCode.Expired, "expired"], [ErrorCode.Conflict, "conflict"], [ErrorCode.Rejected, "rejected"],
  [ErrorCode.NotAccepted, "not_accepted"], [ErrorCode.Duplicate, "duplicate"], [ErrorCode.Late, "late"],
  [ErrorCode.LeaseHeld, "lease_held"], [ErrorCode.CancelRequested, "cancel_requested"],
  [ErrorCode.NoVerdict, "no_verdict"], [ErrorCode.LeaseEnded, "lease_ended"], [ErrorCode.Closed, "closed"],
  [ErrorCode.SequenceExhausted, "sequence_exhausted"], [ErrorCode.RunStopped, "run_stopped"],
  [ErrorCode.Permanent, "permanent"],
];

class AdapterError extends Error {
  constructor(readonly kind: "invalid" | "unknown" | "unsupported" | "timeout", message: string) {
    super(message);
  }
}

function write(o: Obj): void {
  process.stdout.write(JSON.stringify(o) + "\n");
}

function event(name: string, o: Obj): void {
  write({ event: name, ...o, at_ms: Date.now() });
}

function verdictOf(err: unknown): VerdictError | undefined {
  for (let e: unknown = err, i = 0; e instanceof Error && i < 32; i++, e = e.cause) {
    if (e instanceof VerdictError) return e;
  }
  return undefined;
}

function isList(err: unknown): string[] {
  return names.filter(([c]) => isError(err, c)).map(([, n]) => n);
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function errorObject(err: unknown): Obj {
  if (err instanceof AdapterError) return { kind: err.kind, is: [], message: err.message };
  const v = verdictOf(err);
  const o: Obj = { kind: "internal", is: isList(err), message: message(err) };
  if (v) {
    o.kind = "verdict";
    o.verdict = { kind: v.kind, reason: v.reason, ...(v.detail ? { detail: v.detail } : {}) };
  } else if (err instanceof TenureError || isList(err).length > 0) {
    o.kind = "sdk";
  } else if (err instanceof TypeError || err instanceof RangeError) {
    o.kind = "invalid";
  }
  return o;
}

/** The cause object of ADAPTER.md §2.4, derived in its order. */
function causeObject(reason: unknown): Obj {
  const o = errorObject(reason);
  delete o.kind;
  const v = verdictOf(reason);
  let cause: string;
  if (!(reason instanceof VerdictError) && isError(reason, ErrorCode.RunStopped)) {
    cause = "run_stopped"; // a handler's signal ended by the run's end, whatever ended the run
  } else if (v) {
    if (v.kind === "cancel_requested" || v.reason === "cancel_requested") cause = "cancel_requested";
    else if (v.kind === "unresolved" || (v.kind === "resolved" && v.reason === "settled")) cause = "unresolved";
    else if (v.kind === "resolved" && v.reason === "lease_revoked") cause = "revoked";
    else if (v.kind === "conflict") cause = "conflict";
    else if (v.is(ErrorCode.StaleGeneration)) cause = "stale_generation";
    else if (v.is(ErrorCode.Expired)) cause = "expired";
    else cause = "lost_authority";
  } else if (isError(reason, ErrorCode.LeaseEnded)) cause = "ended";
  else if (isError(reason, ErrorCode.Closed)) cause = "closed";
  else if (isError(reason, ErrorCode.Expired)) cause = "local_deadline";
  else cause = "lost_authority";
  return { cause, ...o };
}

function leaseObject(l: Lease): Obj {
  return { job: l.job, lease_id: l.leaseId, generation: l.generation, token: formatFencingToken(l.token), lease_ms: l.leaseMs };
}

function offerObject(o: Offer): Obj {
  const j = o.decision.job;
  return {
    job: o.job, lease_id: o.leaseId, generation: o.generation, token: formatFencingToken(o.token), lease_ms: o.leaseMs,
    ack_deadline: j.ack_deadline, ...(o.decision.kind === "assigned" && j.queue ? { queue: j.queue } : {}),
    ...(j.payload !== undefined ? { payload: j.payload } : {}),
  };
}

interface Step {
  progress?: number[];
  then: "succeed" | "fail" | "fail_permanent" | "throw" | "block";
  message?: string;
}

class Adapter {
  #nc: NatsConnection | undefined;
  #w: Worker | undefined;
  readonly #offers = new Map<string, Offer>();
  #unreturned: Offer[] = [];
  #offerWake: Array<() => void> = [];
  readonly #leases = new Map<string, Lease>();
  readonly #runs = new Map<string, { stop: AbortController; done: Promise<Obj | null> }>();

  async handle(c: Obj): Promise<Obj> {
    const cmd = c.cmd;
    if (cmd !== "connect" && cmd !== "close" && !this.#w) throw new AdapterError("invalid", `${String(cmd)} before connect`);
    switch (cmd) {
      case "connect": return this.#connect(c);
      case "acquire": return this.#acquire(c);
      case "wait_offer": return this.#waitOffer(c);
      case "accept": return this.#accept(c);
      case "decline": await this.#offer(c).decline(); return {};
      case "renew": await this.#lease(c).renew(); return {};
      case "progress": await this.#lease(c).progress(int(c, "value")); return {};
      case "complete": return this.#complete(c);
      case "release": await this.#lease(c).release(); return {};
      case "cancel_ack": await this.#lease(c).ackCancel(); return {};
      case "lease_state": {
        const l = this.#lease(c);
        return { lost: l.signal.aborted, cause: l.signal.aborted ? causeObject(l.signal.reason) : null, cancel_requested: l.cancelRequested };
      }
      case "run": return this.#run(c);
      case "stop_run": {
        const q = str(c, "queue");
        const r = this.#runs.get(q);
        if (!r) throw new AdapterError("unknown", `no run of queue ${q}`);
        r.stop.abort();
        return { error: await r.done };
      }
      case "close": await this.close(); return {};
    }
    throw new AdapterError("unsupported", `command ${JSON.stringify(cmd)}`);
  }

  async #connect(c: Obj): Promise<Obj> {
    if (this.#w) throw new AdapterError("invalid", "connected already");
    const url = process.env.TENURE_NATS_URL;
    const id = process.env.TENURE_WORKER_ID;
    if (!url || !id) throw new AdapterError("invalid", "TENURE_NATS_URL and TENURE_WORKER_ID must be set");
    // With the worker's credential (tenure auth init) when the runner gives
    // one: its user, and the only inbox prefix it may subscribe to.
    const user = process.env.TENURE_NATS_USER || undefined;
    const inboxPrefix = process.env.TENURE_NATS_INBOX_PREFIX || undefined;
    this.#nc = await natsConnect({
      servers: url, name: `conformance-${id}`,
      ...(user ? { user, pass: process.env.TENURE_NATS_PASSWORD ?? "" } : {}),
      ...(inboxPrefix ? { inboxPrefix } : {}),
    });
    this.#w = await connect(this.#nc, id, {
      streamPrefix: process.env.TENURE_STREAM_PREFIX || undefined,
      verdictTimeoutMs: optInt(c, "verdict_timeout_ms"),
      publishTimeoutMs: optInt(c, "publish_timeout_ms"),
      onError: (e) => process.stderr.write(`adapter: sdk: ${e.message}\n`),
    });
    void this.#takeOffers(this.#w);
    return { worker: id };
  }

  async #takeOffers(w: Worker): Promise<void> {
    for await (const o of w.offers()) {
      this.#offers.set(o.leaseId, o);
      this.#unreturned.push(o);
      event("offer", offerObject(o));
      for (const wake of this.#offerWake.splice(0)) wake();
    }
  }

  #watch(l: Lease): void {
    this.#leases.set(l.leaseId, l);
    const lost = () => event("lease_lost", { ...leaseObject(l), cause: causeObject(l.signal.reason) });
    if (l.signal.aborted) lost();
    else l.signal.addEventListener("abort", lost, { once: true });
  }

  #leaseOpts(c: Obj) {
    const renewFraction = optNum(c, "renew_fraction");
    return {
      renewFraction,
      onRenewError: (l: Lease, err: Error) => event("renew_error", { ...leaseObject(l), error: errorObject(err) }),
    };
  }

  async #acquire(c: Obj): Promise<Obj> {
    const l = await this.#w!.acquire(str(c, "job"), { leaseMs: optInt(c, "lease_ms"), ...this.#leaseOpts(c) });
    this.#watch(l);
    return leaseObject(l);
  }

  async #waitOffer(c: Obj): Promise<Obj> {
    const timeout = int(c, "timeout_ms");
    const job = c.job === undefined ? undefined : str(c, "job");
    const deadline = Date.now() + timeout;
    for (;;) {
      const i = this.#unreturned.findIndex((o) => job === undefined || o.job === job);
      if (i >= 0) return offerObject(this.#unreturned.splice(i, 1)[0]!);
      const left = deadline - Date.now();
      if (left <= 0) throw new AdapterError("timeout", `no offer${job ? ` of ${job}` : ""} in ${timeout} ms`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.#offerWake.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  async #accept(c: Obj): Promise<Obj> {
    const o = this.#offer(c);
    const l = await o.accept(this.#leaseOpts(c));
    this.#watch(l);
    return leaseObject(l);
  }

  async #complete(c: Obj): Promise<Obj> {
    const l = this.#lease(c);
    const outcome = str(c, "outcome");
    const detail = c.detail === undefined ? undefined : str(c, "detail");
    if (c.permanent !== undefined && typeof c.permanent !== "boolean") throw new AdapterError("invalid", "permanent: want a boolean");
    if (c.permanent === true) {
      if (outcome !== "FAILED") throw new AdapterError("invalid", "permanent goes with FAILED only");
      await l.failPermanently(detail);
    } else {
      if (outcome !== "SUCCESS" && outcome !== "FAILED" && outcome !== "CANCELLED") throw new AdapterError("invalid", `outcome ${outcome}`);
      await l.complete(outcome, detail);
    }
    return {};
  }

  #run(c: Obj): Obj {
    const queue = str(c, "queue");
    if (this.#runs.has(queue)) throw new AdapterError("invalid", `queue ${queue} already runs`);
    const b = (c.behaviour ?? {}) as { default?: Step; jobs?: Record<string, Step[]> };
    if (typeof b !== "object" || b === null) throw new AdapterError("invalid", "behaviour: want an object");
    const calls = new Map<string, number>();
    const stepOf = (job: string, call: number): Step => {
      const list = b.jobs?.[job];
      if (list && list.length > 0) return list[Math.min(call, list.length) - 1]!;
      return b.default ?? { then: "succeed" };
    };
    const handler = async (j: Job, signal: AbortSignal): Promise<void> => {
      const call = (calls.get(j.id) ?? 0) + 1;
      calls.set(j.id, call);
      this.#watch(j.lease);
      const lf = { lease_id: j.lease.leaseId, generation: j.lease.generation };
      event("handler_started", {
        queue, job: j.id, attempt: j.attempt, max_attempts: j.maxAttempts,
        ...(j.payload !== undefined ? { payload: j.payload } : {}),
        ...(j.scheduledFor ? { scheduled_for_ms: Math.floor(j.scheduledFor) } : {}),
        ...lf, token: formatFencingToken(j.lease.token), call,
      });
      const step = stepOf(j.id, call);
      const progressErrors: Obj[] = [];
      for (const v of step.progress ?? []) {
        try {
          await j.lease.progress(v);
        } catch (err) {
          progressErrors.push(errorObject(err));
        }
      }
      const text = step.message ?? `conformance: ${step.then}`;
      let thrown: unknown;
      let ok = false;
      switch (step.then) {
        case "succeed": ok = true; break;
        case "fail": thrown = new Error(text); break;
        case "fail_permanent": thrown = permanent(new Error(text)); break;
        case "throw": thrown = new Error(text); break;
        case "block":
          thrown = await new Promise((r) => (signal.aborted ? r(signal.reason) : signal.addEventListener("abort", () => r(signal.reason), { once: true })));
          break;
        default: thrown = new Error(`adapter: unknown step ${JSON.stringify(step.then)}`);
      }
      event("handler_ended", {
        queue, job: j.id, attempt: j.attempt, ...lf, call, then: step.then, progress_errors: progressErrors,
        ctx_cause: signal.aborted ? causeObject(signal.reason) : null,
      });
      if (!ok) throw thrown;
    };
    const stop = new AbortController();
    const done = this.#w!.run(queue, handler, {
      concurrency: optInt(c, "concurrency"), capacityTtlMs: optInt(c, "capacity_ttl_ms"), signal: stop.signal,
    }).then(() => null, (err: unknown) => errorObject(err)).then((error) => {
      event("run_ended", { queue, error });
      this.#runs.delete(queue);
      return error;
    });
    this.#runs.set(queue, { stop, done });
    return {};
  }

  #offer(c: Obj): Offer {
    const id = str(c, "lease_id");
    const o = this.#offers.get(id);
    if (!o) throw new AdapterError("unknown", `no offer ${id}`);
    return o;
  }

  #lease(c: Obj): Lease {
    const id = str(c, "lease_id");
    const l = this.#leases.get(id);
    if (!l) throw new AdapterError("unknown", `no lease ${id}`);
    return l;
  }

  async close(): Promise<void> {
    for (const r of [...this.#runs.values()]) {
      r.stop.abort();
      await r.done;
    }
    await this.#w?.close();
    this.#w = undefined;
    await this.#nc?.close().catch(() => undefined);
    this.#nc = undefined;
  }
}

function str(c: Obj, k: string): string {
  const v = c[k];
  if (typeof v !== "string") throw new AdapterError("invalid", `${k}: want a string`);
  return v;
}

function int(c: Obj, k: string): number {
  const v = c[k];
  if (typeof v !== "number" || !Number.isInteger(v)) throw new AdapterError("invalid", `${k}: want an integer`);
  return v;
}

function optInt(c: Obj, k: string): number | undefined {
  return c[k] === undefined || c[k] === null ? undefined : int(c, k);
}

function optNum(c: Obj, k: string): number | undefined {
  const v = c[k];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number") throw new AdapterError("invalid", `${k}: want a number`);
  return v;
}

async function main(): Promise<void> {
  write({ event: "ready", protocol: PROTOCOL, sdk: "typescript", version: VERSION });
  const a = new Adapter();
  const pending = new Set<Promise<void>>();
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (line.trim() === "") continue;
    let c: Obj;
    try {
      c = JSON.parse(line) as Obj;
      if (typeof c !== "object" || c === null || Array.isArray(c)) throw new Error("not an object");
    } catch (err) {
      process.stderr.write(`adapter: bad command line: ${message(err)}\n`);
      continue;
    }
    const id = c.id;
    const p = a.handle(c).then(
      (result) => write({ id, ok: true, result }),
      (err: unknown) => write({ id, ok: false, error: errorObject(err) }),
    );
    pending.add(p);
    void p.finally(() => pending.delete(p));
  }
  // End of stdin: close whatever is still open, then exit.
  const exit = setTimeout(() => process.exit(0), 9_000);
  exit.unref();
  await a.close().catch((err: unknown) => process.stderr.write(`adapter: close: ${message(err)}\n`));
  await Promise.race([Promise.allSettled([...pending]), new Promise((r) => setTimeout(r, 2_000).unref())]);
  process.exit(0);
}

void main();
