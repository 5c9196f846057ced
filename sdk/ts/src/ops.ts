// The dispatcher's side (the Go SDK's package ops, its submits): submit a
// job to a queue, or many in few inputs (batch submits, rules revision 7,
// PROTOCOL.md §22.9), each job judged on its own with its own verdict. One
// decision reader per Dispatcher (a consumer of tenure.out.<id>.>, created
// once at connect and recovered when lost, as a Worker reads its own)
// learns every verdict: a submit costs its publish and nothing more.

import { randomBytes } from "node:crypto";

import type { NatsConnection } from "@nats-io/nats-core";
import { jetstream, type JetStreamClient, type PubAck } from "@nats-io/jetstream";

import { closedError, ErrorCode, sdkError, TenureError, VerdictError } from "./errors.js";
import { Follower, type FollowMsg } from "./follow.js";
import { addresseeFilter, decodeDecision, derivedKind, MAX_BATCH, MAX_DURATION_MS, NO_JOB, validToken, type Decision } from "./protocol.js";
import { Stash, addWaiter, dropWaiter, wants } from "./stash.js";
import { retryable } from "./worker.js";

/** The most bytes of an input body (events.MaxInputBytes): a batch submit's jobs with their payloads fit in it. */
export const MAX_INPUT_BYTES = 65_536;
/** A submitted job's payload, at most, in bytes of UTF-8 (events.MaxPayloadBytes). */
export const MAX_PAYLOAD_BYTES = 4096;
/** Priorities are 0 (default) to 9. */
export const MAX_PRIORITY = 9;
/** The most attempts a job may be given. */
export const MAX_ATTEMPTS = 1000;
/** The longest delay_ms (366 days). */
export const MAX_DELAY_MS = 366 * 86_400_000;
/** submitMany's batch submits published and awaiting their verdicts at once, at most. */
export const MAX_SUBMITS_IN_FLIGHT = 8;
/** Bounds one call by default: its publish and its verdicts. */
export const DEFAULT_DISPATCHER_TIMEOUT_MS = 10_000;

// Inactivity threshold of the decision consumer: the consumer of a process
// that died is removed that long after its last pull.
const CONSUMER_INACTIVE_MS = 30_000;

/** The optional fields of a submit (PROTOCOL.md §22.1); absent: the protocol's default. */
export interface SubmitOptions {
  /** 0 (default) to 9; higher is offered first. */
  priority?: number;
  /** The attempt budget, 1 to 1000 (default 3). */
  maxAttempts?: number;
  /** The backoff before the first retry, ms (default 1000); doubled for each later one up to backoffMaxMs. */
  backoffMs?: number;
  /** The backoff's cap, ms (default 3600000), at least backoffMs. */
  backoffMaxMs?: number;
  /** Each attempt's lease, ms (default: the policy's default_lease_ms at the offer). */
  leaseMs?: number;
  /** Each attempt's ACK timeout, ms (default: the policy's ack_timeout_ms). */
  ackTimeoutMs?: number;
  /** Opaque, at most 4096 bytes of UTF-8; an empty string is a payload. */
  payload?: string;
  /** Rules revision 8 (§26.1): not offered before this time (single submits only). Excludes delayMs. */
  runAt?: Date;
  /** Rules revision 8: not offered before the submit's stored time plus this, 1 ms to 366 days (single submits only). */
  delayMs?: number;
  /** Rules revision 8 (§26.2): no other job of the queue naming this key while this one holds it (single submits only). */
  uniqueKey?: string;
  /** Rules revision 8: the job holds its key this long after it ended too; needs uniqueKey (single submits only). */
  uniqueForMs?: number;
  /**
   * Rules revision 9 (§26.4): the job's concurrency key; while the queue
   * has a limit of the key (an operator's, tenure limit), at most its
   * max_active jobs naming it are offered or active at once (single
   * submits only).
   */
  concurrencyKey?: string;
}

