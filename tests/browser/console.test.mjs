// Headless Chromium against the operator console (issue 34): unreachable
// without the session cookie, a wrong key refused, the right one logs in;
// the charts move while a load runs; a channel is found by search and
// opened; a message published from the console reaches a WebSocket
// subscriber; screenshots (light/dark × desktop 1280×800/phone) are
// kept as artifacts in target/console-shots/, or written to docs/src/console/
// (the README's) with UPDATE_SCREENSHOTS=1, so a test run leaves the
// checkout clean.
//
// Run by scripts/browser_test.sh, which sets CORECAST_BIN; this test
// starts its own server with --admin-key.
import test from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const bin = process.env.CORECAST_BIN;
assert.ok(bin, "CORECAST_BIN must name a corecast binary");
const KEY = "browser-console-key-0123";
const SHOTS = process.env.UPDATE_SCREENSHOTS === "1"
  ? "../../docs/src/console"
  : "../../target/console-shots";

/** Starts corecast with the console on a free port; resolves with its base URL. */
function startServer() {
  const child = spawn(bin, ["--listen", "127.0.0.1:0", "--admin-key", KEY, "--history-size", "50",
    "--log-level", "info"], { stdio: ["ignore", "ignore", "pipe"] });
  return new Promise((resolve, reject) => {
    let log = "";
    const timer = setTimeout(() => reject(new Error(`corecast did not start: ${log}`)), 10_000);
    child.stderr.on("data", (d) => {
      log += d;
      const m = /corecast listening" addr=(127\.0\.0\.1:\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ child, base: `http://${m[1]}`, host: m[1], log: () => log });
      }
    });
    child.on("exit", (code) => reject(new Error(`corecast exited (${code}): ${log}`)));
  });
}

async function publish(base, channel, body) {
  const r = await fetch(`${base}/publish/${channel}`, { method: "POST", body });
  assert.equal(r.status, 200);
}

/** Opens a WebSocket subscriber to each channel in `page`; `window.got`
 * collects their messages. */
async function subscribe(page, host, channels) {
  await page.evaluate(([h, cs]) => Promise.all(cs.map((c) => new Promise((resolve, reject) => {
    window.got = window.got || [];
    window.keep = window.keep || [];
    const ws = new WebSocket(`ws://${h}/ws/${c}`);
    // The load's messages are not kept: only what the test looks for.
    ws.onmessage = (e) => { if (!e.data.startsWith("load ")) window.got.push(e.data); };
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error("subscriber failed"));
    window.keep.push(ws);
  }))), [host, channels]);
}

