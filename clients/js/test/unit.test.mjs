// Pure parts of the client, no server: backoff bounds, close-code
// verdicts, the SSE parser and event ids, JWT exp.
import test from "node:test";
import assert from "node:assert/strict";
import { backoffDelay, closeVerdict, DEFAULT_BACKOFF, parseEventId, refusalVerdict, SseParser, tokenExp } from "../dist/index.js";
import { signToken } from "./support.mjs";

test("backoff: full jitter within [0, min(max, min * 2^attempt)), documented defaults", () => {
  assert.deepEqual(DEFAULT_BACKOFF, { minReconnectDelay: 500, maxReconnectDelay: 30_000 });
  const almostOne = () => 0.999999;
  const caps = [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000];
  caps.forEach((cap, attempt) => {
    assert.equal(backoffDelay(attempt, DEFAULT_BACKOFF, () => 0), 0);
    const hi = backoffDelay(attempt, DEFAULT_BACKOFF, almostOne);
    assert.ok(hi < cap && hi >= cap - 1, `attempt ${attempt}: ${hi} vs cap ${cap}`);
  });
  // Huge attempt counts do not overflow to Infinity or NaN.
  assert.equal(backoffDelay(10_000, DEFAULT_BACKOFF, almostOne), 29_999);
});

test("close codes: what reconnects, what asks for a new token, what stops", () => {
  for (const code of [1000, 1001, 1006, 1009, 1011, 1012, 1013]) assert.equal(closeVerdict(code, ""), "reconnect", `${code}`);
  assert.equal(closeVerdict(1008, "slow consumer"), "reconnect");
  assert.equal(closeVerdict(1008, "this connection may not publish here"), "stop");
  for (const code of [1002, 1003, 1007, 4000, 4100]) assert.equal(closeVerdict(code, ""), "stop", `${code}`);
  assert.equal(closeVerdict(4001, "token expired"), "new-token");
  assert.equal(refusalVerdict(401), "new-token");
  for (const s of [403, 404, 405]) assert.equal(refusalVerdict(s), "stop", `${s}`);
  for (const s of [400, 426, 429, 502, 503]) assert.equal(refusalVerdict(s), "reconnect", `${s}`);
});

test("SSE parser: fields, multi-line data, CRLF split across chunks, comments, bounds", () => {
  const p = new SseParser(64);
  assert.deepEqual(p.push(": heartbeat\n\nid: a:e1:7\ndata: one\r"), []);
  assert.deepEqual(p.push("\ndata: two\r\n\r\n"), [{ event: "message", data: "one\ntwo", id: "a:e1:7" }]);
  assert.deepEqual(p.push("event: gap\nid: a:e1:9\ndata: {}\n\n"), [{ event: "gap", data: "{}", id: "a:e1:9" }]);
  // The id persists to later events (last event ID), as in the spec.
  assert.deepEqual(p.push("data:x\n\n"), [{ event: "message", data: "x", id: "a:e1:9" }]);
  assert.throws(() => p.push("data: " + "y".repeat(100)), /over 64 bytes/);
});

test("event ids are read from the right (channel names may contain ':')", () => {
  assert.deepEqual(parseEventId("room:1:abc:42", "room:1"), { epoch: "abc", offset: 42 });
  assert.equal(parseEventId("other:abc:42", "room:1"), undefined);
  assert.equal(parseEventId("room:abc:x", "room"), undefined);
  assert.equal(parseEventId(undefined, "room"), undefined);
});

test("tokenExp reads a JWT's exp without verifying it", () => {
  assert.equal(tokenExp(signToken("s".repeat(32), { exp: 1234567890, sub: "ü" })), 1234567890);
  assert.equal(tokenExp("not-a-jwt"), undefined);
});