/** One job of submitMany. Its options take no runAt, delayMs, uniqueKey, uniqueForMs or concurrencyKey: such a job goes alone, with submit. */
export interface SubmitJob {
  id: string;
  queue: string;
  options?: Omit<SubmitOptions, "runAt" | "delayMs" | "uniqueKey" | "uniqueForMs" | "concurrencyKey">;
}

/** What became of one job of submitMany. */
export interface SubmitResult {
  /**
   * The job's verdict: submitted/ok, or duplicate/duplicate_submit for a job
   * already submitted with the same fields (no error), or a refusal;
   * undefined when no verdict was learned.
   */
  decision: Decision | undefined;
  /**
   * undefined when the job is in its queue (submitted now or before with
   * the same fields); a VerdictError for a refusal (submit_conflicts,
   * job_exists, duration_out_of_policy, ...); a TenureError with code
   * NoVerdict when its input's verdicts were not learned in time (it may
   * still be decided: submitting the same jobs again is safe); Closed; or
   * the publish's error.
   */
  error: Error | undefined;
}

/** Configures a Dispatcher. */
export interface DispatcherOptions {
  /** Names the input (<prefix>_IN) and decision (<prefix>_OUT) streams. Default "TENURE". */
  streamPrefix?: string;
  /** The JetStream API prefix. Default "$JS.API" (dispatchers share the deployment's account, PROTOCOL.md §4). */
  apiPrefix?: string;
  /** Bounds each call without a signal of its own that ends it first: the publishes and the verdicts. Default 10 s. */
  timeoutMs?: number;
  /** Receives asynchronous errors: the decision reader's (its replacements, dropped messages), undecodable decisions. */
  onError?: (err: Error) => void;
}

/** Options of one call of a Dispatcher. */
export interface DispatchCallOptions {
  /** Abandons the call (an input published may still be judged: the error is NoVerdict). */
  signal?: AbortSignal;
}

interface Waiter {
  ds: Decision[];
  n: number;
  wake: (() => void) | null;
  /** Its input's verb and job: it takes only their verdicts (wants, stash.ts). */
  verb: string;
  job: string;
}

/**
 * Connects dispatcher `id` (an ops actor: server permissions should let it
 * publish only on tenure.in.ops.<id>.>) over nc, which the caller keeps
 * owning. Before it returns it creates the consumer that reads the
 * decisions addressed to the dispatcher (tenure.out.<id>.>) from the
 * decision stream's next sequence on. Partitioned deployments (PROTOCOL.md
 * §18) are not supported: the consumer cannot be created without
 * <prefix>_OUT.
 */
export async function connectDispatcher(nc: NatsConnection, id: string, opts: DispatcherOptions = {}): Promise<Dispatcher> {
  if (!validToken(id)) throw new TypeError(`ops: invalid id ${JSON.stringify(id)}: want 1 to 64 of [A-Za-z0-9_-], not "_"`);
  const prefix = opts.streamPrefix ?? "TENURE";
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(prefix)) throw new TypeError(`ops: invalid stream prefix ${JSON.stringify(prefix)}`);
  const timeoutMs = opts.timeoutMs ?? DEFAULT_DISPATCHER_TIMEOUT_MS;
  if (!(timeoutMs > 0) || !Number.isFinite(timeoutMs)) throw new RangeError(`ops: timeoutMs ${timeoutMs}: want > 0`);
  const apiPrefix = opts.apiPrefix ?? "$JS.API";
  const js = jetstream(nc, { apiPrefix, timeout: timeoutMs });
  const d = new Dispatcher(id, js, `${prefix}_IN`, timeoutMs, opts.onError);
  await d._start(nc, apiPrefix, `${prefix}_OUT`);
  return d;
}

/**
 * One ops actor that submits jobs: create it with connectDispatcher(),
 * close it when done. Its methods may be called concurrently.
 */
