// The decision consumer recovers, as the Go SDK's does (PROTOCOL.md §3.3):
// deleted under a live lease, it is made again one past the last decision
// read, without a gap, and the lease keeps its authority; a process whose
// predecessor crashed less than 30 s ago (its consumer still holds its
// name) takes another of the four names; two processes of one worker id
// read at once; with every name held, connect says so.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";

import { connect, type Offer, type Worker } from "@tenure/worker";

import { Decisions, Ops, Serve, uniq } from "./harness.js";

let serve: Serve;
let nc: NatsConnection;
let jsm: JetStreamManager;
let ops: Ops;

before(async () => {
  serve = await Serve.start();
  nc = await serve.connect("consumer-test");
  jsm = await jetstreamManager(nc);
  ops = new Ops(nc);
});

after(async () => {
  await nc?.close();
  await serve?.stop();
});

/** The reader's state, which the Worker keeps internal. */
interface Reader {
  dropped: number;
}

function reader(w: Worker): Reader | undefined {
  return (w as unknown as { _follower?: Reader })._follower;
}

/** The names of the consumers on TENURE_OUT filtered to worker id's decisions. */
async function consumersOf(id: string): Promise<string[]> {
  const names: string[] = [];
  for await (const ci of jsm.consumers.list("TENURE_OUT")) {
    if (ci.config.filter_subject === `tenure.out.${id}.>`) names.push(ci.name);
  }
  return names.sort();
}

/**
 * The consumer names of worker id that `tenure auth init` allows (the
 * default; given here so that the tests say what they rely on).
 */
function names(id: string): { consumerNamePrefix: string } {
  return { consumerNamePrefix: `tw_${id}` };
}

async function nextOffer(w: Worker, timeoutMs = 10_000): Promise<Offer> {
  const it = w.offers({ signal: AbortSignal.timeout(timeoutMs) });
  const r = await it.next();
  await it.return?.(undefined);
  assert.ok(!r.done, "no offer arrived");
  return r.value;
}