test("SSE events (the /sse wire: JSON protocol objects as data) drive a subscription like WebSocket frames", async () => {
  const { Subscription } = await import("../dist/index.js");
  const host = {};
  const run = (since, stream) => {
    const sub = new Subscription("news", host, { since });
    const seen = [];
    for (const ev of ["subscribed", "recovered", "gap", "message"]) sub.on(ev, (v) => seen.push([ev, v.offset, v.reason ?? v.data]));
    sub.beginSubscribe();
    for (const e of new SseParser(1 << 16).push(stream)) sub.handleSse(e.event, JSON.parse(e.data), parseEventId(e.id, "news"));
    return { seen, pos: sub.position(), dups: sub.duplicatesDropped };
  };
  const fresh = run(undefined,
    "event: subscribed\nid: news:E1:41\ndata: {\"type\":\"subscribed\",\"channel\":\"news\",\"epoch\":\"E1\",\"offset\":41}\n\n" +
    ": heartbeat\n\n" +
    "event: message\nid: news:E1:42\ndata: {\"type\":\"message\",\"channel\":\"news\",\"offset\":42,\"data\":\"hello\"}\n\n" +
    "event: message\nid: news:E1:42\ndata: {\"type\":\"message\",\"channel\":\"news\",\"offset\":42,\"data\":\"hello\"}\n\n" +
    "event: gap\nid: news:E1:60\ndata: {\"type\":\"gap\",\"channel\":\"news\",\"epoch\":\"E1\",\"offset\":60}\n\n" +
    "event: message\nid: news:E1:61\ndata: {\"type\":\"message\",\"channel\":\"news\",\"offset\":61,\"data\":\"later\"}\n\n");
  assert.deepEqual(fresh.seen, [["subscribed", 41, undefined], ["message", 42, "hello"], ["gap", 60, "server"], ["message", 61, "later"]]);
  assert.deepEqual(fresh.pos, { epoch: "E1", offset: 61 });
  assert.equal(fresh.dups, 1);
  // A resume the server covered: subscribed (recovered) and the replay.
  const covered = run({ epoch: "E1", offset: 41 },
    "event: subscribed\nid: news:E1:42\ndata: {\"type\":\"subscribed\",\"channel\":\"news\",\"recovered\":true,\"epoch\":\"E1\",\"offset\":42}\n\n" +
    "event: message\nid: news:E1:42\ndata: {\"type\":\"message\",\"channel\":\"news\",\"offset\":42,\"data\":\"missed\"}\n\n");
  assert.deepEqual(covered.seen, [["subscribed", 42, undefined], ["recovered", 42, undefined], ["message", 42, "missed"]]);
  // One it could not cover: a gap alone, which is the resume's answer.
  const lost = run({ epoch: "OLD", offset: 5 },
    "event: gap\nid: news:E2:9\ndata: {\"type\":\"gap\",\"channel\":\"news\",\"epoch\":\"E2\",\"offset\":9}\n\n");
  assert.deepEqual(lost.seen, [["subscribed", 9, undefined], ["gap", 9, "not_recovered"]]);
  assert.deepEqual(lost.pos, { epoch: "E2", offset: 9 });
});

test("deltas: our applier rebuilds what the reference fossil-delta makes, and refuses a wrong base", async () => {
  const { applyDelta, applyTextDelta } = await import("../dist/index.js");
  const { createDelta } = await import("fossil-delta");
  let seed = 42;
  const rnd = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
  const doc = (n) => JSON.stringify({ n, rows: Array.from({ length: 60 }, (_, i) => ({ i, v: i * 3 + (i % 7 === 0 ? n : 0) })) });
  for (let n = 1; n < 50; n++) {
    const [a, b] = [new TextEncoder().encode(doc(n - 1)), new TextEncoder().encode(doc(n))];
    assert.deepEqual(applyDelta(a, createDelta(a, b)), b);
    // Random bytes, grown and shrunk.
    const s = Uint8Array.from({ length: rnd(2000) }, () => rnd(256));
    const t = Uint8Array.from({ length: rnd(2000) }, (_, i) => (rnd(4) ? s[i % Math.max(1, s.length)] ?? 0 : rnd(256)));
    assert.deepEqual(applyDelta(s, createDelta(s, t)), t);
  }
  const d = new TextDecoder().decode(createDelta(new TextEncoder().encode(doc(1)), new TextEncoder().encode(doc(2))));
  assert.equal(applyTextDelta(doc(1), d), doc(2));
  assert.throws(() => applyTextDelta(doc(3), d), /checksum|past the/);
  for (const bad of ["", "5", "5\n5:ab", "3\n3@40,0;", "3\n3:abc?", "3\n3:abc0;"]) {
    assert.throws(() => applyTextDelta("0123456789abcdefghij", bad), undefined, JSON.stringify(bad));
  }
  assert.throws(() => applyDelta(new Uint8Array(), new TextEncoder().encode("zzzzz\n0;"), 1000), /larger/);
});

