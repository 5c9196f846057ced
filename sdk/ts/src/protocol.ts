// The wire protocol as this SDK uses it (PROTOCOL.md): subjects, the input
// bodies a worker publishes, the decisions it reads, and their limits. The
// Go package events is the reference; the names here follow PROTOCOL.md.

/** Protocol version of every input and decision (PROTOCOL.md §5). */
export const PROTOCOL_VERSION = 1;

/** Most leases one batch renew names, and most slots one pull announces (§5.1). */
export const MAX_BATCH = 256;
/** Most slots one pull announces (§22.2). */
export const MAX_SLOTS = 256;
/** Largest sequence (renew_seq, progress_seq, generation): 2^53-1 (§5.1). */
export const MAX_SEQ = Number.MAX_SAFE_INTEGER;
/** Longest text (note, detail, reason) in bytes of UTF-8 (§5.1). */
export const MAX_TEXT_BYTES = 256;
/** Longest duration in milliseconds: 30 days (§5.1). */
export const MAX_DURATION_MS = 2_592_000_000;
/** A pull's ttl_ms when it names none, and its longest (§22.2). */
export const DEFAULT_CAPACITY_TTL_MS = 30_000;
export const MAX_CAPACITY_TTL_MS = 600_000;
/** Longest token (§3.1). */
export const MAX_TOKEN_LEN = 64;
/** The job token of job-less inputs and the "no actor" addressee (§3.1). */
export const NO_JOB = "_";

const tokenRe = /^[A-Za-z0-9_-]{1,64}$/;

/** Reports whether s is a valid token: 1 to 64 of [A-Za-z0-9_-], not "_" (§3.1). */
export function validToken(s: string): boolean {
  return typeof s === "string" && s !== NO_JOB && tokenRe.test(s);
}

/** The verbs a worker publishes (§3.1, §22.2). */
export type WorkerVerb = "acquire" | "ack" | "renew" | "progress" | "cancel_ack" | "result" | "release" | "pull";

/** Terminal outcomes of a result (§6.10). */
export type Outcome = "SUCCESS" | "FAILED" | "CANCELLED";

/** Decision kinds (§11). */
export type Kind =
  | "offered" | "granted" | "acked" | "renewed" | "progressed" | "cancel_requested" | "cancel_acked"
  | "completed" | "released" | "resolved" | "policy_set" | "ticked" | "rules_set" | "checkpointed"
  | "duplicate" | "stale" | "late" | "conflict" | "lost_authority" | "rejected"
  | "expired" | "ack_missed" | "unresolved" | "retired"
  | "submitted" | "capacity_set" | "requeued" | "dead" | "assigned" | "withdrawn"
  | "limit_set" // revision 9
  | "schedule_set" | "schedule_deleted" | "fired" | "schedule_missed"; // revision 10

const acceptedKinds: ReadonlySet<string> = new Set([
  "offered", "granted", "acked", "renewed", "progressed", "cancel_requested", "cancel_acked", "completed",
  "released", "resolved", "policy_set", "ticked", "rules_set", "checkpointed", "submitted", "capacity_set",
  "limit_set", "schedule_set", "schedule_deleted",
]);
const derivedKinds: ReadonlySet<string> = new Set([
  "expired", "ack_missed", "unresolved", "retired", "requeued", "dead", "assigned", "withdrawn",
  "fired", "schedule_missed",
]);

/** Reports whether kind is an accepted verdict (§11). */
export function acceptedKind(kind: string): boolean {
  return acceptedKinds.has(kind);
}

/**
 * Reports whether kind is derived: fired by time or following from the
 * queues' rules, the verdict of no input (§11, §15).
 */
export function derivedKind(kind: string): boolean {
  return derivedKinds.has(kind);
}

/** Lease states (§13, §22). */
export type State =
  | "NONE" | "OFFERED" | "ACTIVE" | "EXPIRED" | "ACK_MISSED" | "COMPLETED" | "FAILED" | "CANCELLED"
  | "RELEASED" | "UNRESOLVED" | "REVOKED" | "QUEUED" | "DEAD";

/** Reports whether a lease in state s is live: OFFERED or ACTIVE. */
export function liveState(s: string): boolean {
  return s === "OFFERED" || s === "ACTIVE";
}

/** The job projection a decision carries (§10.2, §22.6). Times are RFC 3339 strings. */
export interface JobProjection {
  id: string;
  lease_id?: string;
  generation?: number;
  holder?: string;
  state: State;
  ack_state?: string;
  result?: Outcome;
  lease_ms?: number;
  issued_at?: string;
  expires_at?: string;
  ack_deadline?: string;
  acked_at?: string;
  renew_seq?: number;
  renew_at?: string;
  progress_seq?: number;
  progress_value?: number;
  progress_at?: string;
  cancel_requested?: boolean;
  cancel_acked?: boolean;
  cancel_at?: string;
  cancel_by?: string;
  ended_at?: string;
  lease_expired?: boolean;
  conflict?: boolean;
  conflict_with?: string;
  stale?: number;
  late?: number;
  late_progress?: number;
  duplicates?: number;
  conflicts?: number;
  // Queue jobs (§22.6).
  queue?: string;
  submitter?: string;
  priority?: number;
  turn?: number;
  attempt?: number;
  max_attempts?: number;
  backoff_ms?: number;
  backoff_max_ms?: number;
  attempt_lease_ms?: number;
  attempt_ack_timeout_ms?: number;
  /** Rules revision 8 (§26.1): the submit's run_at, if any. */
  run_at?: string;
  /** Rules revision 8 (§26.1): the submit's delay_ms, if any. */
  delay_ms?: number;
  /** Rules revision 8 (§26.2): the submit's unique_key, if any. */
  unique_key?: string;
  /** Rules revision 8 (§26.2): the submit's unique_for_ms, if any. */
  unique_for_ms?: number;
  /** Rules revision 9 (§26.4): the submit's concurrency_key, if any. */
  concurrency_key?: string;
  submitted_at?: string;
  submit_seq?: number;
  ready_at?: string;
  last_reason?: string;
  payload?: string;
  /**
   * Rules revision 5 (PROTOCOL.md §10.2, need to know): true on a decision
   * addressed to a worker that does not hold the job's current lease; its
   * lease_id is then "" and its payload absent.
   */
  withheld?: boolean;
}