describe("the decision consumer", () => {
  test("deleted under a live lease: made again without a gap, the lease kept", async () => {
    const id = uniq("wd");
    const errors: Error[] = [];
    const w = await connect(nc, id, { onError: (e) => errors.push(e), ...names(id) });
    try {
      const job = uniq("del");
      const watch = await Decisions.follow(nc, `tenure.out.${id}.${job}.*`);
      const l = await w.acquire(job, { leaseMs: 6000, renewFraction: 0.25 });
      const [name] = await consumersOf(id);
      await jsm.consumers.delete("TENURE_OUT", name!);
      // Stored while the consumer may be gone: it must still arrive.
      const offered = uniq("del-offer");
      await ops.offer(offered, id, { lease_ms: 60_000 });
      const o = await nextOffer(w);
      assert.equal(o.job, offered);
      // Verdicts go on arriving: an explicit renewal, then automatic ones.
      await l.renew();
      const seen = watch.seen.length;
      await watch.waitFor((d) => d.kind === "renewed", 10_000, seen);
      await watch.waitFor((d) => d.kind === "renewed", 10_000, watch.seen.length);
      assert.ok(!l.signal.aborted, `the lease lost its authority: ${String(l.signal.reason)}`);
      assert.equal(name, `tw_${id}_0`);
      assert.deepEqual(await consumersOf(id), [name], "the replacement takes the name it frees");
      const l2 = await o.accept();
      await l2.complete("SUCCESS");
      await l.complete("SUCCESS");
      assert.equal(reader(w)?.dropped, 0);
      assert.ok(errors.some((e) => /replacing consumer/.test(e.message)), `the replacement is reported: ${errors.map((e) => e.message).join("; ")}`);
      await watch.close();
    } finally {
      await w.close();
    }
  });

  test("a process restarted within 30 s of a crash takes another name", async () => {
    const id = uniq("wc");
    // The crashed process: its connection gone without a close, its
    // consumer left holding tw_<id>_0 until its inactivity threshold.
    const nc1 = await serve.connect("crashed");
    const w1 = await connect(nc1, id, names(id));
    const held = await w1.acquire(uniq("crash-held"), { leaseMs: 60_000 });
    assert.ok(!held.signal.aborted);
    await nc1.close();
    const w2 = await connect(nc, id, names(id));
    try {
      const l = await w2.acquire(uniq("crash-after"), { leaseMs: 30_000 });
      await l.renew();
      await l.complete("SUCCESS");
      assert.deepEqual(await consumersOf(id), [`tw_${id}_0`, `tw_${id}_1`]);
      // Once more: two consumers of crashed processes, the third name.
      const nc3 = await serve.connect("crashed-again");
      await connect(nc3, id, names(id));
      await nc3.close();
      const w4 = await connect(nc, id, names(id));
      try {
        assert.deepEqual(await consumersOf(id), [`tw_${id}_0`, `tw_${id}_1`, `tw_${id}_2`, `tw_${id}_3`]);
        const l4 = await w4.acquire(uniq("crash-third"), { leaseMs: 30_000 });
        await l4.complete("SUCCESS");
      } finally {
        await w4.close();
      }
    } finally {
      await w2.close();
    }
    await w1.close().catch(() => undefined);
  });

  test("two processes of one worker id at once", async () => {
    const id = uniq("wt");
    const a = await connect(nc, id, names(id));
    const nc2 = await serve.connect("twin");
    const b = await connect(nc2, id, names(id));
    try {
      const [la, lb] = await Promise.all([a.acquire(uniq("twin-a"), { leaseMs: 30_000 }), b.acquire(uniq("twin-b"), { leaseMs: 30_000 })]);
      await Promise.all([la.renew(), lb.renew()]);
      // Both read the worker's decisions: an offer reaches both.
      const offered = uniq("twin-offer");
      await ops.offer(offered, id, { lease_ms: 60_000 });
      const [oa, ob] = await Promise.all([nextOffer(a), nextOffer(b)]);
      assert.equal(oa.job, offered);
      assert.equal(ob.job, offered);
      const lo = await oa.accept();
      await Promise.all([la.complete("SUCCESS"), lb.complete("SUCCESS"), lo.complete("SUCCESS")]);
      assert.deepEqual(await consumersOf(id), [`tw_${id}_0`, `tw_${id}_1`]);
    } finally {
      await a.close();
      await b.close();
      await nc2.close();
    }
    assert.deepEqual(await consumersOf(id), [], "a closed worker deletes its consumer");
  });

  test("a worker whose connection was closed under it stops making consumers", async () => {
    // A process that closed its connection without closing its worker (or
    // whose connection was closed for it) must still be able to exit: its
    // reader, finding the heartbeats gone, used to retry making a consumer
    // on the closed connection every retryMs for ever, a timer that kept
    // node running after every test had passed.
    const id = uniq("wz");
    const errors: Error[] = [];
    const nc2 = await serve.connect("closed-under");
    await connect(nc2, id, { onError: (e) => errors.push(e), ...names(id) });
    await nc2.close();
    for (let i = 0; !errors.some((e) => /the connection is closed: no consumer can be made/.test(e.message)); i++) {
      assert.ok(i < 600, `the reader did not stop on its closed connection in 60 s: ${errors.map((e) => e.message).join("; ")}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  });

  test("every name held: connect says so", async () => {
    const id = uniq("wf");
    for (let i = 0; i < 4; i++) {
      await jsm.consumers.add("TENURE_OUT", {
        name: `tw_${id}_${i}`, filter_subject: `tenure.out.${id}.>`, ack_policy: "none" as never, inactive_threshold: 30_000_000_000,
      });
    }
    await assert.rejects(connect(nc, id, { verdictTimeoutMs: 1500, ...names(id) }), /every consumer name allowed is in use/);
  });
});
