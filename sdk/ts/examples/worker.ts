// A Tenure worker in TypeScript: it takes the jobs of one queue, at most
// CONCURRENCY at once, until SIGINT or SIGTERM, then shuts down cleanly
// (capacity withdrawn, unfinished jobs released for another worker).
//
//   npm run build
//   node build/examples/worker.js <queue> [worker id]     # NATS_URL, CONCURRENCY
//
// With `tenure serve` running, submit jobs with
//   go run ./cmd/tenure submit mail-1 --queue emails --payload 'hello'
// A payload starting with "fail" fails the attempt (retried after a
// backoff), one starting with "bad" fails the job for good.

import { connect as natsConnect } from "@nats-io/transport-node";

import { connect, isError, ErrorCode, permanent, type Job } from "@tenure/worker";

const [queue = "emails", id = `ts-${process.pid}`] = process.argv.slice(2);
const nc = await natsConnect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222", name: id });
const w = await connect(nc, id, { onError: (err) => console.error(`worker ${id}:`, err.message) });

const shutdown = new AbortController();
for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => shutdown.abort(new Error(sig)));

async function handle(job: Job, signal: AbortSignal): Promise<void> {
  console.log(`job ${job.id} attempt ${job.attempt}/${job.maxAttempts}: ${job.payload ?? "(no payload)"} token ${job.lease}`);
  if (job.payload?.startsWith("bad")) throw permanent(new Error(`bad payload ${JSON.stringify(job.payload)}`));
  if (job.payload?.startsWith("fail")) throw new Error("simulated failure");
  for (let step = 1; step <= 4; step++) {
    // Check authority before every side effect; a real worker passes
    // job.lease.token to it, so that a fenced resource refuses stale writes.
    if (signal.aborted) throw signal.reason;
    await new Promise((r) => setTimeout(r, 50));
    await job.lease.progress(step * 25).catch((err: unknown) => {
      if (isError(err, ErrorCode.LostAuthority)) throw err; // stop: someone else may hold the job now
    });
  }
  console.log(`job ${job.id} done`);
}

console.log(`worker ${id} running queue ${queue}`);
try {
  await w.run(queue, handle, { concurrency: Number(process.env.CONCURRENCY ?? 2), signal: shutdown.signal });
} finally {
  await w.close();
  await nc.close();
}
console.log(`worker ${id} stopped`);