test("deltas: a subscription applies them, restarts from full after every subscribed, and reports one it cannot apply", async () => {
  const { Subscription } = await import("../dist/index.js");
  const { createDelta } = await import("fossil-delta");
  const delta = (a, b) => new TextDecoder().decode(createDelta(new TextEncoder().encode(a), new TextEncoder().encode(b)));
  const host = { presence: async () => ({}), history: async () => ({}), unsubscribe: async () => {} };
  const sub = new Subscription("doc:a", host, { delta: "fossil" });
  assert.equal(sub.subscribeRequest().delta, "fossil");
  const got = [], errors = [], gaps = [];
  sub.on("message", (m) => got.push(m.data));
  sub.on("error", (e) => errors.push(e.code));
  sub.on("gap", (g) => gaps.push(g.reason));
  const [d1, d2, d3] = ["x".repeat(40) + "one", "x".repeat(40) + "two", "x".repeat(40) + "three"];
  sub.handle({ type: "subscribed", epoch: "e", offset: 0, delta: true });
  sub.handle({ type: "message", offset: 1, data: d1 });
  sub.handle({ type: "message", offset: 2, data: delta(d1, d2), delta: true });
  // A duplicate still moves the base (the server's base moved too).
  sub.handle({ type: "message", offset: 2, data: delta(d2, d2), delta: true });
  assert.deepEqual(got, [d1, d2]);
  // After a (re)subscribe the base is gone: a delta now is an error, a gap.
  sub.handle({ type: "subscribed", epoch: "e", offset: 2, delta: true });
  sub.handle({ type: "message", offset: 3, data: delta(d2, d3), delta: true });
  assert.deepEqual([got.length, errors, gaps], [2, ["delta"], ["delta"]]);
  sub.handle({ type: "message", offset: 4, data: d3 });
  assert.equal(got.at(-1), d3);
});

test("idempotency keys: a copy published again is dropped, its offset passed, the memory bounded", async () => {
  const { Subscription, RECENT_KEYS } = await import("../dist/index.js");
  const host = { presence: async () => ({}), history: async () => ({}), unsubscribe: async () => {} };
  const sub = new Subscription("orders", host, {});
  const got = [];
  sub.on("message", (m) => got.push([m.offset, m.idempotencyKey]));
  sub.handle({ type: "subscribed", epoch: "e", offset: 0 });
  sub.handle({ type: "message", offset: 1, data: "a", idempotency_key: "outbox:1" });
  sub.handle({ type: "message", offset: 2, data: "b", idempotency_key: "outbox:2" });
  // The consumer crashed before its commit; the rows came again.
  sub.handle({ type: "message", offset: 3, data: "a", idempotency_key: "outbox:1" });
  sub.handle({ type: "message", offset: 4, data: "b", idempotency_key: "outbox:2" });
  sub.handle({ type: "message", offset: 5, data: "c", idempotency_key: "outbox:3" });
  sub.handle({ type: "message", offset: 6, data: "no key" });
  assert.deepEqual(got, [[1, "outbox:1"], [2, "outbox:2"], [5, "outbox:3"], [6, undefined]]);
  assert.deepEqual(sub.position(), { epoch: "e", offset: 6 });
  assert.equal(sub.duplicatesDropped, 2);
  // Bounded: the oldest keys are forgotten first.
  for (let i = 0; i < RECENT_KEYS; i++) sub.handle({ type: "message", offset: 7 + i, data: "x", idempotency_key: `k:${i}` });
  sub.handle({ type: "message", offset: 7 + RECENT_KEYS, data: "a again", idempotency_key: "outbox:1" });
  assert.deepEqual(got.at(-1), [7 + RECENT_KEYS, "outbox:1"]);
});
