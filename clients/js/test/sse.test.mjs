// The client's SSE transport against a real corecast with `GET /sse`
// (issue 33 part 2): resume across a server killed and restarted on its
// port (Redis-backed history, a publisher on a second instance), and the
// fallback from WebSocket when a proxy in front refuses upgrades.
// Node ≥ 18 has fetch; no WebSocket is needed for the SSE transport.
import test from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import WebSocket from "ws";
import { Client } from "../dist/index.js";
import { publish, startCorecast, startRedis, until } from "./support.mjs";

test("SSE: every message once and in order across a server restart (Redis history)", async (t) => {
  const redis = await startRedis();
  t.after(() => redis.stop());
  const args = ["--redis-url", redis.url, "--history-size", "10000"];
  let server = await startCorecast(args);
  const publisher = await startCorecast(args);
  t.after(() => publisher.stop());
  t.after(() => server.stop());
  const c = new Client(server.url, { transports: ["sse"], minReconnectDelay: 50, maxReconnectDelay: 300 });
  t.after(() => c.disconnect());
  const got = [];
  const events = [];
  const sub = c.subscribe("sse-live");
  sub.on("message", (m) => got.push([m.offset, m.data]));
  for (const ev of ["subscribed", "recovered", "gap"]) sub.on(ev, (e) => events.push([ev, e]));
  let connects = 0;
  c.on("connected", (e) => {
    assert.equal(e.transport, "sse");
    connects++;
  });
  c.connect();
  await until(() => events.some(([e]) => e === "subscribed"), "subscribed over SSE");
  const sent = [];
  let running = true;
  const loop = (async () => {
    for (let i = 1; running; i++) {
      sent.push(`s${i}`);
      await publish(publisher, "sse-live", `s${i}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  try {
    await until(() => got.length >= 50, "50 messages over SSE");
    const port = server.port;
    await server.kill("SIGKILL");
    const atKill = sent.length;
    await until(() => sent.length >= atKill + 100, "100 published while the server is down");
    server = await startCorecast(args, port);
    await until(() => connects >= 2, "the SSE stream back", 15_000);
    const atBack = sent.length;
    await until(() => sent.length >= atBack + 100, "100 more");
  } finally {
    // Stopped here even when a wait above failed: left running, it would
    // publish to the stopped publisher and reject after the test ended.
    running = false;
    await loop;
  }
  await until(() => got.length >= sent.length, `every message (have ${got.length} of ${sent.length})`, 15_000);
  assert.deepEqual(got.map(([, d]) => d), sent);
  got.forEach(([o], i) => assert.equal(o, got[0][0] + i));
  assert.equal(events.filter(([e]) => e === "recovered").length, 1);
  assert.equal(events.filter(([e]) => e === "gap").length, 0);
  assert.equal(sub.duplicatesDropped, 0, "the server resumed exactly: nothing to drop");
});

test("SSE fallback: behind a proxy that refuses upgrades, the client switches to SSE and publishes over HTTP", async (t) => {
  const server = await startCorecast(["--history-size", "100"]);
  t.after(() => server.stop());
  // The proxy: plain requests are passed on (streamed), upgrades get 400.
  const proxy = http.createServer((req, res) => {
    const up = http.request({ host: "127.0.0.1", port: server.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  proxy.on("upgrade", (_req, socket) => socket.end("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { proxy.closeAllConnections(); proxy.close(r); }));
  const url = `ws://127.0.0.1:${proxy.address().port}/ws`;
  const c = new Client(url, { WebSocket, fallbackAfter: 2, minReconnectDelay: 10, maxReconnectDelay: 20 });
  t.after(() => c.disconnect());
  const tried = [];
  c.on("reconnecting", (r) => tried.push(r.transport));
  const sub = c.subscribe("behind-proxy");
  const got = [];
  sub.on("message", (m) => got.push(m.data));
  const connected = new Promise((r) => c.once("connected", r));
  c.connect();
  assert.deepEqual(await connected, { transport: "sse" });
  assert.deepEqual(tried.slice(0, 2), ["websocket", "sse"]);
  await until(() => sub.state === "subscribed", "the SSE subscription");
  const ack = await c.publish("behind-proxy", "through HTTP");
  assert.equal(ack.subscribers, 1);
  await until(() => got.length === 1, "the message over SSE");
  assert.deepEqual(got, ["through HTTP"]);
});
