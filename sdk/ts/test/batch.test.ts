// run()'s ACKs and results coalesced across leases (batch.ts, rules
// revision 7, PROTOCOL.md §22.9): 300 jobs through a worker with 64 slots
// take far fewer ACK and result inputs than jobs, each lease its own
// verdict; against a log held at revision 6 (test/foldcoord) the batcher
// falls back to single inputs, for good.

import assert from "node:assert/strict";
import { test } from "node:test";

import { connect as natsConnect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";

import { connect, connectDispatcher, type Decision } from "@tenure/worker";
import { Decisions, describe, FoldCoord, Serve, uniq } from "./harness.js";

async function inputSubjects(nc: NatsConnection, from: number, to?: number): Promise<string[]> {
  const jsm = await jetstreamManager(nc);
  const last = to ?? (await jsm.streams.info("TENURE_IN")).state.last_seq;
  const out: string[] = [];
  for (let seq = from + 1; seq <= last; seq++) {
    const m = await jsm.streams.getMessage("TENURE_IN", { seq });
    if (m) out.push(m.subject);
  }
  return out;
}

async function runJobs(nc: NatsConnection, watch: Decisions, queue: string, ids: string[], timeoutMs: number): Promise<void> {
  const d = await connectDispatcher(nc, uniq("disp"));
  try {
    const res = await d.submitMany(ids.map((id) => ({ id, queue, options: { leaseMs: 600_000, ackTimeoutMs: 600_000 } })));
    for (const r of res) assert.equal(r.error, undefined, r.error?.message);
  } finally {
    await d.close();
  }
  const want = new Set(ids);
  const done = new Set<string>();
  await watch.waitFor((x: Decision) => {
    if (x.kind === "completed" && want.has(x.job.id)) done.add(x.job.id);
    return done.size === want.size;
  }, timeoutMs);
}

test("run() coalesces ACKs and results: 300 jobs, far fewer inputs, each lease its own verdict", async () => {
  const serve = await Serve.start();
  const nc = await serve.connect("batch-test");
  const id = uniq("bw");
  const queue = uniq("q");
  const w = await connect(nc, id, { onError: (err) => console.error(`worker ${id}:`, err.message) });
  const watch = await Decisions.follow(nc, "tenure.out.>");
  const stop = new AbortController();
  try {
    const run = w.run(queue, () => undefined, { concurrency: 64, signal: stop.signal });
    run.catch(() => undefined); // awaited below; a failure before that must not be an unhandled rejection
    await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === id);
    const jsm = await jetstreamManager(nc);
    const from = (await jsm.streams.info("TENURE_IN")).state.last_seq;
    const ids = Array.from({ length: 300 }, (_, i) => `${queue}-${i}`);
    await runJobs(nc, watch, queue, ids, 120_000);
    const subjects = await inputSubjects(nc, from);
    const acks = subjects.filter((s) => s.startsWith(`tenure.in.worker.${id}.`) && s.endsWith(".ack"));
    const results = subjects.filter((s) => s.startsWith(`tenure.in.worker.${id}.`) && s.endsWith(".result"));
    console.log(`300 jobs: ${acks.length} ACK inputs (${acks.filter((s) => s.includes("._.")).length} batches), ${results.length} result inputs (${results.filter((s) => s.includes("._.")).length} batches)`);
    assert.ok(acks.length < 300 && acks.some((s) => s === `tenure.in.worker.${id}._.ack`), `${acks.length} ACK inputs for 300 jobs`);
    assert.ok(results.length < 300 && results.some((s) => s === `tenure.in.worker.${id}._.result`), `${results.length} result inputs for 300 jobs`);
    // Each lease its own verdict: one acked and one completed SUCCESS per job.
    for (const [kind, n] of [["acked", 300], ["completed", 300]] as const) {
      const got = watch.seen.filter((d) => d.kind === kind && d.job.id.startsWith(queue + "-"));
      assert.equal(new Set(got.map((d) => d.job.id)).size, n, kind);
      assert.equal(got.length, n, `${kind}: ${got.length} verdicts`);
    }
    assert.ok(watch.seen.every((d) => !(d.job.id.startsWith(queue + "-") && d.kind === "completed") || d.job.result === "SUCCESS"));
    stop.abort();
    await run;
  } finally {
    stop.abort();
    await watch.close();
    await w.close();
    await nc.close();
    await serve.stop();
  }
});

