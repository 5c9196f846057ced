// run(): the jobs of a queue (PROTOCOL.md §22), the Go SDK's worker.Run.
// The worker announces capacity (pull), the queue's fold offers (assigned
// decisions), a handler runs each job under its lease's signal, and the
// handler's end becomes the attempt's result.

import { setMaxListeners } from "node:events";

import type { Timer } from "./clock.js";
import { ErrorCode, TenureError, VerdictError, isError, sdkError } from "./errors.js";
import { Lease, leaseOptions } from "./lease.js";
import type { Offer } from "./offer.js";
import { DEFAULT_CAPACITY_TTL_MS, MAX_CAPACITY_TTL_MS, MAX_SLOTS, NO_JOB, cleanText, timeMs } from "./protocol.js";
import { sleep, type Worker } from "./worker.js";
import { ATTR, leaseRef } from "./tracing.js";
import { context as otelContext, SpanStatusCode, type Context, type Span } from "@opentelemetry/api";

/** One attempt of a queue job, as the queue offered it (§22.6). */
export interface Job {
  readonly id: string;
  readonly queue: string;
  /** Opaque to Tenure; undefined when the submit carried none (an empty string is a payload). */
  readonly payload: string | undefined;
  /** This attempt's number, from 1 (declines and releases are not counted). */
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly priority: number;
  /** The ops actor that submitted it. */
  readonly submitter: string;
  /** On the coordinator's clock, ms since the epoch. */
  readonly submittedAt: number;
  /**
   * Rules revision 8 (§26.1): when the job was scheduled to run from (its
   * submit's run_at, or its time plus delay_ms), ms since the epoch; 0 for
   * a job submitted to run at once.
   */
  readonly scheduledFor: number;
  /** Why the previous attempt ended ("" on the first). */
  readonly lastReason: string;
  /**
   * The OpenTelemetry context of this run's span (PROTOCOL.md §27): start
   * the handler's spans in it. run() also calls the handler with it active,
   * which reaches the handler's awaits when the program installed a
   * context manager.
   */
  readonly traceContext: Context;
  /**
   * The attempt's lease: its token for every side effect, progress(),
   * deadline, cancelRequested. run() reports the result itself when the
   * handler returns; a handler that calls complete or release has ended the
   * lease, and run() then reports nothing more.
   */
  readonly lease: Lease;
  /**
   * What RunOptions.effects bound to this attempt before the handler ran
   * (a FenceClient's BoundFence, ...); undefined without one.
   */
  readonly effects: unknown;
}

/**
 * Binds a resource to each attempt run() runs (the Go SDK's
 * worker.WithEffects): bind is called once the attempt's lease is held,
 * before the handler, and may claim the job at the resource, so that an
 * older lease's writes are refused from then on; what it returns is the
 * handler's job.effects. A bind that throws fails the attempt without
 * running the handler.
 */
export interface EffectsBinder {
  bind(lease: Lease, signal: AbortSignal): Promise<unknown>;
}

/**
 * Runs one attempt of a queue job. signal is aborted the moment the lease's
 * authority is lost (its reason as the lease's) and when the run shuts down
 * (a RunStopped error). Resolve for SUCCESS; throw to fail the attempt
 * (retried after a backoff while the job's attempt budget lasts); throw
 * permanent(err) to fail the job without retry.
 */
export type Handler = (job: Job, signal: AbortSignal) => Promise<void> | void;

/** Configures one run(). */
export interface RunOptions {
  /** The most handlers at once, 1 to 256: the slots announced (§22.2). Default 1. */
  concurrency?: number;
  /** How long each announcement stands (ttl_ms), 1 to 600000 ms; run() announces again every third of it. Default 30000. */
  capacityTtlMs?: number;
  /**
   * Aborting it shuts the run down at once (River's StopAndCancel):
   * capacity withdrawn, handlers' signals aborted, unfinished work
   * released. It also ends a drain early.
   */
  signal?: AbortSignal;
  /**
   * Aborting it drains the run (River's Stop; the Go SDK's WithDrain): the
   * capacity is withdrawn and the offers arriving from then on declined at
   * once, as a shutdown does, but the running handlers go on and their
   * results are reported as usual (a handler that throws fails its
   * attempt: nothing interrupted it) until drainTimeoutMs has passed; then
   * the signals of those still running are aborted with a RunStopped
   * reason, as a shutdown does, and a handler that then throws has its
   * lease released. run() resolves once every handler has returned and its
   * result was reported. drainOnSignals() wires it to SIGTERM and SIGINT.
   */
  drain?: AbortSignal;
  /**
   * How long a drain lets the running handlers go on before their signals
   * are aborted, in milliseconds on the Worker's clock; 0 (the default):
   * for as long as they take, until `signal` is aborted.
   */
  drainTimeoutMs?: number;
  /**
   * Told how each attempt run() ran ended: what it reported to the
   * coordinator, or why it reported nothing (the Go SDK's
   * WithResultHandler), for a log line per outcome (describeResult). Called
   * after the report's verdict; must not throw or block.
   */
  onResult?: (job: Job, result: Result) => void;
  /** Binds each attempt to a resource before its handler runs (fence.ts: FenceClient). */
  effects?: EffectsBinder;
}

