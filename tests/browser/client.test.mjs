// Headless Chromium runs the built corecast-client (clients/js/dist) in a
// page against real corecast servers this file starts (and restarts):
// every message arrives exactly once and in order across (1) connections
// the server cuts and (2) the server killed and started again on the same
// port, with Redis-backed history and a publisher on a second instance
// that never stops. Run by scripts/client_test.sh after the client is built.
import test from "node:test";
import assert from "node:assert/strict";
import { publish, startCorecast, until } from "../../clients/js/test/support.mjs";
import { assertExactlyOnce, count, dropped, messages, restartUnderPublisher, startClient, withClientPage } from "./client_page.mjs";

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
  await restartUnderPublisher(t, { minReconnectDelay: 100, maxReconnectDelay: 500 });
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
