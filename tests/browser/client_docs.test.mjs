// The book's copy-paste client page (docs/src/clients.md), as written in
// headless Chromium, the built client served where the page imports it
// and the server's port put in place of 8080: a message published over
// HTTP shows in the page's list with its offset.
//
// Run by scripts/client_test.sh after the client is built.
import test from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { publish, startCorecast, until } from "../../clients/js/test/support.mjs";
import { withClientPage } from "./client_page.mjs";

function page() {
  const text = readFileSync(new URL("../../docs/src/clients.md", import.meta.url), "utf8");
  const m = text.match(/<!-- snippet: client-page -->\s*```html\n([\s\S]*?)```/);
  assert.ok(m, "no client-page snippet in docs/src/clients.md");
  return m[1];
}

test("the book's client page shows a published message", async (t) => {
  const server = await startCorecast(["--history-size", "1000"]);
  t.after(() => server.stop());
  const port = new URL(server.http).port;
  const html = page()
    .replaceAll("/corecast-client/", "/__client/")
    .replaceAll(":8080", `:${port}`);
  await withClientPage(server, async (p) => {
    await p.route(`${server.http}/docs-page`, (route) =>
      route.fulfill({ body: html, contentType: "text/html" }));
    await p.goto(`${server.http}/docs-page`);
    const items = () => p.evaluate(() =>
      [...document.querySelectorAll("#log li")].map((li) => li.textContent));
    await until(async () => {
      const s = await (await fetch(`${server.http}/stats`)).json();
      return s.subscriptions >= 1;
    }, "the page subscribed");
    await publish(server, "news", "hi");
    await until(async () => (await items()).some((t) => /^#\d+: hi$/.test(t)), "the message in the page");
  });
});
