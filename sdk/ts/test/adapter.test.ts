// The conformance adapter (dist/conformance-adapter.js) driven as the
// conformance runner drives it (conformance/ADAPTER.md, protocol 1), against
// a real `tenure serve`: the ready line, commands and replies, typed errors,
// offer, lease_lost and handler events.

import assert from "node:assert/strict";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";

import { Ops, pkgDir, Serve, uniq } from "./harness.js";

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let serve: Serve;
let nc: NatsConnection;
let ops: Ops;

before(async () => {
  serve = await Serve.start();
  nc = await serve.connect("adapter-test");
  ops = new Ops(nc);
});

after(async () => {
  await nc?.close();
  await serve?.stop();
});

class Session {
  readonly lines: Obj[] = [];
  readonly #p: ChildProcessWithoutNullStreams;
  #id = 0;
  #wake: (() => void) | undefined;
  stderr = "";
  exited: Promise<number | null>;

  constructor(workerId: string) {
    this.#p = spawn(process.execPath, [join(pkgDir, "dist", "conformance-adapter.js")], {
      env: { ...process.env, TENURE_NATS_URL: serve.url, TENURE_WORKER_ID: workerId, TENURE_ADAPTER_PROTOCOL: "1" },
    });
    this.exited = new Promise((r) => this.#p.once("exit", (code) => r(code)));
    this.#p.stderr.on("data", (b: Buffer) => (this.stderr += b.toString()));
    const rl = createInterface({ input: this.#p.stdout });
    rl.on("line", (l) => {
      const o = JSON.parse(l) as Obj; // a line that is not JSON fails the test here
      assert.equal(typeof o, "object");
      this.lines.push(o);
      this.#wake?.();
    });
  }

  async waitLine(pred: (o: Obj) => boolean, timeoutMs = 10_000): Promise<Obj> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const o = this.lines.find(pred);
      if (o) return o;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no such line; saw:\n${this.lines.map((l) => JSON.stringify(l)).join("\n")}\nstderr:\n${this.stderr}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.#wake = () => {
          clearTimeout(t);
          r();
        };
      });
    }
  }

  async cmd(cmd: string, args: Obj = {}): Promise<Obj> {
    const id = ++this.#id;
    this.#p.stdin.write(JSON.stringify({ id, cmd, ...args }) + "\n");
    return this.waitLine((o) => o.id === id);
  }

  async ok(cmd: string, args: Obj = {}): Promise<Obj> {
    const r = await this.cmd(cmd, args);
    assert.equal(r.ok, true, `${cmd}: ${JSON.stringify(r)}`);
    return r.result as Obj;
  }

  end(): void {
    this.#p.stdin.end();
  }
}

