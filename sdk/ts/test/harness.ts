// Test harness: a real `tenure serve` (the Go binary, built once from the
// repository), a NATS connection to it, a dispatcher that publishes ops
// inputs, a reader of decisions, and a fake clock.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { connect as natsConnect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";
import { headers, type MsgHdrs } from "@nats-io/nats-core";
import { jetstream, jetstreamManager, type JetStreamClient, type ConsumerMessages } from "@nats-io/jetstream";

import type { Clock, Decision, Timer } from "@tenure/worker";

const here = dirname(fileURLToPath(import.meta.url));
/** sdk/ts, whether this file runs from test/ or build/test/. */
export const pkgDir = resolve(here, existsSync(join(here, "..", "package.json")) ? ".." : "../..");
/** The repository root. */
export const repoRoot = resolve(pkgDir, "../..");

let binary: string | undefined;

/**
 * The tenure binary: $TENURE_BIN, or built from the repository into
 * build/bin/tenure (go build once; Go's cache makes a build of an
 * unchanged tree instant).
 */
export function tenureBinary(): string {
  if (binary) return binary;
  const env = process.env.TENURE_BIN;
  if (env) {
    if (!existsSync(env)) throw new Error(`TENURE_BIN=${env}: no such file`);
    return (binary = env);
  }
  const out = join(pkgDir, "build", "bin", "tenure");
  mkdirSync(dirname(out), { recursive: true });
  execFileSync("go", ["build", "-o", out, "./cmd/tenure"], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
  statSync(out);
  return (binary = out);
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

/** A running `tenure serve` with a fresh data directory. */
export class Serve {
  readonly url: string;
  readonly dir: string;
  readonly #proc: ChildProcess;
  #log = "";

  readonly #auth: { user: string; password: string; inbox_prefix: string } | undefined;

  private constructor(url: string, dir: string, proc: ChildProcess, auth?: { user: string; password: string; inbox_prefix: string }) {
    this.url = url;
    this.dir = dir;
    this.#proc = proc;
    this.#auth = auth;
  }

  /** The log so far (stderr and stdout). */
  get log(): string {
    return this.#log;
  }

  /**
   * Starts `tenure serve --listen 127.0.0.1:<free port> --data <tmpdir>`,
   * waits for its "live" log line, then for the coordinator's own first
   * inputs (rules, policy) to be decided, so that every input of a test is
   * judged under the rules revision in force. With admin (the credential
   * file of the administrator that `tenure auth init` writes), it also runs
   * `tenure genesis` with it: under auth init's permissions the coordinator
   * may not widen a brand-new deployment's input stream itself.
   */
  static async start(extra: string[] = [], auth?: { user: string; password: string; inbox_prefix: string }, admin?: string): Promise<Serve> {
    const bin = tenureBinary();
    const dir = mkdtempSync(join(tmpdir(), "tenure-ts-"));
    const port = await freePort();
    const args = ["serve", "--listen", `127.0.0.1:${port}`, "--data", dir, "--sync", "interval", "--no-heads", ...extra];
    const proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } });
    const s = new Serve(`nats://127.0.0.1:${port}`, dir, proc, auth);
    // The genesis connects once the embedded server listens (its "ready"
    // line): earlier it finds no server to connect to.
    let genesis = !admin;
    const startGenesis = () => {
      genesis = true;
      const g = spawn(bin, ["genesis", "--credential", admin!, "--nats-url", s.url, "--timeout", "30s"],
        { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } });
      const onG = (b: Buffer) => { s.#log += "[genesis] " + b.toString(); };
      g.stdout!.on("data", onG);
      g.stderr!.on("data", onG);
    };
    // A serve that never goes live is killed, not left behind.
    const live = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`tenure serve: no "live" line in 30 s:\n${s.#log}`)), 30_000);
      const onData = (b: Buffer) => {
        s.#log += b.toString();
        if (!genesis && /embedded nats-server ready/.test(s.#log)) startGenesis();
        if (/\bINF live\b|"msg":"live"/.test(s.#log)) {
          clearTimeout(timer);
          resolve();
        }
      };
      proc.stdout!.on("data", onData);
      proc.stderr!.on("data", onData);
      proc.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`tenure serve exited with ${code}:\n${s.#log}`));
      });
    });
    try {
      await live;
    } catch (err) {
      proc.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    const nc = await s.connect("harness");
    try {
      const jsm = await jetstreamManager(nc);
      for (let i = 0; ; i++) {
        const si = await jsm.streams.info("TENURE_OUT");
        if (si.state.last_seq >= 2) break;
        if (i > 300) throw new Error("tenure serve: its rules and policy were not decided in 30 s");
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await nc.close();
    }
    return s;
  }

  /** A NATS connection to the server (as the coordinator's user under a server configuration with users). */
  connect(name: string): Promise<NatsConnection> {
    const a = this.#auth;
    return natsConnect({ servers: this.url, name, ...(a ? { user: a.user, pass: a.password, inboxPrefix: a.inbox_prefix } : {}) });
  }

  /** Stops the server (SIGTERM, then SIGKILL) and removes its data directory. */
  async stop(): Promise<void> {
    const p = this.#proc;
    if (p.exitCode === null && p.signalCode === null) {
      const exited = new Promise<void>((r) => p.once("exit", () => r()));
      p.kill("SIGTERM");
      const t = setTimeout(() => p.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(t);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

let foldBinary: string | undefined;

/**
 * An embedded nats-server with Tenure's streams whose log is held at an
 * older rules revision, the real fold deciding in place of a coordinator
 * (test/foldcoord, a Go program built once): what a deployment not yet
 * upgraded does with inputs this SDK sends.
 */
export class FoldCoord {
  readonly url: string;
  readonly #proc: ChildProcess;
  readonly #dir: string;

  private constructor(url: string, proc: ChildProcess, dir: string) {
    this.url = url;
    this.#proc = proc;
    this.#dir = dir;
  }

  static async start(rev: number): Promise<FoldCoord> {
    if (!foldBinary) {
      const out = join(pkgDir, "build", "bin", "foldcoord");
      mkdirSync(dirname(out), { recursive: true });
      execFileSync("go", ["build", "-o", out, "./sdk/ts/test/foldcoord"], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
      foldBinary = out;
    }
    const dir = mkdtempSync(join(tmpdir(), "tenure-fold-"));
    const proc = spawn(foldBinary, ["-rev", String(rev), "-data", dir], { stdio: ["pipe", "pipe", "pipe"] });
    let log = "";
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`foldcoord: no url in 30 s:\n${log}`)), 30_000);
      const onData = (b: Buffer) => {
        log += b.toString();
        const m = /^url (\S+)$/m.exec(log);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      };
      proc.stdout!.on("data", onData);
      proc.stderr!.on("data", onData);
      proc.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`foldcoord exited with ${code}:\n${log}`));
      });
    });
    return new FoldCoord(url, proc, dir);
  }

  /** Stops it (its stdin closed, then SIGKILL) and removes its data directory. */
  async stop(): Promise<void> {
    const p = this.#proc;
    if (p.exitCode === null && p.signalCode === null) {
      const exited = new Promise<void>((r) => p.once("exit", () => r()));
      p.stdin!.end();
      const t = setTimeout(() => p.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(t);
    }
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

/** A dispatcher and operator: publishes ops inputs and returns their input sequence. */
export class Ops {
  readonly #js: JetStreamClient;
  readonly actor: string;
  #n = 0;

  constructor(nc: NatsConnection, actor = "disp") {
    this.#js = jetstream(nc);
    this.actor = actor;
  }

  async publish(job: string, verb: string, body: Record<string, unknown>, hdrs?: Record<string, string>): Promise<number> {
    let h: MsgHdrs | undefined;
    if (hdrs) {
      h = headers();
      for (const [k, v] of Object.entries(hdrs)) h.set(k, v);
    }
    const ack = await this.#js.publish(`tenure.in.ops.${this.actor}.${job}.${verb}`, JSON.stringify({ v: 1, ...body }),
      { msgID: `${this.actor}-${process.pid}-${Date.now()}-${++this.#n}`, headers: h });
    return ack.seq;
  }

  offer(job: string, holder: string, body: Record<string, unknown> = {}): Promise<number> {
    return this.publish(job, "offer", { holder, ...body });
  }

  cancel(job: string, reason = "test"): Promise<number> {
    return this.publish(job, "cancel", { reason });
  }

  revoke(job: string): Promise<number> {
    return this.publish(job, "resolve", { action: "revoke", reason: "test" });
  }

  submit(job: string, queue: string, body: Record<string, unknown> = {}, hdrs?: Record<string, string>): Promise<number> {
    return this.publish(job, "submit", { queue, ...body }, hdrs);
  }
}

/**
 * Reads decisions matching filter from the first stored one, and waits for
 * those a test expects (never sleeping: each wait ends at the decision or
 * at its deadline).
 */
export class Decisions {
  readonly seen: Decision[] = [];
  #msgs: ConsumerMessages | undefined;
  #wake: (() => void) | undefined;

  static async follow(nc: NatsConnection, filter: string): Promise<Decisions> {
    const r = new Decisions();
    const js = jetstream(nc);
    const c = await js.consumers.get("TENURE_OUT", { filter_subjects: filter, deliver_policy: "all" as never });
    r.#msgs = await c.consume({
      callback: (m) => {
        r.seen.push(m.json<Decision>());
        r.#wake?.();
      },
    });
    return r;
  }

  /** The first decision seen, from index from on, matching pred; rejects after timeoutMs. */
  async waitFor(pred: (d: Decision) => boolean, timeoutMs = 10_000, from = 0): Promise<Decision> {
    const deadline = Date.now() + timeoutMs;
    let i = from;
    for (;;) {
      for (; i < this.seen.length; i++) if (pred(this.seen[i]!)) return this.seen[i]!;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(`no such decision in ${timeoutMs} ms; saw:\n${this.seen.map(describe).join("\n")}`);
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.#wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.#wake = undefined;
    }
  }

  async close(): Promise<void> {
    await this.#msgs?.close();
  }
}