/** How one attempt run() ran ended (the Go SDK's worker.Result). */
export interface Result {
  /** The result run() reported: SUCCESS, FAILED or CANCELLED (a cancellation request reconciled); undefined when it reported none. */
  readonly outcome: "SUCCESS" | "FAILED" | "CANCELLED" | undefined;
  /** The FAILED result said not to retry (permanent()). */
  readonly permanent: boolean;
  /** run() gave the lease back instead (it was stopping): not an attempt, the queue offers the job again at once. */
  readonly released: boolean;
  /** The handler ended the lease itself (complete, release). */
  readonly ended: boolean;
  /** The detail reported with a FAILED or CANCELLED outcome ("" otherwise). */
  readonly detail: string;
  /** What the handler threw (undefined: it resolved). */
  readonly error: unknown;
  /**
   * Why the result could not be reported or was not accepted (authority
   * lost before it, no verdict); undefined when the coordinator accepted
   * what run() reported, or there was nothing to report.
   */
  readonly reportError: Error | undefined;
}

/**
 * A result for a log line, as the Go SDK's Result.String: "SUCCESS",
 * "FAILED (retried if attempts remain): <detail>", "FAILED permanently:
 * <detail>", "CANCELLED", "released (the run was stopping): not an
 * attempt", "ended by the handler", each with ", not accepted: <why>", or
 * "not reported: <why>".
 */
export function describeResult(r: Result): string {
  let s: string;
  if (r.released) s = "released (the run was stopping): not an attempt";
  else if (r.ended) s = "ended by the handler";
  else if (r.outcome === "FAILED" && r.permanent) s = `FAILED permanently: ${r.detail}`;
  else if (r.outcome === "FAILED") s = `FAILED (retried if attempts remain): ${r.detail}`;
  else if (r.outcome !== undefined) s = r.outcome;
  else return r.reportError ? `not reported: ${r.reportError.message}` : "not reported";
  return r.reportError ? `${s}, not accepted: ${r.reportError.message}` : s;
}

type MutableResult = { -readonly [K in keyof Result]: Result[K] };

function newResult(error: unknown): MutableResult {
  return { outcome: undefined, permanent: false, released: false, ended: false, detail: "", error, reportError: undefined };
}

const enum SlotState { Accepting, Running, Finishing }

// The most attempts of a surplus's corrected announcement whose verdict
// was not learned (the Go SDK's surplusAnnounceTries).
const SURPLUS_ANNOUNCE_TRIES = 3;

interface Slot {
  state: SlotState;
  lease: Lease | undefined;
}

/** @internal One run() of a Worker. */
export class Runner {
  readonly #w: Worker;
  readonly #queue: string;
  readonly #h: Handler;
  readonly #concurrency: number;
  readonly #ttl: number;
  readonly #every: number; // between announcements: a third of the ttl
  readonly #retry: number; // after an announcement whose verdict was not learned
  readonly #stopCtl = new AbortController(); // the run's signal, the Worker closed, a refused pull, a drain's timeout: aborts the handlers
  readonly #quitCtl = new AbortController(); // stop, or a drain begun: the run takes no more jobs
  readonly #userSignal: AbortSignal | undefined;
  readonly #drain: AbortSignal | undefined;
  readonly #drainTimeout: number;
  readonly #onResult: ((job: Job, result: Result) => void) | undefined;
  readonly #effects: EffectsBinder | undefined;
  #fatal: Error | undefined;

  #withdrawnResolve!: () => void;
  readonly #withdrawn = new Promise<void>((r) => (this.#withdrawnResolve = r));

