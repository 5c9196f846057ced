// The error codes against the Go SDK's table (worker/doc.go "Errors"), read
// from the repository so that the two cannot drift apart; fencing tokens;
// text cleaning. No server needed.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  ErrorCode, Fence, formatFencingToken, isError, parseFencingToken, permanent, TenureError, verdictCodes,
} from "@tenure/worker";

import { repoRoot } from "./harness.js";

const goName: Record<string, string> = {
  ErrLostAuthority: ErrorCode.LostAuthority, ErrStaleGeneration: ErrorCode.StaleGeneration, ErrExpired: ErrorCode.Expired,
  ErrConflict: ErrorCode.Conflict, ErrRejected: ErrorCode.Rejected, ErrDuplicate: ErrorCode.Duplicate, ErrLate: ErrorCode.Late,
  ErrLeaseHeld: ErrorCode.LeaseHeld, ErrCancelRequested: ErrorCode.CancelRequested,
};

const afterExpiry = ["progress_after_expiry", "result_after_expiry", "release_after_expiry", "cancel_ack_after_expiry"];

test("verdict codes match the Go SDK's table row by row", () => {
  const doc = readFileSync(join(repoRoot, "worker", "doc.go"), "utf8");
  const start = doc.indexOf("//\tkind              reason");
  assert.ok(start > 0, "the table of worker/doc.go");
  const rows = doc.slice(start).split("\n").slice(1).filter((l) => l.startsWith("//\t")).map((l) => l.slice(3));
  assert.ok(rows.length >= 20, `rows: ${rows.length}`);
  // The reasons a row names explicitly, per kind, so that "any other" is tested with one no row names.
  const named = new Map<string, Set<string>>();
  const parsed = rows.map((row) => {
    const m = /^(\S+)\s+(.+?)\s{2,}(Err\S.*)$/.exec(row);
    assert.ok(m, `row ${JSON.stringify(row)}`);
    const [, kind, reasonCol, codesCol] = m;
    const reasons = reasonCol!.split(",").map((r) => r.trim()).flatMap((r) => (r === "*_after_expiry" ? afterExpiry : [r]));
    const codes = codesCol!.split(",").map((c) => goName[c.trim()] ?? c.trim());
    for (const r of reasons) if (r !== "any" && r !== "any other") {
      if (!named.has(kind!)) named.set(kind!, new Set());
      named.get(kind!)!.add(r);
    }
    return { kind: kind!, reasons, codes };
  });
  for (const { kind, reasons, codes } of parsed) {
    for (let r of reasons) {
      if (r === "any" || r === "any other") {
        r = "no_such_job";
        assert.ok(!named.get(kind)?.has(r));
      }
      const got = verdictCodes(kind, r).filter((c) => c !== ErrorCode.NotAccepted);
      assert.deepEqual([...got].sort(), [...codes].sort(), `${kind}/${r}`);
    }
  }
});

test("NotAccepted matches every kind that is not an accepted one", () => {
  for (const k of ["stale", "lost_authority", "conflict", "rejected", "duplicate", "late", "expired", "ack_missed", "unresolved"]) {
    assert.ok(verdictCodes(k, "ok").includes(ErrorCode.NotAccepted), k);
  }
  for (const k of ["cancel_requested", "resolved", "granted", "renewed", "capacity_set"]) {
    assert.ok(!verdictCodes(k, "ok").includes(ErrorCode.NotAccepted), k);
  }
});

test("isError walks causes; permanent marks an error", () => {
  const inner = new TenureError("x", [ErrorCode.Expired, ErrorCode.LostAuthority]);
  const outer = new Error("wrapped", { cause: new Error("again", { cause: inner }) });
  assert.ok(isError(outer, ErrorCode.LostAuthority));
  assert.ok(!isError(outer, ErrorCode.Conflict));
  const p = permanent(new Error("bad payload"));
  assert.equal(p.message, "bad payload");
  assert.ok(isError(p, ErrorCode.Permanent));
  assert.ok(isError(new Error("up", { cause: p }), ErrorCode.Permanent));
  assert.ok(isError(permanent(), ErrorCode.Permanent));
});

test("fencing tokens round-trip; a Fence refuses older generations", () => {
  const t = { job: "report-42", leaseId: "L3-0FMQ6F4uKWTSoQx6pHrB5g", generation: 2 };
  assert.equal(formatFencingToken(t), "report-42/L3-0FMQ6F4uKWTSoQx6pHrB5g/2");
  assert.deepEqual(parseFencingToken(formatFencingToken(t)), t);
  assert.throws(() => parseFencingToken("a/b"));
  assert.throws(() => parseFencingToken("a/b/0"));
  assert.throws(() => parseFencingToken("a b/c/1"));
  const f = new Fence();
  f.admit(t);
  f.admit({ ...t, generation: 3 });
  assert.throws(() => f.admit(t), (e: unknown) => isError(e, ErrorCode.StaleGeneration));
  assert.equal(f.highest("report-42"), 3);
});
