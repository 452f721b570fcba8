// The client against the real corecast binary (test/support.mjs): resume
// across server-cut connections, backoff bounds, token refresh, no
// reconnect after a refusal, presence, history, bounded queues, idle
// detection. Node 20 has no global WebSocket: the ws package stands in.
import test from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { Client, CorecastError } from "../dist/index.js";
import { nextEvent, publish, signToken, startCorecast, stats, until } from "./support.mjs";

const SECRET = "a-test-secret-of-at-least-32-bytes!!";

function client(server, opts = {}) {
  return new Client(server.url, { WebSocket, ...opts });
}

/** Collects a subscription's messages and checks order and uniqueness as they come. */
function collect(sub) {
  const got = [];
  sub.on("message", (m) => got.push(m));
  return got;
}

test("resume across connections the server cuts: every message once, in order", async (t) => {
  // No pings and a 1 s idle timeout: the server drops the silent client
  // every second, mid-stream, while a publisher keeps publishing.
  const server = await startCorecast(["--history-size", "1000", "--ping-interval", "0", "--idle-timeout", "1s"]);
  t.after(() => server.stop());
  const c = client(server, { pingInterval: 0, minReconnectDelay: 200, maxReconnectDelay: 400 });
  t.after(() => c.disconnect());
  let reconnects = 0;
  c.on("reconnecting", () => reconnects++);
  // Counted from the start, not awaited one by one: a cut or a reconnect
  // may come while the test is still publishing, before a nextEvent()
  // called after the publishing would listen.
  const cuts = [];
  c.on("disconnected", (d) => cuts.push(d));
  let connects = 0;
  c.on("connected", () => connects++);
  const sub = c.subscribe("feed");
  const got = collect(sub);
  const gaps = [];
  sub.on("gap", (g) => gaps.push(g));
  // A second channel, restored beside the first after every cut.
  const other = c.subscribe("feed.other");
  const gotOther = collect(other);
  other.on("gap", (g) => gaps.push(g));
  c.connect();
  await Promise.all([nextEvent(sub, "subscribed"), nextEvent(other, "subscribed")]);
  // Four rounds: 50 messages while connected, then (the server cuts the
  // silent client after 1 s) 25 more while it is away.
  let n = 0;
  const send = async (k) => {
    for (let i = 0; i < k; i++) {
      await publish(server, "feed", `m${++n}`);
      if (n % 5 === 0) await publish(server, "feed.other", `o${n / 5}`);
    }
  };
  for (let round = 1; round <= 4; round++) {
    await send(50);
    await until(() => cuts.length >= round, `cut number ${round}`);
    await send(25);
    await until(() => connects >= round + 1, `reconnect number ${round}`);
  }
  assert.ok(cuts.every((d) => d.reconnect === true), JSON.stringify(cuts));
  const total = n;
  await until(() => got.length >= total, `${total} messages (have ${got.length})`, 15_000);
  assert.deepEqual(got.map((m) => m.data), Array.from({ length: total }, (_, i) => `m${i + 1}`));
  assert.deepEqual(got.map((m) => m.offset), Array.from({ length: total }, (_, i) => i + 1));
  await until(() => gotOther.length >= total / 5, "the second channel's messages");
  assert.deepEqual(gotOther.map((m) => m.data), Array.from({ length: total / 5 }, (_, i) => `o${i + 1}`));
  assert.deepEqual(gaps, []);
  assert.equal(sub.duplicatesDropped + other.duplicatesDropped, 0, "the server resumed exactly: nothing to drop");
  assert.ok(reconnects >= 4, `the server cut the connection ${reconnects} times`);
  const s = await stats(server);
  assert.ok(s.recoveries >= 4, `recoveries ${s.recoveries}`);
  assert.equal(s.recoveries_failed, 0);
});

