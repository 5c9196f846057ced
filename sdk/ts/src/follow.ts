// The decision reader: a port of the Go SDK's package follow, as PROTOCOL.md
// §3.3 and §3.4 describe it. It reads one stream through a pull consumer of
// its own, created under one of a few names (a worker's tw_<id>_0 to _3, the
// only ones `tenure auth init` lets it create), and replaces it whenever it
// is lost (two missed idle heartbeats, a deleted or unknown consumer, no
// responders) or delivers out of order, starting the new one one past the
// last stream sequence handed over: no gap, no message twice. A name held by
// another consumer (a twin process with the same worker id, or a crashed
// process's consumer that has not reached its inactivity threshold) is
// passed over for the next one.
//
// What it accepts (§3.4): it fetches with pull requests whose reply subject
// is <inbox prefix>.<token>.<request id>, the token 128 bits from
// crypto.randomBytes, new for each consumer, subscribing to each request's
// reply subject while the request is outstanding; a delivery is handed over
// only if its $JS.ACK reply names this stream and the current consumer and
// its delivery sequence is the next one; a status only if it matches its
// request (a heartbeat names the last delivery, a request's end the messages
// and bytes it had left); a 409 Consumer Deleted or Leadership Change only
// makes it look the consumer up. Everything else is dropped and counted.

import { randomBytes } from "node:crypto";

import type { Msg, NatsConnection, Subscription } from "@nats-io/nats-core";
import { TRACEPARENT, validTraceParent } from "./tracing.js";

/** One message of the stream, as handed to the handler. */
export interface FollowMsg {
  seq: number;
  subject: string;
  data: Uint8Array;
  /** How many messages matching the filter the stream held after this one when it was delivered. */
  pending: number;
  /** The message's Tenure-Source-Seq header (PROTOCOL.md §4.2), 0 when it has none. */
  sourceSeq?: number;
  /** Its traceparent header (PROTOCOL.md §27), when it carries exactly one that is well formed. */
  traceparent?: string | undefined;
}

/** @internal Configures a Follower. */
export interface FollowConfig {
  stream: string;
  /** The one subject filter (it goes in the creation subject, where permissions can restrict it). */
  filter: string;
  /** The only consumer names it may use; it deletes its own before using a name again. */
  names: string[];
  /** The JetStream API prefix, without its dot: "$JS.API" or a worker's "JS.<prefix>.API". */
  apiPrefix: string;
  /**
   * Start the first consumer after the stream's last message (deliver policy
   * new), learning where from the answer to its creation; else at startSeq.
   */
  fromNew?: boolean;
  startSeq?: number;
  inactiveThresholdMs: number;
  pullAhead?: number;
  pullBytes?: number;
  heartbeatMs?: number;
  createTimeoutMs?: number;
  retryMs?: number;
  /** Told of every consumer error: why one was replaced, the first of a streak of failed creations. */
  onError?: (err: Error) => void;
  /** Told of every message dropped, with the reason and the subject it came on. */
  onDrop?: (reason: string, subject: string) => void;
}

/** @internal Reasons given to onDrop (those of the Go package follow). */
export const DropReason = {
  NoAckReply: "no_ack_reply",
  OtherStream: "other_stream",
  OtherConsumer: "other_consumer",
  StatusMismatch: "status_mismatch",
  UnexpectedStatus: "unexpected_status",
} as const;

const DEFAULT_PULL_AHEAD = 500;
const DEFAULT_PULL_BYTES = 8 << 20;
const DEFAULT_HEARTBEAT_MS = 1000;
const DEFAULT_CREATE_TIMEOUT_MS = 1000;
const DEFAULT_RETRY_MS = 100;
/** The longest wait between creations that failed because every name was in use. */
const MAX_NAMES_BACKOFF_MS = 5000;
/** The outstanding requests of a consumer, at most. */
const MAX_REQUESTS = 4;
/** What a request for one large message asks for beyond the server's max_payload. */
const LARGE_ROOM = 8 << 10;
/** The consumer metadata key of the random token that tells this reader's consumers from others of the same name. */
const META_TOKEN = "tenure_follow";

