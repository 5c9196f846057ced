// The worker's store of unclaimed decisions (src/stash.ts), the Go SDK's
// worker/stash.go: indexed by input and by lease, aged out, bounded with a
// reported drop. No server needed.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Stash, STASH_AGE_MS, STASH_MAX, wants, type Decision } from "@tenure/worker";

const v = (cause: number, job: string): Decision => ({ cause, kind: "renewed", job: { id: job } }) as unknown as Decision;

test("a cancel request a lease being registered needs survives 10,000 abandoned verdicts", () => {
  const s = new Stash();
  for (let i = 0; i < 5000; i++) assert.equal(s.addVerdict(1000 + i, v(1000 + i, "x"), 0), undefined);
  assert.equal(s.addLease("y\u0000L7", v(7, "y"), 0), undefined);
  for (let i = 5000; i < 10000; i++) assert.equal(s.addVerdict(1000 + i, v(1000 + i, "x"), 0), undefined);
  assert.equal(s.takeLease("y\u0000L7").length, 1);
  assert.equal(s.takeVerdicts(1000, 1).length, 1, "the first verdict, for a caller that comes back");
  assert.equal(s.size, 9999);
});

test("verdicts by input: up to n, a whole-input one alone", () => {
  const s = new Stash();
  for (const j of ["a", "b", "c"]) s.addVerdict(7, v(7, j), 0);
  assert.deepEqual(s.takeVerdicts(7, 2).map((d) => d.job.id), ["a", "b"]);
  assert.deepEqual(s.takeVerdicts(7, 5).map((d) => d.job.id), ["c"]);
  assert.deepEqual(s.takeVerdicts(7, 1), []);
  s.addVerdict(9, v(9, "_"), 0);
  s.addVerdict(9, v(9, "late"), 0);
  assert.deepEqual(s.takeVerdicts(9, 3).map((d) => d.job.id), ["_"]);
});

test("aged out after STASH_AGE_MS, not before; a list stashed again is younger", () => {
  const s = new Stash();
  s.addVerdict(1, v(1, "a"), 0);
  s.addLease("j\u0000L1", v(2, "j"), 0);
  s.addVerdict(5, v(5, "e"), 0);
  s.takeVerdicts(5, 1);
  s.addVerdict(5, v(5, "e2"), STASH_AGE_MS);
  s.addVerdict(3, v(3, "c"), STASH_AGE_MS);
  assert.equal(s.size, 4);
  assert.equal(s.addVerdict(4, v(4, "d"), STASH_AGE_MS + 1), undefined, "an aged-out drop is no error");
  assert.deepEqual(s.takeVerdicts(1, 1), []);
  assert.deepEqual(s.takeLease("j\u0000L1"), []);
  assert.deepEqual(s.takeVerdicts(5, 1).map((d) => d.job.id), ["e2"]);
  assert.equal(s.takeVerdicts(3, 1).length, 1);
});

test("past STASH_MAX the oldest is dropped and reported", () => {
  const s = new Stash();
  let err: Error | undefined;
  for (let i = 1; i <= STASH_MAX + 1 && !err; i++) err = s.addVerdict(i, v(i, "j"), 0);
  assert.ok(err && /the verdicts of input 1$/.test(err.message), String(err));
  assert.equal(s.size, STASH_MAX);
  assert.deepEqual(s.takeVerdicts(1, 1), []);
  assert.equal(s.takeVerdicts(2, 1).length, 1);
});

test("a waiter takes only its own input's verdicts: another input may hold its sequence after a lost tail", () => {
  const s = new Stash();
  const d = (verb: string, job: string): Decision =>
    ({ cause: 40, kind: "completed", input: { role: "worker", actor: "w1", verb }, job: { id: job } }) as unknown as Decision;
  s.addVerdict(40, d("result", "j2"), 0);
  s.addVerdict(40, d("result", "j1"), 0);
  // The lost input at 40 was a batch renew: nothing here is its.
  assert.deepEqual(s.takeVerdicts(40, 1, (x) => wants("renew", "_", x)), []);
  // A result of j1 takes its own, not the first stored.
  assert.deepEqual(s.takeVerdicts(40, 1, (x) => wants("result", "j1", x)).map((x) => x.job.id), ["j1"]);
  assert.deepEqual(s.takeVerdicts(40, 1, (x) => wants("result", "j2", x)).map((x) => x.job.id), ["j2"]);
  assert.equal(s.size, 0);
  // A verdict about no job (the whole input rejected) is any waiter's of its verb.
  s.addVerdict(41, d("result", "_"), 0);
  assert.equal(wants("result", "j3", d("result", "_")), true);
  assert.equal(wants("ack", "j3", d("result", "_")), false);
  assert.equal(s.takeVerdicts(41, 1, (x) => wants("result", "j3", x)).length, 1);
  // A verdict with no verb (a verb the log's rules do not know: bad_subject) is the waiting input's own.
  assert.equal(wants("pull", "_", d("", "_")), true);
});
