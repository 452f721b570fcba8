// Headless Chromium (Debian's /usr/bin/chromium) against a running corecast:
// the embedded /status page loads, connects its WebSocket and shows a number
// that changes when messages are published; and the browser's own WebSocket
// implementation interoperates with corecast's.
//
// Run by scripts/browser_test.sh, which starts the server and sets
// CORECAST_ADDR. A screenshot is kept in target/browser/status.png.
import test from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const addr = process.env.CORECAST_ADDR;
assert.ok(addr, "CORECAST_ADDR must be set (host:port of a running corecast)");
const base = `http://${addr}`;

async function withPage(fn) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 640 } });
    await fn(page);
  } finally {
    await browser.close();
  }
}

async function publish(channel, body) {
  const r = await fetch(`${base}/publish/${channel}`, { method: "POST", body });
  assert.equal(r.status, 200);
}

test("the status page connects and shows traffic as it happens", async () => {
  await withPage(async (page) => {
    await page.goto(`${base}/status`);
    await page.waitForFunction(() => document.getElementById("state").textContent === "connected",
      null, { timeout: 10_000 });
    // The first sample arrives within a second.
    await page.waitForFunction(() => document.getElementById("connections").textContent !== "–",
      null, { timeout: 10_000 });
    const before = Number(await page.textContent("#total"));
    for (let i = 0; i < 25; i++) await publish("browser-test", `m${i}`);
    await page.waitForFunction((b) => Number(document.getElementById("total").textContent) >= b + 25,
      before, { timeout: 10_000 });
    const after = Number(await page.textContent("#total"));
    assert.ok(after >= before + 25, `total went from ${before} to ${after}`);
    // A second sample gives rates; keep a picture of the page for humans.
    await page.waitForFunction(() => document.getElementById("msgs").textContent !== "–",
      null, { timeout: 10_000 });
    mkdirSync("../../target/browser", { recursive: true });
    await page.screenshot({ path: "../../target/browser/status.png", fullPage: true });
  });
});

test("a browser WebSocket publishes and receives through corecast", async () => {
  await withPage(async (page) => {
    await page.goto(`${base}/healthz`);
    const got = await page.evaluate(async (host) => {
      const open = (path) => new Promise((resolve, reject) => {
        const ws = new WebSocket(`ws://${host}${path}`);
        ws.onopen = () => resolve(ws);
        ws.onerror = () => reject(new Error("connect failed: " + path));
      });
      const next = (ws) => new Promise((resolve) => { ws.onmessage = (e) => resolve(e.data); });
      const a = await open("/ws/browser-chat");
      const m = await open("/ws");
      const sub = next(m);
      m.send(JSON.stringify({ op: "subscribe", channel: "browser-chat", id: 1 }));
      const ack = JSON.parse(await sub);
      const echo = next(a), env = next(m);
      a.send("héllo from chromium ✓");
      return { ack, echo: await echo, env: JSON.parse(await env) };
    }, addr);
    assert.equal(got.ack.type, "subscribed");
    assert.equal(got.echo, "héllo from chromium ✓");
    assert.deepEqual(got.env, { type: "message", channel: "browser-chat", data: "héllo from chromium ✓" });
  });
});
