// Headless Chromium against a running corecast with permessage-deflate
// (on by default; Chromium always offers it): a 10 KB JSON message
// published over HTTP reaches a browser subscriber intact, and the
// server's counters show it went out compressed, as one RSV1 frame far
// smaller than the message; what the browser sends compressed is inflated.
//
// Run by scripts/browser_test.sh (which starts the server and sets
// CORECAST_ADDR), after status.test.mjs.
import test from "node:test";
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const addr = process.env.CORECAST_ADDR;
assert.ok(addr, "CORECAST_ADDR must be set (host:port of a running corecast)");
const base = `http://${addr}`;

async function stats() {
  const r = await fetch(`${base}/stats`);
  assert.equal(r.status, 200);
  return r.json();
}

async function waitFor(what, pred) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const s = await stats();
    if (pred(s)) return s;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function tenKbJson() {
  const rows = [];
  for (let i = 0; JSON.stringify(rows).length < 10_240; i++) {
    rows.push({ id: i, sym: "BTC-USD", px: 43000 + (i * 7) % 1000, side: i % 2 ? "buy" : "sell" });
  }
  return JSON.stringify(rows);
}

test("a 10 KB JSON message reaches a browser compressed and intact", async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`${base}/healthz`);
    await page.evaluate(async (host) => {
      window.ws = new WebSocket(`ws://${host}/ws/browser-deflate`);
      window.got = new Promise((resolve) => { window.ws.onmessage = (e) => resolve(e.data); });
      await new Promise((resolve, reject) => {
        window.ws.onopen = resolve;
        window.ws.onerror = () => reject(new Error("connect failed"));
      });
      window.extensions = window.ws.extensions;
    }, addr);
    const ext = await page.evaluate(() => window.extensions);
    assert.match(ext, /^permessage-deflate; server_no_context_takeover/);
    await waitFor("the compressed subscriber", (s) => s.compression_connections >= 1);
    const before = await stats();

    const body = tenKbJson();
    const r = await fetch(`${base}/publish/browser-deflate`, { method: "POST", body });
    assert.equal(r.status, 200);
    const received = await page.evaluate(() => window.got);
    assert.equal(received, body);

    const after = await waitFor("the write", (s) => s.bytes_out > before.bytes_out);
    assert.equal(after.compression_messages - before.compression_messages, 1, "compressed once");
    const inBytes = after.compression_bytes_in - before.compression_bytes_in;
    const outBytes = after.compression_bytes_out - before.compression_bytes_out;
    assert.equal(inBytes, body.length);
    assert.ok(outBytes < body.length / 3, `${body.length} bytes compressed to ${outBytes}`);
    // What went on the wire to the browser is that frame, not the 10 KB.
    assert.ok(after.bytes_out - before.bytes_out < body.length / 2,
      `${after.bytes_out - before.bytes_out} bytes written`);

    // The other way: Chromium compresses what it sends; corecast inflates
    // it and the browser hears its own message back (it is subscribed).
    const echoed = await page.evaluate((text) => new Promise((resolve) => {
      window.ws.onmessage = (e) => resolve(e.data);
      window.ws.send(text);
    }), body);
    assert.equal(echoed, body);
    await waitFor("the inflated message",
      (s) => s.compression_inflated_messages > before.compression_inflated_messages);
  } finally {
    await browser.close();
  }
});
