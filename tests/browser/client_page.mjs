// Helpers of the client's Chromium tests: a page on a corecast server's
// origin with the built client (clients/js/dist) served at /__client/, and
// what the client saw, read back from the page.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { chromium } from "playwright-core";
import { REPO, publish, startCorecast, startRedis, until } from "../../clients/js/test/support.mjs";

const DIST = resolve(REPO, "clients/js/dist");

/** A page on `server`'s origin with the client served at /__client/ (from dist, not the server). */
export async function withClientPage(server, fn) {
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
export async function startClient(page, url, options) {
  await page.evaluate(async ({ url, options }) => {
    const { Client } = await import("/__client/index.js");
    const seen = (window.seen = { messages: [], events: [] });
    const client = (window.client = new Client(url, options));
    for (const ev of ["connected", "disconnected", "reconnecting"]) {
      client.on(ev, (e) => seen.events.push([ev, e, Date.now(), seen.messages.length]));
    }
    const sub = (window.sub = client.subscribe("live"));
    sub.on("message", (m) => seen.messages.push([m.offset, m.data]));
    for (const ev of ["subscribed", "recovered", "gap", "error"]) {
      sub.on(ev, (e) => seen.events.push([ev, e, Date.now(), seen.messages.length]));
    }
    const subscribed = new Promise((r) => sub.once("subscribed", r));
    client.connect();
    await subscribed;
  }, { url, options });
}

export const count = (page, ev) => page.evaluate((ev) => window.seen.events.filter(([e]) => e === ev).length, ev);
export const messages = (page) => page.evaluate(() => window.seen.messages);

export const dropped = (page) => page.evaluate(() => window.sub.duplicatesDropped);

export function assertExactlyOnce(got, sent) {
  assert.equal(got.length, sent.length, `received ${got.length} of ${sent.length}`);
  assert.deepEqual(got.map(([, d]) => d), sent);
  got.forEach(([offset], i) => assert.equal(offset, got[0][0] + i, "offsets follow each other"));
}


/**
 * A page subscribed through `server`; the server is SIGKILLed and started
 * again on its port while a second instance (same Redis) publishes all
 * along: every message must arrive once, in order. Reports the reconnect
 * time and how many messages the resume recovered.
 */
export async function restartUnderPublisher(t, options) {
  const redis = await startRedis();
  t.after(() => redis.stop());
  const redisArgs = ["--redis-url", redis.url, "--history-size", "10000"];
  let server = await startCorecast(redisArgs);
  const publisher = await startCorecast(redisArgs);
  t.after(() => publisher.stop());
  t.after(() => server.stop());
  await withClientPage(server, async (page) => {
    await startClient(page, server.url, options);
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
    try {
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
    } finally {
      // Stopped here even when a wait above failed: left running, it would
      // publish to the stopped publisher and reject after the test ended.
      running = false;
      await loop;
    }
    await until(async () => (await messages(page)).length >= sent.length, "every message in the page", 15_000);
    const got = await messages(page);
    assertExactlyOnce(got, sent);
    assert.equal(await dropped(page), 0);
    const events = await page.evaluate(() => window.seen.events);
    const recovered = events.filter(([e]) => e === "recovered");
    assert.equal(recovered.length, 1);
    assert.equal(await count(page, "gap"), 0);
    const [, at, , before] = recovered[0];
    const connectedAt = events.filter(([e]) => e === "connected")[1][2];
    const lostAt = events.find(([e]) => e === "disconnected")[2];
    t.diagnostic(`offline ${connectedAt - lostAt} ms; connected ${connectedAt - server.listeningAt} ms after the restarted server listened (backoff up to ${options.maxReconnectDelay} ms); ` +
      `resume recovered ${at.offset - got[before - 1][0]} messages; ${sent.length} messages, each once`);
  });
}
