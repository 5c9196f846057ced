// The queue loop, run(), against a real `tenure serve`: success, a retried
// failure, a permanent failure, a cancellation, the shutdown (capacity
// withdrawn before unfinished work is released), a withdrawn
// announcement made again at once, and a surplus offer declined only once
// its corrected announcement is stored (the worker's calls answered by the
// test).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";

import { connect, ErrorCode, isError, permanent, TenureError, type Decision, type Job, type Worker } from "@tenure/worker";

import { Decisions, describe as line, Ops, Serve, uniq } from "./harness.js";

let serve: Serve;
let nc: NatsConnection;
let ops: Ops;

before(async () => {
  serve = await Serve.start();
  nc = await serve.connect("run-test");
  ops = new Ops(nc);
});

after(async () => {
  await nc?.close();
  await serve?.stop();
});

interface Running {
  w: Worker;
  stop: AbortController;
  done: Promise<void>;
  errors: Error[];
}

async function runWorker(queue: string, handler: (j: Job, s: AbortSignal) => Promise<void> | void,
  opts: { concurrency?: number; capacityTtlMs?: number } = {}): Promise<Running> {
  const errors: Error[] = [];
  const w = await connect(nc, uniq("w"), { onError: (e) => errors.push(e) });
  const stop = new AbortController();
  const done = w.run(queue, handler, { ...opts, signal: stop.signal });
  return { w, stop, done, errors };
}

async function shutdown(r: Running): Promise<void> {
  r.stop.abort();
  await r.done;
  await r.w.close();
}

async function storedInput(seq: number): Promise<Record<string, unknown>> {
  const jsm = await jetstreamManager(nc);
  const m = await jsm.streams.getMessage("TENURE_IN", { seq });
  assert.ok(m, `input ${seq}`);
  return m.json<Record<string, unknown>>();
}

