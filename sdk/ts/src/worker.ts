// The Worker: one worker identity connected to Tenure. It publishes the
// worker's inputs with a Nats-Msg-Id each, learns their verdicts from the
// decisions addressed to it (read through a consumer of its own, created
// before anything is published, PROTOCOL.md §15, and recovered when it is
// lost: follow.ts), routes offers, cancellation requests and expiries, and
// runs the renewer that coalesces the renewals of its leases.

import { setMaxListeners } from "node:events";

import type { NatsConnection } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import type { JetStreamClient, PubAck } from "@nats-io/jetstream";

import { realClock, type Clock } from "./clock.js";
import { closedError, ErrorCode, isError, sdkError, TenureError, VerdictError } from "./errors.js";
import { Follower, lookUp, type FollowMsg } from "./follow.js";
import {
  addresseeFilter, decodeDecision, derivedKind, encodeInput, inputSubject, MAX_BATCH, MAX_DURATION_MS, NO_JOB,
  timeMs, validToken, type Decision, type InputFields, type LeaseRef, type WorkerVerb,
} from "./protocol.js";
import { Lease, type LeaseOptions, leaseOptions } from "./lease.js";
import { Offer } from "./offer.js";
import { Runner, type Handler, type RunOptions } from "./run.js";
import { Batcher } from "./batch.js";
import { Stash, addWaiter, dropWaiter, wants } from "./stash.js";
import { Tracing, TRACEPARENT, type TracingOptions } from "./tracing.js";
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/nats-core";
import type { Context } from "@opentelemetry/api";

/** Defaults of WorkerOptions and LeaseOptions (those of the Go SDK). */
export const DEFAULT_STREAM_PREFIX = "TENURE";
export const DEFAULT_VERDICT_TIMEOUT_MS = 10_000;
export const DEFAULT_PUBLISH_TIMEOUT_MS = 2_000;
export const DEFAULT_OFFER_BUFFER = 256;
/** The shortest one publish attempt of a lease's input may take (see WorkerOptions.publishTimeoutMs). */
export const MIN_PUBLISH_TIMEOUT_MS = 100;

// Renewal inputs awaiting their verdicts at once: while both are out, due
// renewals queue up and leave together in one batch renew.
const MAX_RENEW_BATCHES = 2;
// Inactivity threshold of the decision consumer (the Go SDK's): the
// consumer of a process that died holds its name that long.
const CONSUMER_INACTIVE_MS = 30_000;
// The consumer names a worker may use (events.WorkerConsumers in Go).
const CONSUMER_NAMES = 4;

/** Configures a Worker. Every field is optional. */
export interface WorkerOptions {
  /** Names the input (<prefix>_IN) and decision (<prefix>_OUT) streams. Default "TENURE". */
  streamPrefix?: string;
  /**
   * The JetStream API prefix. Default: the worker API prefix JS.<prefix>.API
   * when something answers there (a worker in an account of its own, as
   * `tenure auth init` configures it), else $JS.API.
   */
  apiPrefix?: string;
  /**
   * The name prefix of the decision consumers: they are named <prefix>_0 to
   * <prefix>_3, a free one of the four each time (a twin process with the
   * same id, or a process that crashed less than 30 s ago, holds one).
   * Default "tw_<id>", the only names a worker in an account of its own may
   * create (`tenure auth init`), as the Go SDK names them.
   */
  consumerNamePrefix?: string;
  /** Bounds one call: the publish with its retries and the wait for the verdict. Default 10 s. */
  verdictTimeoutMs?: number;
  /**
   * Bounds one publish attempt; a timed-out attempt is retried with the
   * same Nats-Msg-Id. A lease's inputs bound each attempt further by half
   * the time left before the lease's local deadline, not below 100 ms.
   * Default 2 s.
   */
  publishTimeoutMs?: number;
  /** Offers kept for offers() readers; when full the oldest is dropped (reported). Default 256. */
  offerBuffer?: number;
  /** Receives asynchronous errors: the consumer's (its replacements, dropped messages), undecodable decisions, dropped offers, run()'s. */
  onError?: (err: Error) => void;
  /** The clock of renew loops and local deadlines (tests give a fake). Default: the real one. */
  clock?: Clock;
  /**
   * Tracing (PROTOCOL.md §27): the TracerProvider of run()'s spans and the
   * propagator of inputs' and offers' trace context. Default:
   * OpenTelemetry's global ones, which do nothing until installed.
   */
  tracing?: TracingOptions;
}

interface ResolvedOptions {
  streamPrefix: string;
  verdictTimeoutMs: number;
  publishTimeoutMs: number;
  offerBuffer: number;
  onError: ((err: Error) => void) | undefined;
}

/**
 * One input to publish: its body and Msg-Id are fixed once, so that every
 * retry is the same message, deduplicated by the input stream.
 * @internal
 */
