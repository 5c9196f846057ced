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
import { jetstreamManager } from "@nats-io/jetstream";

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
    "--credential", join(dir, "coord.creds.json")], c, join(dir, "admin.creds.json"));
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

test("under tenure auth init's permissions: no stream info, and none needed", async () => {
  const c = creds("w1");
  const nc = await natsConnect({ servers: serve.url, user: c.user, pass: c.password, inboxPrefix: c.inbox_prefix });
  const adm = await serve.connect("operator"); // the coordinator's user, in the deployment's account
  try {
    const w = await connect(nc, "w1");
    const l = await w.acquire("auth-2", { leaseMs: 6000, renewFraction: 0.25 });
    // Which would list every decision subject with its count: the job ids
    // and worker names of the deployment (PROTOCOL.md §4.1).
    for (const subject of ["JS.TENURE.API.STREAM.INFO.TENURE_OUT", "$JS.API.STREAM.INFO.TENURE_OUT"]) {
      let answer: string | undefined;
      try {
        answer = (await nc.request(subject, JSON.stringify({ subjects_filter: "tenure.out.>" }), { timeout: 1000 })).string();
      } catch {
        // refused: a permissions violation, no answer
      }
      assert.equal(answer, undefined, `${subject} answered: ${answer?.replace(/^.*"subjects":/, "").slice(0, 200)}`);
    }
    // An operator deletes the worker's consumer: it is made again, under
    // the worker's own permissions, and the lease goes on.
    const jsm = await jetstreamManager(adm);
    assert.equal((await jsm.consumers.info("TENURE_OUT", "tw_w1_0")).config.filter_subject, "tenure.out.w1.>");
    await jsm.consumers.delete("TENURE_OUT", "tw_w1_0");
    await l.renew();
    await l.progress(10);
    await l.complete("SUCCESS");
    await w.close();
  } finally {
    await adm.close();
    await nc.close();
  }
});
