// Headless Chromium's own EventSource against corecast's GET /sse: it
// subscribes, receives, and — when its connection is cut — reconnects by
// itself with Last-Event-ID, and corecast resumes it exactly (what was
// published meanwhile arrives once, in order, then live messages).
//
// Run by scripts/browser_test.sh. It starts its own corecast (history
// on) from target/debug and puts a TCP proxy in front of it, so the test
// can cut the browser's connection and see the Last-Event-ID it sends.
import test from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import { chromium } from "playwright-core";

const BIN = process.env.CORECAST_BIN || "../../target/debug/corecast";

/** corecast on 127.0.0.1:0 with `args`; resolves with [process, "host:port"]. */
function startCorecast(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(BIN, ["--listen", "127.0.0.1:0", "--log-level", "info", ...args],
      { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    const timer = setTimeout(() => reject(new Error(`corecast did not start:\n${log}`)), 10_000);
    p.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/addr=(127\.0\.0\.1:\d+)/);
      if (m) { clearTimeout(timer); resolve([p, m[1]]); }
    });
    p.on("exit", (code) => reject(new Error(`corecast exited (${code}):\n${log}`)));
  });
}

/** A TCP proxy to `target`: `cut()` drops every connection through it;
 * `heads` collects what clients sent through it (their request heads). */
function startProxy(target) {
  const [host, port] = target.split(":");
  const sockets = new Set();
  const heads = [];
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), host);
    sockets.add(client); sockets.add(upstream);
    // Requests come whole in one read here (small heads, loopback); a
    // keep-alive connection may carry several.
    client.on("data", (d) => {
      heads.push(d.toString("latin1"));
      upstream.write(d);
    });
    upstream.on("data", (d) => client.write(d));
    for (const [a, b] of [[client, upstream], [upstream, client]]) {
      a.on("close", () => { b.destroy(); sockets.delete(a); });
      a.on("error", () => b.destroy());
    }
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({
    addr: `127.0.0.1:${server.address().port}`,
    heads,
    cut: () => { for (const s of sockets) s.destroy(); },
    close: () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(r); }),
  })));
}

test("EventSource resumes with Last-Event-ID after its connection is cut", async () => {
  const [server, addr] = await startCorecast(["--history-size", "100"]);
  const proxy = await startProxy(addr);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const publish = async (body) => {
    const r = await fetch(`http://${addr}/publish/es:room`, { method: "POST", body });
    assert.equal(r.status, 200);
  };
  try {
    for (const m of ["m1", "m2"]) await publish(m);
    const page = await browser.newPage();
    await page.goto(`http://${proxy.addr}/healthz`);
    await page.evaluate(() => {
      window.got = [];
      window.opens = 0;
      const es = new EventSource("/sse?" + new URLSearchParams({ channel: "es:room" }));
      es.onopen = () => { window.opens += 1; };
      for (const name of ["subscribed", "message", "gap"]) {
        es.addEventListener(name, (e) => {
          window.got.push({ name, id: e.lastEventId, ...JSON.parse(e.data) });
        });
      }
    });
    const waitFor = (n) => page.waitForFunction((k) => window.got.length >= k, n, { timeout: 15_000 });
    await waitFor(1);
    await publish("m3");
    await waitFor(2);
    let got = await page.evaluate(() => window.got);
    const epoch = got[0].epoch;
    assert.match(epoch, /^[0-9a-f]{16}$/);
    assert.deepEqual(got.map((e) => [e.name, e.id]),
      [["subscribed", `es:room:${epoch}:2`], ["message", `es:room:${epoch}:3`]]);
    assert.equal(got[1].data, "m3");

    // Cut; publish while it is away; it comes back on its own.
    proxy.cut();
    for (const m of ["m4", "m5", "m6"]) await publish(m);
    await page.waitForFunction(() => window.opens >= 2, null, { timeout: 15_000 });
    await waitFor(6);
    await publish("m7");
    await waitFor(7);
    got = await page.evaluate(() => window.got);
    const sseHeads = proxy.heads.filter((h) => h.startsWith("GET /sse"));
    assert.equal(sseHeads.length, 2);
    assert.match(sseHeads[1], new RegExp(`last-event-id: es:room:${epoch}:3\r\n`, "i"));
    assert.deepEqual(got.slice(2).map((e) => [e.name, e.id, e.data ?? e.recovered]), [
      ["subscribed", `es:room:${epoch}:6`, true],
      ["message", `es:room:${epoch}:4`, "m4"],
      ["message", `es:room:${epoch}:5`, "m5"],
      ["message", `es:room:${epoch}:6`, "m6"],
      ["message", `es:room:${epoch}:7`, "m7"],
    ]);
  } finally {
    await browser.close();
    await proxy.close();
    server.kill();
  }
});