export interface Input {
  job: string;
  verb: WorkerVerb;
  body: Uint8Array;
  msgId: string;
  /** Local time just before the first publish attempt. */
  t0?: number;
  /** An attempt went out: a duplicate PubAck is then its own. */
  sent: boolean;
  /** The local deadline of the lease the input belongs to: it bounds each attempt. */
  deadline?: number;
  /** The W3C trace context it carries in its traceparent header (PROTOCOL.md §27). */
  traceparent?: string;
}

/** @internal */
export interface RenewResult {
  d?: Decision;
  t0: number;
  err?: Error;
}

/** @internal */
export interface RenewReq {
  ref: LeaseRef;
  deadline: number;
  trace: Context | undefined; // the lease's trace context, which a renewal sent alone carries
  done: (r: RenewResult) => void;
}

interface Waiter {
  ds: Decision[];
  n: number;
  wake: (() => void) | null;
  /** Its input's verb and job: it takes only their verdicts (wants, stash.ts). */
  verb: string;
  job: string;
}

/** Options of one call. */
export interface CallOptions {
  /** Abandons the wait (the input may still be stored and judged: the error is NoVerdict). */
  signal?: AbortSignal;
}

/**
 * Connects worker `id` (1 to 64 of [A-Za-z0-9_-]) to Tenure over nc, a
 * connection from @nats-io/transport-node that the caller keeps owning
 * (close() does not close it).
 *
 * Before it returns it creates the consumer that reads the decisions
 * addressed to the worker (tenure.out.<id>.>) from the decision stream's
 * next sequence on (deliver policy new: a worker may not read the stream's
 * info, PROTOCOL.md §4), so that every verdict of an input published later
 * reaches it; a consumer lost or deleted is replaced one past the last
 * decision read. It finds the deployment by looking up its first consumer
 * name, under the worker API prefix when something answers there.
 * Partitioned deployments (PROTOCOL.md §18) are not supported: connect
 * throws when the deployment is one.
 */
export async function connect(nc: NatsConnection, id: string, opts: WorkerOptions = {}): Promise<Worker> {
  if (!validToken(id)) throw new TypeError(`worker: invalid id ${JSON.stringify(id)}: want 1 to 64 of [A-Za-z0-9_-], not "_"`);
  const o: ResolvedOptions = {
    streamPrefix: opts.streamPrefix ?? DEFAULT_STREAM_PREFIX,
    verdictTimeoutMs: positive("verdictTimeoutMs", opts.verdictTimeoutMs, DEFAULT_VERDICT_TIMEOUT_MS),
    publishTimeoutMs: positive("publishTimeoutMs", opts.publishTimeoutMs, DEFAULT_PUBLISH_TIMEOUT_MS),
    offerBuffer: positive("offerBuffer", opts.offerBuffer, DEFAULT_OFFER_BUFFER),
    onError: opts.onError,
  };
  if (!/^[A-Za-z0-9_-]+$/.test(o.streamPrefix)) throw new TypeError(`worker: invalid stream prefix ${JSON.stringify(o.streamPrefix)}`);
  const namePrefix = opts.consumerNamePrefix ?? `tw_${id}`;
  if (!/^[A-Za-z0-9_-]+$/.test(namePrefix)) throw new TypeError(`worker: invalid consumer name prefix ${JSON.stringify(namePrefix)}`);
  const names = Array.from({ length: CONSUMER_NAMES }, (_, i) => `${namePrefix}_${i}`);
  const out = `${o.streamPrefix}_OUT`;
  const p0 = `${o.streamPrefix}_P0_OUT`;
  const timeout = o.verdictTimeoutMs;
  // A worker in an account of its own reaches the deployment's JetStream
  // API under the worker prefix (PROTOCOL.md §4); else under $JS.API. Its
  // first consumer name's look-up tells which, and whether the deployment
  // is partitioned (the Go SDK's streams.DiscoverWorker).
  const workerPrefix = `JS.${o.streamPrefix}.API`;
  let apiPrefix = opts.apiPrefix;
  let found: "found" | "missing" | "unreachable" | undefined;
  try {
    if (apiPrefix === undefined) {
      found = await lookUp(nc, workerPrefix, out, names[0]!, timeout);
      if (found === "unreachable") {
        // A partitioned deployment's worker account imports nothing of the
        // unpartitioned stream; nothing at all under the worker prefix: the
        // plain API.
        if (await lookUp(nc, workerPrefix, p0, names[0]!, timeout) !== "unreachable") throw partitionedError(out, p0);
        apiPrefix = "$JS.API";
        found = undefined;
      } else {
        apiPrefix = workerPrefix;
      }
    }
    found ??= await lookUp(nc, apiPrefix, out, names[0]!, timeout);
    if (found === "missing" && apiPrefix !== workerPrefix && await lookUp(nc, apiPrefix, p0, names[0]!, timeout) === "found") {
      throw partitionedError(out, p0);
    }
  } catch (err) {
    if (err instanceof PartitionedError) throw err;
    throw new Error(`worker: decision stream ${out}: ${errMessage(err)}`, { cause: err });
  }
  if (found !== "found") {
    throw new Error(`worker: decision stream ${out}: ${found === "missing" ? "stream not found" : "no responders (is JetStream enabled?)"}`);
  }
  const js = jetstream(nc, { apiPrefix, timeout });
  const w = new Worker(id, js, o, opts.clock ?? realClock, new Tracing(opts.tracing));
  await w._start(nc, apiPrefix, out, names);
  return w;
}

