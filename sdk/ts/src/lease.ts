// A lease this worker holds: its fencing token, its AbortSignal (aborted
// with a typed reason the moment authority is lost), the renew loop and
// the inputs that name it (progress, result, release, cancel ACK).

import type { Timer } from "./clock.js";
import { ErrorCode, TenureError, VerdictError, isError, sdkError } from "./errors.js";
import { formatFencingToken, type FencingToken } from "./fence.js";
import { liveState, MAX_DURATION_MS, MAX_SEQ, type Decision, type InputFields, type Outcome, cleanText } from "./protocol.js";
import { grantedMs, wrap, type CallOptions, type Input, type Worker } from "./worker.js";
import type { Context } from "@opentelemetry/api";

/** Default fraction of the lease duration between automatic renewals. */
export const DEFAULT_RENEW_FRACTION = 1 / 3;

/** Configures one lease (acquire, or an offer's accept). */
export interface LeaseOptions {
  /** The lease duration acquire asks for (lease_ms), whole milliseconds; default: the policy's. accept ignores it: the offer fixed it. */
  leaseMs?: number;
  /** Fraction of the lease duration between automatic renewals, in (0, 1). Default 1/3. */
  renewFraction?: number;
  /** Called with every automatic renewal that failed: a VerdictError, or an error with code NoVerdict. Must not throw. */
  onRenewError?: (lease: Lease, err: Error) => void;
}

/** @internal */
export interface ResolvedLeaseOptions {
  leaseMs: number | undefined;
  renewFraction: number;
  onRenewError: ((lease: Lease, err: Error) => void) | undefined;
  /** The trace context the lease's inputs carry when the active context has none (PROTOCOL.md §27). */
  trace?: Context | undefined;
}

/** @internal */
export function leaseOptions(o: LeaseOptions): ResolvedLeaseOptions {
  if (o.leaseMs !== undefined && !(Number.isInteger(o.leaseMs) && o.leaseMs >= 1 && o.leaseMs <= MAX_DURATION_MS)) {
    throw new RangeError(`worker: lease duration ${o.leaseMs} ms: want whole milliseconds from 1 to ${MAX_DURATION_MS}`);
  }
  const f = o.renewFraction ?? DEFAULT_RENEW_FRACTION;
  if (!(f > 0 && f < 1)) throw new RangeError(`worker: renew fraction ${f}: want in (0, 1)`);
  return { leaseMs: o.leaseMs, renewFraction: f, onRenewError: o.onRenewError };
}

function renewInterval(leaseMs: number, fraction: number): number {
  return Math.max(leaseMs * fraction, 1);
}

/** A FIFO mutex: one holder at a time, in call order. */
class Mutex {
  #tail: Promise<void> = Promise.resolve();
  async lock<T>(fn: () => Promise<T>): Promise<T> {
    const prev = this.#tail;
    let release!: () => void;
    this.#tail = new Promise<void>((r) => (release = r));
    await prev;
    try {
      return await fn();
    } finally {
      release();
    }
  }
}

/**
 * One lease this worker holds, from a granted acquire or an accepted
 * offer. While it is held the SDK renews it every renewFraction of its
 * duration. `signal` is aborted, with a TenureError as its reason, the
 * moment the worker must assume it no longer holds the lease; after that
 * it must stop side effects. The object stays usable: complete, release
 * and ackCancel still publish and return the coordinator's verdict (after
 * a cancel request, ackCancel then complete("CANCELLED") is exactly what is
 * expected).
 */
export class Lease {
  /** The lease's fencing token: pass it with every side effect. */
  readonly token: FencingToken;
  readonly #w: Worker;
  readonly #opts: ResolvedLeaseOptions;
  readonly #ctl = new AbortController();
  readonly #renewMu = new Mutex(); // one renewal at a time
  readonly #progressMu = new Mutex(); // progress reports stored in call order
  #cancelRequested = false;
  readonly #cancelWaiters: Array<() => void> = [];

  #deadline: number; // conservative local deadline
  #deadlineTimer: Timer | undefined;
  #renewTimer: Timer | undefined;
  #interval: number;
  #leaseMs: number;
  #renewSeq: number;
  #pendingSeq = 0; // renew_seq of the renewal whose verdict is not known yet
  #pendingT0: number | undefined;
  #progressSeq: number;

  private constructor(w: Worker, d: Decision, t0: number, lo: ResolvedLeaseOptions) {
    const j = d.job;
    this.#w = w;
    this.#opts = lo;
    this.token = Object.freeze({ job: j.id, leaseId: j.lease_id ?? "", generation: j.generation ?? 0 });
    this.#leaseMs = j.lease_ms ?? 0;
    this.#interval = renewInterval(this.#leaseMs, lo.renewFraction);
    this.#renewSeq = j.renew_seq ?? 0;
    this.#progressSeq = j.progress_seq ?? 0;
    // The local deadline: the local time just before the input was first
    // published, plus what the coordinator granted from its own time.
    // The coordinator judged the input after it was published, so its
    // expiry is never earlier.
    this.#deadline = t0 + grantedMs(j.expires_at, d.at);
  }