describe("run", () => {
  test("jobs are offered, handled and completed SUCCESS; shutdown withdraws the capacity", async () => {
    const queue = uniq("q");
    const jobs = [uniq("ja"), uniq("jb"), uniq("jc")];
    const watch = await Decisions.follow(nc, `tenure.out.*.*.*`);
    const seen = new Map<string, Job>();
    const r = await runWorker(queue, (j) => {
      seen.set(j.id, j);
    }, { concurrency: 2 });
    for (const [i, j] of jobs.entries()) await ops.submit(j, queue, { payload: `p${i}` });
    for (const j of jobs) {
      const d = await watch.waitFor((d) => d.job.id === j && d.kind === "completed");
      assert.equal(d.job.state, "COMPLETED", line(d));
      assert.equal(d.addressee, r.w.id);
    }
    for (const [i, j] of jobs.entries()) {
      const job = seen.get(j);
      assert.ok(job, `handler ran ${j}`);
      assert.equal(job.queue, queue);
      assert.equal(job.payload, `p${i}`);
      assert.equal(job.attempt, 1);
      assert.equal(job.maxAttempts, 3);
      assert.equal(job.submitter, ops.actor);
      assert.equal(job.lease.job, j);
    }
    const announced = await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === r.w.id);
    assert.equal(announced.capacity?.slots, 2, "slots = concurrency");
    assert.equal(announced.capacity?.queue, queue);
    const mark = watch.seen.length;
    await shutdown(r);
    const withdrawn = await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === r.w.id, 10_000, mark);
    assert.equal(withdrawn.capacity?.slots, 0, "shutdown withdraws the capacity");
    assert.deepEqual(r.errors, []);
    await watch.close();
  });

  test("a scheduled job (rules revision 8, delay_ms) is offered no earlier than its time, which scheduledFor says", async () => {
    const queue = uniq("q");
    const job = uniq("later");
    const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
    const seen: Job[] = [];
    const r = await runWorker(queue, (j) => {
      seen.push(j);
    });
    await ops.submit(job, queue, { delay_ms: 300 });
    const submitted = await watch.waitFor((d) => d.kind === "submitted");
    const assigned = await watch.waitFor((d) => d.kind === "assigned");
    await watch.waitFor((d) => d.kind === "completed");
    const due = Date.parse(submitted.job.submitted_at ?? "") + 300;
    assert.ok(Date.parse(assigned.at) >= due, `offered at ${assigned.at}, before ${due}`);
    assert.equal(seen.length, 1);
    assert.ok(Math.abs((seen[0]?.scheduledFor ?? 0) - due) < 1, `scheduledFor ${seen[0]?.scheduledFor}, want ${due}`);
    await shutdown(r);
    await watch.close();
  });

  test("a handler that throws fails the attempt: retried after its backoff, then SUCCESS", async () => {
    const queue = uniq("q");
    const job = uniq("job");
    const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
    const attempts: Array<{ attempt: number; lastReason: string }> = [];
    const r = await runWorker(queue, (j) => {
      attempts.push({ attempt: j.attempt, lastReason: j.lastReason });
      if (j.attempt === 1) throw new Error("first try\nfails");
    });
    await ops.submit(job, queue, { max_attempts: 3, backoff_ms: 100 });
    const failed = await watch.waitFor((d) => d.kind === "completed");
    assert.equal(failed.job.state, "FAILED");
    const req = await watch.waitFor((d) => d.kind === "requeued");
    assert.equal(req.reason, "attempt_failed");
    assert.equal(req.cause, failed.cause, "the requeue follows the result in the same input");
    const input = await storedInput(failed.cause);
    assert.equal(input.outcome, "FAILED");
    assert.equal(input.detail, "first try fails", "the error's text, control characters replaced");
    assert.equal(input.permanent, undefined);
    const ok = await watch.waitFor((d) => d.kind === "completed" && d.job.state === "COMPLETED");
    assert.equal(ok.job.attempt, 2);
    assert.deepEqual(attempts, [{ attempt: 1, lastReason: "" }, { attempt: 2, lastReason: "attempt_failed" }]);
    await shutdown(r);
    await watch.close();
  });

  test("a permanent error fails the job without retry", async () => {
    const queue = uniq("q");
    const job = uniq("job");
    const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
    let calls = 0;
    const r = await runWorker(queue, () => {
      calls++;
      throw permanent(new Error("bad payload"));
    });
    await ops.submit(job, queue, { max_attempts: 3, backoff_ms: 1 });
    const d = await watch.waitFor((d) => d.kind === "completed");
    assert.equal(d.job.state, "FAILED");
    assert.equal(d.of, 1, "no requeue or dead decision in the result's input");
    const input = await storedInput(d.cause);
    assert.equal(input.permanent, true);
    assert.equal(input.detail, "bad payload");
    await shutdown(r);
    assert.equal(calls, 1);
    assert.ok(!watch.seen.some((x: Decision) => x.kind === "requeued" || x.kind === "dead"), watch.seen.map(line).join("\n"));
    await watch.close();
  });

  test("a cancellation aborts the handler's signal; run reconciles with CANCELLED", async () => {
    const queue = uniq("q");
    const job = uniq("job");
    const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
    let reason: unknown;
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const r = await runWorker(queue, async (_j, signal) => {
      started();
      reason = await new Promise((res) => signal.addEventListener("abort", () => res(signal.reason), { once: true }));
      throw new Error("stopped");
    });
    await ops.submit(job, queue);
    await running;
    await ops.cancel(job, "no longer needed");
    const d = await watch.waitFor((d) => d.kind === "completed");
    assert.equal(d.job.state, "CANCELLED");
    assert.equal(d.job.cancel_acked, true, "cancel_ack before the result");
    assert.ok(isError(reason, ErrorCode.CancelRequested), String(reason));
    await shutdown(r);
    await watch.close();
  });

  test("shutdown: capacity withdrawn, then the unfinished job released (not an attempt)", async () => {
    const queue = uniq("q");
    const job = uniq("job");
    const watch = await Decisions.follow(nc, `tenure.out.*.*.*`);
    let reason: unknown;
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const r = await runWorker(queue, async (_j, signal) => {
      started();
      reason = await new Promise((res) => signal.addEventListener("abort", () => res(signal.reason), { once: true }));
      throw reason;
    });
    await ops.submit(job, queue);
    await running;
    const mark = watch.seen.length;
    await shutdown(r);
    assert.ok(isError(reason, ErrorCode.RunStopped), String(reason));
    const withdrawn = await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === r.w.id && d.capacity?.slots === 0, 10_000, mark);
    const released = await watch.waitFor((d) => d.kind === "released" && d.job.id === job, 10_000, mark);
    assert.ok(watch.seen.indexOf(withdrawn) < watch.seen.indexOf(released), "withdrawn before released");
    const requeued = await watch.waitFor((d) => d.kind === "requeued" && d.job.id === job, 10_000, mark);
    assert.equal(requeued.reason, "released");
    assert.equal(requeued.job.state, "QUEUED");
    await watch.close();
  });

  test("a withdrawn announcement is made again at once", async () => {
    // An ACK timeout of 1 ms, and this process stalled for 200 ms right
    // after the submit (as a paused worker would be): the offer's ACK
    // deadline passes first, the queue's fold withdraws the announcement,
    // and run() announces again at once, long before its ttl/3 renewal.
    const queue = uniq("q");
    const job = uniq("job");
    const watch = await Decisions.follow(nc, `tenure.out.*.*.*`);
    const r = await runWorker(queue, () => undefined, { capacityTtlMs: 600_000 });
    const first = await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === r.w.id);
    await ops.submit(job, queue, { ack_timeout_ms: 1 });
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200); // blocks the event loop: no ACK goes out
    const w1 = await watch.waitFor((d) => d.kind === "withdrawn" && d.addressee === r.w.id);
    const again = await watch.waitFor((d) => d.kind === "capacity_set" && d.addressee === r.w.id && d !== first,
      5_000, watch.seen.indexOf(w1));
    assert.equal(again.capacity?.slots, 1);
    await ops.cancel(job, "test over");
    await shutdown(r);
    await watch.close();
  });

  test("a surplus offer is declined once its corrected announcement is stored", async () => {
    // The Go SDK's TestRunSurplusDeclinedOnceItsAnnouncementIsStored, with
    // the worker's own calls answered here instead of by the coordinator:
    // j1 offered and its ACK never answered (the coordinator ended it on
    // the way), j2 offered in its place. run() corrects its announcement
    // to the leases whose ACKs were accepted, none; that correction's
    // verdict is lost. Declining j2 then would be a refusal against an
    // honest worker: run() sends the correction again and declines after.
    const queue = uniq("q");
    const errors: Error[] = [];
    const real = await connect(nc, uniq("w"), { onError: (e) => errors.push(e) });
    const w = real as unknown as {
      id: string;
      _sendN(p: { job: string; verb: string; body: Uint8Array }, n: number, signal?: AbortSignal): Promise<{ ds: Decision[]; seq?: number; err?: Error }>;
      _dispatch(d: Decision, src?: number, m?: { seq: number }): void;
    };
    const log: string[] = [];
    let seq = 1_000_000;
    let loseZero = 1;
    const noVerdict = async (signal?: AbortSignal) => {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 300);
        signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
      });
      return { ds: [], err: new TenureError("no verdict (lost in this test)", [ErrorCode.NoVerdict]) };
    };
    const verdict = (kind: string, job: string, extra: Partial<Decision> = {}): Decision => ({
      v: 1, cause: ++seq, n: 1, of: 1, at: new Date().toISOString(), kind: kind as Decision["kind"], accepted: true, reason: "ok",
      input: { role: "worker", actor: w.id, verb: "" }, addressee: w.id, job: { id: job, state: "QUEUED" } as Decision["job"], ...extra,
    });
    w._sendN = async (p, _n, signal) => {
      const body = JSON.parse(new TextDecoder().decode(p.body)) as { slots?: number };
      switch (p.verb) {
        case "pull":
          if (body.slots === 0 && loseZero > 0) {
            loseZero--;
            log.push("pull 0 lost");
            return noVerdict(signal);
          }
          log.push(`pull ${body.slots}`);
          return { ds: [verdict("capacity_set", "_", { capacity: { queue, slots: body.slots ?? 0, until: new Date(Date.now() + 60_000).toISOString() } })], seq };
        case "ack":
          log.push(`ack ${p.job}`);
          return noVerdict(signal);
        case "release":
          log.push(`release ${p.job}`);
          return { ds: [verdict("released", p.job)], seq };
        default:
          throw new Error(`unexpected ${p.verb}`);
      }
    };
    const offer = (job: string, ackMs: number) => {
      const at = new Date();
      w._dispatch(verdict("assigned", job, {
        input: { role: "worker", actor: w.id, verb: "pull" },
        job: { id: job, lease_id: `L-${job}`, generation: 1, holder: w.id, state: "OFFERED", queue, lease_ms: 60_000,
          ack_deadline: new Date(at.getTime() + ackMs).toISOString() } as Decision["job"],
        at: at.toISOString(),
      }), 0, { seq: ++seq });
    };
    const until = async (f: () => boolean) => {
      for (let i = 0; i < 1000 && !f(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
      assert.ok(f(), `not reached: ${log.join(", ")}`);
    };
    const stop = new AbortController();
    const r: Running = { w: real, stop, errors,
      done: real.run(queue, (_j, s) => new Promise<void>((resolve) => s.addEventListener("abort", () => resolve())), { concurrency: 1, signal: stop.signal }) };
    try {
      await until(() => log.includes("pull 1"));
      offer("j1", 10_000);
      await until(() => log.includes("ack j1"));
      offer("j2", 3_000);
      await until(() => log.includes("release j2"));
      const got = log.filter((s) => !s.startsWith("ack "));
      const lost = got.indexOf("pull 0 lost"), stored = got.indexOf("pull 0"), released = got.indexOf("release j2");
      assert.ok(lost >= 0 && stored > lost && stored < released, `inputs ${got.join(", ")}: want the correction lost, sent again and stored, then j2 released`);
    } finally {
      await shutdown(r);
    }
  });
});
