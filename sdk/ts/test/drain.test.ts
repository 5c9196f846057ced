// The graceful stop of a worker process (issue 34): a node process running
// run() with drainOnSignals() (test/fixtures/drain-worker.ts) against a
// real `tenure serve`, sent SIGTERM while three handlers run. Its capacity
// is withdrawn at once (the decision waited for, nothing offered to it
// after), the handlers that finish during the drain report their results
// as usual (SUCCESS; a thrown error a counted FAILED attempt), the one that
// ignores the drain has its signal aborted (RunStopped) when the drain's
// timeout passes and its lease released, and the process exits 0.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";

import type { Decision } from "@tenure/worker";
import { Decisions, describe, Ops, pkgDir, Serve, uniq } from "./harness.js";

let serve: Serve;
let nc: NatsConnection;

before(async () => {
  serve = await Serve.start();
  nc = await serve.connect("drain-test");
});

after(async () => {
  await nc?.close();
  await serve?.stop();
});

/** A child process's JSON lines, waited for as they come. */
class Lines {
  readonly seen: Array<Record<string, unknown>> = [];
  text = "";
  #wake: (() => void) | undefined;

  add(chunk: string): void {
    this.text += chunk;
    const lines = this.text.split("\n");
    this.seen.length = 0;
    for (const l of lines) {
      if (l.startsWith("{")) this.seen.push(JSON.parse(l) as Record<string, unknown>);
    }
    this.#wake?.();
  }

  async waitFor(pred: (o: Record<string, unknown>) => boolean, timeoutMs = 20_000): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const o = this.seen.find(pred);
      if (o) return o;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no such line in ${timeoutMs} ms:\n${this.text}`);
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
}

test("SIGTERM drains a worker process: withdrawn at once, running jobs finish, a stubborn one stopped at the timeout, exit 0", async () => {
  const queue = uniq("q");
  const id = uniq("dw");
  const drainMs = 3000;
  const watch = await Decisions.follow(nc, "tenure.out.*.*.*");
  const p = spawn(process.execPath, [join(pkgDir, "build", "test", "fixtures", "drain-worker.js"), queue, id], {
    env: { ...process.env, NATS_URL: serve.url, DRAIN_MS: String(drainMs) },
  });
  const out = new Lines();
  let errText = "";
  p.stdout.on("data", (b: Buffer) => out.add(b.toString()));
  p.stderr.on("data", (b: Buffer) => (errText += b.toString()));
  const exited = new Promise<number | null>((r) => p.once("exit", (code) => r(code)));
  const ctx = () => `\nstdout:\n${out.text}\nstderr:\n${errText}\ndecisions:\n${watch.seen.map(describe).join("\n")}`;
  try {
    await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === id && d.capacity?.slots === 3, 20_000);
    const ops = new Ops(nc);
    const [ok, bad, stub, later] = ["ok", "bad", "stub", "later"].map((j) => uniq(j)) as [string, string, string, string];
    const long = { lease_ms: 60_000, ack_timeout_ms: 60_000 };
    await ops.submit(ok, queue, { payload: "finish-on-stdin", ...long });
    await ops.submit(bad, queue, { payload: "fail-on-stdin", max_attempts: 3, backoff_ms: 60_000, ...long });
    await ops.submit(stub, queue, { payload: "stubborn", ...long });
    for (const j of [ok, bad, stub]) await out.waitFor((o) => o.started === j);

    // SIGTERM: the capacity is withdrawn while every handler still runs.
    const t0 = performance.now();
    p.kill("SIGTERM");
    const withdrawn = await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === id && d.capacity?.slots === 0, 20_000);
    const settled = (j: string) => (d: Decision) => d.job.id === j && (d.kind === "completed" || d.kind === "released" || d.kind === "requeued");
    for (const j of [ok, bad, stub]) assert.ok(!watch.seen.some(settled(j)), `${j} settled before the handlers finished:${ctx()}`);
    // A job submitted now is not offered to the draining worker.
    const laterSeq = await ops.submit(later, queue, { payload: "finish-on-stdin" });
    assert.ok(laterSeq > withdrawn.cause);

    // The two that finish during the drain report as usual.
    p.stdin.write(`finish ${ok}\nfinish ${bad}\n`);
    const done = await watch.waitFor((d) => d.job.id === ok && d.kind === "completed", 20_000);
    assert.equal(done.job.state, "COMPLETED", ctx());
    assert.equal(done.job.result, "SUCCESS", ctx());
    const requeued = await watch.waitFor((d) => d.job.id === bad && d.kind === "requeued", 20_000);
    assert.equal(requeued.reason, "attempt_failed", `a handler's error during the drain is a counted attempt:${ctx()}`);
    const failed = watch.seen.find((d) => d.job.id === bad && d.kind === "completed");
    assert.equal(failed?.job.result, "FAILED", ctx());

    // The stubborn one runs on until the drain's timeout, then its signal
    // is aborted (RunStopped) and its lease released.
    const ab = await out.waitFor((o) => o.aborted === stub, drainMs + 20_000);
    assert.ok((ab.codes as string[]).includes("RunStopped"), ctx());
    assert.ok((ab.after_drain_ms as number) >= drainMs - 50, `${stub} aborted ${String(ab.after_drain_ms)} ms into a drain of ${drainMs} ms${ctx()}`);
    const released = await watch.waitFor((d) => d.job.id === stub && d.kind === "released", 20_000);
    assert.equal(released.job.holder, id);

    const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r("still running"), 20_000))]);
    assert.equal(code, 0, `exit after SIGTERM${ctx()}`);
    const took = performance.now() - t0;
    assert.ok(took >= drainMs, `exited ${Math.round(took)} ms after SIGTERM, before the drain's timeout of ${drainMs} ms`);

    // Nothing was offered to the worker once it had withdrawn: "later",
    // stored before the release, was offered to nobody.
    const offeredLater = watch.seen.filter((d) => d.job.id === later && d.kind === "assigned");
    assert.deepEqual(offeredLater.map(describe), [], ctx());
    const results = Object.fromEntries(out.seen.filter((o) => o.result).map((o) => [o.result as string, o.text as string]));
    assert.deepEqual(results, {
      [ok]: "SUCCESS",
      [bad]: "FAILED (retried if attempts remain): disk full",
      [stub]: "released (the run was stopping): not an attempt",
    }, ctx());
    assert.ok(out.seen.some((o) => o.stopped), ctx());
  } finally {
    p.kill("SIGKILL");
    await watch.close();
  }
});