test("adapter: protocol 1 over the SDK", async () => {
  const wid = uniq("w");
  const s = new Session(wid);
  const ready = await s.waitLine((o) => o.event === "ready");
  assert.equal(s.lines[0], ready, "the ready line comes first");
  assert.deepEqual({ protocol: ready.protocol, sdk: ready.sdk }, { protocol: 1, sdk: "typescript" });

  const early = await s.cmd("acquire", { job: "x" });
  assert.equal(early.error.kind, "invalid", "a command before connect");
  assert.deepEqual(await s.ok("connect", { verdict_timeout_ms: 5000 }), { worker: wid });
  assert.equal((await s.cmd("fly")).error.kind, "unsupported");

  // acquire, lease held, lease_state, complete: lease_lost "ended".
  const job = uniq("a");
  const lease = await s.ok("acquire", { job, lease_ms: 30_000 });
  assert.equal(lease.job, job);
  assert.equal(lease.token, `${job}/${lease.lease_id}/1`);
  assert.equal(lease.lease_ms, 30_000);
  const again = await s.cmd("acquire", { job });
  assert.equal(again.ok, false);
  assert.equal(again.error.kind, "verdict");
  assert.deepEqual(again.error.verdict, { kind: "rejected", reason: "lease_held" });
  for (const n of ["rejected", "lease_held", "not_accepted"]) assert.ok(again.error.is.includes(n), n);
  assert.deepEqual(await s.ok("lease_state", { lease_id: lease.lease_id }), { lost: false, cause: null, cancel_requested: false });
  await s.ok("renew", { lease_id: lease.lease_id });
  await s.ok("progress", { lease_id: lease.lease_id, value: 30 });
  await s.ok("complete", { lease_id: lease.lease_id, outcome: "SUCCESS" });
  const ended = await s.waitLine((o) => o.event === "lease_lost" && o.lease_id === lease.lease_id);
  assert.equal(ended.cause.cause, "ended");
  assert.ok(ended.cause.is.includes("lease_ended"));
  assert.equal(typeof ended.at_ms, "number");
  assert.equal((await s.cmd("renew", { lease_id: "L0-nope" })).error.kind, "unknown");

  // An offer: the offer event, wait_offer, accept, a cancellation.
  const ojob = uniq("o");
  await ops.offer(ojob, wid, { lease_ms: 20_000 });
  const offer = await s.ok("wait_offer", { timeout_ms: 5000, job: ojob });
  assert.equal(offer.job, ojob);
  assert.equal(offer.lease_ms, 20_000);
  assert.match(offer.ack_deadline, /^\d{4}-\d{2}-\d{2}T/);
  assert.ok(s.lines.some((o) => o.event === "offer" && o.lease_id === offer.lease_id));
  assert.equal((await s.cmd("wait_offer", { timeout_ms: 50 })).error.kind, "timeout");
  const ol = await s.ok("accept", { lease_id: offer.lease_id });
  await ops.cancel(ojob);
  const cancelled = await s.waitLine((o) => o.event === "lease_lost" && o.lease_id === ol.lease_id);
  assert.equal(cancelled.cause.cause, "cancel_requested");
  assert.deepEqual(cancelled.cause.verdict, { kind: "cancel_requested", reason: "ok" });
  const st = await s.ok("lease_state", { lease_id: ol.lease_id });
  assert.equal(st.lost, true);
  assert.equal(st.cancel_requested, true);
  await s.ok("cancel_ack", { lease_id: ol.lease_id });
  await s.ok("complete", { lease_id: ol.lease_id, outcome: "CANCELLED" });

  // run: a job failing once, then succeeding with progress.
  const queue = uniq("q");
  const qjob = uniq("j");
  await s.ok("run", {
    queue, concurrency: 1,
    behaviour: { jobs: { [qjob]: [{ then: "fail", message: "nope" }, { progress: [50, 200], then: "succeed" }] } },
  });
  await ops.submit(qjob, queue, { backoff_ms: 50, payload: "hello" });
  const h1 = await s.waitLine((o) => o.event === "handler_started" && o.job === qjob && o.call === 1);
  assert.equal(h1.attempt, 1);
  assert.equal(h1.payload, "hello");
  const e2 = await s.waitLine((o) => o.event === "handler_ended" && o.job === qjob && o.call === 2);
  assert.equal(e2.attempt, 2);
  assert.equal(e2.then, "succeed");
  assert.equal(e2.progress_errors.length, 1, "progress 200 is refused");
  assert.equal(e2.progress_errors[0].verdict.reason, "bad_value");
  assert.equal(e2.ctx_cause, null);
  const stopped = await s.ok("stop_run", { queue });
  assert.equal(stopped.error, null);
  await s.waitLine((o) => o.event === "run_ended" && o.queue === queue);

  // close: leases still held end with cause closed, before the reply.
  const held = await s.ok("acquire", { job: uniq("h"), lease_ms: 30_000 });
  const closeReply = await s.cmd("close");
  assert.equal(closeReply.ok, true);
  const lost = s.lines.findIndex((o) => o.event === "lease_lost" && o.lease_id === held.lease_id);
  assert.ok(lost >= 0 && lost < s.lines.indexOf(closeReply), "lease_lost before the close reply");
  assert.equal(s.lines[lost]!.cause.cause, "closed");
  s.end();
  assert.equal(await s.exited, 0);
});