/** One decision of the decision stream (§10.1). */
export interface Decision {
  v: number;
  cause: number;
  n: number;
  of: number;
  at: string;
  kind: Kind;
  accepted: boolean;
  reason: string;
  detail?: string;
  input: { role: string; actor: string; verb: string };
  addressee: string;
  job: JobProjection;
  capacity?: { queue: string; slots: number; until: string };
  /** Rules revision 5: the addressee's standing on a queue (§22.8). */
  standing?: { queue: string; window: number; strikes: number; held_until?: string };
  /** Rules revision 8 (§26.2): the job holding the unique key a refused submit or retry needed. */
  duplicate_of?: string;
  policy?: Record<string, number>;
  rules?: { revision: number };
  checkpoint?: { input_seq: number; state_hash: string };
}

/**
 * Parses a decision body. It checks the envelope's shape (the fields this
 * SDK reads), not the canonical form: the coordinator wrote it.
 */
export function decodeDecision(data: Uint8Array): Decision {
  const v: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new Error("decision: not a JSON object");
  }
  const d = v as Decision;
  if (d.v !== PROTOCOL_VERSION) throw new Error(`decision: version ${String(d.v)}`);
  if (!Number.isSafeInteger(d.cause) || typeof d.kind !== "string" || typeof d.reason !== "string" ||
      typeof d.at !== "string" || typeof d.input !== "object" || d.input === null ||
      typeof d.job !== "object" || d.job === null || typeof d.job.id !== "string") {
    throw new Error("decision: missing or mistyped fields");
  }
  return d;
}

/**
 * Milliseconds since the Unix epoch of an RFC 3339 time as decisions write
 * it (UTC, up to nine fractional digits), with the sub-millisecond part as
 * a fraction. NaN when s is not such a time.
 */
export function timeMs(s: string | undefined): number {
  if (!s) return NaN;
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/.exec(s);
  if (!m) return NaN;
  const whole = Date.parse(m[1] + m[3]);
  const frac = m[2] ? Number("0." + m[2]) * 1000 : 0;
  return whole + frac;
}

// ---- Subjects (§3) ----

/** The input subject of a worker's input: tenure.in.worker.<actor>.<job>.<verb>. */
export function inputSubject(actor: string, job: string, verb: WorkerVerb): string {
  return `tenure.in.worker.${actor}.${job}.${verb}`;
}

/** The filter of every decision addressed to actor: tenure.out.<actor>.> (§3.3). */
export function addresseeFilter(actor: string): string {
  return `tenure.out.${actor}.>`;
}

// ---- Input bodies (§6) ----

/** One element of a batch renew (§6.6). */
export interface LeaseRef {
  job: string;
  lease_id: string;
  generation: number;
  renew_seq: number;
  lease_ms?: number;
}

/** The fields of a worker's input body, besides v and sent_at. */
export type InputFields = Record<string, string | number | boolean | readonly object[] | undefined>;

/**
 * Encodes an input body: {"v":1,"sent_at":...} then the fields in the
 * order given, undefined ones left out. sent_at is evidence only (§5).
 */
export function encodeInput(fields: InputFields, sentAtMs: number): Uint8Array {
  const body: Record<string, unknown> = { v: PROTOCOL_VERSION, sent_at: new Date(sentAtMs).toISOString() };
  for (const [k, v] of Object.entries(fields)) {
    if (v !== undefined) body[k] = v;
  }
  return new TextEncoder().encode(JSON.stringify(body));
}

/**
 * Text as a detail or note may carry it: valid UTF-8 (a JS string always
 * encodes to it, lone surrogates replaced), control characters (which the
 * protocol refuses in text, §5.2) replaced by spaces, cut to 256 bytes on
 * a character boundary.
 */
export function cleanText(s: string): string {
  // eslint-disable-next-line no-control-regex
  let t = s.toWellFormed().replace(/[\u0000-\u001f\u007f]/g, " ");
  const enc = new TextEncoder();
  if (enc.encode(t).length <= MAX_TEXT_BYTES) return t;
  let out = "";
  let n = 0;
  for (const ch of t) {
    const b = enc.encode(ch).length;
    if (n + b > MAX_TEXT_BYTES) break;
    out += ch;
    n += b;
  }
  t = out;
  return t;
}