export class Dispatcher {
  readonly id: string;
  readonly #js: JetStreamClient;
  readonly #in: string;
  readonly #timeoutMs: number;
  readonly #onError: ((err: Error) => void) | undefined;
  readonly #closeCtl = new AbortController();
  #follower: Follower | undefined;
  #out = "";
  // More than one waiter at a sequence only after a lost tail (wants).
  readonly #waiters = new Map<number, Waiter[]>();
  readonly #stash = new Stash();
  // Set once the log refused a batch submit as a subject it does not know
  // (a log below rules revision 7): submitMany then submits one job per input.
  #noBatch = false;

  /** @internal */
  constructor(id: string, js: JetStreamClient, inStream: string, timeoutMs: number, onError: ((err: Error) => void) | undefined) {
    this.id = id;
    this.#js = js;
    this.#in = inStream;
    this.#timeoutMs = timeoutMs;
    this.#onError = onError;
  }

  /** @internal Creates the decision consumer and starts reading; rejects when none was created within the timeout. */
  async _start(nc: NatsConnection, apiPrefix: string, out: string): Promise<void> {
    this.#out = out;
    // Names of this process's own: 128 random bits, so that no other
    // client can hold or aim at them; the reader deletes its own consumer
    // before it uses a name again.
    const tok = randomBytes(16).toString("hex");
    const f = new Follower(nc, {
      stream: out, filter: addresseeFilter(this.id), names: [`tenure_${tok}_0`, `tenure_${tok}_1`], apiPrefix, fromNew: true,
      inactiveThresholdMs: CONSUMER_INACTIVE_MS, pullAhead: 4096,
      onError: (err) => this.#report(new Error(`ops: decision stream ${out}: ${err.message}`, { cause: err })),
      onDrop: (reason, subject) => this.#report(new Error(
        `ops: decision stream ${out}: dropped a message no consumer of this client sent (${reason}) on ${subject}`)),
    }, (m) => this.#onMsg(m));
    this.#follower = f;
    f.start();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), this.#timeoutMs)));
    const late = await Promise.race([f.ready.then(() => false), timedOut]);
    clearTimeout(timer);
    if (late) {
      const err = f.lastError;
      await f.stop();
      throw new Error(`ops: decision consumer on ${out}: ${err ? err.message : `none created in ${this.#timeoutMs} ms`}`, { cause: err });
    }
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.#closeCtl.signal.aborted;
  }

  /**
   * Stops reading decisions and deletes the consumer; calls waiting for a
   * verdict reject with a Closed error (their inputs may still be
   * decided). Does not close the NATS connection. Idempotent.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.#closeCtl.abort(closedError());
    for (const ws of this.#waiters.values()) for (const wt of ws) wt.wake?.();
    await this.#follower?.stop();
  }

  /**
   * Puts job in queue (PROTOCOL.md §22.1) and resolves with its verdict:
   * submitted/ok, or duplicate/duplicate_submit when the job was submitted
   * with the same fields before (a resend: no error; check kind to tell
   * them apart). A refusal rejects with a VerdictError (rejected/
   * submit_conflicts, job_exists, duration_out_of_policy; duplicate/
   * duplicate_unique_key, whose decision's duplicate_of names the job
   * holding the key); an unknown outcome with a TenureError with code
   * NoVerdict (submitting again is safe). Invalid arguments throw at once
   * (TypeError, RangeError) and publish nothing.
   */
  async submit(job: string, queue: string, opts: SubmitOptions & DispatchCallOptions = {}): Promise<Decision> {
    const fields = submitFields(job, queue, opts, false);
    const subject = `tenure.in.ops.${this.id}.${job}.submit`;
    const ds = await this.#call(opts.signal, (signal) => this.#sendN(subject, encode(fields), 1, signal));
    return verdictOf(ds[0]!);
  }

  /**
   * Submits jobs in few inputs (PROTOCOL.md §22.9): batch submits of up to
   * 256 jobs and 64 KiB each, in the order given, up to eight awaiting
   * their verdicts at once, each job judged on its own with its own
   * verdict. Resolves with one result per job, in the order of jobs (see
   * SubmitResult: check each one's error). Every job is checked first: an
   * invalid one (ids and queues are tokens, the options in their ranges, no
   * runAt, delayMs or unique key: those go alone, with submit) throws at
   * once, naming it, and nothing is published. A job named twice is
   * submitted twice (the second a duplicate of the first when its fields
   * are equal, else rejected/submit_conflicts). A log below rules revision
   * 7 (a coordinator older than batches) refuses a batch as bad_subject:
   * its jobs, and every later call's, are then submitted one per input.
   */
  async submitMany(jobs: readonly SubmitJob[], opts: DispatchCallOptions = {}): Promise<SubmitResult[]> {
    const elems = jobs.map((j, i) => {
      try {
        return submitFields(j.id, j.queue, j.options ?? {}, true);
      } catch (err) {
        const e = err as Error;
        throw new (e.constructor as ErrorConstructor)(`ops: submit many: job ${i}: ${e.message}`);
      }
    });
    if (this.closed) throw closedError();
    const results: SubmitResult[] = jobs.map(() => ({ decision: undefined, error: undefined }));
    // Cut into batches, in order: at most 256 jobs and the body's bytes.
    const batches: number[][] = [];
    let cur: number[] = [];
    let size = 0;
    const enc = new TextEncoder();
    const bodies = elems.map((f, i) => enc.encode(JSON.stringify({ job: jobs[i]!.id, ...f })).length);
    for (let i = 0; i < elems.length; i++) {
      const n = bodies[i]! + 1;
      if (cur.length > 0 && (cur.length === MAX_BATCH || size + n > MAX_INPUT_BYTES - 64)) {
        batches.push(cur);
        cur = [];
        size = 0;
      }
      cur.push(i);
      size += n;
    }
    if (cur.length > 0) batches.push(cur);
    // Published in order (a submitter's jobs are offered in the order they
    // were stored), at most MAX_SUBMITS_IN_FLIGHT awaiting verdicts.
    const running = new Set<Promise<void>>();
    for (const b of batches) {
      while (running.size >= MAX_SUBMITS_IN_FLIGHT) await Promise.race(running);
      if (opts.signal?.aborted || this.closed) {
        const why = this.closed ? closedError() : sdkError(`ops: submit: not sent: ${msg(opts.signal!.reason)}`, [ErrorCode.NoVerdict], opts.signal!.reason);
        for (const i of b) results[i]!.error = why;
        continue;
      }
      const t = this.#batch(b, jobs, elems, results, opts.signal).catch((err) => {
        for (const i of b) results[i]!.error ??= err as Error;
      });
      const tracked = t.finally(() => running.delete(tracked));
      running.add(tracked);
    }
    await Promise.all(running);
    return results;
  }

  // Submits the jobs idx (indexes into jobs and elems) in one batch submit,
  // or one by one (a single job, or a log without batches), and fills their results.
  async #batch(idx: number[], jobs: readonly SubmitJob[], elems: Fields[], results: SubmitResult[], signal: AbortSignal | undefined): Promise<void> {
    if (idx.length === 1 || this.#noBatch) return this.#each(idx, jobs, elems, results, signal);
    const body = encode({ jobs: idx.map((i) => ({ job: jobs[i]!.id, ...elems[i]! })) });
    const subject = `tenure.in.ops.${this.id}.${NO_JOB}.submit`;
    let ds: Decision[];
    let err: Error | undefined;
    try {
      ds = await this.#call(signal, (s) => this.#sendN(subject, body, idx.length, s, true));
    } catch (e) {
      const te = e as Error & { partial?: Decision[] };
      ds = te.partial ?? [];
      err = te;
    }
    if (ds.length === 1 && ds[0]!.job.id === NO_JOB) {
      const d = ds[0]!;
      if (d.kind === "rejected" && d.reason === "bad_subject") { // a log below rules revision 7: no batches there
        this.#noBatch = true;
        return this.#each(idx, jobs, elems, results, signal);
      }
      for (const i of idx) results[i] = { decision: d, error: new VerdictError(d) }; // the whole input refused
      return;
    }
    idx.forEach((i, k) => {
      const d = ds[k];
      if (!d) {
        results[i]!.error = err ?? sdkError(`ops: submit ${jobs[i]!.id}: verdict missing`, [ErrorCode.NoVerdict]);
      } else if (d.job.id !== jobs[i]!.id) {
        results[i]!.error = new Error(`ops: submit ${jobs[i]!.id}: verdict ${k} of the batch is about job ${d.job.id}`);
      } else {
        results[i] = resultOf(d);
      }
    });
  }

  async #each(idx: number[], jobs: readonly SubmitJob[], elems: Fields[], results: SubmitResult[], signal: AbortSignal | undefined): Promise<void> {
    for (const i of idx) {
      const subject = `tenure.in.ops.${this.id}.${jobs[i]!.id}.submit`;
      try {
        const ds = await this.#call(signal, (s) => this.#sendN(subject, encode(elems[i]!), 1, s));
        results[i] = resultOf(ds[0]!);
      } catch (err) {
        results[i]!.error = err as Error;
      }
    }
  }

  // Runs fn under one signal: the call's timeout, close(), the caller's signal.
  async #call<T>(signal: AbortSignal | undefined, fn: (s: AbortSignal) => Promise<T>): Promise<T> {
    if (this.closed) throw closedError();
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new Error(`no verdict in ${this.#timeoutMs} ms`)), this.#timeoutMs);
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
      return await fn(ctl.signal);
    } finally {
      clearTimeout(timer);
      for (const s of sources) s.removeEventListener("abort", onAbort);
    }
  }

  // Publishes body on subject and waits for its n verdicts (or one about
  // no job: the whole input refused). Rejects with Closed, or an error with
  // code NoVerdict carrying the verdicts learned so far (partial) when
  // partial is set.
  async #sendN(subject: string, body: Uint8Array, n: number, signal: AbortSignal, partial = false): Promise<Decision[]> {
    let seq: number;
    try {
      seq = await this.#publish(subject, body, signal);
    } catch (err) {
      if (this.closed) throw closedError();
      throw sdkError(`ops: publish ${subject}: ${msg(err)}`, [ErrorCode.NoVerdict], err);
    }
    // The subject's last two tokens are the input's job and verb.
    const tokens = subject.split(".");
    const verb = tokens[tokens.length - 1]!, job = tokens[tokens.length - 2]!;
    const ds = this.#stash.takeVerdicts(seq, n, (d) => wants(verb, job, d));
    if (ds.length >= n || ds.some((d) => d.job.id === NO_JOB)) return ds;
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
    if (wt.ds.length >= n || wt.ds.some((d) => d.job.id === NO_JOB)) return wt.ds;
    const err: TenureError & { partial?: Decision[] } = this.closed ? closedError()
      : sdkError(`ops: no verdict for input ${seq} (${wt.ds.length} of ${n}): ${msg(signal.reason)}`, [ErrorCode.NoVerdict], signal.reason);
    if (partial) err.partial = wt.ds;
    throw err;
  }

  // Stores body on subject in the input stream and returns its sequence.
  // Attempts whose outcome is unknown are sent again with the same Msg-Id
  // until signal is aborted: if an earlier one was stored, the stream
  // answers with its sequence.
  async #publish(subject: string, body: Uint8Array, signal: AbortSignal): Promise<number> {
    let msgID = this.#newMsgId();
    let first = true;
    let wait = 10;
    for (;;) {
      if (signal.aborted) throw signal.reason;
      let ack: PubAck | undefined;
      let lastErr: unknown;
      try {
        ack = await this.#js.publish(subject, body, { msgID, expect: { streamName: this.#in }, timeout: Math.min(2000, this.#timeoutMs) });
      } catch (err) {
        lastErr = err;
      }
      if (ack) {
        if (ack.duplicate && first) {
          // Never sent before: another publisher's message holds this
          // Msg-Id (the duplicate window is stream-wide). Resend under a
          // fresh one rather than adopt it.
          this.#report(new Error(`ops: ${subject}: Nats-Msg-Id ${msgID} was already used by input ${ack.seq} of another publisher; resending`));
          msgID = this.#newMsgId();
          continue;
        }
        return ack.seq;
      }
      first = false;
      if (!retryable(lastErr) || signal.aborted) throw lastErr;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, wait);
        signal.addEventListener("abort", () => {
          clearTimeout(t);
          resolve();
        }, { once: true });
      });
      wait = Math.min(2 * wait, 500);
    }
  }

  // "<id>-<random UUID>": namespaced by the actor and unguessable (§4, §14).
  #newMsgId(): string {
    return `${this.id}-${crypto.randomUUID()}`;
  }

  #onMsg(m: FollowMsg): void {
    if (this.closed) return;
    if (!m.subject.startsWith(`tenure.out.${this.id}.`)) {
      this.#report(new Error(`ops: dropped a message of stream ${this.#out} on ${m.subject}: not a decision addressed to ${this.id}`));
      return;
    }
    let d: Decision;
    try {
      d = decodeDecision(m.data);
    } catch (err) {
      this.#report(new Error(`ops: decision ${m.subject}: ${msg(err)}`, { cause: err }));
      return;
    }
    // Derived decisions (the requeues and DEAD ends of the jobs it
    // submitted) and the verdicts of others' inputs are nobody's here.
    if (derivedKind(d.kind) || d.input.role !== "ops" || d.input.actor !== this.id) return;
    const wt = this.#waiters.get(d.cause)?.find((x) => wants(x.verb, x.job, d));
    if (wt) {
      wt.ds.push(d);
      if (wt.ds.length >= wt.n || d.job.id === NO_JOB) {
        dropWaiter(this.#waiters, d.cause, wt);
        wt.wake?.();
      }
      return;
    }
    const err = this.#stash.addVerdict(d.cause, d, performance.now()); // its PubAck has not come back yet
    if (err) this.#report(err);
  }

  #report(err: Error): void {
    if (this.closed || !this.#onError) return;
    try {
      this.#onError(err);
    } catch {
      // an error handler's own error is nobody's
    }
  }
}