  /** @internal Starts the lease granted or acked by d, for an input first published at local time t0. */
  static _start(w: Worker, d: Decision, t0: number, lo: ResolvedLeaseOptions): Lease {
    const l = new Lease(w, d, t0, lo);
    if (w._closeSignal.aborted) {
      l._finish(w._closeSignal.reason);
      return l;
    }
    l.#armDeadline();
    w._register(l); // applies stashed decisions about it, which may end it
    if (!l.signal.aborted) l.#scheduleRenew(l.#interval);
    return l;
  }

  /** The job's id. */
  get job(): string {
    return this.token.job;
  }

  /** The lease id. */
  get leaseId(): string {
    return this.token.leaseId;
  }

  /** The generation. */
  get generation(): number {
    return this.token.generation;
  }

  /** The lease duration the coordinator granted with the last accepted grant, ACK or renewal (job.lease_ms), in milliseconds. */
  get leaseMs(): number {
    return this.#leaseMs;
  }

  /** The token as "<job>/<lease id>/<generation>". */
  toString(): string {
    return formatFencingToken(this.token);
  }

  /**
   * Aborted the moment this worker must assume it lost authority. Its
   * reason is a TenureError matching (isError):
   *   - Expired (and LostAuthority): the local conservative deadline passed
   *     (with NoVerdict when a renewal's verdict was not learned), or the
   *     coordinator's expired decision;
   *   - LostAuthority with StaleGeneration, Conflict, ...: a verdict refused a
   *     renewal or another operation (a VerdictError);
   *   - CancelRequested: an operator asked for cancellation;
   *   - LeaseEnded: this worker completed or released the lease;
   *   - Closed: the Worker was closed.
   */
  get signal(): AbortSignal {
    return this.#ctl.signal;
  }

  /**
   * The local conservative deadline, in milliseconds on the SDK's clock
   * (the real one: performance.timeOrigin + performance.now()): the local
   * time just before the last accepted grant, ACK or renewal was published,
   * plus the duration the coordinator granted with it.
   */
  get deadline(): number {
    return this.#deadline;
  }

  /** Whether an operator's cancellation request for this lease reached the worker. */
  get cancelRequested(): boolean {
    return this.#cancelRequested;
  }

  /** Resolves when an operator's cancellation request reaches the worker (then ackCancel, and complete CANCELLED or FAILED). */
  whenCancelRequested(): Promise<void> {
    if (this.#cancelRequested) return Promise.resolve();
    return new Promise((r) => this.#cancelWaiters.push(r));
  }

  /**
   * Reports progress, 0 to 100 (an optional note of at most 256 bytes).
   * The lease numbers reports (progress_seq) and stores them in call order.
   * Progress never renews the lease. Resolves when accepted; rejects with a
   * VerdictError when not, or an error with code NoVerdict.
   */
  progress(value: number, opts: CallOptions & { note?: string } = {}): Promise<void> {
    return this.#progressMu.lock(async () => {
      if (this.#progressSeq >= MAX_SEQ) {
        throw sdkError(`worker: progress ${this}: sequence exhausted`, [ErrorCode.SequenceExhausted]);
      }
      this.#progressSeq++;
      const fields: InputFields = {
        lease_id: this.leaseId, generation: this.generation, progress_seq: this.#progressSeq, value,
        note: opts.note === undefined ? undefined : cleanText(opts.note),
      };
      return this.#do("progress", "progress", fields, opts.signal);
    });
  }

  /**
   * Reports the lease's terminal result. Accepted, it ends the lease (the
   * signal's reason becomes LeaseEnded unless authority was lost before).
   * After a cancel request only CANCELLED and FAILED are accepted. detail:
   * at most 256 bytes, control characters replaced by spaces.
   */
  complete(outcome: Outcome, detail?: string, opts: CallOptions = {}): Promise<void> {
    if (outcome !== "SUCCESS" && outcome !== "FAILED" && outcome !== "CANCELLED") {
      return Promise.reject(new TypeError(`worker: complete: outcome ${JSON.stringify(outcome)}`));
    }
    return this.#result(outcome, detail, false, opts.signal);
  }

  /**
   * Reports FAILED with "permanent":true: a queue job's attempt that failed
   * so is not retried, the job ends FAILED at once (§22.4).
   */
  failPermanently(detail?: string, opts: CallOptions = {}): Promise<void> {
    return this.#result("FAILED", detail, true, opts.signal);
  }

