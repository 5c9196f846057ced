// The HTTP fence client against the Go middleware (fence/httpfence, served
// by internal/fencehttpd) and a real `tenure serve`: run()'s effects option
// binds each attempt (claiming its job) before the handler, and a worker
// whose renewals stopped has its request refused once a newer generation
// claimed the job, with the codes a verdict would have.

import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";

import { connect, ErrorCode, FenceClient, isError, type BoundFence } from "@tenure/worker";

import { Decisions, Ops, pkgDir, repoRoot, Serve, uniq } from "./harness.js";

let serve: Serve;
let nc: NatsConnection;
let ops: Ops;
let httpd: ChildProcess;
let base: string;

before(async () => {
  const bin = join(pkgDir, "build", "bin", "fencehttpd");
  mkdirSync(join(pkgDir, "build", "bin"), { recursive: true });
  execFileSync("go", ["build", "-o", bin, "./internal/fencehttpd"], { cwd: repoRoot, stdio: ["ignore", "inherit", "inherit"] });
  httpd = spawn(bin, [], { stdio: ["pipe", "pipe", "inherit"] });
  base = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: httpd.stdout! });
    rl.once("line", (l) => (l.startsWith("listening ") ? resolve(l.slice("listening ".length)) : reject(new Error(l))));
    httpd.once("exit", (c) => reject(new Error(`fencehttpd exited ${c}`)));
  });
  serve = await Serve.start();
  nc = await serve.connect("fence-test");
  ops = new Ops(nc);
});

after(async () => {
  httpd?.stdin?.end();
  await nc?.close();
  await serve?.stop();
});

async function paid(): Promise<number> {
  return Number(await (await fetch(base + "/paid")).text());
}

describe("fence", () => {
  test("run binds each attempt: the handler pays through job.effects", async () => {
    const queue = uniq("q");
    const job = uniq("j");
    const w = await connect(nc, uniq("w"));
    const stop = new AbortController();
    const before = await paid();
    const done = new Promise<void>((resolve, reject) => {
      void w.run(queue, async (j) => {
        const b = j.effects as BoundFence;
        const resp = await b.fetch(`${base}/pay/${j.id}`, { method: "POST" }, "charge");
        assert.equal(resp.status, 201);
        // The same effect again is a replay, refused.
        await assert.rejects(b.fetch(`${base}/pay/${j.id}`, { method: "POST" }, "charge"), (e) => isError(e, ErrorCode.Replay));
        // A request for another job's route: a mismatch.
        await assert.rejects(b.fetch(`${base}/pay/other`, { method: "POST" }, "charge-2"), (e) => isError(e, ErrorCode.Mismatch) && isError(e, ErrorCode.LostAuthority));
        resolve();
      }, { effects: new FenceClient({ claimUrl: base + "/claim" }), signal: stop.signal }).catch(reject);
    });
    const dec = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
    await ops.submit(job, queue, { lease_ms: 30000 });
    await done;
    await dec.waitFor((d) => d.job.id === job && d.kind === "completed");
    await dec.close();
    stop.abort();
    await w.close();
    assert.equal(await paid(), before + 1);
  });

  test("a worker whose renewals stopped is refused once a newer generation claimed the job", async () => {
    const job = uniq("j");
    const client = new FenceClient({ claimUrl: base + "/claim" });
    const w1 = await connect(nc, uniq("w"));
    const l1 = await w1.acquire(job, { leaseMs: 500 });
    const b1 = await client.bind(l1);
    await w1.close(); // paused: no more renewals
    const w2 = await connect(nc, uniq("w"));
    let l2;
    for (;;) {
      try {
        l2 = await w2.acquire(job, { leaseMs: 60000 });
        break;
      } catch (e) {
        if (!isError(e, ErrorCode.LeaseHeld)) throw e;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    await client.bind(l2);
    const before = await paid();
    await assert.rejects(b1.fetch(`${base}/pay/${job}`, { method: "POST" }, "charge"),
      (e) => isError(e, ErrorCode.Refused) && isError(e, ErrorCode.StaleGeneration) && isError(e, ErrorCode.LostAuthority));
    assert.equal(await paid(), before);
    await w2.close();
  });
});