type Fields = Record<string, string | number>;

// The fields of a submit of job to queue with o, checked as the
// coordinator's decoder checks them; batch: an element of a batch submit,
// which takes none of revision 8's fields.
function submitFields(job: string, queue: string, o: SubmitOptions, batch: boolean): Fields {
  if (typeof job !== "string" || !validToken(job)) throw new TypeError(`ops: submit: invalid job id ${JSON.stringify(job)}`);
  if (typeof queue !== "string" || !validToken(queue)) throw new TypeError(`ops: submit ${job}: invalid queue name ${JSON.stringify(queue)}`);
  const f: Fields = { queue };
  const int = (name: string, v: number | undefined, lo: number, hi: number): number | undefined => {
    if (v === undefined) return undefined;
    if (!Number.isSafeInteger(v) || v < lo || v > hi) throw new RangeError(`ops: submit ${job}: ${name} ${v}: want whole numbers from ${lo} to ${hi}`);
    return v;
  };
  const put = (k: string, v: number | string | undefined) => {
    if (v !== undefined) f[k] = v;
  };
  put("priority", int("priority", o.priority, 0, MAX_PRIORITY) || undefined);
  put("max_attempts", int("max attempts", o.maxAttempts, 1, MAX_ATTEMPTS));
  const backoff = int("backoff (ms)", o.backoffMs, 1, MAX_DURATION_MS);
  const cap = int("backoff cap (ms)", o.backoffMaxMs, 1, MAX_DURATION_MS);
  if ((cap ?? 3_600_000) < (backoff ?? 1000)) throw new RangeError(`ops: submit ${job}: backoff cap ${cap ?? 3_600_000} ms is below the backoff ${backoff ?? 1000} ms`);
  put("backoff_ms", backoff);
  put("backoff_max_ms", cap);
  put("lease_ms", int("lease (ms)", o.leaseMs, 1, MAX_DURATION_MS));
  put("ack_timeout_ms", int("ACK timeout (ms)", o.ackTimeoutMs, 1, MAX_DURATION_MS));
  if (o.payload !== undefined) {
    if (typeof o.payload !== "string" || !o.payload.isWellFormed()) throw new TypeError(`ops: submit ${job}: the payload is not a well-formed string`);
    const n = new TextEncoder().encode(o.payload).length;
    if (n > MAX_PAYLOAD_BYTES) throw new RangeError(`ops: submit ${job}: payload of ${n} bytes: at most ${MAX_PAYLOAD_BYTES}`);
    f.payload = o.payload;
  }
  const flow = o.runAt !== undefined || o.delayMs !== undefined || o.uniqueKey !== undefined || o.uniqueForMs !== undefined || o.concurrencyKey !== undefined;
  if (flow && batch) throw new TypeError(`ops: submit ${job}: a run_at, delay, unique key or concurrency key goes in a single submit (submit), not a batch`);
  if (o.runAt !== undefined) {
    if (o.delayMs !== undefined) throw new TypeError(`ops: submit ${job}: runAt and delayMs exclude each other`);
    const t = o.runAt instanceof Date ? o.runAt.getTime() : NaN;
    const y = o.runAt instanceof Date ? o.runAt.getUTCFullYear() : 0;
    if (!Number.isFinite(t) || t === 0 || y < 1678 || y > 2261) throw new RangeError(`ops: submit ${job}: run at ${String(o.runAt)}: want a Date from 1678 to 2261, not the Unix epoch itself`);
    f.run_at = o.runAt.toISOString();
  }
  put("delay_ms", int("delay (ms)", o.delayMs, 1, MAX_DELAY_MS));
  if (o.uniqueKey !== undefined) {
    if (typeof o.uniqueKey !== "string" || !validToken(o.uniqueKey)) throw new TypeError(`ops: submit ${job}: unique key ${JSON.stringify(o.uniqueKey)}: want 1 to 64 of [A-Za-z0-9_-], not _`);
    f.unique_key = o.uniqueKey;
  }
  if (o.uniqueForMs !== undefined) {
    if (o.uniqueKey === undefined) throw new TypeError(`ops: submit ${job}: uniqueForMs needs a uniqueKey`);
    put("unique_for_ms", int("unique for (ms)", o.uniqueForMs, 1, MAX_DURATION_MS));
  }
  if (o.concurrencyKey !== undefined) {
    if (typeof o.concurrencyKey !== "string" || !validToken(o.concurrencyKey)) throw new TypeError(`ops: submit ${job}: concurrency key ${JSON.stringify(o.concurrencyKey)}: want 1 to 64 of [A-Za-z0-9_-], not _`);
    f.concurrency_key = o.concurrencyKey;
  }
  return f;
}

// An ops input body: {"v":1, ...fields}.
function encode(fields: Record<string, unknown>): Uint8Array {
  return new TextEncoder().encode(JSON.stringify({ v: 1, ...fields }));
}

// A submit's verdict: the decision when the job is in its queue (submitted
// now, or a duplicate of a stored submit), else a VerdictError.
function verdictOf(d: Decision): Decision {
  if (d.accepted || isDuplicateSubmit(d)) return d;
  throw new VerdictError(d);
}

function resultOf(d: Decision): SubmitResult {
  return { decision: d, error: d.accepted || isDuplicateSubmit(d) ? undefined : new VerdictError(d) };
}

/** Whether d is the verdict of a submit that found the job already submitted with the same fields (submit's success for a resend). */
export function isDuplicateSubmit(d: Decision): boolean {
  return d.kind === "duplicate" && d.reason === "duplicate_submit";
}

function msg(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