test("the console: login, live charts, search, publish, screenshots", async () => {
  const { child, base, host, log } = await startServer();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  // The load below publishes until told to stop: stopped and awaited in
  // `finally` too, or after a failed step it goes on against the killed
  // server and rejects ("fetch failed") after the test has ended.
  let loading = false;
  let load = Promise.resolve();
  try {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await ctx.newPage();

    // Without the cookie: the login page, and neither feed nor series.
    const first = await page.goto(`${base}/console`);
    assert.equal(first.status(), 401);
    assert.equal(await page.locator("#console").count(), 0);
    assert.equal((await fetch(`${base}/console/series`)).status, 401);
    const feedRefused = await page.evaluate((h) => new Promise((resolve) => {
      const ws = new WebSocket(`ws://${h}/console/feed`);
      ws.onopen = () => resolve("opened");
      ws.onerror = () => resolve("refused");
    }), host);
    assert.equal(feedRefused, "refused");

    // A wrong key: 401, the form again with the error, no cookie.
    await page.fill("#key", "not-the-key-at-all");
    const [wrong] = await Promise.all([
      page.waitForNavigation(),
      page.click("button[type=submit]"),
    ]);
    assert.equal(wrong.status(), 401);
    assert.match(await page.textContent("body"), /Wrong key/);
    assert.equal((await ctx.cookies()).length, 0);

    // The right key: the console, live.
    await page.fill("#key", KEY);
    const [right] = await Promise.all([
      page.waitForNavigation(),
      page.click("button[type=submit]"),
    ]);
    assert.equal(right.status(), 200);
    assert.equal(new URL(page.url()).pathname, "/console");
    const cookie = (await ctx.cookies())[0];
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, "Strict");
    await page.waitForFunction(() => document.getElementById("state").textContent === "live",
      null, { timeout: 10_000 });

    // Charts move while a load runs: messages per second above zero and
    // the line drawn through more points.
    const sub = await ctx.newPage();
    await sub.goto(`${base}/healthz`);
    await subscribe(sub, host, ["needle-channel", "load-0", "load-1", "load-2", "load-3", "load-4"]);
    const pointsBefore = Number(await page.getAttribute("#chart-messages_in", "data-points"));
    loading = true;
    load = (async () => {
      let i = 0;
      while (loading) await publish(base, `load-${i % 5}`, `load ${i++}`);
    })();
    await page.waitForFunction(() => {
      const now = document.getElementById("now-messages_in").textContent;
      return now !== "–" && Number.parseFloat(now) > 0;
    }, null, { timeout: 15_000 });
    // A point a second: wait for what is asserted below, two more points
    // and at least three in all (a console that had none yet gets to two
    // first, a line of one segment).
    await page.waitForFunction((b) => Number(document.getElementById("chart-messages_in").dataset.points) >= Math.max(b + 2, 3),
      pointsBefore, { timeout: 15_000 });
    const line = await page.getAttribute("#chart-messages_in .line", "d");
    assert.ok(line && line.split("L").length > 2, `a line is drawn: ${line}`);

    // Find a channel by search, open it. With the load running each step
    // takes seconds on a busy 2-core machine (2-3 s measured): the waits
    // below get Playwright's default 30 s, as the ones without a timeout.
    await page.fill("#search", "needle");
    await page.waitForSelector("#search-results tbody tr[data-name='needle-channel']", { timeout: 30_000 });
    await page.click("#search-results tbody tr[data-name='needle-channel']");
    await page.waitForFunction(() => document.getElementById("detail-name").textContent === "needle-channel");
    assert.equal(await page.inputValue("#pub-channel"), "needle-channel");

    // Publish from the console; the subscriber gets it.
    await page.fill("#pub-data", "hello from the console");
    await page.click("#pub-send");
    await sub.waitForFunction(() => window.got.includes("hello from the console"), null, { timeout: 30_000 });
    await page.waitForFunction(() => /published to needle-channel/.test(document.getElementById("action-result").textContent));
    // The channel's history now shows it.
    await page.click("#search-results tbody tr[data-name='needle-channel']");
    await page.waitForFunction(() => /hello from the console/.test(document.getElementById("detail-history").textContent),
      null, { timeout: 30_000 });
    assert.match(log(), /msg="console action" action=publish target=needle-channel admin=127\.0\.0\.1/);

    // Screenshots, while the load still runs: light/dark × desktop/phone.
    mkdirSync(SHOTS, { recursive: true });
    for (const scheme of ["light", "dark"]) {
      await page.emulateMedia({ colorScheme: scheme });
      for (const [name, size] of [["desktop", { width: 1280, height: 800 }], ["phone", { width: 390, height: 844 }]]) {
        await page.setViewportSize(size);
        await page.screenshot({ path: `${SHOTS}/${scheme}-${name}.png`, fullPage: name === "desktop" });
      }
    }
    // The toggle overrides the system's scheme.
    await page.emulateMedia({ colorScheme: "light" });
    const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const light = await bg();
    await page.click("#theme");
    assert.notEqual(await bg(), light);
    loading = false;
    await load;
  } finally {
    loading = false;
    await load.catch(() => {});
    await browser.close();
    child.kill();
  }
});
