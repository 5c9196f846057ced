// The decisions addressed to a worker that nobody has claimed yet: the
// verdicts of an input whose PubAck has not come back (or whose caller gave
// up and may come back for them under the same sequence), and the
// decisions about a lease not registered yet. The Go SDK's worker/stash.go.

import { NO_JOB, type Decision } from "./protocol.js";

/** How long an unclaimed decision is kept (ms): past it nobody will claim it. */
export const STASH_AGE_MS = 120_000;
/** The most decisions kept at once: past it the oldest are dropped, and the drop is reported. */
export const STASH_MAX = 65_536;

interface Entry {
  at: number;
  ds: Decision[];
}

/**
 * Unclaimed decisions by what will claim them: verdicts by input
 * sequence, lease decisions by lease. Adding and taking cost O(1) whatever
 * it holds (a stash filtered on every wait and shifted on every entry past
 * full cost the worker its event loop under load, and dropped silently what
 * a lease being registered needed).
 */
export class Stash {
  // One map, in first-arrival order (a Map iterates in insertion order):
  // "v<seq>" for verdicts, "l<lease key>" for lease decisions.
  readonly #m = new Map<string, Entry>();
  #n = 0;

  /** Decisions held. */
  get size(): number {
    return this.#n;
  }

  /** Stashes a verdict of input seq; returns an error when room was made by dropping unclaimed decisions. */
  addVerdict(seq: number, d: Decision, now: number): Error | undefined {
    return this.#add("v" + seq, d, now);
  }

  /** Stashes a decision about lease key (see leaseKey in worker.ts). */
  addLease(key: string, d: Decision, now: number): Error | undefined {
    return this.#add("l" + key, d, now);
  }

  /**
   * Takes, in arrival order, up to n verdicts of input seq that want takes
   * (wants: of the waiter's verb and job), fewer when one about no job
   * comes first; the rest stay.
   */
  takeVerdicts(seq: number, n: number, want: (d: Decision) => boolean = () => true): Decision[] {
    const k = "v" + seq;
    const e = this.#m.get(k);
    if (!e) return [];
    const out: Decision[] = [];
    const kept: Decision[] = [];
    for (const d of e.ds) {
      if (out.length >= n || (out.length > 0 && out[out.length - 1]!.job.id === NO_JOB) || !want(d)) kept.push(d);
      else out.push(d);
    }
    e.ds = kept;
    if (e.ds.length === 0) this.#m.delete(k);
    this.#n -= out.length;
    return out;
  }

  /** Takes the decisions about lease key. */
  takeLease(key: string): Decision[] {
    const k = "l" + key;
    const e = this.#m.get(k);
    if (!e) return [];
    this.#m.delete(k);
    this.#n -= e.ds.length;
    return e.ds;
  }

  #add(k: string, d: Decision, now: number): Error | undefined {
    let e = this.#m.get(k);
    if (!e) {
      e = { at: now, ds: [] };
      this.#m.set(k, e);
    }
    e.ds.push(d);
    this.#n++;
    return this.#trim(now);
  }

  // Drops what is older than STASH_AGE_MS, then, past STASH_MAX, the
  // oldest, and reports the latter.
  #trim(now: number): Error | undefined {
    const dropped: string[] = [];
    for (const [k, e] of this.#m) {
      const old = now - e.at > STASH_AGE_MS;
      if (!old && this.#n <= STASH_MAX) break;
      if (!old && dropped.length < 3) dropped.push(k[0] === "v" ? `the verdicts of input ${k.slice(1)}` : `the decisions about lease ${k.slice(1)}`);
      this.#m.delete(k);
      this.#n -= e.ds.length;
    }
    return dropped.length > 0 ? new Error(`worker: more than ${STASH_MAX} decisions unclaimed: dropped ${dropped.join(", ")}`) : undefined;
  }
}

/**
 * Whether d may be a verdict of an input of verb about job (NO_JOB: a
 * batch or a pull, whose verdicts name any job): its verb and job, or about
 * no job (the whole input rejected). An input sequence names one input only
 * while the stream keeps it: a server that loses its unsynced tail in a
 * crash (PROTOCOL.md §2) stores the next inputs at the sequences lost, so
 * another input of this client may hold the sequence a PubAck named, and
 * its verdict is not the lost input's (the Go SDK's waiter.wants).
 */
export function wants(verb: string, job: string, d: Decision): boolean {
  // A verdict with no verb is of an input whose verb the log's rules do not
  // know (bad_subject): it can only be the waiter's own.
  const v = d.input.verb as string;
  return (v === verb || v === "" || v === undefined) && (job === NO_JOB || d.job.id === NO_JOB || d.job.id === job);
}

/** Adds wt to the waiters of input key. */
export function addWaiter<W>(m: Map<number, W[]>, key: number, wt: W): void {
  const ws = m.get(key);
  if (ws) ws.push(wt);
  else m.set(key, [wt]);
}

/** Removes wt from the waiters of input key, if it is there. */
export function dropWaiter<W>(m: Map<number, W[]>, key: number, wt: W): void {
  const ws = m.get(key);
  if (!ws) return;
  const i = ws.indexOf(wt);
  if (i >= 0) ws.splice(i, 1);
  if (ws.length === 0) m.delete(key);
}