const MS = 1_000_000; // nanoseconds

/** JetStream API error codes it tells apart. */
const CONSUMER_NAME_EXISTS = 10013;
const CONSUMER_NOT_FOUND = 10014;
const STREAM_NOT_FOUND = 10059;
const CONSUMER_EXISTS = 10148;

/** @internal An error answer of the JetStream API. */
export class ApiError extends Error {
  override readonly name = "JetStreamApiError";
  constructor(readonly code: number, readonly status: number, description: string) {
    super(`${description} (err_code ${code})`);
  }
}

/** @internal Every name allowed is held by another consumer. */
export class NamesInUseError extends Error {
  override readonly name = "NamesInUseError";
}

/** @internal A delivery's $JS.ACK reply subject, parsed. */
export interface Delivery {
  stream: string;
  consumer: string;
  streamSeq: number;
  consumerSeq: number;
  pending: number;
}

/**
 * @internal Parses $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
 * or the form with a domain and an account hash before the stream (and a
 * token after), as the Go package streams does.
 */
export function parseAckReply(s: string | undefined): Delivery | undefined {
  if (!s || !s.startsWith("$JS.ACK.")) return undefined;
  const tok = s.slice(8).split(".");
  let names: string[];
  let f: string[];
  if (tok.length === 7) [names, f] = [tok.slice(0, 2), tok.slice(2)];
  else if (tok.length >= 9) [names, f] = [tok.slice(2, 4), tok.slice(4, 9)];
  else return undefined;
  if (!names[0] || !names[1]) return undefined;
  const n = f.map((x) => (/^[0-9]{1,19}$/.test(x) ? Number(x) : NaN));
  if (n.some((x) => !Number.isFinite(x))) return undefined;
  return { stream: names[0], consumer: names[1], streamSeq: n[1]!, consumerSeq: n[2]!, pending: n[4]! };
}

interface Request {
  id: number;
  sub: Subscription;
  batch: number;
  maxBytes: number; // 0: no bound
  n: number; // messages left
  b: number; // bytes left
  large: boolean;
  got: boolean; // something proving the consumer alive came in
  sent: number;
  retired: boolean;
}

interface Session {
  gen: number;
  name: string;
  token: string;
  inbox: string;
  nextSubj: string;
  dseq: number;
  reqs: Request[];
  batch: number;
  bytes: number;
  largeMax: number;
  expiresMs: number;
  hbMs: number;
  needLarge: boolean;
  unbounded: boolean;
  live: number;
  seen: number;
  lastLive: number;
  lastSent: number;
  checking: boolean;
  wantCheck: boolean;
  lastCheck: number;
  ended: boolean;
  /** Resolves when the session ends: why it must be replaced, or null when stopping. */
  done: Promise<Error | null>;
  finish: (why: Error | null) => void;
}

interface ConsumerInfoAnswer {
  error?: { code?: number; err_code?: number; description?: string };
  stream_name?: string;
  name?: string;
  config?: {
    deliver_policy?: string;
    opt_start_seq?: number;
    metadata?: Record<string, string>;
    max_batch?: number;
    max_bytes?: number;
    max_expires?: number;
  };
  delivered?: { consumer_seq?: number; stream_seq?: number };
}

const now = (): number => performance.now();

