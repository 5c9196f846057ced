// A Tenure worker in TypeScript: it takes the jobs of one queue, at most
// CONCURRENCY at once, and logs how each attempt ended.
//
// The first SIGTERM or SIGINT (Ctrl-C) drains it: it withdraws its capacity
// at once, so the queue offers it nothing more, and lets the running jobs
// finish for up to DRAIN_MS (default 30 s); then, or at a second signal,
// it stops them and releases their leases, so that another worker (or this
// one, restarted) takes them at once. It exits 0.
//
//   npm run build
//   node build/examples/worker.js <queue> [worker id]     # NATS_URL, CONCURRENCY, DRAIN_MS
//   node build/examples/worker.js <queue> --creds-json auth/w1.creds.json   # as worker w1 of tenure auth init
//
// With `tenure serve` running, submit jobs with
//   go run ./cmd/tenure submit mail-1 --queue emails --payload 'hello'
// A payload starting with "fail" fails the attempt (retried after a
// backoff), one starting with "bad" fails the job for good.

import { readFileSync } from "node:fs";

import { connect as natsConnect, type ConnectionOptions } from "@nats-io/transport-node";

import { connect, describeResult, drainOnSignals, isError, ErrorCode, permanent, type Job } from "@tenure/worker";

// The arguments: <queue> [worker id] [--creds-json FILE].
const args = process.argv.slice(2);
let credsJSON: string | undefined;
const k = args.indexOf("--creds-json");
if (k >= 0) [credsJSON] = args.splice(k, 2).slice(1);
const [queue = "emails", idArg] = args;

// tenure auth init's credential file for this worker (user and password;
// its name is the worker id).
let natsOpts: ConnectionOptions = { servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" };
let credName: string | undefined;
if (credsJSON) {
  const c = JSON.parse(readFileSync(credsJSON, "utf8")) as { name: string; url?: string; user?: string; password?: string; inbox_prefix?: string; nkey_seed_file?: string; tls_ca_file?: string };
  if (!c.user || c.nkey_seed_file || c.tls_ca_file) throw new Error(`${credsJSON}: this example takes a user and password credential, without TLS`);
  natsOpts = { servers: process.env.NATS_URL ?? c.url, user: c.user, pass: c.password, inboxPrefix: c.inbox_prefix };
  credName = c.name;
}
const id = idArg ?? credName ?? `ts-${process.pid}`;
const drainMs = Number(process.env.DRAIN_MS ?? 30_000);

const nc = await natsConnect({ ...natsOpts, name: id });
const w = await connect(nc, id, { onError: (err) => console.error(`worker ${id}:`, err.message) });

// The first signal starts the drain, a second one stops the running jobs at once.
const stop = drainOnSignals({
  onSignal: (sig, phase) => console.log(phase === "drain"
    ? `${sig}: taking no more jobs; the running ones may finish for ${drainMs} ms (signal again to stop them now)`
    : `${sig}: stopping the running jobs now`),
});

async function handle(job: Job, signal: AbortSignal): Promise<void> {
  console.log(`job ${job.id} attempt ${job.attempt}/${job.maxAttempts}: ${job.payload ?? "(no payload)"} token ${job.lease}`);
  if (job.payload?.startsWith("bad")) throw permanent(new Error(`bad payload ${JSON.stringify(job.payload)}`));
  if (job.payload?.startsWith("fail")) throw new Error("simulated failure");
  for (let step = 1; step <= 4; step++) {
    // Check authority before every side effect; a real worker passes
    // job.lease.token to it, so that a fenced resource refuses stale writes.
    if (signal.aborted) throw signal.reason; // cancelled, revoked, expired, or stopped: stop at once
    await new Promise((r) => setTimeout(r, 50));
    await job.lease.progress(step * 25).catch((err: unknown) => {
      if (isError(err, ErrorCode.LostAuthority)) throw err; // stop: someone else may hold the job now
      console.error(`job ${job.id}: progress ${step * 25}% not recorded: ${(err as Error).message}`);
    });
  }
  console.log(`job ${job.id} done`);
}

console.log(`worker ${id} running queue ${queue}`);
try {
  await w.run(queue, handle, {
    concurrency: Number(process.env.CONCURRENCY ?? 2),
    drain: stop.drain, drainTimeoutMs: drainMs, signal: stop.signal,
    onResult: (job, res) => console.log(`job ${job.id} attempt ${job.attempt}: ${describeResult(res)}`),
  });
} finally {
  stop.dispose();
  await w.close();
  await nc.close();
}
console.log(`worker ${id} stopped`);
