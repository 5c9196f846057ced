// Renewal round trips through the TypeScript SDK next to the Go SDK, in the
// same run, against the same `tenure serve`: each SDK connects as its own
// worker, acquires one lease of ten minutes (no automatic renewal during the
// measurement) and times lease.renew() / Lease.Renew one after the other.
// Rounds alternate between the two SDKs so that both see the same load; a
// third, bare nats.js publishing the same renewals without the SDK, shows
// what the JavaScript client itself costs.
//
//   npm run build && node build/bench/renew.js [--n 2000] [--rounds 2] [--sync always|interval] [--url nats://...]
//
// Without --url it starts its own tenure serve (built from this tree) with
// a fresh data directory; the Go counterpart is bench/gorenew, built with
// go build from the repository.

import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { connect as natsConnect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";

import { connect } from "@tenure/worker";

import { pkgDir, repoRoot, Serve } from "../test/harness.js";

const { values } = parseArgs({
  options: {
    n: { type: "string", default: "2000" },
    rounds: { type: "string", default: "2" },
    warmup: { type: "string", default: "200" },
    sync: { type: "string", default: "always" },
    url: { type: "string" },
  },
});
const n = Number(values.n);
const rounds = Number(values.rounds);
const warmup = Number(values.warmup);

function pct(xs: number[], p: number): number {
  return xs[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))]!;
}

interface Stats { sdk: string; n: number; p50_us: number; p99_us: number; mean_us: number; max_us: number }

function stats(sdk: string, us: number[]): Stats {
  const s = [...us].sort((a, b) => a - b);
  return { sdk, n: s.length, p50_us: pct(s, 50), p99_us: pct(s, 99), mean_us: s.reduce((a, b) => a + b, 0) / s.length, max_us: s[s.length - 1]! };
}

async function tsRound(url: string, round: number): Promise<number[]> {
  const nc = await natsConnect({ servers: url, name: "ts-bench" });
  const w = await connect(nc, `tsbench-${process.pid}-${round}`);
  try {
    const l = await w.acquire(`tsbench-${process.pid}-${round}-job`, { leaseMs: 600_000 });
    for (let i = 0; i < warmup; i++) await l.renew();
    const us: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = process.hrtime.bigint();
      await l.renew();
      us.push(Number(process.hrtime.bigint() - t0) / 1e3);
    }
    await l.release();
    return us;
  } finally {
    await w.close();
    await nc.close();
  }
}

// The same round trip without the SDK, for attribution: a bare nats.js
// JetStream publish of a single renew (its own Nats-Msg-Id) and the wait
// for its verdict on an ordered consumer of the worker's decisions.
async function rawRound(url: string, round: number): Promise<number[]> {
  const nc = await natsConnect({ servers: url, name: "raw-bench" });
  const id = `rawbench-${process.pid}-${round}`;
  const w = await connect(nc, id); // only to acquire the lease
  try {
    const l = await w.acquire(`${id}-job`, { leaseMs: 600_000 });
    const js = jetstream(nc);
    const seen = new Set<number>();
    let wake: (() => void) | undefined;
    const c = await js.consumers.get("TENURE_OUT", { filter_subjects: `tenure.out.${id}.*.renewed` });
    const msgs = await c.consume({ callback: (m) => { seen.add(m.json<{ cause: number }>().cause); wake?.(); } });
    const us: number[] = [];
    for (let i = 0, seq = 1; i < warmup + n; i++, seq++) {
      const t0 = process.hrtime.bigint();
      const body = JSON.stringify({ v: 1, lease_id: l.leaseId, generation: l.generation, renew_seq: seq });
      const ack = await js.publish(`tenure.in.worker.${id}.${l.job}.renew`, body, { msgID: `${id}-${crypto.randomUUID()}` });
      while (!seen.has(ack.seq)) await new Promise<void>((r) => (wake = r));
      if (i >= warmup) us.push(Number(process.hrtime.bigint() - t0) / 1e3);
    }
    await msgs.close();
    return us;
  } finally {
    await w.close();
    await nc.close();
  }
}

// The Go round: bench/gorenew, a process of its own, prints every round
// trip it timed (samples_us), summed up here as the TypeScript ones are.
function goRound(bin: string, url: string, round: number): number[] {
  const out = execFileSync(bin, ["-url", url, "-n", String(n), "-warmup", String(warmup), "-id", `gobench-${process.pid}-${round}`, "-samples"],
    { encoding: "utf8" });
  return (JSON.parse(out) as { samples_us: number[] }).samples_us;
}

const goBin = join(pkgDir, "build", "bin", "gorenew");
execFileSync("go", ["build", "-o", goBin, "./sdk/ts/bench/gorenew"], { cwd: repoRoot, stdio: "inherit" });
let serve: Serve | undefined;
let url = values.url;
if (!url) {
  serve = await Serve.start(values.sync === "always" ? ["--sync", "always"] : []);
  url = serve.url;
}
try {
  const ts: number[] = [];
  const goUs: number[] = [];
  const raw: number[] = [];
  for (let r = 0; r < rounds; r++) {
    ts.push(...(await tsRound(url, r)));
    goUs.push(...goRound(goBin, url, r));
    raw.push(...(await rawRound(url, r)));
  }
  const t = stats("typescript", ts);
  const g = stats("go", goUs);
  const b = stats("nats.js raw", raw);
  console.log(`renew() round trips, ${n} per round, ${rounds} rounds alternating, against one tenure serve (${values.url ? url : `--sync ${values.sync}`})`);
  const f = (x: number) => (x / 1000).toFixed(3).padStart(8);
  console.log(`${"sdk".padEnd(12)}${"n".padStart(7)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}${"mean ms".padStart(9)}${"max ms".padStart(9)}`);
  for (const s of [t, g, b]) {
    console.log(`${s.sdk.padEnd(12)}${String(s.n).padStart(7)} ${f(s.p50_us)} ${f(s.p99_us)} ${f(s.mean_us)} ${f(s.max_us)}`);
  }
  console.log(JSON.stringify({ typescript: t, go: g, nats_js_raw: b }));
} finally {
  await serve?.stop();
}