/** One line per decision, for failure messages. */
export function describe(d: Decision): string {
  return `${d.cause}/${d.n} ${d.addressee} ${d.job.id} ${d.kind}/${d.reason} state=${d.job.state}` +
    (d.job.attempt !== undefined ? ` attempt=${d.job.attempt}` : "") + (d.detail ? ` detail=${JSON.stringify(d.detail)}` : "");
}

/** A clock whose time moves only when the test advances it (the Go SDK's clock.Fake). */
export class FakeClock implements Clock {
  #t: number;
  #timers: Array<{ at: number; fn: () => void; stopped: boolean; seq: number }> = [];
  #seq = 0;

  constructor(t = performance.timeOrigin + performance.now()) {
    this.#t = t;
  }

  now(): number {
    return this.#t;
  }

  setTimer(fn: () => void, ms: number): Timer {
    const e = { at: this.#t + Math.max(0, ms), fn, stopped: false, seq: this.#seq++ };
    this.#timers.push(e);
    return { stop: () => void (e.stopped = true) };
  }

  /** Timers armed and not yet fired or stopped. */
  get pending(): number {
    return this.#timers.filter((e) => !e.stopped).length;
  }

  /** Moves the time by ms, firing the timers due, in order. */
  advance(ms: number): void {
    const until = this.#t + ms;
    for (;;) {
      this.#timers = this.#timers.filter((e) => !e.stopped);
      this.#timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const e = this.#timers[0];
      if (!e || e.at > until) break;
      this.#timers.shift();
      this.#t = Math.max(this.#t, e.at);
      e.fn();
    }
    this.#t = until;
  }
}

/** Resolves when signal is aborted, with its reason; rejects after timeoutMs. */
export function aborted(signal: AbortSignal, timeoutMs = 10_000): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`signal not aborted in ${timeoutMs} ms`)), timeoutMs);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(signal.reason);
    }, { once: true });
  });
}

/** A unique token for ids in one run. */
export function uniq(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}