function randomHex(): string {
  return randomBytes(16).toString("hex");
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function isNoResponders(err: unknown): boolean {
  for (let e: unknown = err, i = 0; e instanceof Error && i < 8; i++, e = e.cause) {
    if (e.name === "NoRespondersError" || e.name === "NoResponders") return true;
    const re = e as unknown as { isNoResponders?: () => boolean };
    if (typeof re.isNoResponders === "function" && re.isNoResponders()) return true;
  }
  return false;
}

/** @internal The answer to one JetStream API request, its error thrown as an ApiError. */
export async function apiRequest(nc: NatsConnection, subject: string, body: unknown, timeout: number): Promise<ConsumerInfoAnswer> {
  const m = await nc.request(subject, body === undefined ? "" : JSON.stringify(body), { timeout });
  let a: ConsumerInfoAnswer;
  try {
    a = m.json<ConsumerInfoAnswer>();
  } catch (err) {
    throw new Error(`${subject}: an answer that is not JSON`, { cause: err });
  }
  if (a.error) throw new ApiError(a.error.err_code ?? 0, a.error.code ?? 0, a.error.description ?? "error");
  return a;
}

/**
 * @internal Looks consumer name up on stream: "found" when the stream exists
 * (the answer is the consumer's info or "consumer not found"), "missing"
 * when it does not, "unreachable" when nothing answers (no responders: the
 * account imports nothing there). Any other failure is thrown.
 */
export async function lookUp(nc: NatsConnection, apiPrefix: string, stream: string, name: string, timeout: number): Promise<"found" | "missing" | "unreachable"> {
  try {
    await apiRequest(nc, `${apiPrefix}.CONSUMER.INFO.${stream}.${name}`, undefined, timeout);
    return "found";
  } catch (err) {
    if (err instanceof ApiError && err.code === CONSUMER_NOT_FOUND) return "found";
    if (err instanceof ApiError && err.code === STREAM_NOT_FOUND) return "missing";
    if (isNoResponders(err)) return "unreachable";
    throw err;
  }
}

/** @internal Reads one stream, recovering its consumer; see the file's comment. */
export class Follower {
  readonly #nc: NatsConnection;
  readonly #cfg: Required<Omit<FollowConfig, "onError" | "onDrop" | "fromNew">> & Pick<FollowConfig, "onError" | "onDrop" | "fromNew">;
  readonly #handle: (m: FollowMsg) => void;
  #next: number;
  #placed: boolean;
  #reqId = 0;
  #gen = 0;
  #prefer = 0;
  #prev: Session | undefined; // the replaced consumer, deleted before its name is used again
  #used: string[] = [];
  #session: Session | undefined;
  #stopped = false;
  #wake: (() => void) | undefined; // ends a wait between creations
  #createErr: Error | undefined;
  #replaced = 0;
  #dropped = 0;
  #done: Promise<void> | undefined;
  #readyResolve!: () => void;
  /** Resolves once the first consumer exists: from then on every message from next on is on its way. */
  readonly ready: Promise<void>;
  #status: { stop?: () => void } | undefined;

  constructor(nc: NatsConnection, cfg: FollowConfig, handle: (m: FollowMsg) => void) {
    if (cfg.names.length === 0) throw new RangeError("follow: no consumer names");
    this.#nc = nc;
    this.#cfg = {
      startSeq: 1, pullAhead: DEFAULT_PULL_AHEAD, pullBytes: DEFAULT_PULL_BYTES, heartbeatMs: DEFAULT_HEARTBEAT_MS,
      createTimeoutMs: DEFAULT_CREATE_TIMEOUT_MS, retryMs: DEFAULT_RETRY_MS, ...cfg,
    };
    this.#cfg.heartbeatMs = Math.min(Math.max(this.#cfg.heartbeatMs, 500), 30_000);
    this.#next = this.#cfg.startSeq;
    this.#placed = !cfg.fromNew;
    this.#handle = handle;
    this.ready = new Promise((r) => (this.#readyResolve = r));
  }

  /** Starts reading in the background. */
  start(): void {
    if (this.#done) return;
    this.#watchStatus();
    this.#done = this.#run();
  }

  /** The stream sequence after the last message handed over (with fromNew, until ready, startSeq). */
  get next(): number {
    return this.#next;
  }

  /** How many times the consumer was replaced. */
  get replaced(): number {
    return this.#replaced;
  }

  /** How many messages were dropped (not this reader's consumer's, or a status not matching its request). */
  get dropped(): number {
    return this.#dropped;
  }

  /** The last failed creation's error, if no consumer was created since. */
  get lastError(): Error | undefined {
    return this.#createErr;
  }

  /** The current consumer's name, if there is one. */
  get consumerName(): string | undefined {
    return this.#session && !this.#session.ended ? this.#session.name : undefined;
  }

  /**
   * Stops reading: nothing more is handed over once it resolves, and the
   * current consumer has been deleted (if it is still this reader's).
   */
  async stop(): Promise<void> {
    if (this.#stopped) return this.#done;
    this.#stopped = true;
    this.#status?.stop?.();
    this.#wake?.();
    if (this.#session) this.#fail(this.#session, null);
    await this.#done;
  }

  #watchStatus(): void {
    const st = this.#nc.status();
    this.#status = st as unknown as { stop?: () => void };
    void (async () => {
      try {
        for await (const s of st) {
          if (this.#stopped) return;
          if (s.type === "reconnect") this.#reconnected();
        }
      } catch {
        // the connection closed: the missed heartbeats tell
      }
    })();
  }

  async #run(): Promise<void> {
    try {
      for (;;) {
        const s = await this.#create();
        if (!s) break;
        const why = await this.#follow(s);
        this.#end(s);
        if (this.#stopped || !why) {
          await this.#deleteIfOurs(s.name, s.token).catch(() => undefined);
          break;
        }
        this.#report(new Error(`follow ${this.#cfg.stream}: replacing consumer ${s.name}: ${why.message}`, { cause: why }));
        this.#replaced++;
      }
    } finally {
      if (this.#prev) {
        const p = this.#prev;
        this.#prev = undefined;
        await this.#deleteIfOurs(p.name, p.token).catch(() => undefined);
      }
    }
  }

  #report(err: Error): void {
    try {
      this.#cfg.onError?.(err);
    } catch {
      // an error handler's own error is nobody's
    }
  }

  #drop(reason: string, m: Msg): void {
    this.#dropped++;
    try {
      this.#cfg.onDrop?.(reason, m.subject);
    } catch {
      // likewise
    }
  }

  // Creates a consumer starting at #next, retrying until one exists
  // (undefined: stopped).
  async #create(): Promise<Session | undefined> {
    let backoff = this.#cfg.retryMs;
    for (;;) {
      if (this.#stopped) return undefined;
      // A closed connection never opens again: retrying on it (a timer
      // every retryMs, for ever) kept a process whose connection was
      // closed under a worker it never closed from exiting.
      if (this.#nc.isClosed()) {
        this.#report(new Error(`follow ${this.#cfg.stream}: the connection is closed: no consumer can be made`));
        return undefined;
      }
      try {
        const s = await this.#tryCreate();
        if (this.#stopped) {
          await this.#deleteIfOurs(s.name, s.token).catch(() => undefined);
          return undefined;
        }
        this.#createErr = undefined;
        this.#session = s;
        this.#readyResolve();
        return s;
      } catch (err) {
        if (this.#stopped) return undefined;
        const e = new Error(`follow ${this.#cfg.stream}: creating a consumer: ${errMessage(err)}`, { cause: err });
        const first = this.#createErr === undefined;
        this.#createErr = e;
        if (first) this.#report(e);
        let wait = this.#cfg.retryMs;
        if (err instanceof NamesInUseError) {
          wait = backoff;
          backoff = Math.min(2 * backoff, MAX_NAMES_BACKOFF_MS);
        } else {
          backoff = this.#cfg.retryMs;
        }
        await new Promise<void>((resolve) => {
          const t = setTimeout(done, wait);
          function done(): void {
            clearTimeout(t);
            resolve();
          }
          this.#wake = done;
        });
        this.#wake = undefined;
      }
    }
  }

  // One attempt: each name in turn, from the one used last, until one is free.
  async #tryCreate(): Promise<Session> {
    const names = this.#cfg.names;
    for (let i = 0; i < names.length; i++) {
      const k = (this.#prefer + i) % names.length;
      const name = names[k]!;
      const p = this.#prev;
      if (p && p.name === name) {
        // The consumer this one replaces: gone, or deleted now.
        await this.#deleteIfOurs(p.name, p.token);
        this.#prev = undefined;
      }
      try {
        const s = await this.#createNamed(name);
        this.#prefer = k;
        return s;
      } catch (err) {
        if (err instanceof ApiError && (err.code === CONSUMER_EXISTS || err.code === CONSUMER_NAME_EXISTS)) continue;
        throw err;
      }
    }
    throw new NamesInUseError(`every consumer name allowed is in use (${names.join(", ")})`);
  }

  async #createNamed(name: string): Promise<Session> {
    const c = this.#cfg;
    const token = randomHex();
    const placed = this.#placed;
    const config: Record<string, unknown> = {
      name,
      filter_subject: c.filter,
      deliver_policy: placed ? "by_start_sequence" : "new",
      ...(placed ? { opt_start_seq: this.#next } : {}),
      ack_policy: "none",
      inactive_threshold: c.inactiveThresholdMs * MS,
      num_replicas: 1,
      mem_storage: true,
      // Tells this consumer from another of the same name; and a creation
      // of an existing consumer with the same configuration succeeds: the
      // token makes every configuration unique.
      metadata: { [META_TOKEN]: token },
    };
    const a = await apiRequest(this.#nc, `${c.apiPrefix}.CONSUMER.CREATE.${c.stream}.${name}.${c.filter}`,
      { stream_name: c.stream, config, action: "create" }, c.createTimeoutMs);
    const cfg = a.config;
    if (a.name !== name || a.stream_name !== c.stream || cfg?.metadata?.[META_TOKEN] !== token ||
      cfg.deliver_policy !== config.deliver_policy || (placed && cfg.opt_start_seq !== this.#next)) {
      // Not the answer to this request (the API's reply inbox is not unguessable).
      throw new Error(`the answer to the creation of consumer ${name} describes another consumer`);
    }
    if (!placed) {
      // A new consumer delivers from the stream's last sequence + 1, whatever
      // its filter, and reports one less as delivered (the Go package
      // follow's fromnew_test.go pins it).
      const d = a.delivered;
      if (!d || d.consumer_seq !== 0 || !Number.isSafeInteger(d.stream_seq) || d.stream_seq! < 0) {
        throw new Error(`the answer to the creation of consumer ${name} does not say where it starts`);
      }
      this.#next = d.stream_seq! + 1;
      this.#placed = true;
    }
    const prefix = (this.#nc as unknown as { options?: { inboxPrefix?: string } }).options?.inboxPrefix || "_INBOX";
    let finish!: (why: Error | null) => void;
    const done = new Promise<Error | null>((r) => (finish = r));
    const s: Session = {
      gen: ++this.#gen, name, token,
      inbox: `${prefix.replace(/\.$/, "")}.${randomHex()}`,
      nextSubj: `${c.apiPrefix}.CONSUMER.MSG.NEXT.${c.stream}.${name}`,
      dseq: 0, reqs: [],
      batch: c.pullAhead, bytes: c.pullBytes,
      largeMax: (this.#nc.info?.max_payload ?? 1 << 20) + LARGE_ROOM,
      expiresMs: Math.max(5000, 2 * c.heartbeatMs), hbMs: c.heartbeatMs,
      needLarge: false, unbounded: false, live: 0, seen: 0, lastLive: 0, lastSent: 0,
      checking: false, wantCheck: false, lastCheck: -Infinity, ended: false,
      done, finish: (why) => finish(why),
    };
    // Within the consumer's limits (an account may impose them).
    if (cfg.max_batch && cfg.max_batch > 0) s.batch = Math.min(s.batch, cfg.max_batch);
    if (cfg.max_bytes && cfg.max_bytes > 0) {
      s.bytes = Math.min(s.bytes, cfg.max_bytes);
      s.largeMax = Math.min(s.largeMax, cfg.max_bytes);
    }
    if (cfg.max_expires && cfg.max_expires > 0 && s.expiresMs > cfg.max_expires / MS) {
      s.expiresMs = cfg.max_expires / MS;
      s.hbMs = Math.min(s.hbMs, s.expiresMs / 2);
    }
    this.#used.push(name);
    if (this.#used.length > 8) this.#used.shift();
    return s;
  }

  // Reads through s until its consumer must be replaced (why) or stopping (null).
  async #follow(s: Session): Promise<Error | null> {
    if (this.#stopped) this.#fail(s, null);
    s.lastLive = now();
    this.#fill(s);
    const tick = setInterval(() => this.#tick(s), Math.max(s.hbMs / 2, 50));
    tick.unref?.();
    try {
      return await s.done;
    } finally {
      clearInterval(tick);
    }
  }

  #fail(s: Session, why: Error | null): void {
    if (s.ended) return;
    s.ended = true;
    s.finish(why);
  }

  // Forgets s: unsubscribes its requests; with names, remembers it so that
  // its name is freed before it is used again.
  #end(s: Session): void {
    s.ended = true;
    while (s.reqs.length > 0) this.#retire(s, s.reqs[0]!);
    if (this.#session === s) this.#session = undefined;
    if (!this.#stopped) this.#prev = s;
  }

  // Deletes consumer name if it is still the one with token (another
  // process with the same names may have taken the name since).
  async #deleteIfOurs(name: string, token: string): Promise<void> {
    const c = this.#cfg;
    let a: ConsumerInfoAnswer;
    try {
      a = await apiRequest(this.#nc, `${c.apiPrefix}.CONSUMER.INFO.${c.stream}.${name}`, undefined, c.createTimeoutMs);
    } catch (err) {
      if (err instanceof ApiError && (err.code === CONSUMER_NOT_FOUND || err.code === STREAM_NOT_FOUND)) return;
      throw new Error(`looking up consumer ${name} before deleting it: ${errMessage(err)}`, { cause: err });
    }
    if (a.config?.metadata?.[META_TOKEN] !== token) return; // not ours: its creation will find the name in use
    try {
      await apiRequest(this.#nc, `${c.apiPrefix}.CONSUMER.DELETE.${c.stream}.${name}`, undefined, c.createTimeoutMs);
    } catch (err) {
      if (err instanceof ApiError && err.code === CONSUMER_NOT_FOUND) return;
      throw new Error(`deleting consumer ${name}: ${errMessage(err)}`, { cause: err });
    }
  }

  // Runs every half heartbeat.
  #tick(s: Session): void {
    if (s.ended) return;
    const t = now();
    for (const r of [...s.reqs]) {
      // The server ends a request at its expiry with a status; that status
      // never came: it ended without one.
      if (t > r.sent + s.expiresMs + s.hbMs) this.#retire(s, r);
    }
    if (s.wantCheck) this.#check(s);
    this.#fill(s);
    if (s.live !== s.seen) {
      s.seen = s.live;
      s.lastLive = t;
    }
    const last = Math.max(s.lastLive, s.lastSent);
    if (t - last > 2 * s.hbMs) this.#fail(s, new Error("no heartbeat received"));
  }

  // Reconnected: the server dropped the requests of the connection it lost.
  #reconnected(): void {
    const s = this.#session;
    if (!s || s.ended) return;
    while (s.reqs.length > 0) this.#retire(s, s.reqs[0]!);
    this.#fill(s);
  }

  // Takes one message that came in through request r's subscription.
  #process(s: Session, r: Request, m: Msg): void {
    if (s.ended || r.retired) return; // for a request given up: expected after a replacement or a reconnection
    const h = m.headers;
    if (!m.reply && m.data.length === 0 && h && h.code > 0) {
      this.#statusMsg(s, r, m);
      return;
    }
    const d = parseAckReply(m.reply);
    if (!d) return this.#drop(DropReason.NoAckReply, m);
    if (d.stream !== this.#cfg.stream) return this.#drop(DropReason.OtherStream, m);
    if (d.consumer !== s.name) {
      if (this.#used.includes(d.consumer)) return; // an earlier consumer of this reader's
      return this.#drop(DropReason.OtherConsumer, m);
    }
    r.got = true;
    r.n--;
    if (r.maxBytes > 0) {
      // The server stops a request once its bytes are spent.
      r.b -= msgSize(m);
      if (r.b <= 0) {
        r.b = 0;
        r.n = 0;
      }
    }
    if (this.#stopped) return;
    if (d.consumerSeq !== s.dseq + 1 || d.streamSeq < this.#next) {
      // A message skipped (or one already handed over): start again after
      // the last one handed over.
      this.#fail(s, new Error(`delivery ${d.consumerSeq} (stream sequence ${d.streamSeq}) after delivery ${s.dseq} (next ${this.#next})`));
      return;
    }
    s.dseq = d.consumerSeq;
    this.#next = d.streamSeq + 1;
    try {
      const src = Number(m.headers?.get("Tenure-Source-Seq") ?? "");
      const tps = m.headers?.values(TRACEPARENT) ?? [];
      this.#handle({
        seq: d.streamSeq, subject: m.subject, data: m.data, pending: d.pending, sourceSeq: Number.isSafeInteger(src) && src > 0 ? src : 0,
        traceparent: tps.length === 1 && validTraceParent(tps[0]) ? tps[0] : undefined,
      });
    } catch (err) {
      this.#report(new Error(`follow ${this.#cfg.stream}: handler: ${errMessage(err)}`, { cause: err }));
    }
    s.live++;
    if (r.n === 0) {
      if (r.large) s.unbounded = false;
      this.#retire(s, r);
    }
    this.#fill(s);
  }

  // A status message for request r.
  #statusMsg(s: Session, r: Request, m: Msg): void {
    const h = m.headers!;
    const code = h.code;
    const desc = (h.description ?? "").toLowerCase();
    switch (code) {
      case 100: // idle heartbeat
        if (h.get("Nats-Last-Consumer") === String(s.dseq)) {
          r.got = true;
          s.live++;
          return;
        }
        return this.#drop(DropReason.StatusMismatch, m);
      case 503: // no responders: nobody serves the consumer's subject
        if (h.get("Nats-Subject") === s.nextSubj && !r.got) {
          this.#fail(s, new Error("no responders"));
          return;
        }
        return this.#drop(DropReason.StatusMismatch, m);
      case 408: case 409: case 423: {
        const ns = h.get("Nats-Pending-Messages");
        const bs = h.get("Nats-Pending-Bytes");
        if (ns !== "" && bs !== "") {
          // The end of the request, with the messages and bytes it had left.
          if (Number(ns) !== r.n || Number(bs) !== r.b) return this.#drop(DropReason.StatusMismatch, m);
          s.live++;
          if (code === 409 && desc === "server shutdown") {
            this.#fail(s, new Error("server shutdown"));
            return;
          }
          if (code === 409 && desc === "message size exceeds maxbytes" && r.n === r.batch && r.b === r.maxBytes) {
            // Nothing came: the next message is larger than the request's
            // max_bytes. Ask for it alone.
            if (r.large) s.unbounded = true;
            s.needLarge = true;
          }
          this.#retire(s, r);
          this.#fill(s);
          return;
        }
        if (code === 409 && (desc === "consumer deleted" || desc === "leadership change")) {
          // Anyone can send this to a subject it knows: look the consumer
          // up. The request stays outstanding until its end is proven.
          s.wantCheck = true;
          this.#check(s);
          return;
        }
      }
    }
    this.#drop(DropReason.UnexpectedStatus, m);
  }

  // Looks the consumer up, at most once per half heartbeat; replaces it if
  // it is gone or another one now.
  #check(s: Session): void {
    const t = now();
    if (s.checking || t - s.lastCheck < s.hbMs / 2) return;
    s.checking = true;
    s.wantCheck = false;
    s.lastCheck = t;
    const c = this.#cfg;
    void apiRequest(this.#nc, `${c.apiPrefix}.CONSUMER.INFO.${c.stream}.${s.name}`, undefined, c.createTimeoutMs).then(
      (a) => {
        s.checking = false;
        if (a.config?.metadata?.[META_TOKEN] !== s.token) this.#fail(s, new Error(`consumer ${s.name} is another one now`));
      },
      (err) => {
        s.checking = false;
        if (err instanceof ApiError && (err.code === CONSUMER_NOT_FOUND || err.code === STREAM_NOT_FOUND)) {
          this.#fail(s, new Error(`consumer ${s.name}: ${err.message}`, { cause: err }));
        }
      },
    );
  }

  // Tops the outstanding requests up to pullAhead messages and pullBytes
  // bytes once half of either is spent, as the Go reader does.
  #fill(s: Session): void {
    const c = this.#cfg;
    while (!s.ended && s.reqs.length < MAX_REQUESTS) {
      let aheadN = 0;
      let aheadB = 0;
      let large = false;
      for (const r of s.reqs) {
        aheadN += r.n;
        aheadB += r.b;
        large ||= r.large;
      }
      let n: number;
      let maxBytes: number;
      const asLarge = s.needLarge && !large && aheadN < c.pullAhead;
      if (asLarge) {
        n = 1;
        maxBytes = s.unbounded ? 0 : s.largeMax;
      } else if (s.reqs.length > 0 && 2 * aheadN > c.pullAhead && 2 * aheadB > c.pullBytes) {
        return; // more than half of both still asked for
      } else {
        n = Math.min(s.batch, c.pullAhead - aheadN);
        maxBytes = Math.min(s.bytes, c.pullBytes - aheadB);
        if (n <= 0 || maxBytes <= 0) return;
      }
      if (!this.#pull(s, n, maxBytes, asLarge)) return;
      if (asLarge) s.needLarge = false;
    }
  }

  // Sends one request for n messages and maxBytes bytes (0: no bound).
  #pull(s: Session, n: number, maxBytes: number, large: boolean): boolean {
    const id = ++this.#reqId;
    const reply = `${s.inbox}.${id}`;
    let r: Request | undefined;
    let sub: Subscription;
    try {
      sub = this.#nc.subscribe(reply, { callback: (_err, m) => { if (r && m) this.#process(s, r, m); } });
    } catch {
      return false; // the connection is closed: the missed heartbeats tell
    }
    const body: Record<string, number> = { batch: n };
    if (maxBytes > 0) body.max_bytes = maxBytes;
    body.expires = s.expiresMs * MS;
    body.idle_heartbeat = s.hbMs * MS;
    try {
      this.#nc.publish(s.nextSubj, JSON.stringify(body), { reply });
    } catch {
      sub.unsubscribe();
      return false;
    }
    const t = now();
    r = { id, sub, batch: n, maxBytes, n, b: maxBytes, large, got: false, sent: t, retired: false };
    s.reqs.push(r);
    s.lastSent = t;
    return true;
  }

  // Forgets request r: nothing more is taken from its subscription.
  #retire(s: Session, r: Request): void {
    const i = s.reqs.indexOf(r);
    if (i >= 0) s.reqs.splice(i, 1);
    r.retired = true;
    try {
      r.sub.unsubscribe();
    } catch {
      // closed already
    }
  }
}

// The size of a delivery as the server counts it against max_bytes:
// subject, reply subject, headers and body.
function msgSize(m: Msg): number {
  const sized = m as unknown as { size?: () => number };
  if (typeof sized.size === "function") return sized.size();
  return Buffer.byteLength(m.subject) + Buffer.byteLength(m.reply ?? "") + m.data.length;
}
