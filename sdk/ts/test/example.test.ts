// examples/worker.ts as a process against a real `tenure serve`: it runs a
// queue's jobs, logs each outcome, and SIGTERM drains it (exit 0, capacity
// withdrawn; test/drain.test.ts tests the drain itself).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";

import { Decisions, Ops, pkgDir, Serve, uniq } from "./harness.js";

let serve: Serve;
let nc: NatsConnection;

before(async () => {
  serve = await Serve.start();
  nc = await serve.connect("example-test");
});

after(async () => {
  await nc?.close();
  await serve?.stop();
});

test("examples/worker.ts runs a queue and stops on SIGTERM", async () => {
  const queue = uniq("q");
  const id = uniq("ex");
  const watch = await Decisions.follow(nc, "tenure.out.*.*.*");
  const p = spawn(process.execPath, [join(pkgDir, "build", "examples", "worker.js"), queue, id], {
    env: { ...process.env, NATS_URL: serve.url, CONCURRENCY: "2" },
  });
  let out = "";
  p.stdout.on("data", (b: Buffer) => (out += b.toString()));
  p.stderr.on("data", (b: Buffer) => (out += b.toString()));
  const exited = new Promise<number | null>((r) => p.once("exit", (code) => r(code)));
  try {
    await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === id);
    const ops = new Ops(nc);
    const ok = uniq("ok");
    const bad = uniq("bad");
    await ops.submit(ok, queue, { payload: "hello" });
    await ops.submit(bad, queue, { payload: "bad one" });
    const done = await watch.waitFor((d) => d.job.id === ok && d.kind === "completed");
    assert.equal(done.job.state, "COMPLETED");
    assert.equal(done.job.progress_value, 100);
    const failed = await watch.waitFor((d) => d.job.id === bad && d.kind === "completed");
    assert.equal(failed.job.state, "FAILED");
    assert.equal(failed.of, 1, "a permanent failure is not requeued");
    const mark = watch.seen.length;
    p.kill("SIGTERM");
    assert.equal(await exited, 0, out);
    const w = await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === id, 10_000, mark);
    assert.equal(w.capacity?.slots, 0);
    assert.match(out, new RegExp(`job ${ok} done`));
    assert.match(out, new RegExp(`job ${ok} attempt 1: SUCCESS`), "the outcome of each attempt is logged");
    assert.match(out, new RegExp(`job ${bad} attempt 1: FAILED permanently: `));
    assert.match(out, /SIGTERM: taking no more jobs/);
    assert.match(out, /stopped/);
  } finally {
    p.kill("SIGKILL");
    await watch.close();
  }
});
