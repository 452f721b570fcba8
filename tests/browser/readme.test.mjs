// The README's browser snippet (also the book's Getting started), run as
// written in headless Chromium's console against a running corecast, its
// address put in place of 127.0.0.1:8080: the page's own message comes
// back to it (path mode delivers to every subscriber, the sender
// included), and so does one published over HTTP.
//
// Run by scripts/browser_test.sh (which starts the server and sets
// CORECAST_ADDR).
import test from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const addr = process.env.CORECAST_ADDR;
assert.ok(addr, "CORECAST_ADDR must be set (host:port of a running corecast)");
const base = `http://${addr}`;

/** The js block after `<!-- snippet: browser -->` in a Markdown file. */
function snippet(path) {
  const text = readFileSync(new URL(path, import.meta.url), "utf8");
  const m = text.match(/<!-- snippet: browser -->\s*```js\n([\s\S]*?)```/);
  assert.ok(m, `no browser snippet in ${path}`);
  return m[1];
}

test("the README's browser snippet works as written", async () => {
  const code = snippet("../../README.md");
  assert.equal(code, snippet("../../docs/src/getting-started.md"), "the two copies differ");
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  try {
    const page = await browser.newPage();
    const logged = [];
    page.on("console", (m) => logged.push(m.text()));
    await page.goto(`${base}/healthz`);
    await page.evaluate(code.replaceAll("127.0.0.1:8080", addr));
    const until = async (what, pred) => {
      const deadline = Date.now() + 10_000;
      while (!pred()) {
        assert.ok(Date.now() < deadline, `timed out waiting for ${what}: ${logged}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    await until("its own message", () => logged.includes("hi everyone"));
    const r = await fetch(`${base}/publish/news`, { method: "POST", body: "from curl" });
    assert.equal(r.status, 200);
    await until("the published message", () => logged.includes("from curl"));
  } finally {
    await browser.close();
  }
});