  readonly #slots = new Set<Slot>();
  #running = 0; // slots accepting an offer or running a handler
  readonly #tasks = new Set<Promise<void>>();

  // The announcement.
  #annBusy: Promise<void> = Promise.resolve();
  #stale = false; // the coordinator withdrew it (a missed ACK): announce again at once
  #ok = false; // the last pull was accepted
  #annSlots = 0; // the slots it announced
  // Surplus offers being declined (#surplus): while there are any, the
  // announcement counts only the leases whose ACKs were accepted.
  #declining = 0;
  // Woken when a slot is freed or its offer accepted (#awaitAccepts).
  #settled: Array<() => void> = [];
  #due = 0; // the next pull is due then, whatever changes
  #wakeAnnouncer: (() => void) | undefined;
  #woken = false;

  constructor(w: Worker, queue: string, h: Handler, o: RunOptions) {
    const c = o.concurrency ?? 1;
    if (!Number.isInteger(c) || c < 1 || c > MAX_SLOTS) throw new RangeError(`worker: run: concurrency ${c}: want 1 to ${MAX_SLOTS}`);
    const ttl = o.capacityTtlMs ?? DEFAULT_CAPACITY_TTL_MS;
    if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_CAPACITY_TTL_MS) {
      throw new RangeError(`worker: run: capacity ttl ${ttl} ms: want whole milliseconds from 1 to ${MAX_CAPACITY_TTL_MS}`);
    }
    this.#w = w;
    this.#queue = queue;
    this.#h = h;
    this.#concurrency = c;
    this.#ttl = ttl;
    this.#every = Math.max(ttl / 3, 1);
    this.#retry = Math.max(this.#every / 4, 1);
    const dt = o.drainTimeoutMs ?? 0;
    if (!Number.isFinite(dt) || dt < 0) throw new RangeError(`worker: run: drain timeout ${dt} ms: want 0 or more`);
    // One listener per running handler (up to 256) is no leak.
    setMaxListeners(0, this.#stopCtl.signal, this.#quitCtl.signal);
    this.#userSignal = o.signal;
    this.#drain = o.drain;
    this.#drainTimeout = dt;
    this.#onResult = o.onResult;
    this.#effects = o.effects;
  }

