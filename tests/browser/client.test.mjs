// Headless Chromium runs the built corecast-client (clients/js/dist) in a
// page against real corecast servers this file starts (and restarts):
// every message arrives exactly once and in order across (1) connections
// the server cuts and (2) the server killed and started again on the same
// port, with Redis-backed history and a publisher on a second instance
// that never stops. Run by scripts/client_test.sh after the client is built.
import test from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { chromium } from "playwright-core";
import { REPO, publish, startCorecast, startRedis, until } from "../../clients/js/test/support.mjs";

const DIST = resolve(REPO, "clients/js/dist");

/** A page on `server`'s origin with the client served at /__client/ (from dist, not the server). */
async function withClientPage(server, fn) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  try {
    const page = await browser.newPage();
    await page.route(`${server.http}/__client/**`, async (route) => {
      const file = new URL(route.request().url()).pathname.replace("/__client/", "");
      const body = await readFile(resolve(DIST, file));
      await route.fulfill({ body, contentType: "text/javascript" });
    });
    await page.goto(`${server.http}/healthz`);
    await fn(page);
  } finally {
    await browser.close();
  }
}

/** Starts the client in the page; everything it sees lands in window.seen. */
async function startClient(page, url, options) {
  await page.evaluate(async ({ url, options }) => {
    const { Client } = await import("/__client/index.js");
    const seen = (window.seen = { messages: [], events: [] });
    const client = (window.client = new Client(url, options));
    for (const ev of ["connected", "disconnected", "reconnecting"]) {
      client.on(ev, (e) => seen.events.push([ev, e]));
    }
    const sub = (window.sub = client.subscribe("live"));
    sub.on("message", (m) => seen.messages.push([m.offset, m.data]));
    for (const ev of ["subscribed", "recovered", "gap", "error"]) {
      sub.on(ev, (e) => seen.events.push([ev, e]));
    }
    const subscribed = new Promise((r) => sub.once("subscribed", r));
    client.connect();
    await subscribed;
  }, { url, options });
}

const count = (page, ev) => page.evaluate((ev) => window.seen.events.filter(([e]) => e === ev).length, ev);
const messages = (page) => page.evaluate(() => window.seen.messages);

const dropped = (page) => page.evaluate(() => window.sub.duplicatesDropped);

function assertExactlyOnce(got, sent) {
  assert.equal(got.length, sent.length, `received ${got.length} of ${sent.length}`);
  assert.deepEqual(got.map(([, d]) => d), sent);
  got.forEach(([offset], i) => assert.equal(offset, got[0][0] + i, "offsets follow each other"));
}

test("Chromium: subscribe, receive, and resume across connections the server cuts", async (t) => {
  const server = await startCorecast(["--history-size", "1000", "--ping-interval", "0", "--idle-timeout", "1s"]);
  t.after(() => server.stop());
  await withClientPage(server, async (page) => {
    await startClient(page, server.url, { pingInterval: 0, minReconnectDelay: 200, maxReconnectDelay: 400 });
    const sent = [];
    let n = 0;
    const send = async (k) => {
      for (let i = 0; i < k; i++) {
        sent.push(`b${++n}`);
        await publish(server, "live", sent.at(-1));
      }
    };
    // The browser's own publish comes back too.
    const ack = await page.evaluate(() => window.client.publish("live", "from the page"));
    assert.equal(ack.subscribers, 1);
    sent.push("from the page");
    for (let round = 1; round <= 3; round++) {
      await send(40);
      // The idle timeout cuts the silent client; publish while it is away.
      await until(async () => (await count(page, "disconnected")) >= round, `cut number ${round}`);
      await send(20);
      await until(async () => (await count(page, "connected")) >= round + 1, `reconnect number ${round}`);
    }
    await until(async () => (await messages(page)).length >= sent.length, "every message in the page");
    assertExactlyOnce(await messages(page), sent);
    assert.equal(await dropped(page), 0);
    assert.ok((await count(page, "recovered")) >= 3);
    assert.equal(await count(page, "gap"), 0);
  });
});

test("Chromium: the server is killed and restarted on its port (Redis history) while a publisher goes on", async (t) => {
  const redis = await startRedis();
  t.after(() => redis.stop());
  const redisArgs = ["--redis-url", redis.url, "--history-size", "10000"];
  let server = await startCorecast(redisArgs);
  const publisher = await startCorecast(redisArgs);
  t.after(() => publisher.stop());
  t.after(() => server.stop());
  await withClientPage(server, async (page) => {
    await startClient(page, server.url, { minReconnectDelay: 100, maxReconnectDelay: 500 });
    // The publisher: another instance, so it never stops; paced at about
    // 200 messages/s so the test's history stays small.
    const sent = [];
    let running = true;
    const loop = (async () => {
      for (let i = 1; running; i++) {
        sent.push(`r${i}`);
        await publish(publisher, "live", `r${i}`);
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    await until(async () => (await messages(page)).length >= 50, "50 messages before the kill");
    const port = server.port;
    await server.kill("SIGKILL");
    await until(async () => (await count(page, "disconnected")) >= 1, "the page to notice");
    const atKill = sent.length;
    await until(() => sent.length >= atKill + 100, "100 messages published while the server is down");
    server = await startCorecast(redisArgs, port);
    await until(async () => (await count(page, "connected")) >= 2, "the page to reconnect", 15_000);
    const atBack = sent.length;
    await until(() => sent.length >= atBack + 100, "100 more after the restart");
    running = false;
    await loop;
    await until(async () => (await messages(page)).length >= sent.length, "every message in the page", 15_000);
    assertExactlyOnce(await messages(page), sent);
    assert.equal(await dropped(page), 0);
    const recovered = await page.evaluate(() => window.seen.events.filter(([e]) => e === "recovered").map(([, v]) => v));
    assert.equal(recovered.length, 1);
    assert.equal(await count(page, "gap"), 0);
  });
});

test("Chromium: a refused token is not retried (the refusal read back over plain HTTP)", async (t) => {
  const server = await startCorecast(["--token-secret", "a-test-secret-of-at-least-32-bytes!!"]);
  t.after(() => server.stop());
  await withClientPage(server, async (page) => {
    const d = await page.evaluate(async (url) => {
      const { Client } = await import("/__client/index.js");
      const client = new Client(url, { token: "not.a.token", minReconnectDelay: 1 });
      const reconnecting = [];
      client.on("reconnecting", (r) => reconnecting.push(r));
      client.on("error", () => {});
      const d = new Promise((r) => client.once("disconnected", r));
      client.connect();
      return { ...(await d), reconnecting: reconnecting.length, state: client.state };
    }, server.url);
    assert.equal(d.reconnect, false);
    assert.match(d.reason, /401/);
    assert.equal(d.reconnecting, 0);
    assert.equal(d.state, "disconnected");
  });
});
