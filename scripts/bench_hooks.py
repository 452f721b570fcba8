#!/usr/bin/env python3
"""Figures for the hooks (BENCHMARKS.md): subscribe latency with and without
--proxy-subscribe, and a 10,000-client connect storm through --proxy-connect
(backend requests/s, corecast CPU, p99 connect, backend connections).

    .venv/bin/python scripts/bench_hooks.py [--subscribes 2000] [--connects 10000]

Needs target/release/corecast and target/release/corecast-bench
(`cargo build --release -p corecast -p corecast-bench`), node, and the
`websockets` package (.venv). The backend is scripts/hook_bench_backend.mjs.
"""

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import websockets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REL = os.path.join(ROOT, "target", "release")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend():
    p = subprocess.Popen(["node", os.path.join(ROOT, "scripts", "hook_bench_backend.mjs")],
                         stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline().split()[1])
    return p, port


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def corecast(args):
    port = free_port()
    p = subprocess.Popen([os.path.join(REL, "corecast"), "--listen", f"127.0.0.1:{port}",
                          "--log-level", "warn"] + args)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            get_json(f"http://127.0.0.1:{port}/healthz")
            return p, port
        except OSError:
            time.sleep(0.05)
    raise SystemExit("corecast did not start")


def cpu_seconds(pid):
    """utime + stime of `pid`, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def subscribe_latency(port, n):
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
        took = []
        for i in range(n):
            t = time.perf_counter()
            await ws.send(json.dumps({"op": "subscribe", "channel": f"c{i}", "id": i}))
            reply = json.loads(await ws.recv())
            took.append(time.perf_counter() - t)
            assert reply["type"] == "subscribed", reply
        return took


def run_subscribes(n, hook_port):
    rows = []
    for name, extra in [("without hook", []),
                        ("with --proxy-subscribe", ["--proxy-subscribe",
                                                    f"http://127.0.0.1:{hook_port}/subscribe"])]:
        srv, port = corecast(["--max-subscriptions", str(n + 10)] + extra)
        try:
            took = asyncio.run(subscribe_latency(port, n))
        finally:
            srv.terminate()
            srv.wait()
        rows.append((name, pct(took, 0.5) * 1e6, pct(took, 0.99) * 1e6))
    return rows


def run_storm(n, hook_port, hook=True):
    args = ["--max-connections", str(n + 100)]
    if hook:
        args += ["--proxy-connect", f"http://127.0.0.1:{hook_port}/connect"]
    srv, port = corecast(args)
    try:
        cpu0, t0 = cpu_seconds(srv.pid), time.time()
        out = subprocess.run([os.path.join(REL, "corecast-bench"), "connect",
                              "--url", f"ws://127.0.0.1:{port}/ws/storm", "-n", str(n),
                              "--server-pid", str(srv.pid), "--json", "--quiet", "--cpu", "1"],
                             capture_output=True, text=True, check=True)
        report = json.loads(out.stdout)
        # CPU over the whole run (storm, then the bench's closes).
        report["corecast_cpu_percent"] = 100 * (cpu_seconds(srv.pid) - cpu0) / (time.time() - t0)
        stats = get_json(f"http://127.0.0.1:{port}/stats") if hook else {}
    finally:
        srv.terminate()
        srv.wait()
    return report, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscribes", type=int, default=2000)
    ap.add_argument("--connects", type=int, default=10000)
    a = ap.parse_args()
    node, hook_port = backend()
    try:
        for name, p50, p99 in run_subscribes(a.subscribes, hook_port):
            print(f"subscribe {name}: p50 {p50:.0f} us, p99 {p99:.0f} us ({a.subscribes} sequential)")
        before = get_json(f"http://127.0.0.1:{hook_port}/seen")
        # (the corecast of the storm opens its own backend connections)
        report, stats = run_storm(a.connects, hook_port)
        seen = get_json(f"http://127.0.0.1:{hook_port}/seen")
        base, _ = run_storm(a.connects, hook_port, hook=False)
    finally:
        node.terminate()
    bh = base["handshake"]
    print(f"connect storm without hook: {base['connected']}/{base['requested']} in "
          f"{base['open_seconds']:.2f} s, p50 {bh['p50_us'] / 1000:.1f} ms, "
          f"p99 {bh['p99_us'] / 1000:.1f} ms, corecast CPU {base['corecast_cpu_percent']:.0f}%")
    reqs = seen["requests"] - before["requests"]
    hs = report["handshake"]
    print(f"connect storm: {report['connected']}/{report['requested']} connected in "
          f"{report['open_seconds']:.2f} s ({report['open_rate']:.0f}/s), failed {report['failed']}")
    print(f"  connect p50 {hs['p50_us'] / 1000:.1f} ms, p99 {hs['p99_us'] / 1000:.1f} ms, "
          f"max {hs['max_us'] / 1000:.1f} ms")
    print(f"  backend: {reqs} connect requests, ~{reqs / report['open_seconds']:.0f}/s over the storm; "
          f"backend connections seen in total {seen['connections']} "
          f"(corecast opened {stats.get('proxy_backend_connections_opened')})")
    cpu = report["corecast_cpu_percent"]
    print(f"  corecast CPU {cpu:.0f}% of one core over the run (storm + closes); "
          f"proxy.connect {json.dumps(stats['proxy']['connect'])}")


if __name__ == "__main__":
    sys.exit(main())
