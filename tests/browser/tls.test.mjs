// Headless Chromium against corecast serving TLS itself (--tls-cert): a
// page loaded over https:// opens wss:// WebSockets, publishes over
// https:// and receives it, with Chromium's own TLS stack (BoringSSL)
// verifying a leaf of a test CA made here by openssl. Chromium has no
// way to add a CA without NSS tools, so the leaf's key is trusted by its
// SPKI hash (--ignore-certificate-errors-spki-list): the certificate is
// still checked for the host name, validity and signature.
//
// Run by scripts/browser_test.sh, which sets CORECAST_BIN; this test
// starts its own TLS server.
import test from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const bin = process.env.CORECAST_BIN;
assert.ok(bin, "CORECAST_BIN must name a corecast binary");

function openssl(...args) {
  return execFileSync("openssl", args, { stdio: ["ignore", "pipe", "pipe"] });
}

/** A test CA and a leaf for localhost; the leaf key's SPKI hash. */
function pki() {
  const dir = mkdtempSync(join(tmpdir(), "corecast-browser-tls-"));
  const f = (name) => join(dir, name);
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-days", "2", "-subj", "/CN=corecast browser test CA", "-keyout", f("ca.key"), "-out", f("ca.pem"));
  openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
    "-subj", "/CN=localhost", "-keyout", f("key.pem"), "-out", f("leaf.csr"));
  writeFileSync(f("leaf.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  openssl("x509", "-req", "-days", "2", "-in", f("leaf.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"),
    "-CAcreateserial", "-extfile", f("leaf.ext"), "-out", f("cert.pem"));
  const spki = openssl("x509", "-in", f("cert.pem"), "-noout", "-pubkey");
  const der = execFileSync("openssl", ["pkey", "-pubin", "-outform", "der"], { input: spki });
  const hash = execFileSync("openssl", ["dgst", "-sha256", "-binary"], { input: der }).toString("base64");
  return { cert: f("cert.pem"), key: f("key.pem"), hash };
}

/** Starts corecast on a free port with TLS; resolves with its port. */
function startServer(cert, key) {
  const child = spawn(bin, ["--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
    "--log-level", "info"], { stdio: ["ignore", "ignore", "pipe"] });
  return new Promise((resolve, reject) => {
    let log = "";
    const timer = setTimeout(() => reject(new Error(`corecast did not start: ${log}`)), 10_000);
    child.stderr.on("data", (d) => {
      log += d;
      const m = /corecast listening" addr=127\.0\.0\.1:(\d+) tls=true/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ child, port: Number(m[1]) });
      }
    });
    child.on("exit", (code) => reject(new Error(`corecast exited (${code}): ${log}`)));
  });
}

test("Chromium speaks https:// and wss:// to corecast's own TLS", async () => {
  const { cert, key, hash } = pki();
  const { child, port } = await startServer(cert, key);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run",
           `--ignore-certificate-errors-spki-list=${hash}`],
  });
  try {
    const page = await browser.newPage();
    const origin = `https://localhost:${port}`;
    const res = await page.goto(`${origin}/healthz`);
    assert.equal(res.status(), 200);
    const security = await res.securityDetails();
    assert.ok(security, "the page came over TLS");
    assert.match(security.protocol, /^TLS 1\.[23]$/, JSON.stringify(security));
    assert.equal(security.subjectName, "localhost");

    const got = await page.evaluate(async (host) => {
      const open = (path) => new Promise((resolve, reject) => {
        const ws = new WebSocket(`wss://${host}${path}`);
        ws.onopen = () => resolve(ws);
        ws.onerror = () => reject(new Error(`wss://${host}${path} failed`));
      });
      const a = await open("/ws/browser-tls");
      const b = await open("/ws/browser-tls");
      const next = (ws) => new Promise((resolve) => { ws.onmessage = (e) => resolve(e.data); });
      // Over https://, then from one WebSocket to both.
      let first = Promise.all([next(a), next(b)]);
      const r = await fetch("/publish/browser-tls", { method: "POST", body: "over https" });
      const answer = await r.json();
      const viaHttps = await first;
      first = Promise.all([next(a), next(b)]);
      const big = "x".repeat(100_000);
      a.send(big);
      const viaWss = await first;
      return { status: r.status, answer, viaHttps, sameBig: viaWss.every((m) => m === big) };
    }, `localhost:${port}`);
    assert.equal(got.status, 200);
    assert.equal(got.answer.subscribers, 2);
    assert.deepEqual(got.viaHttps, ["over https", "over https"]);
    assert.ok(got.sameBig, "100 KB went through TLS records both ways intact");
  } finally {
    await browser.close();
    child.kill();
  }
});

test("Chromium refuses a certificate it was not told to trust", async () => {
  const { cert, key } = pki();
  const { child, port } = await startServer(cert, key);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run"],
  });
  try {
    const page = await browser.newPage();
    await assert.rejects(page.goto(`https://localhost:${port}/healthz`), /ERR_CERT_AUTHORITY_INVALID/);
  } finally {
    await browser.close();
    child.kill();
  }
});