test("backoff: reconnect delays stay within the documented bounds, reset after success", async (t) => {
  const first = await startCorecast([]);
  const c = client(first, { minReconnectDelay: 40, maxReconnectDelay: 200, pingInterval: 0 });
  t.after(() => c.disconnect());
  const delays = [];
  c.on("reconnecting", (r) => delays.push(r));
  // Counted, not awaited after the restart: the client (retrying every
  // 200 ms at most) may connect to the new server before startCorecast
  // has read its log line and returned, and a listener added then would
  // wait for a second connect that never comes.
  let connects = 0;
  c.on("connected", () => connects++);
  c.connect();
  await until(() => connects >= 1, "the first connect");
  await first.stop();
  await until(() => delays.length >= 6, "six reconnect attempts", 10_000);
  delays.forEach((r, i) => {
    assert.equal(r.attempt, i);
    const cap = Math.min(200, 40 * 2 ** i);
    assert.ok(r.delay >= 0 && r.delay < cap, `attempt ${i}: ${r.delay} ms, cap ${cap}`);
  });
  // Back on the same port: connected again, and the count starts over.
  const again = await startCorecast([], first.port);
  t.after(() => again.stop());
  await until(() => connects >= 2, "the connect to the restarted server");
  const before = delays.length;
  await again.stop();
  await until(() => delays.length > before, "a reconnect after the second loss");
  assert.equal(delays[before].attempt, 0);
});

test("token refresh before exp through the callback; after a refused refresh, 4001 and a new token", async (t) => {
  const server = await startCorecast(["--token-secret", SECRET, "--history-size", "100"]);
  t.after(() => server.stop());
  let calls = 0;
  let grant = ["news"];
  const token = async () => {
    calls++;
    return signToken(SECRET, { exp: Math.floor(Date.now() / 1000) + 3, sub: "u1", subscribe: grant, publish: grant });
  };
  const c = client(server, { token, pingInterval: 0, minReconnectDelay: 10, maxReconnectDelay: 50 });
  t.after(() => c.disconnect());
  const disconnects = [];
  c.on("disconnected", (d) => disconnects.push(d));
  // Counted: the reconnect after the 4001 (10 ms of backoff at most) may
  // come before the publish below has its answer.
  let connects = 0;
  c.on("connected", () => connects++);
  const sub = c.subscribe("news");
  const got = collect(sub);
  c.connect();
  await nextEvent(sub, "subscribed");
  // Refreshed at half its 3 s life, twice: the connection outlives two tokens.
  await until(async () => (await stats(server)).token_refreshes >= 2, "two refreshes", 10_000);
  assert.deepEqual(disconnects, []);
  assert.ok(calls >= 3);
  await publish(server, "news", "n1");
  await until(() => got.length === 1, "n1");

  // Now the callback returns a token with other grants: the server refuses
  // the refresh (invalid_token), closes with 4001 at exp, and the client
  // reconnects with a new token and resumes.
  const errors = [];
  c.on("error", (e) => errors.push(e));
  grant = ["news", "other"];
  const d = await nextEvent(c, "disconnected", 10_000);
  assert.equal(d.code, 4001);
  assert.equal(d.reconnect, true);
  assert.ok(errors.some((e) => e.code === "invalid_token"), JSON.stringify(errors));
  await publish(server, "news", "n2");
  await until(() => connects >= 2, "the reconnect with a new token");
  await until(() => got.length === 2, "n2 after the reconnect");
  assert.deepEqual(got.map((m) => m.data), ["n1", "n2"]);
});