  // The handlers are being stopped (a shutdown, or a drain's timeout).
  get #stopped(): boolean {
    return this.#stopCtl.signal.aborted;
  }

  // The run takes no more jobs (stopped, or draining).
  get #quitting(): boolean {
    return this.#quitCtl.signal.aborted;
  }

  /** @internal The run itself; removeRoute stops routing offers to it once the capacity is withdrawn. */
  async _run(removeRoute: () => void): Promise<void> {
    const stop = this.#stopCtl;
    const quit = this.#quitCtl;
    const onUser = () => stop.abort(sdkError(`worker: run ${this.#queue} stopped`, [ErrorCode.RunStopped], this.#userSignal?.reason));
    const onClose = () => stop.abort(this.#w._closeSignal.reason);
    const onStop = () => quit.abort(stop.signal.reason);
    const onDrain = () => quit.abort(sdkError(`worker: run ${this.#queue} draining`, [ErrorCode.RunStopped], this.#drain?.reason));
    stop.signal.addEventListener("abort", onStop, { once: true });
    if (this.#userSignal?.aborted) onUser();
    this.#userSignal?.addEventListener("abort", onUser, { once: true });
    this.#w._closeSignal.addEventListener("abort", onClose, { once: true });
    if (this.#drain?.aborted) onDrain();
    this.#drain?.addEventListener("abort", onDrain, { once: true });
    let drainTimer: Timer | undefined;
    try {
      const announcer = this.#announcer();
      await new Promise<void>((r) => (quit.signal.aborted ? r() : quit.signal.addEventListener("abort", () => r(), { once: true })));
      this.#wake();
      await announcer;
      // Shutdown (stop ended: the handlers' signals are aborted) or drain
      // (only quit ended: they run on): the capacity is withdrawn before
      // any release or decline is sent, so that the queue does not offer
      // those jobs to this worker again.
      await this.#withdraw();
      this.#withdrawnResolve();
      // Every offer made before the withdrawal was dispatched before its
      // verdict (decisions arrive in order): this run has them all.
      removeRoute();
      if (!stop.signal.aborted && this.#drainTimeout > 0) {
        const ms = this.#drainTimeout;
        drainTimer = this.#w._clock.setTimer(() => stop.abort(sdkError(
          `worker: run ${this.#queue} stopped: the drain's timeout of ${ms} ms passed`, [ErrorCode.RunStopped])), ms);
      }
      while (this.#tasks.size > 0) await Promise.allSettled([...this.#tasks]);
    } finally {
      drainTimer?.stop();
      stop.signal.removeEventListener("abort", onStop);
      this.#userSignal?.removeEventListener("abort", onUser);
      this.#w._closeSignal.removeEventListener("abort", onClose);
      this.#drain?.removeEventListener("abort", onDrain);
      this.#withdrawnResolve();
    }
    if (this.#fatal) throw this.#fatal;
    if (this.#w.closed) throw this.#w._closeSignal.reason;
  }

  #go(p: Promise<void>): void {
    const t = p.catch((err) => this.#w._report(err));
    this.#tasks.add(t);
    void t.finally(() => this.#tasks.delete(t));
  }

  /** @internal An offer of this run's queue (an assigned decision addressed to this worker). */
  _offer(o: Offer): void {
    const s = this.#reserve();
    if (s) this.#go(this.#work(o, s));
    else this.#go(this.#surplus(o));
  }

  // Takes a free slot, if there is one and the run is not shutting down.
  #reserve(): Slot | undefined {
    if (this.#quitting || this.#running >= this.#concurrency) return undefined;
    const s: Slot = { state: SlotState.Accepting, lease: undefined };
    this.#slots.add(s);
    this.#running++;
    this.#wake();
    return s;
  }

  // An offer that came when no slot was free (a lease the coordinator
  // ended while its handler still runs frees a slot there first). The
  // announcement is corrected first, so that the queue does not offer the
  // declined job again; if a slot was freed meanwhile the offer takes it.
  // A decline is not counted as an attempt.
  //
  // The corrected announcement counts only the leases whose ACKs were
  // accepted, not the offers being accepted: the coordinator may have
  // ended one of those already (its ACK deadline passed while the offer or
  // the ACK was on its way), and then counts the declined offer within an
  // announcement that still counted it, which makes the decline a refusal
  // (PROTOCOL.md §22.7; the Go SDK's seed 173). The slots are announced
  // again once the decline is stored.
  //
  // The decline is surplus only once the corrected announcement is stored:
  // one whose verdict was not learned is sent again at once, until it is
  // stored or half the time left to o's ACK deadline has passed,
  // SURPLUS_ANNOUNCE_TRIES times at most (a refusal is not retried); only
  // then is o declined (the Go SDK's TestRunSurplusDeclinedOnceItsAnnouncementIsStored).
  async #surplus(o: Offer): Promise<void> {
    if (!this.#quitting) {
      this.#declining++;
      let lowered = true;
      const raise = () => {
        if (lowered) {
          lowered = false;
          this.#declining--;
          this.#wake();
        }
      };
      try {
        const clock = this.#w._clock;
        const until = clock.now() + (o.localDeadline - clock.now()) / 2;
        for (let tries = 1; ; tries++) {
          const { stored, again } = await this.#announce();
          if (stored || !again || tries === SURPLUS_ANNOUNCE_TRIES || this.#quitting || clock.now() >= until) break;
          this.#stale = true; // at once, not at the announcer's next retry
        }
        const s = this.#reserve() ?? await this.#awaitAccepts(o);
        if (s) {
          raise();
          return this.#work(o, s);
        }
        if (this.#quitting) await this.#withdrawn;
        await this.#decline(o);
      } finally {
        raise();
      }
      return;
    }
    await this.#withdrawn;
    await this.#decline(o);
  }

  // Wakes #awaitAccepts: a slot was freed, or its offer accepted.
  #slotSettled(): void {
    const ws = this.#settled;
    this.#settled = [];
    for (const f of ws) f();
  }

  // Waits, while offers are being accepted (their ACKs in flight), for one
  // of them to free its slot, and takes it for o; undefined once none is
  // being accepted and no slot is free, when half the time left to o's ACK
  // deadline has passed, or when the run quits. An ACK in flight may be
  // refused (an operator revoked the lease meanwhile, its deadline passed):
  // the coordinator has then ended that lease and offered o in its place,
  // and counts o against the slots announced, so declining o would be a
  // refusal (the Go SDK's awaitAccepts; the simulator's seed 717).
  async #awaitAccepts(o: Offer): Promise<Slot | undefined> {
    const clock = this.#w._clock;
    const until = clock.now() + (o.localDeadline - clock.now()) / 2;
    const quit = this.#quitCtl.signal;
    for (;;) {
      let accepting = false;
      for (const s of this.#slots) {
        if (s.state === SlotState.Accepting) {
          accepting = true;
          break;
        }
      }
      const left = until - clock.now();
      if (!accepting || left <= 0 || quit.aborted) return undefined;
      let t: Timer | undefined;
      let settled = false;
      await new Promise<void>((resolve) => {
        const onQuit = () => resolve();
        this.#settled.push(() => {
          settled = true;
          quit.removeEventListener("abort", onQuit);
          resolve();
        });
        quit.addEventListener("abort", onQuit, { once: true });
        t = clock.setTimer(() => {
          quit.removeEventListener("abort", onQuit);
          resolve();
        }, left);
      });
      t?.stop();
      if (!settled) return undefined;
      const s = this.#reserve();
      if (s) return s;
    }
  }

  // Releases o, unless its ACK window has passed already.
  async #decline(o: Offer): Promise<void> {
    if (this.#w._clock.now() >= o.localDeadline) return; // lapsed already: nothing to decline
    try {
      await o.decline();
    } catch (err) {
      this.#w._report(new Error(`worker: run ${this.#queue}: decline ${o.job}: ${msg(err)}`, { cause: err }));
    }
  }

  // Accepts o in slot s, runs the handler and reports the result.
  async #work(o: Offer, s: Slot): Promise<void> {
    // The run's span (PROTOCOL.md §27): a child of the offer's trace
    // context (the submit's); the lease's inputs carry its context.
    const { span, ctx } = this.#w._tracing.startRun(o.traceContext(), {
      [ATTR.job]: o.job, [ATTR.queue]: this.#queue, [ATTR.leaseRef]: leaseRef(o.leaseId),
      [ATTR.generation]: o.generation, [ATTR.decisionSeq]: o.seq, [ATTR.attempt]: o.decision.job.attempt ?? 0,
    });
    let l: Lease;
    try {
      l = await this.#accept(o, ctx);
    } catch (err) {
      this.#free(s);
      const e = new Error(`worker: run ${this.#queue}: accept ${o.job}: ${msg(err)}`, { cause: err });
      span.recordException(e);
      span.setStatus({ code: SpanStatusCode.ERROR, message: "not accepted" });
      span.end();
      this.#w._report(e);
      return;
    }
    const onLost = () => this.#wake(); // a lost lease is no longer held
    l.signal.addEventListener("abort", onLost, { once: true });
    try {
      s.lease = l;
      s.state = SlotState.Running;
      this.#slotSettled();
      if (this.#stopped) { // shutting down before the handler started: give it back
        this.#finishing(s);
        const res = await this.#result(l, sdkError("worker: run stopped before the handler started", [ErrorCode.RunStopped]), true);
        endSpan(span, res);
        this.#done(jobOf(o, l, undefined, ctx), res);
        return;
      }
      const hctl = new AbortController();
      const onLease = () => hctl.abort(l.signal.reason);
      const onStop = () => hctl.abort(sdkError(`worker: run ${this.#queue} stopped`, [ErrorCode.RunStopped], this.#stopCtl.signal.reason));
      if (l.signal.aborted) onLease();
      l.signal.addEventListener("abort", onLease, { once: true });
      this.#stopCtl.signal.addEventListener("abort", onStop, { once: true });
      let herr: unknown;
      let job = jobOf(o, l, undefined, ctx);
      try {
        if (this.#effects) job = jobOf(o, l, await otelContext.with(ctx, () => this.#effects!.bind(l, hctl.signal)), ctx);
        await otelContext.with(ctx, () => this.#h(job, hctl.signal)); // spans the handler starts are the run's children
      } catch (err) {
        herr = err ?? new Error("handler threw " + String(err));
      } finally {
        l.signal.removeEventListener("abort", onLease);
        this.#stopCtl.signal.removeEventListener("abort", onStop);
      }
      const shutdown = this.#stopped;
      this.#finishing(s); // the handler no longer runs: its slot is free
      const res = await this.#result(l, herr, shutdown);
      endSpan(span, res);
      this.#done(job, res);
    } finally {
      l.signal.removeEventListener("abort", onLost);
      this.#free(s);
      span.end();
    }
  }

  // Reports what went wrong with an attempt's end and tells its result to
  // RunOptions.onResult.
  #done(job: Job, res: Result): void {
    if (res.reportError) this.#w._report(res.reportError);
    if (!this.#onResult) return;
    try {
      this.#onResult(job, res);
    } catch (err) {
      this.#w._report(new Error(`worker: run ${this.#queue}: onResult threw: ${msg(err)}`, { cause: err }));
    }
  }

  // ACKs o through the worker's ACK batcher (with the ACKs of other offers
  // that arrived meanwhile, in one batch ack), which sends the same input
  // again while its verdict is not learned and the offer's ACK deadline has
  // not passed (an offer read after its deadline is not ACKed at all).
  async #accept(o: Offer, trace: Context): Promise<Lease> {
    const w = this.#w;
    if (w._clock.now() >= o.localDeadline) {
      throw sdkError("the offer's ACK deadline passed before it could be accepted", [ErrorCode.Expired]);
    }
    const res = await w._acks.do({ job: o.job, lease_id: o.leaseId, generation: o.generation }, o.localDeadline, trace);
    if (res.err) throw wrapErr(`worker: accept ${o.job}/${o.leaseId}/${o.generation}`, res.err);
    let d = res.d!;
    const j = d.job;
    if (d.kind === "duplicate" && d.reason === "duplicate_ack" && j.state === "ACTIVE" && j.holder === w.id &&
      j.lease_id === o.leaseId && j.generation === o.generation && j.acked_at) {
      // This ACK was stored twice (its first verdict was not learned, and
      // the duplicate window had passed): the first was accepted at
      // acked_at, after res.t0.
      d = { ...d, at: j.acked_at };
    } else if (d.kind !== "acked") {
      throw new VerdictError(d);
    }
    return Lease._start(w, d, res.t0, { ...leaseOptions({}), trace });
  }

  async #pause(): Promise<void> {
    await sleep(this.#w._clock, 50, this.#w._closeSignal).catch(() => undefined);
  }

  // Reports the result of the handler that threw herr (undefined: resolved)
  // on lease l (shutdown: after the run's shutdown began, or a drain's
  // timeout); returns what it reported and what went wrong.
  async #result(l: Lease, herr: unknown, shutdown: boolean): Promise<Result> {
    const res = newResult(herr);
    if (l.signal.aborted) {
      const cause = l.signal.reason;
      if (isError(cause, ErrorCode.LeaseEnded)) { // the handler completed or released it itself
        res.ended = true;
        return res;
      }
      if (cancelPending(cause)) return this.#reconcile(l, herr);
      res.reportError = new Error(`worker: run ${this.#queue}: job ${l}: authority lost (${msg(cause)}), the handler's end (${herr === undefined ? "resolved" : msg(herr)}) not reported`, { cause });
      return res;
    }
    let err: Error | undefined;
    if (herr === undefined) {
      res.outcome = "SUCCESS";
      err = await this.#settle(l, "complete", () => l._resultVia("SUCCESS", undefined, false));
    } else if (isError(herr, ErrorCode.Permanent)) {
      res.outcome = "FAILED";
      res.permanent = true;
      res.detail = detailOf(herr);
      err = await this.#settle(l, "complete", () => l._resultVia("FAILED", res.detail, true));
    } else if (shutdown) {
      await this.#withdrawn;
      res.released = true;
      err = await this.#settle(l, "release", () => l.release());
    } else {
      res.outcome = "FAILED";
      res.detail = detailOf(herr);
      err = await this.#settle(l, "complete", () => l._resultVia("FAILED", res.detail, false));
    }
    if (err && cancelPending(err)) return this.#reconcile(l, herr); // requested while the result was on its way
    res.reportError = err;
    return res;
  }

  // Answers a cancellation request: cancel ACK, then CANCELLED.
  async #reconcile(l: Lease, herr: unknown): Promise<Result> {
    const res = newResult(herr);
    res.outcome = "CANCELLED";
    res.detail = herr === undefined ? "cancelled on request" : detailOf(`cancelled on request: ${msg(herr)}`);
    const e1 = await this.#settle(l, "cancel_ack", () => l.ackCancel());
    const e2 = await this.#settle(l, "complete", () => l._resultVia("CANCELLED", res.detail, false));
    if (e2) res.reportError = e1 ? new AggregateError([e1, e2], `${e1.message}; ${e2.message}`) : e2;
    return res;
  }

  // Sends one of l's closing inputs, again while its verdict is not
  // learned and the lease's local deadline has not passed; a duplicate
  // verdict says an earlier one was accepted.
  async #settle(l: Lease, what: string, op: () => Promise<void>): Promise<Error | undefined> {
    for (;;) {
      try {
        await op();
        return undefined;
      } catch (err) {
        if (isError(err, ErrorCode.Duplicate)) return undefined;
        if (!isError(err, ErrorCode.NoVerdict) || this.#w.closed || this.#w._clock.now() >= l.deadline) {
          return wrapErr(`worker: run ${this.#queue}: ${what}`, err);
        }
      }
      await this.#pause();
    }
  }

  #finishing(s: Slot): void {
    if (s.state !== SlotState.Finishing) {
      s.state = SlotState.Finishing;
      this.#running--;
    }
    this.#wake();
  }

  #free(s: Slot): void {
    if (!this.#slots.has(s)) return;
    if (s.state !== SlotState.Finishing) this.#running--;
    this.#slots.delete(s);
    this.#wake();
    this.#slotSettled();
  }

  // The slots to announce: the leases held (those of running handlers and
  // of offers being accepted, live at the coordinator) plus the free slots.
  #desired(): number {
    if (this.#quitting) return 0;
    let held = 0;
    let confirmed = 0; // the leases whose ACKs were accepted
    for (const s of this.#slots) {
      if (s.state !== SlotState.Finishing && !endedAtCoordinator(s.lease)) held++;
      if (s.state === SlotState.Running && !endedAtCoordinator(s.lease)) confirmed++;
    }
    const want = this.#concurrency - this.#running + held;
    return this.#declining > 0 ? Math.min(want, confirmed) : want;
  }

  #wake(): void {
    this.#woken = true;
    this.#wakeAnnouncer?.();
  }

  // Keeps the announcement standing and right until the run shuts down:
  // at once, every third of the ttl, and whenever the slots to announce
  // change.
  async #announcer(): Promise<void> {
    await this.#announce();
    while (!this.#quitting) {
      if (!this.#woken) {
        let t: Timer | undefined;
        await new Promise<void>((resolve) => {
          this.#wakeAnnouncer = resolve;
          t = this.#w._clock.setTimer(resolve, this.#due - this.#w._clock.now());
        });
        t?.stop();
        this.#wakeAnnouncer = undefined;
      }
      this.#woken = false;
      if (this.#quitting) return;
      await this.#announce();
    }
  }

  // Sends the announcement if it is due or its slots changed (unless a
  // failed one waits for its retry), and learns its verdict. A refusal
  // stops the run, but for bad_subject (reported, and tried again). One
  // pull at a time, stored in the order decided. It tells whether the
  // announcement standing is the one wanted (stored), and, when not,
  // whether it failed for want of a verdict and may be sent again at once
  // (again): not after a refusal.
  #announce(): Promise<{ stored: boolean; again: boolean }> {
    const p = this.#annBusy.then(async () => {
      const want = this.#desired();
      const t0 = this.#w._clock.now();
      const stale = this.#stale;
      this.#stale = false;
      if (!stale && t0 < this.#due && (!this.#ok || want === this.#annSlots)) {
        return { stored: this.#ok && want === this.#annSlots, again: !this.#ok };
      }
      try {
        await this.#pull(want, this.#quitCtl.signal);
        this.#ok = true;
        this.#annSlots = want;
        this.#due = t0 + this.#every;
        return { stored: true, again: false };
      } catch (err) {
        this.#ok = false;
        const ve = err instanceof VerdictError ? err : err instanceof TenureError && err.cause instanceof VerdictError ? err.cause : undefined;
        if (ve?.reason === "bad_subject") {
          // A log that does not know the pull verb: one whose rules input a
          // server lost with its unsynced tail (PROTOCOL.md §2), until a live
          // coordinator moves it to its revision again. Reported, and tried
          // again (the Go SDK's simulator seeds 13603 and 61869).
          this.#due = this.#w._clock.now() + this.#retry;
          if (!this.#quitting) this.#w._report(err);
        } else if (ve) {
          this.#due = this.#w._clock.now() + this.#every;
          if (!this.#fatal) {
            this.#fatal = err as Error;
            this.#stopCtl.abort(err);
          }
        } else {
          this.#due = this.#w._clock.now() + this.#retry;
          if (!this.#quitting) this.#w._report(err);
          return { stored: false, again: true };
        }
        return { stored: false, again: false };
      }
    });
    this.#annBusy = p.then(() => undefined, () => undefined);
    return p;
  }

  /** @internal The coordinator withdrew the announcement (an offer's ACK deadline passed, §22.4): announce again at once. */
  _withdrawn(): void {
    this.#stale = true;
    this.#wake();
  }

  // Announces slots 0.
  async #withdraw(): Promise<void> {
    const p = this.#annBusy.then(async () => {
      try {
        await this.#pull(0);
      } catch (err) {
        this.#w._report(new Error(`worker: run ${this.#queue}: withdraw: ${msg(err)}`, { cause: err }));
      }
    });
    this.#annBusy = p;
    await p;
  }

  // Announces slots and learns the verdict: resolves on capacity_set,
  // rejects with a VerdictError for a refusal, or an error with code
  // NoVerdict or Closed.
  async #pull(slots: number, signal?: AbortSignal): Promise<void> {
    const p = this.#w._newInput(NO_JOB, "pull", { queue: this.#queue, slots, ttl_ms: this.#ttl });
    const d = await this.#w._send(p, signal).catch((err) => {
      throw wrapErr(`worker: run ${this.#queue}: pull ${slots} slots`, err);
    });
    if (d.kind !== "capacity_set") throw new VerdictError(d);
  }
}

