// Tag filters and latest-value channels through the client, against the
// real corecast binary: a subscription's filter (over WebSocket and over
// the SSE transport), publishes with tags and a key, the messages' tags,
// and a latest-value subscription's jumps reported as `skipped`, not gaps.
import test from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { Client } from "../dist/index.js";
import { nextEvent, signToken, startCorecast, stats, until } from "./support.mjs";

const BTC = { key: "sym", cmp: "eq", val: "BTC" };

for (const transport of ["websocket", "sse"]) {
  test(`filter over ${transport}: only matching messages, with their tags`, async (t) => {
    const server = await startCorecast([]);
    t.after(() => server.stop());
    const c = new Client(server.url, { WebSocket, transports: [transport], pingInterval: 0 });
    t.after(() => c.disconnect());
    const sub = c.subscribe("px", { filter: BTC });
    const got = [];
    sub.on("message", (m) => got.push(m));
    const subscribed = nextEvent(sub, "subscribed");
    c.connect();
    await subscribed;
    // A second client publishes over WebSocket: tags as the JSON op's.
    const p = new Client(server.url, { WebSocket, pingInterval: 0 });
    t.after(() => p.disconnect());
    p.connect();
    await nextEvent(p, "connected");
    await p.publish("px", "eth", { tags: { sym: "ETH" } });
    await p.publish("px", "btc", { tags: { sym: "BTC", side: "buy" } });
    await until(() => got.length === 1, "the BTC message");
    assert.equal(got[0].data, "btc");
    assert.deepEqual(got[0].tags, { side: "buy", sym: "BTC" });
    // Over HTTP (the SSE transport's publish path) the tags go as tag.K=V.
    const h = new Client(server.url, { transports: ["sse"] });
    t.after(() => h.disconnect());
    h.connect();
    await nextEvent(h, "connected");
    await h.publish("px", "btc-http", { tags: { sym: "BTC" } });
    await until(() => got.length === 2, "the message published over HTTP");
    assert.equal(got[1].data, "btc-http");
  });
}

test("latest-value channel: jumps are `skipped`, not gaps, and the newest value arrives", async (t) => {
  const server = await startCorecast(["--history-size", "100000", "--namespace", "px:conflate=true"]);
  t.after(() => server.stop());
  const c = new Client(server.url, { WebSocket, pingInterval: 0 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("px:book", { latest: true });
  const got = [];
  const gaps = [];
  sub.on("message", (m) => got.push(m));
  sub.on("gap", (g) => gaps.push(g));
  c.connect();
  await nextEvent(sub, "subscribed");
  // Publish faster than one socket takes: a burst the queue conflates.
  const p = new Client(server.url, { WebSocket, pingInterval: 0, maxPendingRequests: 10000, maxQueuedPublishes: 10000 });
  t.after(() => p.disconnect());
  p.connect();
  await nextEvent(p, "connected");
  const body = "x".repeat(4000);
  const n = 3000;
  const acks = [];
  for (let i = 1; i <= n; i++) acks.push(p.publish("px:book", `${i}:${body}`, { key: i % 2 ? "a" : "b" }));
  await Promise.all(acks);
  await until(() => got.length > 0 && got.at(-1).offset === n, "the newest value");
  const offsets = got.map((m) => m.offset);
  assert.ok(offsets.every((o, i) => i === 0 || o > offsets[i - 1]), "in order");
  const skipped = got.reduce((s, m) => s + m.skipped, 0);
  assert.equal(got.length + skipped, n, "every offset delivered or skipped");
  assert.equal(gaps.length, 0);
  assert.ok((await stats(server)).messages_conflated > 0);
});

test("a token's filter: the server says so in `subscribed`, and its jumps are not gaps", async (t) => {
  const SECRET = "a-test-secret-of-at-least-32-bytes!!";
  const server = await startCorecast(["--token-secret", SECRET, "--history-size", "100"]);
  t.after(() => server.stop());
  const token = signToken(SECRET, { exp: 4102444800, subscribe: ["*"], publish: ["*"], filters: { px: BTC } });
  const c = new Client(server.url, { WebSocket, token, pingInterval: 0 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("px");
  const got = [];
  const gaps = [];
  sub.on("message", (m) => got.push(m));
  sub.on("gap", (g) => gaps.push(g));
  c.connect();
  await nextEvent(sub, "subscribed");
  for (const sym of ["ETH", "BTC", "ETH", "ETH", "BTC"]) await c.publish("px", sym, { tags: { sym } });
  await until(() => got.length === 2, "the two BTC messages");
  assert.deepEqual(got.map((m) => [m.offset, m.skipped]), [[2, 1], [5, 2]]);
  assert.equal(gaps.length, 0);
});

test("deltas: the app sees whole documents while the wire carries deltas (checked with the reference fossil-delta)", async (t) => {
  const { applyDelta } = await import("fossil-delta");
  const server = await startCorecast(["--history-size", "100", "--namespace", "doc:delta=fossil"]);
  t.after(() => server.stop());
  const c = new Client(server.url, { WebSocket, pingInterval: 0 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("doc:board", { delta: "fossil" });
  const got = [];
  sub.on("message", (m) => got.push(m.data));
  c.connect();
  await nextEvent(sub, "subscribed");
  // An independent subscriber reads the raw frames.
  const raw = new WebSocket(server.url);
  const frames = [];
  raw.on("message", (b) => frames.push(JSON.parse(b.toString())));
  await new Promise((r) => raw.once("open", r));
  t.after(() => raw.close());
  raw.send(JSON.stringify({ op: "subscribe", channel: "doc:board", delta: "fossil", id: 1 }));
  await until(() => frames.length === 1, "the raw subscriber's reply");
  assert.equal(frames[0].delta, true, JSON.stringify(frames[0]));
  const doc = (n) => JSON.stringify({ n, rows: Array.from({ length: 50 }, (_, i) => ({ team: `t${i}`, score: 100 + i + (i === 9 ? n : 0) })) });
  // Over WebSocket, then over HTTP (`?delta=1`).
  for (let n = 0; n < 3; n++) await c.publish("doc:board", doc(n), { delta: true });
  const h = new Client(server.url, { transports: ["sse"] });
  t.after(() => h.disconnect());
  h.connect();
  await nextEvent(h, "connected");
  for (let n = 3; n < 5; n++) await h.publish("doc:board", doc(n), { delta: true });
  await until(() => got.length === 5 && frames.length === 6, "five documents");
  assert.deepEqual(got, [0, 1, 2, 3, 4].map(doc));
  const msgs = frames.slice(1);
  assert.deepEqual(msgs.map((m) => m.delta === true), [false, true, true, true, true]);
  let base = new TextEncoder().encode(msgs[0].data);
  for (const [i, m] of msgs.slice(1).entries()) {
    base = applyDelta(base, new TextEncoder().encode(m.data));
    assert.equal(new TextDecoder().decode(base), doc(i + 1));
    assert.ok(m.data.length * 10 < doc(i + 1).length, `delta ${i + 1} is small (${m.data.length} bytes)`);
  }
});