test("no reconnect after a refused token (401), a static expired token or 4001 without a callback", async (t) => {
  const server = await startCorecast(["--token-secret", SECRET]);
  t.after(() => server.stop());
  // Signed with another secret: refused at the upgrade.
  let calls = 0;
  const bad = async () => {
    calls++;
    return signToken("another-secret-that-is-long-enough!!", { exp: Math.floor(Date.now() / 1000) + 60 });
  };
  const c = client(server, { token: bad, minReconnectDelay: 1 });
  const reconnecting = [];
  c.on("reconnecting", (r) => reconnecting.push(r));
  c.on("error", () => {});
  c.connect();
  const d = await nextEvent(c, "disconnected");
  assert.equal(d.reconnect, false);
  assert.match(d.reason, /401/);
  assert.equal(calls, 1, "a token fresh from the callback that is refused is not asked for again");
  assert.deepEqual(reconnecting, []);
  assert.equal(c.state, "disconnected");
  assert.equal((await stats(server)).auth_failures, 1);

  // A static token that expires while connected: 4001, and no way back.
  const short = signToken(SECRET, { exp: Math.floor(Date.now() / 1000) + 2 });
  const s = client(server, { token: short, pingInterval: 0 });
  s.on("error", () => {});
  s.connect();
  await nextEvent(s, "connected");
  // At exp, 1-2 s away, at the server's next sweep: the default deadline
  // leaves room for a loaded machine.
  const d2 = await nextEvent(s, "disconnected", 10_000);
  assert.equal(d2.code, 4001);
  assert.equal(d2.reconnect, false);
  assert.equal(s.state, "disconnected");
  // Connecting again with it does not even try the server.
  s.connect();
  const d3 = await nextEvent(s, "disconnected");
  assert.equal(d3.reconnect, false);
  assert.match(d3.reason, /expired/);
});

test("presence: join and leave events, and the member list", async (t) => {
  const server = await startCorecast(["--token-secret", SECRET, "--presence-channels", "room-*"]);
  t.after(() => server.stop());
  const tok = (user) => signToken(SECRET, { exp: Math.floor(Date.now() / 1000) + 600, sub: user, subscribe: ["*"], publish: ["*"] });
  const ana = client(server, { token: tok("ana"), pingInterval: 0 });
  t.after(() => ana.disconnect());
  const sub = ana.subscribe("room-1", { presence: true });
  ana.connect();
  await nextEvent(sub, "subscribed");
  const bob = client(server, { token: tok("bob"), pingInterval: 0 });
  const join = nextEvent(sub, "join");
  bob.subscribe("room-1");
  bob.connect();
  assert.deepEqual(await join, { channel: "room-1", user: "bob", info: undefined });
  const p = await sub.presence();
  assert.equal(p.count, 2);
  assert.deepEqual(p.members.map((m) => m.user), ["ana", "bob"]);
  const leave = nextEvent(sub, "leave");
  bob.disconnect();
  assert.equal((await leave).user, "bob");
  // Presence on a channel without it: the server's error code.
  const plain = ana.subscribe("plain", { presence: true });
  const err = await nextEvent(plain, "error");
  assert.ok(err instanceof CorecastError);
  assert.equal(err.code, "presence_off");
});