test("run() under rules revision 6: a refused batch is sent as single inputs, and every later one too", async () => {
  const fc = await FoldCoord.start(6);
  const nc = await natsConnect({ servers: fc.url });
  const w = await connect(nc, "w1", { onError: (err) => console.error("worker w1:", err.message) });
  const watch = await Decisions.follow(nc, "tenure.out.>");
  const stop = new AbortController();
  // The handlers of a round (8 jobs: the window of a worker new to the
  // queue, §22.8) return together, when its gate opens: their results
  // reach the batcher in the same turn, the first four leave alone and the
  // other four wait for them and leave as one batch.
  let open!: () => void;
  let gate = new Promise<void>((r) => (open = r));
  try {
    const run = w.run("q", () => gate, { concurrency: 8, signal: stop.signal });
    run.catch(() => undefined); // awaited below; a failure before that must not be an unhandled rejection
    await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === "w1");
    const jsm = await jetstreamManager(nc);
    const seqs: number[] = [(await jsm.streams.info("TENURE_IN")).state.last_seq];
    for (const round of ["a", "b"]) {
      const ids = Array.from({ length: 8 }, (_, i) => `${round}-${i}`);
      const d = await connectDispatcher(nc, `disp-${round}`);
      for (const r of await d.submitMany(ids.map((id) => ({ id, queue: "q", options: { leaseMs: 600_000 } })))) assert.equal(r.error, undefined);
      await d.close();
      const acked = new Set<string>();
      await watch.waitFor((x) => {
        if (x.kind === "acked" && x.job.id.startsWith(round + "-")) acked.add(x.job.id);
        return acked.size === 8;
      }, 60_000);
      open();
      const done = new Set<string>();
      await watch.waitFor((x) => {
        if (x.kind === "completed" && x.job.id.startsWith(round + "-")) done.add(x.job.id);
        return done.size === 8;
      }, 60_000);
      gate = new Promise<void>((r) => (open = r));
      seqs.push((await jsm.streams.info("TENURE_IN")).state.last_seq);
    }
    for (const d of watch.seen.filter((d) => d.job.id.match(/^[ab]-/) && d.kind === "completed")) assert.equal(d.job.result, "SUCCESS");
    const refused = watch.seen.filter((d) => d.job.id === "_" && d.addressee === "w1" && d.kind === "rejected");
    assert.ok(refused.every((d) => d.reason === "bad_subject"), refused.map(describe).join("\n"));
    const first = await inputSubjects(nc, seqs[0]!, seqs[1]!);
    const results = first.filter((s) => s.endsWith(".result"));
    assert.equal(results.filter((s) => s === "tenure.in.worker.w1._.result").length, 1, `round a's results: one batch tried:\n${first.join("\n")}`);
    assert.equal(results.filter((s) => /^tenure\.in\.worker\.w1\.a-\d+\.result$/.test(s)).length, 8, "and every result alone");
    const second = await inputSubjects(nc, seqs[1]!, seqs[2]!);
    assert.deepEqual(second.filter((s) => s === "tenure.in.worker.w1._.result"), [], "no batch result once one was refused");
    assert.equal(second.filter((s) => /^tenure\.in\.worker\.w1\.b-\d+\.result$/.test(s)).length, 8);
    stop.abort();
    await run;
  } finally {
    open();
    stop.abort();
    await watch.close();
    await w.close();
    await nc.close();
    await fc.stop();
  }
});
