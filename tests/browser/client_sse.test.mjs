// Headless Chromium, the built client over its SSE transport (fetch
// streams, GET /sse): the server killed and restarted on its port with
// Redis-backed history while a publisher goes on — every message once, in
// order. Needs a corecast with GET /sse (issue 33 part 2); run with
// CORECAST_BIN pointing at one.
import test from "node:test";
import { restartUnderPublisher } from "./client_page.mjs";

test("Chromium over SSE: the server is killed and restarted on its port (Redis history) while a publisher goes on", async (t) => {
  await restartUnderPublisher(t, { transports: ["sse"], minReconnectDelay: 100, maxReconnectDelay: 500 });
});