test("history: GET /history through sub.history, with the token", async (t) => {
  const server = await startCorecast(["--token-secret", SECRET, "--history-size", "50"]);
  t.after(() => server.stop());
  const token = signToken(SECRET, { exp: Math.floor(Date.now() / 1000) + 600, subscribe: ["hist"], publish: ["hist"] });
  const c = client(server, { token, pingInterval: 0 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("hist");
  c.connect();
  await nextEvent(sub, "subscribed");
  for (let i = 1; i <= 10; i++) await c.publish("hist", i === 10 ? new Uint8Array([0, 1, 255]) : `h${i}`);
  const page = await sub.history({ limit: 5 });
  assert.equal(page.offset, 10);
  assert.deepEqual(page.messages.map((m) => [m.offset, m.data]), [[1, "h1"], [2, "h2"], [3, "h3"], [4, "h4"], [5, "h5"]]);
  const tail = await sub.history({ since: 8 });
  assert.deepEqual(tail.messages.map((m) => m.offset), [9, 10]);
  assert.deepEqual([...tail.messages[1].data], [0, 1, 255]);
  // A channel the token does not grant: the HTTP refusal as an error.
  await assert.rejects(c.subscribe("secret").history(), (e) => e.code === "http" && /403/.test(e.message));
});

test("publish: acknowledged with the subscriber count; bounded queue while disconnected", async (t) => {
  const server = await startCorecast([]);
  t.after(() => server.stop());
  const c = client(server, { maxQueuedPublishes: 3, pingInterval: 0 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("q");
  const got = collect(sub);
  // Not connected yet: three wait, the fourth is refused at once.
  const queued = [c.publish("q", "a"), c.publish("q", "b"), c.publish("q", "c")];
  await assert.rejects(c.publish("q", "d"), (e) => e.code === "queue_full");
  c.connect();
  const acks = await Promise.all(queued);
  assert.ok(acks.every((a) => typeof a.subscribers === "number"));
  await until(() => got.length === 3, "the three queued messages");
  assert.deepEqual(got.map((m) => m.data), ["a", "b", "c"]);
});

test("idle detection: a frozen server is given up after pongTimeout, then resumed", async (t) => {
  const server = await startCorecast(["--history-size", "100"]);
  t.after(() => {
    server.proc.kill("SIGCONT");
    return server.stop();
  });
  const c = client(server, { pingInterval: 200, pongTimeout: 300, connectTimeout: 300, minReconnectDelay: 20, maxReconnectDelay: 100 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("idle");
  const got = collect(sub);
  c.connect();
  await nextEvent(sub, "subscribed");
  await publish(server, "idle", "before");
  await until(() => got.length === 1, "the first message");
  server.proc.kill("SIGSTOP");
  const d = await nextEvent(c, "disconnected", 5000);
  assert.match(d.reason, /no answer within 300 ms/);
  server.proc.kill("SIGCONT");
  await nextEvent(c, "connected", 10_000);
  await publish(server, "idle", "after");
  await until(() => got.length === 2, "the message after the freeze");
  assert.deepEqual(got.map((m) => m.data), ["before", "after"]);
});

test("connect timeout: a peer that accepts but never answers the upgrade is abandoned and retried", async (t) => {
  // A TCP listener that holds connections without a word (a stalled
  // server or a black-holing middlebox).
  const held = new Set();
  const { createServer } = await import("node:net");
  const hole = createServer((s) => {
    held.add(s);
    s.on("close", () => held.delete(s));
  });
  await new Promise((r) => hole.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => {
    for (const s of held) s.destroy();
    hole.close(r);
  }));
  const c = new Client(`ws://127.0.0.1:${hole.address().port}/ws`, { WebSocket, connectTimeout: 150, minReconnectDelay: 10, maxReconnectDelay: 20, transports: ["websocket"] });
  t.after(() => c.disconnect());
  const tries = [];
  c.on("reconnecting", (r) => tries.push(r));
  c.connect();
  await until(() => tries.length >= 3, "three abandoned connects");
  assert.ok(tries.every((r) => r.reason === "connect timeout" && r.transport === "websocket"), JSON.stringify(tries));
  c.disconnect();
  assert.equal(c.state, "disconnected");
});

test("maxPendingRequests: past it publishes wait in the queue and other requests fail at once", async (t) => {
  const server = await startCorecast(["--presence-channels", "*"]);
  t.after(() => {
    server.proc.kill("SIGCONT");
    return server.stop();
  });
  const c = client(server, { maxPendingRequests: 2, pingInterval: 0 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("pending");
  const got = collect(sub);
  c.connect();
  await nextEvent(sub, "subscribed");
  // A frozen server answers nothing: two publishes await replies, the
  // third waits unsent in the queue, a presence read is refused.
  server.proc.kill("SIGSTOP");
  const settled = [];
  const pubs = ["p1", "p2", "p3"].map((d) => c.publish("pending", d).then((a) => settled.push([d, a.subscribers])));
  await assert.rejects(sub.presence(), (e) => e.code === "queue_full" && /2 requests/.test(e.message));
  assert.deepEqual(settled, []);
  server.proc.kill("SIGCONT");
  await Promise.all(pubs);
  assert.deepEqual(settled, [["p1", 1], ["p2", 1], ["p3", 1]]);
  await until(() => got.length === 3, "the three messages");
  assert.deepEqual(got.map((m) => m.data), ["p1", "p2", "p3"]);
});

test("maxBufferedAmount: past it queued publishes wait unsent until the socket drains", async (t) => {
  const server = await startCorecast([]);
  t.after(() => {
    server.proc.kill("SIGCONT");
    return server.stop();
  });
  const limit = 64 * 1024;
  const c = client(server, { maxBufferedAmount: limit, maxQueuedPublishes: 500, maxPendingRequests: 500, pingInterval: 0, requestTimeout: 60_000 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("buffered");
  const got = collect(sub);
  c.connect();
  await nextEvent(sub, "subscribed");
  // A frozen server reads nothing: once the kernel's buffers are full,
  // the socket's own buffer grows, and past the bound the rest wait in
  // the client's queue instead of piling up in it.
  server.proc.kill("SIGSTOP");
  const big = "x".repeat(16 * 1024);
  const pubs = [];
  for (let i = 0; i < 300; i++) pubs.push(c.publish("buffered", `${i}:${big}`));
  await until(() => c.queue.length > 0 && c.ws.bufferedAmount > limit, "the bound crossed, publishes held back");
  // Bounded: a publish is handed over only while the buffer is within
  // the bound, so it holds at most one message more.
  assert.ok(c.ws.bufferedAmount <= limit + big.length + 64, `buffered ${c.ws.bufferedAmount}`);
  assert.ok(c.queue.length > 0, "some publishes still wait");
  server.proc.kill("SIGCONT");
  await Promise.all(pubs);
  await until(() => got.length === 300, "all 300 messages", 30_000);
  assert.deepEqual(got.map((m) => Number(m.data.split(":")[0])), [...Array(300).keys()]);
});

test("rpc: a call reaches the backend's RPC hook and its answer comes back; a refusal rejects", async (t) => {
  // The application's backend, answering corecast's --proxy-rpc calls in
  // Centrifugo's proxy shape.
  const { createServer } = await import("node:http");
  const backend = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      const call = JSON.parse(body);
      const answer = call.method === "add"
        ? { result: { data: { sum: call.data.a + call.data.b } } }
        : { error: { code: 1001, message: "unknown method" } };
      res.setHeader("Content-Type", "application/json");
      res.end(JSON.stringify(answer));
    });
  });
  await new Promise((r) => backend.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => backend.close(r)));
  const server = await startCorecast(["--proxy-rpc", `http://127.0.0.1:${backend.address().port}/rpc`]);
  t.after(() => server.stop());
  const c = client(server, { pingInterval: 0 });
  t.after(() => c.disconnect());
  c.connect();
  assert.deepEqual(await c.rpc("add", { a: 2, b: 3 }), { sum: 5 });
  await assert.rejects(c.rpc("nope"), (e) => e instanceof CorecastError && e.code === "refused");
});

test("a subscribe refused as unavailable (Redis down) is asked again until Redis is back", async (t) => {
  const { startRedis } = await import("./support.mjs");
  let redis = await startRedis();
  t.after(() => redis.stop());
  const server = await startCorecast(["--redis-url", redis.url, "--history-size", "100", "--redis-command-timeout", "300ms"]);
  t.after(() => server.stop());
  const c = client(server, { pingInterval: 0, minReconnectDelay: 50, maxReconnectDelay: 100 });
  t.after(() => c.disconnect());
  c.connect();
  await nextEvent(c, "connected");
  const port = redis.port;
  await redis.stop();
  const sub = c.subscribe("while-down");
  const err = await nextEvent(sub, "error", 10_000);
  assert.equal(err.code, "unavailable");
  assert.equal(sub.state, "pending");
  redis = await startRedis(port);
  await nextEvent(sub, "subscribed", 15_000);
  const got = collect(sub);
  await until(async () => (await fetch(`${server.http}/readyz`)).status === 200, "corecast ready again");
  await publish(server, "while-down", "back");
  await until(() => got.length === 1, "a message after Redis came back");
  assert.equal(got[0].data, "back");
});

test("idle probes on a quiet but live connection are answered: no spurious reconnect", async (t) => {
  const server = await startCorecast(["--ping-interval", "0"]);
  t.after(() => server.stop());
  const c = client(server, { pingInterval: 100, pongTimeout: 150 });
  t.after(() => c.disconnect());
  const disconnects = [];
  c.on("disconnected", (d) => disconnects.push(d));
  c.connect();
  await nextEvent(c, "connected");
  await until(() => c.probes.answered >= 5, "five probes answered", 10_000);
  assert.ok(c.probes.sent - c.probes.answered <= 1);
  assert.deepEqual(disconnects, []);
  assert.equal(c.state, "connected");
});

test("since from storage: a new client resumes where an earlier one stopped (page reload)", async (t) => {
  const server = await startCorecast(["--history-size", "100"]);
  t.after(() => server.stop());
  const first = client(server, { pingInterval: 0 });
  const sub1 = first.subscribe("stored");
  const got1 = collect(sub1);
  first.connect();
  await nextEvent(sub1, "subscribed");
  for (const d of ["a", "b"]) await publish(server, "stored", d);
  await until(() => got1.length === 2, "a and b");
  const saved = JSON.parse(JSON.stringify(sub1.position()));
  first.disconnect();
  for (const d of ["c", "d"]) await publish(server, "stored", d);
  const second = client(server, { pingInterval: 0 });
  t.after(() => second.disconnect());
  const sub2 = second.subscribe("stored", { since: saved });
  const got2 = collect(sub2);
  const recovered = nextEvent(sub2, "recovered");
  second.connect();
  assert.equal((await recovered).resumed, true);
  await until(() => got2.length === 2, "c and d");
  assert.deepEqual(got2.map((m) => [m.offset, m.data]), [[3, "c"], [4, "d"]]);
  // A position from another epoch (a restarted server): subscribed, then gap.
  const third = client(server, { pingInterval: 0 });
  t.after(() => third.disconnect());
  const sub3 = third.subscribe("stored", { since: { epoch: "gone", offset: 2 } });
  const gap = nextEvent(sub3, "gap");
  third.connect();
  const g = await gap;
  assert.equal(g.reason, "not_recovered");
  assert.equal(g.offset, 4);
  assert.deepEqual(sub3.position(), { epoch: saved.epoch, offset: 4 });
});

test("slow consumer: cut with 1008 \"slow consumer\", the client reconnects and resumes without loss", async (t) => {
  const server = await startCorecast([
    "--history-size", "100000", "--history-max-bytes", "64MiB",
    "--max-outbound-queue", "256KiB", "--slow-consumer-grace", "100ms", "--ping-interval", "0",
  ]);
  t.after(() => server.stop());
  // A TCP proxy whose server-to-client direction can be stopped: the
  // client then reads nothing, as a stuck consumer would.
  const { createServer, connect } = await import("node:net");
  const ups = new Set();
  let paused = false;
  const proxy = createServer((down) => {
    const up = connect(server.port, "127.0.0.1");
    ups.add(up);
    down.pipe(up);
    if (!paused) up.pipe(down);
    const end = () => {
      ups.delete(up);
      up.destroy();
      down.destroy();
    };
    // The server closing its side ends the client's after what the proxy
    // still buffers for it (the close frame last): destroying it here
    // dropped that tail when the client read slower than the proxy, and
    // the client saw 1006 instead of the server's 1008.
    up.on("close", () => {
      ups.delete(up);
      down.end();
    });
    up.on("error", end);
    down.on("close", end).on("error", end);
    up.down = down;
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => {
    for (const u of ups) u.destroy();
    proxy.close(r);
  }));
  const c = new Client(`ws://127.0.0.1:${proxy.address().port}/ws`, { WebSocket, pingInterval: 0, minReconnectDelay: 20, maxReconnectDelay: 50 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("slow");
  const got = collect(sub);
  const gaps = [];
  sub.on("gap", (g) => gaps.push(g));
  c.connect();
  await nextEvent(sub, "subscribed");
  paused = true;
  for (const up of ups) {
    up.unpipe(up.down);
    up.pause();
  }
  // Kernel buffers (the proxy's receive window can grow to tcp_rmem's
  // maximum) absorb megabytes first; publish until the server's queue for
  // the client passes the bound, then wait for the cut (after the grace).
  // The queue then holds about the bound: within what a resume replays
  // (2 x --max-outbound-queue).
  // Random, so that permessage-deflate (which ws offers) cannot shrink it.
  const { randomBytes } = await import("node:crypto");
  const payload = () => randomBytes(48 * 1024).toString("base64");
  let n = 0;
  const queued = async () => {
    const st = await stats(server);
    return st.outbound_bytes > 256 * 1024 || st.slow_consumer_disconnects > 0;
  };
  while (!(await queued())) {
    await publish(server, "slow", `${++n}:${payload()}`);
    if (n > 5_000) throw new Error("the server's queue never grew");
  }
  await until(async () => (await stats(server)).slow_consumer_disconnects === 1, "the slow-consumer cut");
  const log = [];
  for (const ev of ["subscribed", "gap", "error"]) sub.on(ev, (e) => log.push([ev, e]));
  for (const ev of ["connected", "reconnecting", "error"]) c.on(ev, (e) => log.push([ev, e]));
  const closed = nextEvent(c, "disconnected", 10_000);
  paused = false;
  for (const up of ups) up.pipe(up.down);
  const resubscribed = nextEvent(sub, "subscribed", 15_000);
  const d = await closed;
  assert.equal(d.code, 1008);
  assert.match(d.reason, /slow consumer/);
  assert.equal(d.reconnect, true);
  const again = await resubscribed;
  assert.equal(again.recovered, true, JSON.stringify(log));
  for (let i = 0; i < 5; i++) await publish(server, "slow", `${++n}:${payload()}`);
  await until(() => got.length >= n, `all ${n} messages`, 15_000).catch(async (e) => {
    const st = await stats(server);
    const pick = Object.fromEntries(Object.entries(st).filter(([k]) => /outbound|slow|recover|backpress|paused|conn|deliver|history_gaps/.test(k)));
    throw new Error(`${e.message}: have ${got.length}; ${JSON.stringify(log)}; ${JSON.stringify(pick)}`);
  });
  assert.deepEqual(got.map((m) => Number(String(m.data).split(":")[0])), Array.from({ length: n }, (_, i) => i + 1));
  assert.deepEqual(gaps, []);
  assert.equal(sub.duplicatesDropped, 0);
  t.diagnostic(`${n} messages of 64 KiB; cut after ${n - 5}; ${(await stats(server)).recovered_messages} recovered by the resume`);
});

test("idempotency keys: a row published twice (an outbox consumer's crash) is delivered once", async (t) => {
  const server = await startCorecast(["--history-size", "100"]);
  t.after(() => server.stop());
  const c = client(server, { pingInterval: 0 });
  t.after(() => c.disconnect());
  const sub = c.subscribe("orders");
  const got = collect(sub);
  c.connect();
  await nextEvent(sub, "subscribed");
  for (const [key, body] of [["shop:1", "a"], ["shop:2", "b"], ["shop:1", "a"], ["shop:3", "c"]]) {
    await publish(server, `orders?idempotency_key=${encodeURIComponent(key)}`, body);
  }
  await until(() => got.length === 3, "three messages");
  assert.deepEqual(got.map((m) => [m.data, m.idempotencyKey, m.offset]), [["a", "shop:1", 1], ["b", "shop:2", 2], ["c", "shop:3", 4]]);
  assert.equal(sub.duplicatesDropped, 1);
  assert.deepEqual(sub.position().offset, 4);
});