  #result(outcome: Outcome, detail: string | undefined, permanent: boolean, signal?: AbortSignal): Promise<void> {
    return this.#do("complete", "result", {
      lease_id: this.leaseId, generation: this.generation, outcome,
      detail: detail ? cleanText(detail) : undefined, permanent: permanent ? true : undefined,
    }, signal);
  }

  /**
   * @internal Reports the terminal result through the worker's result
   * batcher (run(): with the results of other leases that end meanwhile,
   * in one batch result), which sends the same input again while its
   * verdict is not learned and the lease's local deadline has not passed.
   * Like complete, it resolves when the result was accepted.
   */
  async _resultVia(outcome: Outcome, detail: string | undefined, permanent: boolean): Promise<void> {
    const res = await this.#w._results.do({
      job: this.job, lease_id: this.leaseId, generation: this.generation, outcome,
      detail: detail ? cleanText(detail) : undefined, permanent: permanent ? true : undefined,
    }, this.#deadline, this.#opts.trace);
    if (res.err) throw wrap(`worker: complete ${this}`, res.err);
    const err = this.#observe(res.d!);
    if (err) throw err;
  }

  /** Gives the lease back without a result; accepted, it ends the lease. Refused after a cancel request (reconcile instead). */
  release(opts: CallOptions = {}): Promise<void> {
    return this.#do("release", "release", { lease_id: this.leaseId, generation: this.generation }, opts.signal);
  }

  /** Acknowledges a cancellation request: the worker has stopped. Follow it with complete("CANCELLED") or complete("FAILED"). */
  ackCancel(opts: CallOptions = {}): Promise<void> {
    return this.#do("cancel_ack", "cancel_ack", { lease_id: this.leaseId, generation: this.generation }, opts.signal);
  }

  async #do(op: string, verb: "progress" | "result" | "release" | "cancel_ack", fields: InputFields, signal?: AbortSignal): Promise<void> {
    const p = this.#input(verb, fields);
    let d: Decision;
    try {
      d = await this.#w._send(p, signal);
    } catch (err) {
      throw wrap(`worker: ${op} ${this}`, err);
    }
    const err = this.#observe(d);
    if (err) throw err;
  }

  // An input of this lease: its publish attempts are bounded by the
  // lease's local deadline.
  #input(verb: "progress" | "result" | "release" | "cancel_ack", fields: InputFields): Input {
    const p = this.#w._newInput(this.job, verb, fields, this.#opts.trace);
    p.deadline = this.#deadline;
    return p;
  }

  // Applies the verdict of one of this lease's operations and returns it
  // as an error (undefined when accepted).
  #observe(d: Decision): VerdictError | undefined {
    const err = d.accepted ? undefined : new VerdictError(d);
    if (err?.is(ErrorCode.CancelRequested)) {
      this.#lose(err); // first: once cancelRequested is set, the signal is aborted
      this.#markCancel();
    }
    if (err?.is(ErrorCode.LostAuthority)) this.#lose(err);
    const j = d.job;
    if (j.id === this.job && (j.generation ?? 0) !== 0 && (j.generation !== this.generation || !liveState(j.state))) {
      this._finish(err ?? sdkError(`worker: lease ${this} ended`, [ErrorCode.LeaseEnded]));
      this.#w._unregister(this);
    }
    return err;
  }

  /**
   * @internal Applies a decision about this lease that no call of it
   * caused (cancel request, expiry, revocation); reports whether the lease
   * has ended.
   */
  _handle(d: Decision): boolean {
    if ((d.job.generation ?? 0) !== this.generation) return false;
    switch (d.kind) {
      case "cancel_requested":
        this.#lose(new VerdictError(d));
        this.#markCancel();
        return false;
      case "expired":
        this._finish(new VerdictError(d));
        return true;
      case "unresolved":
        this._finish(new VerdictError(d));
        this.#markCancel();
        return true;
      case "resolved":
        if (d.reason === "lease_revoked" || d.reason === "settled") {
          this._finish(new VerdictError(d));
          return true;
        }
    }
    return false;
  }

  #markCancel(): void {
    if (this.#cancelRequested) return;
    this.#cancelRequested = true;
    for (const r of this.#cancelWaiters.splice(0)) r();
  }

  // Aborts the signal (the first reason wins) and stops the timers.
  #lose(reason: unknown): void {
    if (!this.#ctl.signal.aborted) this.#ctl.abort(reason);
    this.#deadlineTimer?.stop();
    this.#renewTimer?.stop();
  }

  /** @internal Ends the lease locally. */
  _finish(reason: unknown): void {
    this.#lose(reason);
  }

  #armDeadline(): void {
    this.#deadlineTimer?.stop();
    const clock = this.#w._clock;
    this.#deadlineTimer = clock.setTimer(() => this.#onDeadline(), this.#deadline - clock.now());
  }

  #onDeadline(): void {
    if (this.#w._clock.now() < this.#deadline) {
      this.#armDeadline(); // extended meanwhile
      return;
    }
    const at = new Date(this.#deadline).toISOString();
    // Authority is lost: LostAuthority with Expired, as the Go SDK's cause.
    if (this.#pendingSeq !== 0) {
      this.#lose(new TenureError(`worker: lease ${this}: local deadline ${at} passed before the renewal's verdict was learned`,
        [ErrorCode.Expired, ErrorCode.NoVerdict, ErrorCode.LostAuthority]));
      return;
    }
    this.#lose(new TenureError(`worker: lease ${this}: local deadline ${at} passed`, [ErrorCode.Expired, ErrorCode.LostAuthority]));
  }

  // Moves the local deadline after an accepted renewal first published at
  // t0, extended by durMs from the coordinator's time.
  #extend(t0: number, durMs: number, leaseMs: number | undefined): void {
    if (this.signal.aborted) return; // authority given up is never taken back
    this.#deadline = t0 + durMs;
    this.#armDeadline();
    if (leaseMs !== undefined && leaseMs > 0) {
      this.#leaseMs = leaseMs;
      this.#interval = renewInterval(leaseMs, this.#opts.renewFraction);
    }
  }

  #scheduleRenew(ms: number): void {
    this.#renewTimer?.stop();
    this.#renewTimer = this.#w._clock.setTimer(() => void this.#loopTick(), ms);
  }

  // One turn of the renew loop.
  async #loopTick(): Promise<void> {
    if (this.signal.aborted) return;
    let err: Error | undefined;
    try {
      await this.#w._track(this.#renewMu.lock(() => this.#renew()));
    } catch (e) {
      err = e instanceof Error ? e : new Error(String(e));
      try {
        this.#opts.onRenewError?.(this, err);
      } catch {
        // the handler's own error is nobody's
      }
    }
    if (this.signal.aborted) return;
    let next = this.#interval;
    if (err && isError(err, ErrorCode.NoVerdict)) next = Math.max(next / 4, 5); // retry the same renewal soon
    const half = (this.#deadline - this.#w._clock.now()) / 2;
    if (half < next) next = Math.max(half, 1);
    this.#scheduleRenew(next);
  }

  /**
   * Renews the lease now, besides the automatic renewals (one renewal of a
   * lease is in flight at a time; like the automatic ones it coalesces with
   * the worker's other renewals due at the same time). Resolves once the
   * coordinator accepted it; rejects with a VerdictError when it did not (a
   * refusal that ends authority also aborts signal), or an error with code
   * NoVerdict. signal is checked before the renewal is sent; once sent, the
   * verdict is awaited (at most the Worker's verdictTimeoutMs).
   */
  renew(opts: CallOptions = {}): Promise<void> {
    return this.#renewMu.lock(async () => {
      if (opts.signal?.aborted) throw opts.signal.reason;
      await this.#renew();
    });
  }

  // Sends the pending renewal, or a new one with the next renew_seq, and
  // applies its verdict. A renewal whose verdict is not learned stays
  // pending: the next attempt resends the same renew_seq (a
  // duplicate_renew verdict then says the first was accepted). The caller
  // holds renewMu.
  async #renew(): Promise<void> {
    if (this.#pendingSeq === 0) {
      if (this.#renewSeq >= MAX_SEQ) {
        const err = sdkError(`worker: renew ${this}: sequence exhausted`, [ErrorCode.SequenceExhausted, ErrorCode.LostAuthority]);
        this.#lose(err);
        throw err;
      }
      this.#renewSeq++;
      this.#pendingSeq = this.#renewSeq;
      this.#pendingT0 = undefined;
    }
    const seq = this.#pendingSeq;
    const res = await this.#w._renewVia(
      { job: this.job, lease_id: this.leaseId, generation: this.generation, renew_seq: seq }, this.#deadline, this.#opts.trace);
    if (this.#pendingSeq === seq && this.#pendingT0 === undefined) this.#pendingT0 = res.t0;
    const t0 = this.#pendingT0 ?? res.t0;
    if (!res.err && this.#pendingSeq === seq) {
      this.#pendingSeq = 0;
      this.#pendingT0 = undefined;
    }
    if (res.err) throw wrap(`worker: renew ${this}`, res.err);
    const d = res.d!;
    if (d.kind === "renewed") {
      this.#extend(t0, grantedMs(d.job.expires_at, d.at), d.job.lease_ms);
      return;
    }
    if (d.kind === "duplicate" && d.reason === "duplicate_renew") {
      // Stored twice (an earlier attempt's verdict was not learned): the
      // first was accepted at renew_at, after t0.
      this.#extend(t0, grantedMs(d.job.expires_at, d.job.renew_at), d.job.lease_ms);
      return;
    }
    const err = this.#observe(d);
    if (err) throw err;
  }
}