// Records on span how the run ended (#work ends it).
function endSpan(span: Span, res: Result): void {
  if (span.isRecording()) {
    if (res.released) span.setAttribute("tenure.result.released", true);
    else if (res.ended) span.setAttribute("tenure.result.by_handler", true);
    else if (res.outcome !== undefined) span.setAttribute(ATTR.outcome, res.outcome);
    if (res.error !== undefined) span.recordException(res.error instanceof Error ? res.error : String(res.error));
    if (res.reportError) {
      span.recordException(res.reportError);
      span.setStatus({ code: SpanStatusCode.ERROR, message: "result not reported" });
    } else if (res.outcome === "FAILED") {
      span.setStatus({ code: SpanStatusCode.ERROR, message: res.detail });
    }
  }
}

function jobOf(o: Offer, l: Lease, effects: unknown, traceContext: Context): Job {
  const j = o.decision.job;
  return Object.freeze({
    traceContext,
    id: j.id, queue: j.queue ?? "", payload: j.payload, attempt: j.attempt ?? 0, maxAttempts: j.max_attempts ?? 0,
    priority: j.priority ?? 0, submitter: j.submitter ?? "", submittedAt: timeMs(j.submitted_at),
    scheduledFor: scheduledFor(j), lastReason: j.last_reason ?? "", lease: l, effects,
  });
}

