// A fast hook backend for scripts/bench_hooks.py (Node's http server,
// keep-alive): admits every connect, allows every subscribe, and counts
// requests, their time span and the distinct client connections it saw.
// Prints `port N`; `GET /seen` answers the counts.
import http from "node:http";

let requests = 0;
let first = 0;
let last = 0;
const peers = new Set();

const srv = http.createServer((req, res) => {
  if (req.method === "GET") {
    const seen = { requests, connections: peers.size, span_ms: last - first };
    res.end(JSON.stringify(seen));
    return;
  }
  req.resume();
  req.on("end", () => {
    requests += 1;
    const now = Date.now();
    if (!first) first = now;
    last = now;
    const out = req.url === "/connect" ? { result: { user: `u${requests}` } } : { result: {} };
    const body = JSON.stringify(out);
    res.writeHead(200, {
      "Content-Type": "application/json",
      "Content-Length": Buffer.byteLength(body),
    });
    res.end(body);
  });
});
srv.on("connection", (s) => peers.add(`${s.remoteAddress}:${s.remotePort}`));
srv.keepAliveTimeout = 120000;
srv.listen(0, "127.0.0.1", () => console.log("port", srv.address().port));
