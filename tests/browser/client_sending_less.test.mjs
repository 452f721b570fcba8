// Headless Chromium runs the built client with a tag filter and on a
// latest-value channel against a real corecast: only the matching
// messages reach the page, with their tags, and a conflated burst ends
// on the newest value with its jumps counted as `skipped`, not gaps.
// Run by scripts/client_test.sh after the client is built.
import test from "node:test";
import assert from "node:assert/strict";
import { startCorecast, until } from "../../clients/js/test/support.mjs";
import { withClientPage } from "./client_page.mjs";

async function post(server, path, body) {
  const r = await fetch(`${server.http}${path}`, { method: "POST", body });
  if (r.status !== 200) throw new Error(`${path}: HTTP ${r.status} ${await r.text()}`);
}

test("Chromium: a filtered subscription and a latest-value one", async (t) => {
  const server = await startCorecast(["--history-size", "100000", "--namespace", "px:conflate=true"]);
  t.after(() => server.stop());
  await withClientPage(server, async (page) => {
    await page.evaluate(async (url) => {
      const { Client } = await import("/__client/index.js");
      const seen = (window.seen = { filtered: [], latest: [], gaps: 0 });
      const client = (window.client = new Client(url, { pingInterval: 0 }));
      const f = client.subscribe("quotes", { filter: { key: "sym", cmp: "in", vals: ["BTC", "ETH"] } });
      f.on("message", (m) => seen.filtered.push([m.data, m.tags]));
      const l = client.subscribe("px:book", { latest: true });
      l.on("message", (m) => seen.latest.push([m.offset, m.skipped]));
      l.on("gap", () => seen.gaps++);
      const both = Promise.all([f, l].map((s) => new Promise((r) => s.once("subscribed", r))));
      client.connect();
      await both;
    }, server.url);
    for (const sym of ["DOGE", "BTC", "XRP", "ETH"]) await post(server, `/publish/quotes?tag.sym=${sym}`, sym);
    await until(async () => (await page.evaluate(() => window.seen.filtered.length)) >= 2, "the matching quotes");
    assert.deepEqual(await page.evaluate(() => window.seen.filtered), [
      ["BTC", { sym: "BTC" }],
      ["ETH", { sym: "ETH" }],
    ]);
    const n = 2000;
    const body = "x".repeat(4000);
    await Promise.all(Array.from({ length: n }, (_, i) => post(server, `/publish/px:book?key=k${i % 2}`, `${i + 1}:${body}`)));
    await until(async () => (await page.evaluate(() => window.seen.latest.at(-1)?.[0])) === n, "the newest value");
    const latest = await page.evaluate(() => window.seen.latest);
    assert.equal(latest.length + latest.reduce((s, [, k]) => s + k, 0), n, "every offset delivered or skipped");
    assert.equal(await page.evaluate(() => window.seen.gaps), 0);
  });
});

test("Chromium: a delta subscription gives the page whole documents", async (t) => {
  const server = await startCorecast(["--history-size", "100", "--namespace", "doc:delta=fossil,delta-publish=true"]);
  t.after(() => server.stop());
  const doc = (n) => JSON.stringify({ n, rows: Array.from({ length: 50 }, (_, i) => ({ team: `t${i}`, score: 100 + i + (i === 9 ? n : 0) })) });
  await withClientPage(server, async (page) => {
    await page.evaluate(async (url) => {
      const { Client } = await import("/__client/index.js");
      const seen = (window.seen = { docs: [], errors: 0 });
      const client = (window.client = new Client(url, { pingInterval: 0 }));
      const s = client.subscribe("doc:board", { delta: "fossil" });
      s.on("message", (m) => seen.docs.push(m.data));
      s.on("error", () => seen.errors++);
      const subscribed = new Promise((r) => s.once("subscribed", r));
      client.connect();
      await subscribed;
    }, server.url);
    // delta-publish: plain HTTP publishes go as deltas.
    for (let n = 0; n < 5; n++) await post(server, "/publish/doc:board", doc(n));
    await until(async () => (await page.evaluate(() => window.seen.docs.length)) === 5, "five documents");
    assert.deepEqual(await page.evaluate(() => window.seen.docs), [0, 1, 2, 3, 4].map(doc));
    assert.equal(await page.evaluate(() => window.seen.errors), 0);
  });
  const s = await (await fetch(`${server.http}/stats`)).json();
  assert.equal(s.delta_deliveries, 4, "all but the first went as deltas");
});