class PartitionedError extends Error {}

function partitionedError(out: string, p0: string): Error {
  return new PartitionedError(`worker: the deployment is partitioned (${out} does not exist, ${p0} does): ` +
    "this SDK supports unpartitioned deployments only (see its README)");
}

function positive(name: string, v: number | undefined, def: number): number {
  if (v === undefined) return def;
  if (!(v > 0) || !Number.isFinite(v)) throw new RangeError(`worker: ${name} ${v}: want > 0`);
  return v;
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function noResponders(err: unknown): boolean {
  for (let e: unknown = err, i = 0; e instanceof Error && i < 8; i++, e = e.cause) {
    if (e.name === "NoResponders" || e.name === "JetStreamNotEnabled") return true;
    const re = e as unknown as { isNoResponders?: () => boolean };
    if (e.name === "RequestError" && typeof re.isNoResponders === "function" && re.isNoResponders()) return true;
  }
  return false;
}

/**
 * Reports whether a publish error leaves the outcome unknown or may clear
 * by itself: a timeout, no responders (a stream leader being elected), no
 * JetStream leader, the stream's ingest queue full.
 */
function apiCode(err: unknown): number | undefined {
  if (!(err instanceof Error) || err.name !== "JetStreamApiError") return undefined;
  return (err as { code?: number }).code;
}

// The intake stream refusing an input past its limits (quotas): JetStream's
// 10077 "maximum bytes exceeded" or "maximum messages exceeded".
function quotaRefusal(err: unknown): boolean {
  return apiCode(err) === 10077 && /maximum (bytes|messages) exceeded/.test(errMessage(err));
}

/** @internal */
export function retryable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === "ClosedConnectionError" || err.name === "DrainingConnectionError") return false;
  if (err.name === "TimeoutError" || noResponders(err)) return true;
  if (err.name === "JetStreamApiError") {
    const code = (err as { code?: number }).code;
    return code === 10008 || code === 10009 || code === 10167;
  }
  // A request made while reconnecting.
  return err.name === "ConnectionError" || err.name === "RequestError";
}

/**
 * One worker identity connected to Tenure: create it with connect(), close
 * it when done. Every method may be called at any time, concurrently.
 */
export class Worker {
  readonly id: string;
  /** @internal */ readonly _clock: Clock;
  /** @internal */ readonly _opts: ResolvedOptions;
  /** @internal */ readonly _tracing: Tracing;
  readonly #js: JetStreamClient;
  readonly #closeCtl = new AbortController();
  #in = "";
  // This worker's intake stream (quotas, PROTOCOL.md §4.2), and whether its
  // inputs were last stored there (learned from the server's answers). An
  // input stored there is named by the negated intake sequence, so that the
  // two sequence spaces never meet.
  #intake = "";
  #viaIntake = false;
  #out = "";
  #follower: Follower | undefined;

  // More than one waiter at a sequence only after a lost tail (wants).
  readonly #waiters = new Map<number, Waiter[]>();
  readonly #leases = new Map<string, Lease>();
  // Unclaimed decisions kept for a caller that has not asked yet (a verdict
  // that overtook its PubAck, a cancel request that overtook its lease).
  readonly #stash = new Stash();
  readonly #offerQ: Offer[] = [];
  readonly #offerWaiters: Array<(o: Offer | null) => void> = [];
  readonly #runs = new Map<string, Runner>();

  /** @internal run()'s ACKs and results (batch.ts). */
  readonly _acks: Batcher = new Batcher(this, "ack");
  /** @internal */
  readonly _results: Batcher = new Batcher(this, "result");

  #renewQ: RenewReq[] = [];
  #renewN = 0;
  #renewKick = false;
  #inflight = new Set<Promise<unknown>>();

