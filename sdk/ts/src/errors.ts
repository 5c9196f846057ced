// Errors of the SDK. They carry codes that say what happened, the
// TypeScript form of the Go SDK's sentinels (worker/errors.go): a verdict
// matches several at once (a stale renewal is both StaleGeneration and
// LostAuthority), so match with isError(err, code), never with the message.

import type { Decision } from "./protocol.js";

/**
 * What an error means, one code per Go sentinel (worker/errors.go, package
 * verdict). A VerdictError matches the codes its decision's kind and reason
 * map to (the table in README.md, the same as the Go SDK's); the SDK's own
 * errors match those they name.
 */
export const ErrorCode = {
  /** The worker no longer holds the lease: stop side effects at once. Every other authority-ending code comes with it. */
  LostAuthority: "LostAuthority",
  /** A newer generation of the job exists, or a Fence refused an older token. */
  StaleGeneration: "StaleGeneration",
  /** The lease reached its expiry: the coordinator's, or the worker's own conservative local deadline. */
  Expired: "Expired",
  /** Another holder claims the same lease: the job is blocked until an operator resolves it. */
  Conflict: "Conflict",
  /** The coordinator refused the operation (decision kind rejected); the reason says which. */
  Rejected: "Rejected",
  /** Any verdict whose kind is not an accepted one. */
  NotAccepted: "NotAccepted",
  /** The operation had already been accepted (same sequence, same result) under another message. */
  Duplicate: "Duplicate",
  /** The operation came after the state it needed was gone, or out of sequence. */
  Late: "Late",
  /** acquire found a live lease of another holder; the decision's job names it. */
  LeaseHeld: "LeaseHeld",
  /** An operator asked for the job's cancellation: stop, then ackCancel and complete CANCELLED or FAILED. */
  CancelRequested: "CancelRequested",
  /** The verdict was not learned in time: the input may or may not have been stored and judged. */
  NoVerdict: "NoVerdict",
  /** This worker completed or released the lease itself. */
  LeaseEnded: "LeaseEnded",
  /** The Worker was closed. */
  Closed: "Closed",
  /** A renew or progress sequence reached 2^53-1. */
  SequenceExhausted: "SequenceExhausted",
  /** A handler's error that must not be retried (see permanent()). */
  Permanent: "Permanent",
  /** The run that called a handler is shutting down. */
  RunStopped: "RunStopped",
  /** run() was called on a queue another run of the same Worker runs. */
  AlreadyRunning: "AlreadyRunning",
  /**
   * The server refused an input: this worker's intake stream is full (quotas, PROTOCOL.md §4.2),
   * because it sent more than its rate allows, or storage is short. Nothing was stored; comes with NoVerdict.
   */
  Quota: "Quota",
  /** A resource refused a fenced write (fence.ts): with StaleGeneration, Mismatch, Expired or Replay, the reason. */
  Refused: "Refused",
  /** A resource refused a token that contradicts the lease it holds for the job, or names another job (comes with LostAuthority). */
  Mismatch: "Mismatch",
  /** A resource refused an effect id it had committed already (Go: fence.ErrReplay). */
  Replay: "Replay",
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** An error of this SDK: its codes say what it means. */
export class TenureError extends Error {
  /** Every code this error matches, its own first. */
  readonly codes: readonly ErrorCode[];

  constructor(message: string, codes: readonly ErrorCode[], options?: ErrorOptions) {
    super(message, options);
    this.name = "TenureError";
    this.codes = codes;
  }

  /** The first of codes: what the error is mainly. */
  get code(): ErrorCode {
    return this.codes[0]!;
  }

  /** Reports whether this error matches code (not its causes: see isError). */
  is(code: ErrorCode): boolean {
    return this.codes.includes(code);
  }
}

/**
 * Reports whether err, or an error in its chain of causes, matches code,
 * as Go's errors.Is does: isError(e, ErrorCode.LostAuthority) is the one
 * question that matters before any side effect.
 */
export function isError(err: unknown, code: ErrorCode): boolean {
  for (let e: unknown = err, depth = 0; e != null && depth < 32; depth++) {
    if (e instanceof TenureError && e.is(code)) return true;
    if (e instanceof AggregateError && e.errors.some((x) => isError(x, code))) return true;
    e = e instanceof Error ? e.cause : undefined;
  }
  return false;
}

/**
 * A verdict of the coordinator that did not accept the operation, or a
 * decision that ended a lease (expired, unresolved, cancel requested,
 * revoked). Its codes follow from its kind and reason.
 */
export class VerdictError extends TenureError {
  readonly kind: string;
  readonly reason: string;
  readonly detail: string;
  /** The whole decision: job is the job's projection after it. */
  readonly decision: Decision;

  constructor(d: Decision) {
    super(verdictMessage(d), verdictCodes(d.kind, d.reason, d.accepted));
    this.name = "VerdictError";
    this.kind = d.kind;
    this.reason = d.reason;
    this.detail = d.detail ?? "";
    this.decision = d;
  }
}

function verdictMessage(d: Decision): string {
  let s = `worker: job ${d.job.id}: ${d.kind} (${d.reason})`;
  if (d.detail) s += `: ${d.detail}`;
  return s;
}

const C = ErrorCode;

/**
 * The codes of a verdict of kind k and reason r: the Go SDK's table
 * (worker/doc.go "Errors", package verdict's sentinels), plus NotAccepted
 * for every kind that is not an accepted one.
 */
export function verdictCodes(k: string, r: string, accepted = false): ErrorCode[] {
  const codes = sentinels(k, r);
  if (!accepted && !isAcceptedKind(k)) codes.push(C.NotAccepted);
  return codes;
}

function isAcceptedKind(k: string): boolean {
  switch (k) {
    case "offered": case "granted": case "acked": case "renewed": case "progressed": case "cancel_requested":
    case "cancel_acked": case "completed": case "released": case "resolved": case "policy_set": case "ticked":
    case "rules_set": case "checkpointed": case "submitted": case "capacity_set":
      return true;
  }
  return false;
}

function sentinels(k: string, r: string): ErrorCode[] {
  switch (k) {
    case "stale":
      return [C.StaleGeneration, C.LostAuthority];
    case "lost_authority":
      switch (r) {
        case "renew_after_expiry": case "lease_expired":
          return [C.LostAuthority, C.Expired];
        case "cancel_requested":
          return [C.LostAuthority, C.CancelRequested];
        case "stale_generation":
          return [C.LostAuthority, C.StaleGeneration];
      }
      return [C.LostAuthority];
    case "conflict":
      return [C.Conflict, C.LostAuthority];
    case "rejected":
      switch (r) {
        case "lease_held":
          return [C.Rejected, C.LeaseHeld];
        case "cancel_requested": case "success_after_cancel":
          return [C.Rejected, C.CancelRequested];
      }
      return [C.Rejected];
    case "duplicate":
      return [C.Duplicate];
    case "late":
      switch (r) {
        case "ack_after_deadline": case "progress_after_expiry": case "result_after_expiry":
        case "release_after_expiry": case "cancel_ack_after_expiry":
          return [C.Late, C.Expired, C.LostAuthority];
        case "progress_after_cancel":
          return [C.Late, C.CancelRequested];
        case "cancel_timeout":
          return [C.Late, C.CancelRequested, C.LostAuthority];
        case "lease_ended":
          return [C.Late, C.LostAuthority];
      }
      return [C.Late];
    case "expired": case "ack_missed":
      return [C.Expired, C.LostAuthority];
    case "unresolved":
      if (r === "expired_cancel_unreconciled") return [C.LostAuthority, C.CancelRequested, C.Expired];
      return [C.LostAuthority, C.CancelRequested];
    case "cancel_requested":
      if (r === "offer_withdrawn") return [C.CancelRequested, C.LostAuthority];
      return [C.CancelRequested];
    case "resolved":
      if (r === "lease_revoked" || r === "settled") return [C.LostAuthority];
      return [];
  }
  return [];
}

/** An error of the SDK that names its operation; cause is what went wrong underneath. */
export function sdkError(message: string, codes: readonly ErrorCode[], cause?: unknown): TenureError {
  return new TenureError(message, codes, cause === undefined ? undefined : { cause });
}

/** The error of every call on a closed Worker. */
export function closedError(): TenureError {
  return new TenureError("worker: closed", [C.Closed]);
}

/**
 * Marks err as permanent: a run() handler that throws it fails the attempt
 * with "permanent":true, and the queue does not retry the job (§22.4). Its
 * message is err's and err is its cause. permanent() alone is a bare
 * permanent failure.
 */
export function permanent(err?: unknown): TenureError {
  if (err === undefined) return new TenureError("worker: permanent failure", [C.Permanent]);
  const msg = err instanceof Error ? err.message : String(err);
  const e = new TenureError(msg, [C.Permanent], { cause: err });
  e.name = "PermanentError";
  return e;
}