// The time a queue job was scheduled for (ms; 0: at once): its run_at, or
// its submit's time plus its delay_ms.
function scheduledFor(j: Offer["decision"]["job"]): number {
  if (j.run_at) return timeMs(j.run_at);
  if (j.delay_ms) return timeMs(j.submitted_at) + j.delay_ms;
  return 0;
}

// Whether l is known to be no longer live at the coordinator: its
// authority was lost otherwise than by a cancellation request (after which
// the lease stays live until its result).
function endedAtCoordinator(l: Lease | undefined): boolean {
  return l !== undefined && l.signal.aborted && !cancelPending(l.signal.reason);
}

// Whether a lease's reason is a cancellation request that leaves the lease
// live until the worker reconciles it (not one that ended it: an
// unresolved cancellation, a cancel deadline passed).
function cancelPending(cause: unknown): boolean {
  return isError(cause, ErrorCode.CancelRequested) && !isError(cause, ErrorCode.LostAuthority);
}

// The text of err as a result's detail: control characters replaced by
// spaces, cut to 256 bytes on a character boundary.
function detailOf(err: unknown): string {
  return cleanText(typeof err === "string" ? err : msg(err));
}

function msg(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function wrapErr(what: string, err: unknown): Error {
  if (err instanceof TenureError) return new TenureError(`${what}: ${err.message}`, err.codes, { cause: err });
  return new Error(`${what}: ${msg(err)}`, { cause: err });
}