  /** @internal */
  constructor(id: string, js: JetStreamClient, o: ResolvedOptions, clock: Clock, tracing: Tracing = new Tracing()) {
    this.id = id;
    this._tracing = tracing;
    this.#js = js;
    this._opts = o;
    this._clock = clock;
    setMaxListeners(0, this.#closeCtl.signal); // one listener per call in flight is no leak
    this.#in = `${o.streamPrefix}_IN`;
    this.#intake = `${o.streamPrefix}_INTAKE_${id}`;
  }

  /**
   * @internal Creates the decision consumer, under one of names, from the
   * stream's next sequence on, and starts reading; rejects when no consumer
   * could be created within the verdict timeout.
   */
  async _start(nc: NatsConnection, apiPrefix: string, out: string, names: string[]): Promise<void> {
    this.#out = out;
    const f = new Follower(nc, {
      stream: out, filter: addresseeFilter(this.id), names, apiPrefix, fromNew: true,
      inactiveThresholdMs: CONSUMER_INACTIVE_MS,
      onError: (err) => this._report(new Error(`worker: decision stream ${out}: ${err.message}`, { cause: err })),
      onDrop: (reason, subject) => this._report(new Error(
        `worker: decision stream ${out}: dropped a message no consumer of this worker sent (${reason}) on ${subject}`)),
    }, (m) => this.#onMsg(m));
    this.#follower = f;
    f.start();
    // Wait for its consumer: a worker not allowed to read its decisions
    // (or a server that does not answer) fails connect.
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), this._opts.verdictTimeoutMs)));
    const late = await Promise.race([f.ready.then(() => false), timedOut]);
    clearTimeout(timer);
    if (late) {
      const err = f.lastError;
      await f.stop();
      throw new Error(`worker: decision consumer on ${out}: ${err ? err.message : `none created in ${this._opts.verdictTimeoutMs} ms`}`, { cause: err });
    }
  }

  /** @internal The decision reader (for the tests). */
  get _follower(): Follower | undefined {
    return this.#follower;
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.#closeCtl.signal.aborted;
  }

  /** @internal Aborted, with a Closed error, by close(). */
  get _closeSignal(): AbortSignal {
    return this.#closeCtl.signal;
  }

  /**
   * Stops reading decisions, aborts every lease's signal (a Closed error)
   * and stops their renewals. Leases are not released: they expire at the
   * coordinator. Does not close the NATS connection. Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.#closeCtl.abort(closedError());
    for (const [k, l] of this.#leases) {
      l._finish(closedError());
      this.#leases.delete(k);
    }
    for (const r of this.#renewQ) r.done({ t0: this._clock.now(), err: closedError() });
    this.#renewQ = [];
    this._acks.close();
    this._results.close();
    for (const wake of this.#offerWaiters.splice(0)) wake(null);
    for (const ws of this.#waiters.values()) for (const wt of ws) wt.wake?.();
    await this.#follower?.stop();
    await Promise.allSettled([...this.#inflight]);
  }

  /** @internal Tells the onError handler, unless the Worker is closed. */
  _report(err: unknown): void {
    if (this.closed || !this._opts.onError) return;
    try {
      this._opts.onError(err instanceof Error ? err : new Error(String(err)));
    } catch {
      // an error handler's own error is nobody's
    }
  }

  /** @internal Tracks a background task, so that close() waits for it. */
  _track<T>(p: Promise<T>): Promise<T> {
    this.#inflight.add(p);
    void p.finally(() => this.#inflight.delete(p)).catch(() => undefined);
    return p;
  }

  // ---- Decisions ----

  #onMsg(m: FollowMsg): void {
    // Only decisions addressed to this worker (its consumer's filter): the
    // reader hands over only what the server delivered to its consumer.
    if (!m.subject.startsWith(`tenure.out.${this.id}.`)) {
      this._report(new Error(`worker: dropped a message of stream ${this.#out} on ${m.subject}: not a decision addressed to ${this.id}`));
      return;
    }
    let d: Decision;
    try {
      d = decodeDecision(m.data);
    } catch (err) {
      this._report(new Error(`worker: decision ${m.subject}: ${errMessage(err)}`, { cause: err }));
      return;
    }
    this._dispatch(d, m.sourceSeq ?? 0, m);
  }

  /** @internal Routes one decision addressed to this worker (src: its Tenure-Source-Seq, 0 for none). */
  _dispatch(d: Decision, src = 0, m?: { seq: number; traceparent?: string | undefined }): void {
    if (this.closed) return;
    if (this.#verdictOfMine(d)) {
      const key = src > 0 ? -src : d.cause;
      const wt = this.#waiters.get(key)?.find((x) => wants(x.verb, x.job, d));
      if (wt) {
        wt.ds.push(d);
        if (wt.ds.length >= wt.n || d.job.id === NO_JOB) {
          dropWaiter(this.#waiters, key, wt);
          wt.wake?.();
        }
        return;
      }
      this.#stashed(this.#stash.addVerdict(key, d, this._clock.now())); // its PubAck has not come back yet
      return;
    }
    switch (d.kind) {
      case "assigned": {
        // An offer the queue made (§22.3): to the run() of its queue, or
        // to offers() like any offer.
        if (d.job.holder !== this.id) return;
        const r = d.job.queue !== undefined ? this.#runs.get(d.job.queue) : undefined;
        if (r) {
          r._offer(new Offer(this, d, this._clock.now(), m));
          return;
        }
        this.#queueOffer(d, m);
        return;
      }
      case "withdrawn":
        if (d.capacity && d.addressee === this.id) this.#runs.get(d.capacity.queue)?._withdrawn();
        return;
      case "offered":
        if (d.job.holder === this.id) this.#queueOffer(d, m);
        return;
      case "cancel_requested": case "expired": case "unresolved": case "resolved": {
        const k = leaseKey(d.job.id, d.job.lease_id ?? "");
        const l = this.#leases.get(k);
        if (l) {
          if (l._handle(d)) this.#leases.delete(k);
          return;
        }
        this.#stashed(this.#stash.addLease(k, d, this._clock.now())); // its lease is being registered
      }
    }
  }

  // A verdict of one of this worker's inputs: not derived, caused by an
  // input of this worker (an assigned offer is derived even when this
  // worker's input caused it).
  #verdictOfMine(d: Decision): boolean {
    return !derivedKind(d.kind) && d.input.role === "worker" && d.input.actor === this.id;
  }

  #stashed(err: Error | undefined): void {
    if (err) this._report(err);
  }

  /** @internal Adds l and applies, in order, the stashed decisions about it. */
  _register(l: Lease): void {
    if (this.closed) {
      l._finish(closedError());
      throw closedError();
    }
    const k = leaseKey(l.token.job, l.token.leaseId);
    this.#leases.set(k, l);
    let ended = false;
    for (const d of this.#stash.takeLease(k)) ended = l._handle(d) || ended;
    if (ended) this.#leases.delete(k);
  }

  /** @internal */
  _unregister(l: Lease): void {
    const k = leaseKey(l.token.job, l.token.leaseId);
    if (this.#leases.get(k) === l) this.#leases.delete(k);
  }

  // ---- Offers ----

  #queueOffer(d: Decision, m?: { seq: number; traceparent?: string | undefined }): void {
    const o = new Offer(this, d, this._clock.now(), m);
    const wake = this.#offerWaiters.shift();
    if (wake) {
      wake(o);
      return;
    }
    if (this.#offerQ.length >= this._opts.offerBuffer) {
      const old = this.#offerQ.shift()!;
      this._report(new Error(`worker: offer of job ${old.job} (lease ${old.leaseId}) dropped: offer buffer full`));
    }
    this.#offerQ.push(o);
  }

  /** @internal The next offer, or null once closed or signal aborted. */
  _nextOffer(signal?: AbortSignal): Promise<Offer | null> {
    const o = this.#offerQ.shift();
    if (o) return Promise.resolve(o);
    if (this.closed || signal?.aborted) return Promise.resolve(null);
    return new Promise((resolve) => {
      const wake = (x: Offer | null) => {
        signal?.removeEventListener("abort", onAbort);
        resolve(x);
      };
      const onAbort = () => {
        const i = this.#offerWaiters.indexOf(wake);
        if (i >= 0) this.#offerWaiters.splice(i, 1);
        resolve(null);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#offerWaiters.push(wake);
    });
  }

  /**
   * The offers addressed to this worker, in the order the coordinator made
   * them, as an async iterable: `for await (const o of w.offers()) ...`.
   * The offers of a queue that a run() of this worker runs go to that run
   * instead. Several iterators share the offers (each gets different
   * ones). An iterator ends when the Worker closes or signal is aborted.
   */
  offers(opts: { signal?: AbortSignal } = {}): AsyncIterableIterator<Offer> {
    const w = this;
    const { signal } = opts;
    async function* gen(): AsyncGenerator<Offer> {
      for (;;) {
        const o = await w._nextOffer(signal);
        if (o === null) return;
        yield o;
      }
    }
    return gen();
  }

  // ---- Acquire and run ----

  /**
   * Asks for a new lease on job and returns it once granted. Under
   * competition exactly one acquirer gets it; the others get a VerdictError
   * with codes Rejected and LeaseHeld whose decision's job names the
   * holder. An error with code NoVerdict means the outcome is unknown (a
   * lease granted but never learned simply expires).
   */
  async acquire(job: string, opts: LeaseOptions & CallOptions = {}): Promise<Lease> {
    if (!validToken(job)) throw new TypeError(`worker: acquire: invalid job ${JSON.stringify(job)}`);
    const lo = leaseOptions(opts);
    const p = this._newInput(job, "acquire", { lease_ms: lo.leaseMs });
    if (lo.leaseMs !== undefined) p.deadline = this._clock.now() + lo.leaseMs; // its attempts fit in the lease asked for
    let d: Decision;
    try {
      d = await this._send(p, opts.signal);
    } catch (err) {
      throw wrap(`worker: acquire ${job}`, err);
    }
    if (d.kind !== "granted") throw new VerdictError(d);
    return Lease._start(this, d, p.t0!, lo);
  }

  /**
   * Takes the jobs of queue (PROTOCOL.md §22) and runs handler on each, at
   * most `concurrency` at once, until opts.signal is aborted (stop at once)
   * or opts.drain is (stop gracefully: the running handlers may finish for
   * up to opts.drainTimeoutMs; drainOnSignals() wires SIGTERM and SIGINT to
   * it). See README.md "Queues" and "Drain" for what each outcome of the
   * handler reports. Resolves once the run has shut down and every handler
   * has returned; rejects with the refusal of an announcement (a
   * VerdictError), or a Closed error when the Worker closed under it.
   */
  async run(queue: string, handler: Handler, opts: RunOptions = {}): Promise<void> {
    if (!validToken(queue)) throw new TypeError(`worker: run: invalid queue ${JSON.stringify(queue)}`);
    if (typeof handler !== "function") throw new TypeError("worker: run: handler is not a function");
    if (this.closed) throw closedError();
    if (this.#runs.has(queue)) throw new TenureError(`worker: run ${queue}: queue already run by this worker`, [ErrorCode.AlreadyRunning]);
    const r = new Runner(this, queue, handler, opts);
    this.#runs.set(queue, r);
    try {
      await r._run(() => {
        if (this.#runs.get(queue) === r) this.#runs.delete(queue);
      });
    } finally {
      if (this.#runs.get(queue) === r) this.#runs.delete(queue);
    }
  }

  // ---- Publishing ----

  /** @internal An input of this worker, its body and Msg-Id fixed. */
  /**
   * @internal An input of this worker. Its trace context (PROTOCOL.md §27)
   * is the active context's span's, else trace's; null: none (a batch).
   */
  _newInput(job: string, verb: WorkerVerb, fields: InputFields, trace?: Context | null): Input {
    const p: Input = { job, verb, body: encodeInput(fields, Date.now()), msgId: this._newMsgId(), sent: false };
    if (trace !== null) {
      const tp = this._tracing.traceparent(trace);
      if (tp !== undefined) p.traceparent = tp;
    }
    return p;
  }

  /**
   * @internal "<id>-<random UUID v4>": namespaced by the worker and
   * unguessable, so that no other publisher can suppress this worker's
   * input through the input stream's duplicate window (§4, §14).
   */
  _newMsgId(): string {
    return `${this.id}-${crypto.randomUUID()}`;
  }

  /** @internal Publishes p (with retries, same Msg-Id) and waits for its verdict. */
  async _send(p: Input, signal?: AbortSignal): Promise<Decision> {
    const { ds, err } = await this._sendN(p, 1, signal);
    if (err) throw err;
    return ds[0]!;
  }

  /**
   * @internal _send for an input with n verdicts (a batch renew of n
   * leases). The error is Closed, or matches NoVerdict; it comes with the
   * verdicts learned so far, and seq the input's sequence once stored.
   * want, when given, says how many verdicts to wait for once the
   * sequence is known (a batch sent again whose first verdicts of that
   * input were learned by an earlier attempt).
   */
  async _sendN(p: Input, n: number, signal?: AbortSignal, want?: (seq: number) => number): Promise<{ ds: Decision[]; seq?: number; err?: TenureError }> {
    if (this.closed) return { ds: [], err: closedError() }; // publish nothing after close
    // The call's own signal: the verdict timeout, close(), the caller's
    // signal; one controller and one timer, removed when the call ends.
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new Error(`no verdict in ${this._opts.verdictTimeoutMs} ms`)), this._opts.verdictTimeoutMs);
    timer.unref?.();
    const sources = signal ? [this.#closeCtl.signal, signal] : [this.#closeCtl.signal];
    const onAbort = function (this: AbortSignal) {
      ctl.abort(this.reason);
    };
    for (const s of sources) {
      if (s.aborted) ctl.abort(s.reason);
      else s.addEventListener("abort", onAbort, { once: true });
    }
    try {
      p.t0 ??= this._clock.now();
      let seq: number;
      try {
        seq = await this.#publish(p, ctl.signal);
      } catch (err) {
        return { ds: [], err: this.#callErr(err) };
      }
      return { ...await this.#awaitN(seq, want ? want(seq) : n, ctl.signal, p.verb, p.job), seq };
    } finally {
      clearTimeout(timer);
      for (const s of sources) s.removeEventListener("abort", onAbort);
    }
  }

  #callErr(err: unknown): TenureError {
    if (this.closed) return closedError();
    if (err instanceof TenureError && err.is(ErrorCode.NoVerdict)) return err;
    return sdkError(`worker: verdict not learned in time: ${errMessage(err)}`, [ErrorCode.NoVerdict], err);
  }

  // Stores p in the input stream and returns its sequence. Attempts that
  // may have failed in transit are retried with the same Msg-Id until
  // signal is aborted: if an earlier attempt was stored, the stream answers
  // with that attempt's sequence.
  async #publish(p: Input, signal: AbortSignal): Promise<number> {
    const subject = inputSubject(this.id, p.job, p.verb);
    let wait = 10;
    let flips = 0;
    for (;;) {
      if (signal.aborted) throw abortReason(signal, `publish ${subject}`);
      const first = !p.sent;
      p.sent = true;
      const timeout = publishTimeout(this._opts.publishTimeoutMs, p.deadline, this._clock.now());
      let ack: PubAck | undefined;
      let lastErr: unknown;
      // A deployment with quotas stores this worker's inputs in its intake
      // stream: the expected stream names whichever the last answer
      // showed, and "expected stream does not match" (10060: nothing
      // stored) switches to the other.
      const intake = this.#viaIntake;
      const stream = intake ? this.#intake : this.#in;
      try {
        ack = await raceAbort(this.#js.publish(subject, p.body, { msgID: p.msgId, expect: { streamName: stream }, timeout, headers: traceHeaders(p) }), signal);
      } catch (err) {
        if (signal.aborted) throw abortReason(signal, `publish ${subject}`, err);
        lastErr = err;
      }
      if (!ack && apiCode(lastErr) === 10060 && flips < 2) {
        flips++;
        this.#viaIntake = !intake;
        p.sent = !first;
        continue;
      }
      if (!ack && quotaRefusal(lastErr)) {
        throw sdkError(`publish ${subject}: input refused: over the worker's quota: ${errMessage(lastErr)}`, [ErrorCode.Quota, ErrorCode.NoVerdict], lastErr);
      }
      if (ack) {
        if (ack.stream !== stream) throw new Error(`publish ${subject}: stored by stream ${ack.stream}, want ${stream}`);
        if (ack.duplicate && first) {
          // The SDK never sent this Msg-Id before, so the stream holds
          // another publisher's message under it (the duplicate window is
          // stream-wide): resend under a fresh id rather than adopt it.
          const old = p.msgId;
          p.msgId = this._newMsgId();
          p.sent = false;
          this._report(new Error(`worker: ${p.verb} ${p.job}: Nats-Msg-Id ${old} was already used by input ${ack.seq} of another publisher; resending with Msg-Id ${p.msgId}`));
          continue;
        }
        return intake ? -ack.seq : ack.seq;
      }
      if (!retryable(lastErr)) throw new Error(`publish ${subject}: ${errMessage(lastErr)}`, { cause: lastErr });
      try {
        await sleep(this._clock, wait, signal);
      } catch {
        throw abortReason(signal, `publish ${subject}`, lastErr);
      }
      wait = Math.min(2 * wait, 500);
    }
  }

  // Waits for the n verdicts of input seq, or for one about no job (the
  // whole input rejected), which is then the only one.
  async #awaitN(seq: number, n: number, signal: AbortSignal, verb: string, job: string): Promise<{ ds: Decision[]; err?: TenureError }> {
    const ds = this.#stash.takeVerdicts(seq, n, (d) => wants(verb, job, d));
    const whole = ds.some((d) => d.job.id === NO_JOB);
    if (ds.length >= n || whole) return { ds };
    const wt: Waiter = { ds, n, wake: null, verb, job };
    addWaiter(this.#waiters, seq, wt);
    await new Promise<void>((resolve) => {
      if (signal.aborted) return resolve();
      const onAbort = () => resolve();
      wt.wake = () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      signal.addEventListener("abort", onAbort, { once: true });
    });
    dropWaiter(this.#waiters, seq, wt);
    if (wt.ds.length >= n || wt.ds.some((d) => d.job.id === NO_JOB)) return { ds: wt.ds };
    if (this.closed) return { ds: wt.ds, err: closedError() };
    return {
      ds: wt.ds,
      err: sdkError(`worker: verdict not learned in time: input ${seq}: ${wt.ds.length} of ${n} verdicts: ${errMessage(signal.reason)}`,
        [ErrorCode.NoVerdict], signal.reason),
    };
  }

  // ---- Renewals ----

  /** @internal Hands req to the renewer; resolves with its outcome. */
  _renewVia(ref: LeaseRef, deadline: number, trace?: Context): Promise<RenewResult> {
    if (this.closed) return Promise.resolve({ t0: this._clock.now(), err: closedError() });
    return new Promise((done) => {
      this.#renewQ.push({ ref, deadline, trace, done });
      // Renewals falling due in the same turn of the event loop (the
      // timers of several leases firing together) leave in one input.
      if (!this.#renewKick) {
        this.#renewKick = true;
        setImmediate(() => {
          this.#renewKick = false;
          this.#kickRenewer();
        });
      }
    });
  }

  // Sends the queued renewals, at most 256 per input and two inputs at a
  // time: when the worker is idle a renewal leaves at once; under load,
  // those that fall due while two are being judged leave together.
  #kickRenewer(): void {
    while (this.#renewN < MAX_RENEW_BATCHES && this.#renewQ.length > 0 && !this.closed) {
      const batch = this.#renewQ.splice(0, MAX_BATCH);
      this.#renewN++;
      void this._track(this.#sendRenewals(batch)).finally(() => {
        this.#renewN--;
        this.#kickRenewer();
      });
    }
  }

  // Publishes one input for the renewals of batch (a single renew for one,
  // a batch renew for more) and hands each its verdict.
  async #sendRenewals(batch: RenewReq[]): Promise<void> {
    let p: Input;
    if (batch.length === 1) {
      const r = batch[0]!.ref;
      p = this._newInput(r.job, "renew", { lease_id: r.lease_id, generation: r.generation, renew_seq: r.renew_seq, lease_ms: r.lease_ms }, batch[0]!.trace);
    } else {
      p = this._newInput(NO_JOB, "renew", { leases: batch.map((r) => r.ref) }, null); // its leases belong to as many traces
    }
    p.t0 = this._clock.now();
    for (const r of batch) {
      if (p.deadline === undefined || r.deadline < p.deadline) p.deadline = r.deadline; // attempts fit in the earliest lease
    }
    const { ds, err } = await this._sendN(p, batch.length);
    const answered = new Array<boolean>(batch.length).fill(false);
    for (const d of ds) {
      if (d.job.id === NO_JOB) { // the whole input rejected: the verdict of every lease
        batch.forEach((r, i) => {
          if (!answered[i]) {
            answered[i] = true;
            r.done({ d, t0: p.t0! });
          }
        });
        break;
      }
      const i = batch.findIndex((r, i) => !answered[i] && r.ref.job === d.job.id);
      if (i >= 0) {
        answered[i] = true;
        batch[i]!.done({ d, t0: p.t0! });
      }
    }
    const e = err ?? sdkError(`worker: input ${p.msgId}: verdict missing`, [ErrorCode.NoVerdict]);
    batch.forEach((r, i) => {
      if (!answered[i]) r.done({ t0: p.t0!, err: e });
    });
  }
}

function leaseKey(job: string, leaseId: string): string {
  return `${job}\u0000${leaseId}`;
}

/**
 * The timeout of one publish attempt made at now of an input of a lease
 * whose local deadline is deadline (undefined: no lease): half the time
 * left, between MIN_PUBLISH_TIMEOUT_MS and base.
 */
function publishTimeout(base: number, deadline: number | undefined, now: number): number {
  if (deadline === undefined) return base;
  return Math.min(base, Math.max((deadline - now) / 2, MIN_PUBLISH_TIMEOUT_MS));
}

function abortReason(signal: AbortSignal, what: string, last?: unknown): Error {
  const why = errMessage(signal.reason);
  return new Error(`${what}: ${why}${last !== undefined ? ` (last attempt: ${errMessage(last)})` : ""}`, { cause: signal.reason });
}

function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => { signal.removeEventListener("abort", onAbort); resolve(v); },
      (e) => { signal.removeEventListener("abort", onAbort); reject(e); },
    );
  });
}

/** @internal Waits ms on clock; rejects when signal is aborted. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      t.stop();
      reject(signal!.reason);
    };
    const t = clock.setTimer(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** @internal Wraps err with what the call was, keeping its codes (TenureError) as the cause's. */
export function wrap(what: string, err: unknown): Error {
  if (err instanceof TenureError) return new TenureError(`${what}: ${err.message}`, err.codes, { cause: err });
  return new Error(`${what}: ${errMessage(err)}`, { cause: err });
}

/** @internal Local duration granted by decision d: expires_at - at (ms). */
export function grantedMs(expiresAt: string | undefined, from: string | undefined): number {
  const v = timeMs(expiresAt) - timeMs(from);
  return Number.isFinite(v) ? Math.min(Math.max(v, 0), MAX_DURATION_MS) : 0;
}

export { isError };

/** The headers input p is published with: its traceparent, if any (PROTOCOL.md §27). */
function traceHeaders(p: Input): MsgHdrs | undefined {
  if (p.traceparent === undefined) return undefined;
  const h = natsHeaders();
  h.set(TRACEPARENT, p.traceparent);
  return h;
}
