// run()'s ACKs and results travel like renewals: through a batcher per verb
// that keeps at most MAX_BATCHES_IN_FLIGHT inputs of that verb awaiting
// their verdicts (the Go SDK's worker/batch.go). Idle, an ACK or a result
// leaves at once, alone; under load (four inputs in flight), those that
// fall due meanwhile leave together in one batch ack or batch result (rules revision 7, PROTOCOL.md §22.9), each
// element judged and answered on its own: one input stored (one fsync with
// sync always) for many jobs' ACKs or results.
//
// The batcher also retries: an input whose verdicts were not all learned is
// sent again under the same Msg-Id (the stream stores it once) until they
// are, or until the earliest of its elements' local deadlines (an offer's
// ACK deadline, a lease's expiry). A log below rules revision 7 refuses a
// batch (rejected/bad_subject): from then on each element is an input of
// its own. Only run() uses the batchers: Offer.accept and the Lease methods
// send one input each, as documented.

import { closedError, ErrorCode, isError, sdkError } from "./errors.js";
import { MAX_BATCH, NO_JOB, type Decision, type InputFields } from "./protocol.js";
import { sleep, type Input, type Worker } from "./worker.js";
import type { Context } from "@opentelemetry/api";

/** Inputs of one verb awaiting their verdicts at once (Go's maxBatchesInFlight). */
export const MAX_BATCHES_IN_FLIGHT = 4;
// The most bytes of an input body; a batch's elements are cut to fit.
const MAX_INPUT_BYTES = 65_536;

/** @internal One element of a batch ack or batch result: its job first. */
export interface BatchElem {
  job: string;
  lease_id: string;
  generation: number;
  outcome?: string;
  detail?: string;
  permanent?: boolean;
}

/** @internal What became of one element: its verdict, or err; t0 is the local time just before its input was first published. */
export interface BatchResult {
  d?: Decision;
  t0: number;
  err?: Error;
}

interface Req {
  elem: BatchElem;
  size: number;
  deadline: number;
  trace: Context | undefined; // the trace context the element's input carries when sent alone (a batch carries none)
  done: (r: BatchResult) => void;
}

/** @internal Coalesces one verb's inputs (ack, result) of a Worker. */
export class Batcher {
  readonly #w: Worker;
  readonly #verb: "ack" | "result";
  #q: Req[] = [];
  #n = 0; // inputs awaiting their verdicts
  // Set once the log refused a batch of this verb as a subject it does not
  // know (rules revision 6 or earlier).
  #single = false;

  constructor(w: Worker, verb: "ack" | "result") {
    this.#w = w;
    this.#verb = verb;
  }

  /** Hands elem to the batcher; resolves with its outcome (every element is answered, on close too). */
  do(elem: BatchElem, deadline: number, trace?: Context): Promise<BatchResult> {
    if (this.#w.closed) return Promise.resolve({ t0: this.#w._clock.now(), err: closedError() });
    const size = new TextEncoder().encode(JSON.stringify(elem)).length + 1;
    return new Promise((done) => {
      this.#q.push({ elem, size, deadline, trace, done });
      this.#pump();
    });
  }

  /** Answers what is queued with a Closed error (the Worker closed). */
  close(): void {
    const q = this.#q;
    this.#q = [];
    for (const r of q) r.done({ t0: this.#w._clock.now(), err: closedError() });
  }

  // Sends the queued elements, at most 256 (and the body's bytes) per input
  // and MAX_BATCHES_IN_FLIGHT inputs at a time.
  #pump(): void {
    while (this.#n < MAX_BATCHES_IN_FLIGHT && this.#q.length > 0 && !this.#w.closed) {
      let n = 0;
      let size = 64;
      while (n < this.#q.length && n < MAX_BATCH && (n === 0 || size + this.#q[n]!.size <= MAX_INPUT_BYTES)) {
        size += this.#q[n]!.size;
        n++;
      }
      const batch = this.#q.splice(0, n);
      this.#n++;
      void this.#w._track(this.#send(batch)).finally(() => {
        this.#n--;
        this.#pump(); // more may have queued meanwhile
      });
    }
  }

  // Publishes one input for batch: a single input for one element (or for
  // each, once the log refuses batches), a batch for more, and hands each
  // element its verdict.
  async #send(batch: Req[]): Promise<void> {
    if (batch.length === 1 || this.#single) {
      await Promise.all(batch.map((r) => this.#sendOne(r)));
      return;
    }
    const w = this.#w;
    const p = w._newInput(NO_JOB, this.#verb, { leases: batch.map((r) => r.elem) }, null); // its elements belong to as many traces
    p.t0 = w._clock.now();
    for (const r of batch) { // the publish attempts fit in the earliest deadline
      if (p.deadline === undefined || r.deadline < p.deadline) p.deadline = r.deadline;
    }
    const answered = new Array<boolean>(batch.length).fill(false);
    let left = batch.length;
    const answer = (i: number, res: BatchResult) => {
      answered[i] = true;
      left--;
      batch[i]!.done(res);
    };
    let first = 0; // the input's sequence once stored, and the verdicts of it learned so far
    let got = 0;
    for (;;) {
      const { ds, seq, err } = await w._sendN(p, batch.length, undefined, (s) => (s === first ? batch.length - got : batch.length));
      if (seq !== undefined && seq !== first) {
        first = seq; // stored again as another input (past the duplicate window): all its verdicts come
        got = 0;
      }
      got += ds.length;
      for (const d of ds) {
        if (d.job.id === NO_JOB) { // the whole input refused
          if (d.kind === "rejected" && d.reason === "bad_subject") {
            this.#single = true; // a log below rules revision 7
            await this.#send(batch.filter((_, i) => !answered[i]));
            return;
          }
          batch.forEach((_, i) => {
            if (!answered[i]) answer(i, { d, t0: p.t0! });
          });
          return;
        }
        const i = batch.findIndex((r, i) => !answered[i] && r.elem.job === d.job.id); // in array order
        if (i >= 0) answer(i, { d, t0: p.t0! });
      }
      if (left === 0) return;
      const e = err ?? sdkError(`worker: input ${p.msgId}: ${left} verdicts missing`, [ErrorCode.NoVerdict]);
      if (!isError(e, ErrorCode.NoVerdict) || w.closed || w._clock.now() >= p.deadline!) {
        batch.forEach((_, i) => {
          if (!answered[i]) answer(i, { t0: p.t0!, err: e });
        });
        return;
      }
      await this.#pause();
    }
  }

  // Sends r alone, again under the same Msg-Id while its verdict is not
  // learned and its deadline has not passed.
  async #sendOne(r: Req): Promise<void> {
    const w = this.#w;
    const { job, ...fields } = r.elem;
    const p: Input = w._newInput(job, this.#verb, fields as InputFields, r.trace);
    p.deadline = r.deadline;
    for (;;) {
      const { ds, err } = await w._sendN(p, 1);
      if (!err || !isError(err, ErrorCode.NoVerdict) || w.closed || w._clock.now() >= r.deadline) {
        r.done(err ? { t0: p.t0!, err } : { d: ds[0]!, t0: p.t0! });
        return;
      }
      await this.#pause();
    }
  }

  async #pause(): Promise<void> {
    await sleep(this.#w._clock, 50, this.#w._closeSignal).catch(() => undefined);
  }
}
