// An offer made to this worker: by a dispatcher (an offered decision) or by
// a queue (an assigned decision). It binds nobody until accepted.

import { VerdictError } from "./errors.js";
import type { FencingToken } from "./fence.js";
import { Lease, leaseOptions, type LeaseOptions } from "./lease.js";
import { timeMs, type Decision } from "./protocol.js";
import { grantedMs, wrap, type CallOptions, type Input, type Worker } from "./worker.js";
import type { Context } from "@opentelemetry/api";

/**
 * A lease offered to this worker. Accept it before its ACK deadline, or
 * decline it. Not meant for concurrent accept/decline calls.
 */
export class Offer {
  readonly job: string;
  readonly leaseId: string;
  readonly generation: number;
  /** The lease duration an accepted offer starts with, in milliseconds. */
  readonly leaseMs: number;
  /** The ACK deadline on the coordinator's clock (ms since the epoch). */
  readonly ackDeadline: number;
  /** The offered (or assigned) decision. */
  readonly decision: Decision;
  /**
   * The ACK deadline on this worker's clock, conservatively: the time the
   * offer was read plus what was left of the ACK window when it was
   * decided. It bounds each publish attempt of the ACK and of decline.
   */
  readonly localDeadline: number;
  /** The offer's sequence in the decision stream (0: not known). */
  readonly seq: number;
  /**
   * The W3C trace context the offer's message carried (PROTOCOL.md §27: the
   * submit's, or the dispatcher's offer's), undefined when none.
   */
  readonly traceparent: string | undefined;

  readonly #w: Worker;
  #ack: Input | undefined; // kept so that a retried accept resends the same message
  #decl: Input | undefined; // the release of decline, likewise

  /** @internal */
  constructor(w: Worker, d: Decision, now: number, m?: { seq: number; traceparent?: string | undefined }) {
    this.#w = w;
    this.seq = m?.seq ?? 0;
    this.traceparent = m?.traceparent;
    this.decision = d;
    this.job = d.job.id;
    this.leaseId = d.job.lease_id ?? "";
    this.generation = d.job.generation ?? 0;
    this.leaseMs = d.job.lease_ms ?? 0;
    this.ackDeadline = timeMs(d.job.ack_deadline);
    this.localDeadline = now + grantedMs(d.job.ack_deadline, d.at);
  }

  /**
   * The OpenTelemetry context of the offer's trace context, as the worker's
   * propagator reads it (ROOT_CONTEXT when none): a span started in it
   * continues the trace of the job's submit.
   */
  traceContext(): Context {
    return this.#w._tracing.extract(this.traceparent);
  }

  /** The fencing token of the offered lease. */
  get token(): FencingToken {
    return { job: this.job, leaseId: this.leaseId, generation: this.generation };
  }

  /**
   * Sends the ACK and resolves with the lease once the coordinator acked
   * it; the lease's duration runs from the ACK. A late ACK rejects with a
   * VerdictError with code Expired, a withdrawn offer with LostAuthority.
   * After an error with code NoVerdict, calling accept again resends the
   * same ACK message (same Msg-Id), so that its first verdict is the one
   * learned.
   */
  async accept(opts: LeaseOptions & CallOptions = {}): Promise<Lease> {
    const lo = leaseOptions(opts);
    if (!this.#ack) {
      this.#ack = this.#w._newInput(this.job, "ack", { lease_id: this.leaseId, generation: this.generation }, this.traceContext());
      this.#ack.deadline = this.localDeadline;
    }
    const p = this.#ack;
    let d: Decision;
    try {
      d = await this.#w._send(p, opts.signal);
    } catch (err) {
      throw wrap(`worker: accept ${this.job}/${this.leaseId}/${this.generation}`, err);
    }
    if (d.kind !== "acked") throw new VerdictError(d);
    return Lease._start(this.#w, d, p.t0!, { ...lo, trace: this.traceContext() });
  }

  /** Gives the offer back (a release of the offered lease), so that it can go to someone else before its ACK deadline. */
  async decline(opts: CallOptions = {}): Promise<void> {
    if (!this.#decl) {
      this.#decl = this.#w._newInput(this.job, "release", { lease_id: this.leaseId, generation: this.generation }, this.traceContext());
      this.#decl.deadline = this.localDeadline;
    }
    let d: Decision;
    try {
      d = await this.#w._send(this.#decl, opts.signal);
    } catch (err) {
      throw wrap(`worker: decline ${this.job}/${this.leaseId}/${this.generation}`, err);
    }
    if (!d.accepted) throw new VerdictError(d);
  }
}
