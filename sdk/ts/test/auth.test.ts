// The SDK under the permissions `tenure auth init` writes (PROTOCOL.md §4):
// the worker in an account of its own, with its own inbox prefix, reaching
// JetStream under the worker API prefix, allowed only the consumer names
// tw_<id>_0 to _3. connect finds the prefix and names its consumer so.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { connect as natsConnect } from "@nats-io/transport-node";

import { connect, ErrorCode, isError } from "@tenure/worker";

import { Serve, tenureBinary } from "./harness.js";

interface Creds { user: string; password: string; inbox_prefix: string }

let dir: string;
let serve: Serve;

function creds(name: string): Creds {
  return JSON.parse(readFileSync(join(dir, `${name}.creds.json`), "utf8")) as Creds;
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "tenure-ts-auth-"));
  execFileSync(tenureBinary(), ["auth", "init", "--out", join(dir, "auth"), "--worker", "w1", "--bcrypt-cost", "4"], { stdio: "ignore" });
  dir = join(dir, "auth");
  const c = creds("coord");
  serve = await Serve.start(["--server-config", join(dir, "server.conf"), "--id", "coord",
    "--user", c.user, "--password", c.password, "--inbox-prefix", c.inbox_prefix], c);
});

after(async () => {
  await serve?.stop();
  rmSync(join(dir, ".."), { recursive: true, force: true });
});

test("under tenure auth init's permissions: acquire, renew, progress, complete", async () => {
  const c = creds("w1");
  const nc = await natsConnect({ servers: serve.url, user: c.user, pass: c.password, inboxPrefix: c.inbox_prefix });
  try {
    const w = await connect(nc, "w1");
    const l = await w.acquire("auth-1", { leaseMs: 30_000 });
    assert.match(l.leaseId, /^L\d+-/);
    await l.renew();
    await l.progress(50);
    await l.complete("SUCCESS");
    assert.ok(isError(l.signal.reason, ErrorCode.LeaseEnded));
    await w.close();
    // A consumer name outside tw_w1_0.._3 is refused by the server: the
    // default is what makes the above work.
    await assert.rejects(connect(nc, "w1", { consumerNamePrefix: "other", verdictTimeoutMs: 2000 }));
  } finally {
    await nc.close();
  }
});
