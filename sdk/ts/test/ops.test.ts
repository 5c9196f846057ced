// The dispatcher client (ops.ts) against a real `tenure serve`: submit and
// submitMany, one decision reader per client, each job its own verdict,
// batches cut at 256 jobs and 64 KiB, and against a log held below rules
// revision 7 (test/foldcoord) the fallback to single submits.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";
import { connect as natsConnect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";

import { connectDispatcher, ErrorCode, isError, VerdictError, type Dispatcher, type SubmitJob } from "@tenure/worker";
import { FoldCoord, Serve, uniq } from "./harness.js";

/** The subjects of the inputs stored in TENURE_IN after sequence from, in order. */
async function inputsAfter(nc: NatsConnection, from: number): Promise<{ seq: number; subject: string; size: number }[]> {
  const jsm = await jetstreamManager(nc);
  const last = (await jsm.streams.info("TENURE_IN")).state.last_seq;
  const out: { seq: number; subject: string; size: number }[] = [];
  for (let seq = from + 1; seq <= last; seq++) {
    const m = await jsm.streams.getMessage("TENURE_IN", { seq });
    if (m && !m.subject.startsWith("tenure.in.coord.")) out.push({ seq, subject: m.subject, size: m.data.length });
  }
  return out;
}

async function lastInput(nc: NatsConnection): Promise<number> {
  const jsm = await jetstreamManager(nc);
  return (await jsm.streams.info("TENURE_IN")).state.last_seq;
}

/** The consumers on TENURE_OUT named as a Dispatcher names its own (tenure serve's readers have names without the _<n>). */
async function consumers(nc: NatsConnection): Promise<string[]> {
  const jsm = await jetstreamManager(nc);
  const names: string[] = [];
  for await (const ci of jsm.consumers.list("TENURE_OUT")) if (/^tenure_[0-9a-f]{32}_[01]$/.test(ci.name)) names.push(ci.name);
  return names.sort();
}

describe("dispatcher", () => {
  let serve: Serve;
  let nc: NatsConnection;
  let d: Dispatcher;

  before(async () => {
    serve = await Serve.start();
    nc = await serve.connect("ops-test");
    d = await connectDispatcher(nc, "disp", { onError: (err) => console.error("dispatcher:", err.message) });
  });

  after(async () => {
    await d?.close();
    await nc?.close();
    await serve?.stop();
  });

  test("submit: submitted, a resend is a duplicate (no error), other fields a refusal", async () => {
    const job = uniq("s");
    const v = await d.submit(job, "mail", { payload: "hello", maxAttempts: 2, leaseMs: 60_000 });
    assert.equal(v.kind, "submitted");
    assert.equal(v.job.state, "QUEUED");
    assert.equal(v.job.payload, "hello");
    const again = await d.submit(job, "mail", { payload: "hello", maxAttempts: 2, leaseMs: 60_000 });
    assert.equal(`${again.kind}/${again.reason}`, "duplicate/duplicate_submit");
    await assert.rejects(d.submit(job, "mail", { payload: "other" }), (err: unknown) => {
      assert.ok(err instanceof VerdictError);
      assert.equal(`${err.kind}/${err.reason}`, "rejected/submit_conflicts");
      assert.ok(isError(err, ErrorCode.Rejected) && isError(err, ErrorCode.NotAccepted));
      return true;
    });
    const unique = uniq("u");
    const held = await d.submit(unique, "mail", { uniqueKey: "k-" + unique, delayMs: 60_000 });
    assert.equal(held.kind, "submitted");
    await assert.rejects(d.submit(uniq("u2"), "mail", { uniqueKey: "k-" + unique }), (err: unknown) => {
      assert.ok(err instanceof VerdictError && err.reason === "duplicate_unique_key" && err.decision.duplicate_of === unique);
      return true;
    });
    // Rules revision 9: the job's concurrency key is the submit's, in its projection.
    const keyed = await d.submit(uniq("k"), "mail", { concurrencyKey: "acct-42", delayMs: 60_000 });
    assert.equal(keyed.kind, "submitted");
    assert.equal(keyed.job.concurrency_key, "acct-42");
  });

  test("invalid arguments are refused before anything is published", async () => {
    const from = await lastInput(nc);
    await assert.rejects(d.submit("a.b", "mail"), TypeError);
    await assert.rejects(d.submit("ok", "mail", { priority: 10 }), RangeError);
    await assert.rejects(d.submit("ok", "mail", { payload: "x".repeat(4097) }), RangeError);
    await assert.rejects(d.submit("ok", "mail", { backoffMs: 5000, backoffMaxMs: 4000 }), RangeError);
    await assert.rejects(d.submit("ok", "mail", { delayMs: 5, runAt: new Date() }), TypeError);
    await assert.rejects(d.submit("ok", "mail", { uniqueForMs: 5 }), TypeError);
    await assert.rejects(d.submit("ok", "mail", { concurrencyKey: "a.b" }), TypeError);
    await assert.rejects(d.submitMany([{ id: "a", queue: "q", options: { concurrencyKey: "k" } as never }]),
      (err: Error) => err instanceof TypeError && /single submit/.test(err.message));
    await assert.rejects(d.submitMany([{ id: "a", queue: "q" }, { id: "b", queue: "q", options: { runAt: new Date() } as never }]),
      (err: Error) => err instanceof TypeError && /job 1: .*single submit/.test(err.message));
    await assert.rejects(d.submitMany([{ id: "a", queue: "q", options: { maxAttempts: 0 } }]), RangeError);
    assert.deepEqual(await inputsAfter(nc, from), []);
  });

  test("submitMany: 600 jobs in three batch submits, each its own verdict, one decision consumer for every call", async () => {
    const before = await consumers(nc);
    assert.equal(before.length, 1, `the dispatcher's reader: ${before.join(", ")}`);
    const from = await lastInput(nc);
    const p = uniq("m");
    const jobs: SubmitJob[] = Array.from({ length: 600 }, (_, i) => ({ id: `${p}-${i}`, queue: "bulk", options: { payload: `n${i}`, priority: i % 10 } }));
    const res = await d.submitMany(jobs);
    assert.equal(res.length, 600);
    res.forEach((r, i) => {
      assert.equal(r.error, undefined, `${jobs[i]!.id}: ${r.error?.message}`);
      assert.equal(r.decision?.kind, "submitted");
      assert.equal(r.decision?.job.id, jobs[i]!.id);
      assert.equal(r.decision?.job.payload, `n${i}`);
    });
    const ins = await inputsAfter(nc, from);
    assert.deepEqual(ins.map((m) => m.subject), Array(3).fill("tenure.in.ops.disp._.submit"));
    assert.deepEqual([...new Set(res.map((r) => r.decision!.cause))], ins.map((m) => m.seq), "jobs 0-255, 256-511, 512-599: one input each, in order");
    // The same jobs again: duplicates, no error; plus one that conflicts
    // and one new, in one call: each its own verdict.
    const more: SubmitJob[] = [jobs[0]!, { id: jobs[1]!.id, queue: "bulk", options: { payload: "changed" } }, { id: `${p}-new`, queue: "bulk" }];
    const r2 = await d.submitMany(more);
    assert.equal(`${r2[0]!.decision?.kind}/${r2[0]!.decision?.reason}`, "duplicate/duplicate_submit");
    assert.equal(r2[0]!.error, undefined);
    assert.ok(r2[1]!.error instanceof VerdictError && r2[1]!.error.reason === "submit_conflicts", String(r2[1]!.error));
    assert.equal(r2[2]!.decision?.kind, "submitted");
    assert.equal(r2[2]!.error, undefined);
    assert.deepEqual(await consumers(nc), before, "no consumer per call");
  });

  test("submitMany: large payloads split at 64 KiB", async () => {
    const from = await lastInput(nc);
    const p = uniq("big");
    const jobs: SubmitJob[] = Array.from({ length: 40 }, (_, i) => ({ id: `${p}-${i}`, queue: "bulk", options: { payload: "é".repeat(2000) } }));
    const res = await d.submitMany(jobs);
    for (const r of res) assert.equal(r.error, undefined, r.error?.message);
    const ins = await inputsAfter(nc, from);
    assert.ok(ins.length >= 3, `40 jobs of 4000-byte payloads in ${ins.length} inputs`);
    for (const m of ins) assert.ok(m.size <= 65_536, `input ${m.seq} of ${m.size} bytes`);
  });

  test("a closed dispatcher refuses calls", async () => {
    const nc2 = await serve.connect("ops-closed");
    const d2 = await connectDispatcher(nc2, "disp2");
    await d2.close();
    await assert.rejects(d2.submit("x", "q"), (err: unknown) => isError(err, ErrorCode.Closed));
    await nc2.close();
  });
});

// Against a log of rules revision 6 a batch submit is rejected/bad_subject:
// submitMany submits each of its jobs alone, and later calls go single at
// once. Under revision 7 the same calls are one batch each.
for (const rev of [6, 7]) {
  test(`submitMany under rules revision ${rev}`, async () => {
    const fc = await FoldCoord.start(rev);
    const nc = await natsConnect({ servers: fc.url });
    try {
      const d = await connectDispatcher(nc, "disp");
      try {
        for (const [call, ids] of [["a", "b", "c"], ["d", "e"]].entries()) {
          const from = await lastInput(nc);
          const res = await d.submitMany(ids.map((id) => ({ id, queue: "q", options: { payload: "p-" + id } })));
          res.forEach((r, i) => {
            assert.equal(r.error, undefined, `call ${call}, ${ids[i]}: ${r.error?.message}`);
            assert.equal(r.decision?.kind, "submitted");
            assert.equal(r.decision?.job.payload, "p-" + ids[i]);
          });
          const subjects = (await inputsAfter(nc, from)).map((m) => m.subject);
          let want: string[];
          if (rev >= 7) want = ["tenure.in.ops.disp._.submit"];
          else {
            want = ids.map((id) => `tenure.in.ops.disp.${id}.submit`);
            if (call === 0) want.unshift("tenure.in.ops.disp._.submit"); // the batch refused, then each job alone
          }
          assert.deepEqual(subjects, want, `call ${call}`);
        }
      } finally {
        await d.close();
      }
    } finally {
      await nc.close();
      await fc.stop();
    }
  });
}
