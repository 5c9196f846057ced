// Leases against a real `tenure serve`: acquire, renew, progress,
// complete; offers; a refused renewal; a cancellation; a revocation; an
// expiry seen from the coordinator and the local deadline; coalesced
// renewals; Nats-Msg-Id deduplication.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";

import { connect, ErrorCode, isError, TenureError, VerdictError, type Worker, type Offer } from "@tenure/worker";

import { aborted, Decisions, FakeClock, Ops, Serve, uniq } from "./harness.js";

let serve: Serve;
let nc: NatsConnection;
let ops: Ops;

before(async () => {
  serve = await Serve.start();
  nc = await serve.connect("lease-test");
  ops = new Ops(nc);
});

after(async () => {
  await nc?.close();
  await serve?.stop();
});

async function worker(id: string, opts: Parameters<typeof connect>[2] = {}): Promise<Worker> {
  return connect(nc, id, opts);
}

async function nextOffer(w: Worker, timeoutMs = 10_000): Promise<Offer> {
  const it = w.offers({ signal: AbortSignal.timeout(timeoutMs) });
  const r = await it.next();
  await it.return?.(undefined);
  assert.ok(!r.done, "no offer arrived");
  return r.value;
}

describe("leases", () => {
  test("acquire, renew, progress, complete", async () => {
    const id = uniq("w");
    const w = await worker(id);
    try {
      const job = uniq("job");
      const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
      const l = await w.acquire(job, { leaseMs: 60_000 });
      assert.equal(l.job, job);
      assert.equal(l.generation, 1);
      assert.match(l.leaseId, /^L\d+-[A-Za-z0-9_-]{22}$/);
      assert.ok(l.deadline > performance.timeOrigin + performance.now() + 50_000, "local deadline about a minute away");
      const before = l.deadline;
      await l.renew();
      await l.renew();
      assert.ok(l.deadline >= before, "a renewal moves the local deadline");
      await l.progress(40, { note: "page 4\nof 10" });
      await l.progress(50);
      await l.complete("SUCCESS", "done");
      assert.ok(l.signal.aborted);
      assert.ok(isError(l.signal.reason, ErrorCode.LeaseEnded), "complete ends the lease");
      const renewed = await watch.waitFor((d) => d.kind === "renewed" && d.job.renew_seq === 2);
      assert.equal(renewed.addressee, id);
      const done = await watch.waitFor((d) => d.kind === "completed");
      assert.equal(done.job.state, "COMPLETED");
      assert.equal(done.job.progress_seq, 2);
      assert.equal(done.job.progress_value, 50);
      // After the end: the coordinator's verdict, as an error.
      await assert.rejects(l.progress(60), (e: unknown) => isError(e, ErrorCode.LostAuthority) && e instanceof TenureError);
      await watch.close();
    } finally {
      await w.close();
    }
  });

  test("a second acquirer is refused: lease held, naming the holder", async () => {
    const a = await worker(uniq("wa"));
    const b = await worker(uniq("wb"));
    try {
      const job = uniq("job");
      const l = await a.acquire(job, { leaseMs: 30_000 });
      const err = await b.acquire(job).then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof VerdictError, `want a VerdictError, got ${String(err)}`);
      assert.equal(err.kind, "rejected");
      assert.equal(err.reason, "lease_held");
      assert.ok(err.is(ErrorCode.LeaseHeld) && err.is(ErrorCode.Rejected) && err.is(ErrorCode.NotAccepted));
      assert.ok(!err.is(ErrorCode.LostAuthority));
      assert.equal(err.decision.job.holder, a.id);
      await l.release();
      assert.ok(isError(l.signal.reason, ErrorCode.LeaseEnded));
      const l2 = await b.acquire(job);
      assert.equal(l2.generation, 2);
      await l2.complete("FAILED", "test");
    } finally {
      await a.close();
      await b.close();
    }
  });

  test("offer, accept, renew automatically, complete", async () => {
    const w = await worker(uniq("w"));
    try {
      const job = uniq("job");
      const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
      await ops.offer(job, w.id, { lease_ms: 600 });
      const o = await nextOffer(w);
      assert.equal(o.job, job);
      assert.equal(o.leaseMs, 600);
      const l = await o.accept();
      assert.equal(l.token.leaseId, o.leaseId);
      // Renewed every third of 600 ms by the SDK: the lease outlives its
      // first duration several times over.
      await watch.waitFor((d) => d.kind === "renewed" && (d.job.renew_seq ?? 0) >= 4, 10_000);
      assert.ok(!l.signal.aborted, `authority kept: ${String(l.signal.reason)}`);
      await l.complete("SUCCESS");
      const done = await watch.waitFor((d) => d.kind === "completed");
      assert.equal(done.job.state, "COMPLETED");
      assert.equal(done.job.lease_expired, false);
      await watch.close();
    } finally {
      await w.close();
    }
  });

  test("decline gives the offer back", async () => {
    const w = await worker(uniq("w"));
    try {
      const job = uniq("job");
      const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
      await ops.offer(job, w.id);
      const o = await nextOffer(w);
      await o.decline();
      const d = await watch.waitFor((d) => d.kind === "released");
      assert.equal(d.job.ack_state, "DECLINED");
      await assert.rejects(o.accept(), (e: unknown) => e instanceof VerdictError && e.is(ErrorCode.LostAuthority));
      await watch.close();
    } finally {
      await w.close();
    }
  });

  test("a refused renewal aborts the signal with its verdict", async () => {
    const a = await worker(uniq("wa"));
    try {
      const job = uniq("job");
      const l = await a.acquire(job, { leaseMs: 60_000 });
      // Another worker claims a's very lease: an ownership conflict, after
      // which the job is blocked and a's renewals are refused.
      const js = jetstream(nc);
      const intruder = uniq("wx");
      await js.publish(`tenure.in.worker.${intruder}.${job}.renew`,
        JSON.stringify({ v: 1, lease_id: l.leaseId, generation: 1, renew_seq: 1 }), { msgID: `${intruder}-1` });
      const err = await l.renew().then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof VerdictError, `want a VerdictError, got ${String(err)}`);
      assert.equal(err.kind, "conflict");
      assert.equal(err.reason, "conflict_pending");
      assert.ok(l.signal.aborted, "the refusal aborts the signal");
      const reason = l.signal.reason;
      assert.ok(isError(reason, ErrorCode.Conflict) && isError(reason, ErrorCode.LostAuthority));
      assert.equal((reason as VerdictError).reason, "conflict_pending");
    } finally {
      await a.close();
    }
  });

  test("a cancellation aborts the signal with its reason; ackCancel and CANCELLED reconcile", async () => {
    const w = await worker(uniq("w"));
    try {
      const job = uniq("job");
      const l = await w.acquire(job, { leaseMs: 60_000 });
      assert.equal(l.cancelRequested, false);
      const watch = await Decisions.follow(nc, `tenure.out.*.${job}.*`);
      await ops.cancel(job, "customer withdrew");
      const reason = await aborted(l.signal);
      assert.ok(reason instanceof VerdictError, `want a VerdictError, got ${String(reason)}`);
      assert.equal(reason.kind, "cancel_requested");
      assert.ok(isError(reason, ErrorCode.CancelRequested));
      assert.ok(!isError(reason, ErrorCode.LostAuthority), "the lease stays live until reconciled");
      assert.equal(l.cancelRequested, true);
      await l.whenCancelRequested();
      // SUCCESS is refused now; release too.
      await assert.rejects(l.complete("SUCCESS"), (e: unknown) => isError(e, ErrorCode.CancelRequested) && isError(e, ErrorCode.Rejected));
      await l.ackCancel();
      await l.complete("CANCELLED", "stopped");
      const d = await watch.waitFor((d) => d.kind === "completed");
      assert.equal(d.job.state, "CANCELLED");
      assert.equal(d.job.cancel_acked, true);
      await watch.close();
    } finally {
      await w.close();
    }
  });

  test("a revocation aborts the signal", async () => {
    const w = await worker(uniq("w"));
    try {
      const job = uniq("job");
      const l = await w.acquire(job, { leaseMs: 60_000 });
      await ops.revoke(job);
      const reason = await aborted(l.signal);
      assert.ok(reason instanceof VerdictError);
      assert.equal(reason.kind, "resolved");
      assert.equal(reason.reason, "lease_revoked");
      assert.ok(isError(reason, ErrorCode.LostAuthority));
    } finally {
      await w.close();
    }
  });

  test("the coordinator's expiry aborts the signal (a clock that stands still: no renewals)", async () => {
    const clock = new FakeClock();
    const w = await worker(uniq("w"), { clock });
    try {
      const job = uniq("job");
      const l = await w.acquire(job, { leaseMs: 200 });
      const reason = await aborted(l.signal);
      assert.ok(reason instanceof VerdictError, `want a VerdictError, got ${String(reason)}`);
      assert.equal(reason.kind, "expired");
      assert.equal(reason.reason, "lease_expired");
      assert.ok(isError(reason, ErrorCode.Expired) && isError(reason, ErrorCode.LostAuthority));
      // A renewal after it is refused: renew_after_expiry.
      const err = await l.renew().then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof VerdictError && err.reason === "renew_after_expiry", `got ${String(err)}`);
    } finally {
      await w.close();
    }
  });

  test("the local deadline passing first aborts the signal: Expired", async () => {
    const clock = new FakeClock();
    const w = await worker(uniq("w"), { clock });
    try {
      const l = await w.acquire(uniq("job"), { leaseMs: 60_000 });
      // Before the first renewal is due nothing happens; at the local
      // deadline, with every renewal's verdict unknown, authority ends.
      clock.advance(19_000);
      assert.ok(!l.signal.aborted);
      // Move past the deadline in one step: the renewal due at a third is
      // sent, but its verdict (on real time) cannot come back before the
      // deadline timer fires in the same advance.
      clock.advance(60_000);
      assert.ok(l.signal.aborted, "the local deadline passed");
      const reason = l.signal.reason;
      assert.ok(isError(reason, ErrorCode.Expired), String(reason));
      assert.ok(isError(reason, ErrorCode.LostAuthority), String(reason));
      assert.ok(!(reason instanceof VerdictError), "the SDK's own deadline, not a verdict");
    } finally {
      await w.close();
    }
  });

  test("renewals due together leave in one batch renew", async () => {
    const clock = new FakeClock();
    const w = await worker(uniq("w"), { clock });
    try {
      const jobs = [uniq("ja"), uniq("jb"), uniq("jc")];
      const ls = await Promise.all(jobs.map((j) => w.acquire(j, { leaseMs: 30_000 })));
      const watch = await Decisions.follow(nc, `tenure.out.${w.id}.*.renewed`);
      clock.advance(10_001); // every lease's renewal falls due at once
      const ds = [];
      for (const j of jobs) ds.push(await watch.waitFor((d) => d.job.id === j));
      assert.equal(new Set(ds.map((d) => d.cause)).size, 1, "one input renewed all three");
      assert.equal(ds[0]!.input.verb, "renew");
      assert.equal(ds[0]!.of >= 3, true);
      for (const l of ls) assert.ok(!l.signal.aborted);
      await watch.close();
    } finally {
      await w.close();
    }
  });

  test("every input carries a Nats-Msg-Id <id>-<uuid>; the same id again is stored once", async () => {
    const id = uniq("w");
    const w = await worker(id);
    const sub = nc.subscribe(`tenure.in.worker.${id}.>`, { max: 1 });
    try {
      const job = uniq("job");
      const l = await w.acquire(job, { leaseMs: 30_000 });
      let msgID = "";
      let body: Uint8Array = new Uint8Array();
      for await (const m of sub) {
        msgID = m.headers?.get("Nats-Msg-Id") ?? "";
        body = m.data;
      }
      assert.match(msgID, new RegExp(`^${id}-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`));
      const seq = Number(l.leaseId.slice(1, l.leaseId.indexOf("-")));
      // A retry of that publish (same id, same body), as the SDK sends it
      // when a PubAck is lost: the stream answers with the first's sequence.
      const ack = await jetstream(nc).publish(`tenure.in.worker.${id}.${job}.acquire`, body, { msgID });
      assert.equal(ack.duplicate, true);
      assert.equal(ack.seq, seq, "the lease id names the input that created it");
    } finally {
      sub.unsubscribe();
      await w.close();
    }
  });

  test("close aborts every lease's signal: Closed", async () => {
    const w = await worker(uniq("w"));
    const l = await w.acquire(uniq("job"), { leaseMs: 30_000 });
    await w.close();
    assert.ok(isError(l.signal.reason, ErrorCode.Closed));
    await assert.rejects(w.acquire(uniq("job")), (e: unknown) => isError(e, ErrorCode.Closed));
  });
});
