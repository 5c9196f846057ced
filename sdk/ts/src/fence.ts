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

/** Header names of the HTTP fence (PROTOCOL.md §25; the Go package fence/httpfence). */
export const FenceHeader = {
  Fence: "Tenure-Fence",
  Deadline: "Tenure-Deadline",
  Key: "Idempotency-Key",
  Claim: "Tenure-Claim",
  Refused: "Tenure-Fence-Refused",
  /** A replay's committer: "self" (this lease, a retry) or "other". */
  Committer: "Tenure-Fence-Committer",
} as const;

/** What a fenced request needs of a lease: its token and its local deadline (ms on the epoch scale; 0: none). */
export interface FencedLease {
  readonly token: FencingToken;
  readonly deadline: number;
}

/**
 * The error of a refused response of an HTTP fence (Tenure-Fence-Refused),
 * undefined for any other: a TenureError with code Refused and the
 * reason's codes (stale: StaleGeneration, LostAuthority; mismatch:
 * Mismatch, LostAuthority; expired: Expired, LostAuthority; replay:
 * Replay); a replay of an effect this lease committed (a retry) also
 * carries committedBySelf. The server never names the lease it holds.
 */
export function fenceRefusal(resp: Response, t: FencingToken, effect: string): TenureError | undefined {
  const reason = resp.headers.get(FenceHeader.Refused);
  if (!reason) return undefined;
  const self = reason === "replay" && resp.headers.get(FenceHeader.Committer) === "self";
  const msg = `fence: ${reason}: ${formatFencingToken(t)}${effect ? " effect " + effect : ""}${self ? " (committed by this lease)" : ""}`;
  const codes: ErrorCode[] = [ErrorCode.Refused];
  switch (reason) {
    case "stale": codes.push(ErrorCode.StaleGeneration, ErrorCode.LostAuthority); break;
    case "mismatch": codes.push(ErrorCode.Mismatch, ErrorCode.LostAuthority); break;
    case "expired": codes.push(ErrorCode.Expired, ErrorCode.LostAuthority); break;
    case "replay": codes.push(ErrorCode.Replay); break;
  }
  const err = new TenureError(msg, codes);
  (err as TenureError & { committedBySelf?: boolean }).committedBySelf = self;
  return err;
}

/** Sets the fence's headers of lease l (and the effect id, unless a claim) on h. */
export function setFenceHeaders(h: Headers, l: FencedLease, effect?: string): void {
  h.set(FenceHeader.Fence, formatFencingToken(l.token));
  if (l.deadline > 0) h.set(FenceHeader.Deadline, new Date(Math.floor(l.deadline)).toISOString());
  else h.delete(FenceHeader.Deadline);
  if (effect !== undefined) h.set(FenceHeader.Key, effect);
}

/** Options of a FenceClient. */
export interface FenceClientOptions {
  /** The fetch to use (default: globalThis.fetch). */
  fetch?: typeof fetch;
  /** Where bind claims the job (a POST with Tenure-Claim: 1) before the handler runs. */
  claimUrl?: string;
}

/**
 * Sends fenced HTTP requests for a lease, to a server behind the Go
 * middleware fence/httpfence: run()'s effects option binds it, and a
 * handler's job.effects is the BoundFence.
 */
export class FenceClient {
  readonly #fetch: typeof fetch;
  readonly #claimUrl: string | undefined;

  constructor(o: FenceClientOptions = {}) {
    this.#fetch = o.fetch ?? globalThis.fetch;
    this.#claimUrl = o.claimUrl;
  }

  /** Binds l (claiming its job at claimUrl first, if set). */
  async bind(l: FencedLease, signal?: AbortSignal): Promise<BoundFence> {
    const b = new BoundFence(this.#fetch, l);
    if (this.#claimUrl !== undefined) {
      const h = new Headers({ [FenceHeader.Claim]: "1" });
      setFenceHeaders(h, l);
      const resp = await this.#fetch(this.#claimUrl, { method: "POST", headers: h, signal });
      await resp.body?.cancel();
      const err = fenceRefusal(resp, l.token, "");
      if (err) throw err;
      if (resp.status !== 204) throw new Error(`fence: claim ${formatFencingToken(l.token)}: ${resp.status}`);
    }
    return b;
  }
}

/** A FenceClient bound to one lease. */
export class BoundFence {
  readonly #fetch: typeof fetch;
  readonly lease: FencedLease;

  constructor(f: typeof fetch, l: FencedLease) {
    this.#fetch = f;
    this.lease = l;
  }

  /**
   * Sends a request as effect effect of the lease, with the fence's
   * headers; a refusal throws its TenureError (fenceRefusal).
   */
  async fetch(input: string | URL, init: RequestInit, effect: string): Promise<Response> {
    const h = new Headers(init.headers);
    setFenceHeaders(h, this.lease, effect);
    const resp = await this.#fetch(input, { ...init, headers: h });
    const err = fenceRefusal(resp, this.lease.token, effect);
    if (err) {
      await resp.body?.cancel();
      throw err;
    }
    return resp;
  }
}
