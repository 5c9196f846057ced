// Fencing tokens (PROTOCOL.md §14): the triple (job, lease id, generation)
// that every side effect of a lease carries, and a Fence that refuses the
// tokens of older generations.

import { ErrorCode, TenureError } from "./errors.js";
import { validToken } from "./protocol.js";

/** Names one lease. Pass it with every side effect the lease protects. */
export interface FencingToken {
  readonly job: string;
  readonly leaseId: string;
  readonly generation: number;
}

/** Renders t as "<job>/<lease id>/<generation>", which parseFencingToken reads back. */
export function formatFencingToken(t: FencingToken): string {
  return `${t.job}/${t.leaseId}/${t.generation}`;
}

/** Parses the form formatFencingToken writes. */
export function parseFencingToken(s: string): FencingToken {
  const parts = s.split("/");
  if (parts.length !== 3 || !validToken(parts[0]!) || !validToken(parts[1]!) || !/^[1-9][0-9]*$/.test(parts[2]!)) {
    throw new TypeError(`worker: bad fencing token ${JSON.stringify(s)}`);
  }
  const generation = Number(parts[2]);
  if (!Number.isSafeInteger(generation)) throw new TypeError(`worker: bad fencing token ${JSON.stringify(s)}: generation`);
  return { job: parts[0]!, leaseId: parts[1]!, generation };
}

/**
 * Guards a resource against side effects from stale lease holders: it
 * remembers, per job, the highest generation it admitted and refuses older
 * ones. Keep its state beside the resource's data.
 *
 * A job id reused after its retirement (§13.1) starts again at generation
 * 1: a fence that outlives retirements must order by the lease id's
 * sequence instead.
 */
export class Fence {
  readonly #highest = new Map<string, number>();

  /** Admits t if its generation is at least the highest admitted for its job; throws a StaleGeneration error otherwise. */
  admit(t: FencingToken): void {
    const h = this.#highest.get(t.job) ?? 0;
    if (t.generation < h) {
      throw new TenureError(`worker: job ${t.job}: token generation ${t.generation}, fence has seen ${h}`,
        [ErrorCode.StaleGeneration]);
    }
    this.#highest.set(t.job, t.generation);
  }

  /** The highest generation admitted for job (0: none). */
  highest(job: string): number {
    return this.#highest.get(job) ?? 0;
  }
}
