// Real servers for the client's tests: the corecast binary built by cargo
// (CORECAST_BIN, default target/debug/corecast) on 127.0.0.1:0 — or on a
// given port, to restart in place — and redis-server on a free port.
// Every wait is for a condition with a deadline; nothing sleeps blind.
import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { existsSync } from "node:fs";
import net from "node:net";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const REPO = resolve(here, "../../..");
export const BIN = process.env.CORECAST_BIN ?? resolve(REPO, "target/debug/corecast");

/** Resolves when `cond()` is truthy; rejects after `ms` with `what`. */
export async function until(cond, what, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The next `event` of an emitter, or a rejection after `ms`. */
export function nextEvent(emitter, event, ms = 10_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      emitter.off(event, on);
      reject(new Error(`no ${event} event within ${ms} ms`));
    }, ms);
    const on = (v) => {
      clearTimeout(timer);
      emitter.off(event, on);
      resolve(v);
    };
    emitter.on(event, on);
  });
}

/** A free TCP port (bound, read, released). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * Starts corecast with `args`; `port` 0 picks a free one. Resolves with
 * { addr, port, url, http, proc, stop(), kill(sig), log() }.
 */
export async function startCorecast(args = [], port = 0) {
  if (!existsSync(BIN)) throw new Error(`${BIN} missing: run cargo build --bin corecast first`);
  const proc = spawn(BIN, ["--listen", `127.0.0.1:${port}`, "--log-level", "info", ...args], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  proc.stderr.on("data", (d) => {
    log += d;
    if (log.length > 1 << 20) log = log.slice(-(1 << 19));
  });
  let exited = false;
  proc.on("exit", () => (exited = true));
  const addr = await until(() => {
    if (exited) throw new Error(`corecast exited:\n${log}`);
    return /addr=(127\.0\.0\.1:\d+)/.exec(log)?.[1];
  }, "corecast to listen");
  const listeningAt = Date.now();
  const bound = Number(addr.split(":")[1]);
  const server = {
    addr,
    listeningAt,
    port: bound,
    url: `ws://${addr}/ws`,
    http: `http://${addr}`,
    proc,
    log: () => log,
    exited: () => exited,
    kill(sig = "SIGKILL") {
      if (!exited) proc.kill(sig);
      return until(() => exited, "corecast to exit");
    },
    stop() {
      return server.kill("SIGKILL");
    },
  };
  // In Redis mode, publishes before the Redis link is up are only buffered
  // (202): wait until the instance says it can deliver.
  if (args.includes("--redis-url")) {
    await until(async () => (await fetch(`${server.http}/readyz`).catch(() => ({ status: 0 }))).status === 200, "/readyz");
  }
  return server;
}

/** redis-server on a free port (or `port`), no persistence: { port, url, stop() }. */
export async function startRedis(port) {
  port ??= await freePort();
  const proc = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
    stdio: "ignore",
  });
  let exited = false;
  proc.on("error", () => (exited = true));
  proc.on("exit", () => (exited = true));
  await until(async () => {
    if (exited) throw new Error("redis-server did not start (apt-get install redis-server)");
    return redisPing(port);
  }, "redis-server to answer PING");
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    stop() {
      if (!exited) proc.kill("SIGKILL");
      return until(() => exited, "redis-server to exit");
    },
  };
}

function redisPing(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, "127.0.0.1");
    s.on("error", () => resolve(false));
    s.on("connect", () => s.write("PING\r\n"));
    s.on("data", (d) => {
      s.destroy();
      resolve(String(d).startsWith("+PONG"));
    });
  });
}

/** An HS256 JWT for `--token-secret`. */
export function signToken(secret, claims) {
  const b64 = (v) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}`;
  const sig = createHmac("sha256", secret).update(body).digest("base64url");
  return `${body}.${sig}`;
}

/** POST /publish/{channel}. */
export async function publish(server, channel, body) {
  const r = await fetch(`${server.http}/publish/${channel}`, { method: "POST", body });
  if (r.status !== 200) throw new Error(`publish: HTTP ${r.status} ${await r.text()}`);
  return r.json();
}

/** GET /stats. */
export async function stats(server) {
  return (await fetch(`${server.http}/stats`)).json();
}
