#!/usr/bin/env python3
"""Latest-value channels measured: a slow reader on a conflated channel
and the same reader on a plain channel, side by side in one run.

Usage: conflation_run.py BINARY [SECONDS [RATE [READ_RATE [BYTES [FLAGS]]]]]
  (defaults: 60 s, 2,000 msg/s, reads at 50 msg/s, 200-byte messages;
  FLAGS: more server flags, commas for spaces)

Starts two servers from BINARY, both pinned to CPU 0 with
`--namespace px:conflate=true` (two, so that one's slow plain subscriber
does not pause the other's publisher: publishers wait for a subscriber
over its bound, worker-wide); this process should run on another CPU
(taskset -c 1). On each, a publisher POSTs RATE messages per second,
alternating keys BTC and ETH (`?key=`), pipelined on a keep-alive
connection — to the latest-value channel `px:t` on one, to `plain` on the
other; each body is `seq,key,publish time (ns)` padded to BYTES. A
path-mode subscriber on each (SO_RCVBUF 4 KiB, which Linux doubles) reads
one frame every 1/READ_RATE s. Per reader: how long it stayed connected
(and its close code), frames read, and for every read how many newer
messages of the same key the server had accepted ("behind": p50, p99,
max) and the value's age (ms). Prints one JSON report.
"""

import base64
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

BODY = 200


def start(binary, name, flags):
    path = f"/tmp/conflation_run_{name}.log"
    log = open(path, "w")
    p = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", "--log-level", "info", "--cpu", "0",
         "--namespace", "px:conflate=true", "--max-connections", "1000"] + flags,
        stderr=log)
    for _ in range(100):
        time.sleep(0.1)
        text = open(path).read()
        if "addr=127.0.0.1:" in text:
            port = int(text.split("addr=127.0.0.1:")[1].split()[0].strip('",'))
            return p, port
    raise SystemExit("server did not start:\n" + open(path).read())


def ws_connect(port, path):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert b" 101 " in head.split(b"\r\n")[0], head
    return s


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def read_frame(s):
    b0, b1 = recv_exact(s, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack(">H", recv_exact(s, 2))[0]
    elif n == 127:
        n = struct.unpack(">Q", recv_exact(s, 8))[0]
    return b0 & 0x0F, recv_exact(s, n)


class Published:
    """The newest sequence number published per key (after its 200)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latest = {}

    def note(self, key, seq):
        with self.lock:
            if seq > self.latest.get(key, -1):
                self.latest[key] = seq

    def of(self, key):
        with self.lock:
            return self.latest.get(key, -1)


def publisher(port, channel, rate, seconds, published, stop, size):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = []  # (key, seq) awaiting their 200, in order
    lock = threading.Lock()

    def responses():
        buf = b""
        while not stop.is_set():
            try:
                chunk = s.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = buf[:end].decode()
                length = int(head.lower().split("content-length:")[1].split("\r\n")[0])
                if len(buf) < end + 4 + length:
                    break
                assert head.startswith("HTTP/1.1 200"), head
                buf = buf[end + 4 + length:]
                with lock:
                    key, seq = sent.pop(0)
                published.note(key, seq)

    threading.Thread(target=responses, daemon=True).start()
    t0 = time.monotonic()
    seq = 0
    while time.monotonic() - t0 < seconds and not stop.is_set():
        due = t0 + seq / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        key = "BTC" if seq % 2 == 0 else "ETH"
        body = f"{seq},{key},{time.time_ns()},".encode().ljust(size, b".")
        req = (f"POST /publish/{channel}?key={key} HTTP/1.1\r\nHost: x\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        with lock:
            sent.append((key, seq))
        s.sendall(req)
        seq += 1
    return seq


def reader(port, channel, read_rate, seconds, published, out):
    s = ws_connect(port, f"/ws/{channel}")
    t0 = time.monotonic()
    behind, ages, frames, ended = [], [], 0, None
    try:
        while time.monotonic() - t0 < seconds:
            time.sleep(1 / read_rate)
            op, payload = read_frame(s)
            while op in (9, 10):
                if op == 9:
                    # The server's keepalive: answer it (masked, as a client must).
                    mask = os.urandom(4)
                    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
                    s.sendall(bytes([0x8A, 0x80 | len(payload)]) + mask + body)
                op, payload = read_frame(s)
            if op == 8:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                ended = ("close", code, round(time.monotonic() - t0, 1))
                break
            frames += 1
            seq, key, sent_ns = payload.split(b",")[:3]
            seq, key = int(seq), key.decode()
            behind.append(max(0, (published.of(key) - seq) // 2))
            ages.append((time.time_ns() - int(sent_ns)) / 1e6)
    except (EOFError, OSError) as e:
        ended = ("gone", str(e), round(time.monotonic() - t0, 1))
    q = lambda v, p: sorted(v)[min(len(v) - 1, int(p * len(v)))] if v else None
    out[channel] = {
        "connected_s": ended[2] if ended else seconds,
        "ended": ended[:2] if ended else "still connected",
        "frames_read": frames,
        "behind_p50": q(behind, 0.5), "behind_p99": q(behind, 0.99),
        "behind_max": max(behind) if behind else None,
        "behind_last_10s_max": max(behind[-int(read_rate * 10):]) if behind else None,
        "age_ms_p50": q(ages, 0.5), "age_ms_p99": q(ages, 0.99),
    }


def main():
    binary = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 2000
    read_rate = float(sys.argv[4]) if len(sys.argv) > 4 else 50
    size = int(sys.argv[5]) if len(sys.argv) > 5 else BODY
    flags = sys.argv[6].split(",") if len(sys.argv) > 6 and sys.argv[6] else []
    servers = {c: start(binary, c.replace(":", "_"), flags) for c in ("px:t", "plain")}
    try:
        published = {c: Published() for c in servers}
        out, stop = {}, threading.Event()
        readers = [threading.Thread(target=reader,
                                    args=(servers[c][1], c, read_rate, seconds, published[c], out))
                   for c in servers]
        for t in readers:
            t.start()
        time.sleep(0.5)
        pubs = [threading.Thread(target=publisher,
                                 args=(servers[c][1], c, rate, seconds, published[c], stop, size))
                for c in servers]
        for t in pubs:
            t.start()
        for t in readers:
            t.join()
        stop.set()
        for t in pubs:
            t.join()
        keys = ("messages_in", "deliveries", "messages_conflated", "slow_consumer_disconnects")
        server = {}
        for c, (_, port) in servers.items():
            stats = json.loads(subprocess.run(
                ["curl", "-s", f"http://127.0.0.1:{port}/stats"],
                capture_output=True, text=True).stdout)
            server[c] = {k: stats[k] for k in keys}
        report = {
            "seconds": seconds, "rate": rate, "read_rate": read_rate, "bytes": size,
            "flags": flags, "latest_value": out.get("px:t"), "plain": out.get("plain"),
            "server": server,
        }
        print(json.dumps(report, indent=1))
    finally:
        for p, _ in servers.values():
            p.kill()


if __name__ == "__main__":
    main()
