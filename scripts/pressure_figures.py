#!/usr/bin/env python3
"""Figures for the delivery-under-pressure work (BENCHMARKS.md), measured
against a running corecast (or any server speaking the path-mode contract).

  pressure_figures.py burst   HOST:PORT PID [--messages 1024] [--size 65536]
      One client of /ws/burst publishes N messages of SIZE bytes as fast as
      TCP allows (it is a subscriber too and reads what comes back), one
      subscriber reads at line rate, one never reads. Reports the bytes the
      healthy subscriber got, the time to deliver them all, the server's
      peak RSS (VmHWM) and how long the publisher was held back (time its
      sends spent waiting beyond the healthy reader's pace, as seen from the
      server's publish_backpressure count and the publisher's send time).

  pressure_figures.py stalled HOST:PORT N CHANNEL
      Holds N subscribers of CHANNEL that never read (4 KiB receive buffer)
      until stdin closes: run beside corecast-bench broadcast.

  pressure_figures.py inbound HOST:PORT PID [--clients 1500] [--frame 1048576]
      N clients each send the header of a maximal binary frame and all of
      its payload but one byte, then hold. Reports the server's RSS once
      every byte was read (or the connection refused), /stats inbound_bytes
      and inbound_budget_refusals.

  pressure_figures.py resume  HOST:PORT [--messages 10000]
      (history on: --history-size >= N) A JSON client subscribes to a fresh
      channel and leaves; a path-mode publisher sends N messages; the
      client comes back with `since` and the script reports the time to
      the first and the last replayed message.

Pure stdlib; a minimal RFC 6455 client (masked frames, no extensions).
"""
import asyncio
import base64
import json
import os
import socket
import struct
import sys
import time
import urllib.request


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def stats(addr):
    with urllib.request.urlopen(f"http://{addr}/stats", timeout=10) as r:
        return json.load(r)


def frame(opcode, payload):
    """A masked client frame (mask 0: the payload goes as is)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + b"\0\0\0\0" + payload


async def connect(addr, path, rcvbuf=None):
    host, port = addr.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 24)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        f"Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 101 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"upgrade refused: {head[:80]!r}")
    return reader, writer


async def read_frame(reader):
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", await reader.readexactly(2))
    elif n == 127:
        (n,) = struct.unpack("!Q", await reader.readexactly(8))
    return b0 & 0x0F, await reader.readexactly(n)


async def read_data(reader, count, size):
    """Reads `count` data messages; returns (bytes, seconds to the last)."""
    got, t0 = 0, time.monotonic()
    for i in range(count):
        op, payload = await read_frame(reader)
        if op == 0x8:
            code = struct.unpack("!H", payload[:2])[0] if payload else None
            raise RuntimeError(f"closed with {code} after {i} messages")
        assert int.from_bytes(payload[:8], "big") == i, f"message {i} out of order"
        got += len(payload)
    return got, time.monotonic() - t0


async def burst(addr, pid, messages, size):
    pub_r, pub_w = await connect(addr, "/ws/burst")
    healthy_r, _hw = await connect(addr, "/ws/burst")
    _silent = await connect(addr, "/ws/burst", rcvbuf=4096)
    before = stats(addr)
    t0 = time.monotonic()
    healthy = asyncio.create_task(read_data(healthy_r, messages, size))
    echo = asyncio.create_task(read_data(pub_r, messages, size))
    send_wait = 0.0
    for i in range(messages):
        pub_w.write(frame(0x2, i.to_bytes(8, "big") + b"." * (size - 8)))
        s = time.monotonic()
        await pub_w.drain()
        send_wait += time.monotonic() - s
    sent = time.monotonic() - t0
    got, took = await healthy
    await echo
    after = stats(addr)
    d = lambda k: after.get(k, 0) - before.get(k, 0)
    print(json.dumps({
        "messages": messages,
        "size": size,
        "healthy_bytes": got,
        "healthy_seconds": round(took, 3),
        "healthy_mib_per_s": round(got / took / (1 << 20), 1),
        "publisher_send_seconds": round(sent, 3),
        "publisher_blocked_seconds": round(send_wait, 3),
        "publish_backpressure": d("publish_backpressure"),
        "slow_consumer_disconnects": d("slow_consumer_disconnects"),
        "server_peak_rss_mib": round(rss_kib(pid, "VmHWM") / 1024, 1),
        "outbound_bytes_peak": after.get("outbound_bytes_peak"),
    }))


async def stalled(addr, n, channel):
    conns = [await connect(addr, f"/ws/{channel}", rcvbuf=4096) for _ in range(n)]
    print(f"{len(conns)} stalled subscribers of {channel} holding", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def inbound(addr, pid, clients, frame_size):
    base = rss_kib(pid)
    part = struct.pack("!BBQ", 0x82, 0x80 | 127, frame_size) + b"\0\0\0\0"
    part += b"x" * (frame_size - 1)
    conns = []
    t0 = time.monotonic()
    for _ in range(clients):
        r, w = await connect(addr, "/ws/hog")
        w.write(part)
        conns.append((r, w))
    for _, w in conns:
        try:
            await w.drain()
        except ConnectionError:
            pass
    # Every byte read by the server (or its connection refused).
    want = clients * len(part)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        s = stats(addr)
        if s.get("bytes_in", 0) >= want or s.get("inbound_budget_refusals", 0) > 0 and \
                s.get("inbound_bytes", 0) <= s.get("bytes_in", 0):
            settled = s
            # Let the reads in flight finish: stop when RSS stops growing.
            last = -1
            while rss_kib(pid) != last and time.monotonic() < deadline:
                last = rss_kib(pid)
                await asyncio.sleep(0.5)
            break
        await asyncio.sleep(0.2)
    s = stats(addr)
    print(json.dumps({
        "clients": clients,
        "frame_bytes": frame_size,
        "seconds": round(time.monotonic() - t0, 1),
        "rss_before_mib": round(base / 1024, 1),
        "rss_mib": round(rss_kib(pid) / 1024, 1),
        "peak_rss_mib": round(rss_kib(pid, "VmHWM") / 1024, 1),
        "inbound_bytes_mib": round(s.get("inbound_bytes", 0) / (1 << 20), 1),
        "inbound_budget_refusals": s.get("inbound_budget_refusals"),
        "connections": s.get("connections"),
    }))


async def resume(addr, messages):
    channel = f"resume{os.getpid()}"
    r, w = await connect(addr, "/ws")
    w.write(frame(0x1, json.dumps({"op": "subscribe", "channel": channel}).encode()))
    _, ack = await read_frame(r)
    ack = json.loads(ack)
    epoch, offset = ack["epoch"], ack["offset"]
    w.close()
    pr, pw = await connect(addr, f"/ws/{channel}")
    for i in range(messages):
        pw.write(frame(0x1, f"m{i}".encode()))
    await pw.drain()
    # The publisher hears its own messages (sender included): all in.
    for _ in range(messages):
        await read_frame(pr)
    r, w = await connect(addr, "/ws")
    t0 = time.monotonic()
    since = {"epoch": epoch, "offset": offset}
    w.write(frame(0x1, json.dumps({"op": "subscribe", "channel": channel, "since": since}).encode()))
    _, ack = await read_frame(r)
    ack = json.loads(ack)
    first = last = None
    for i in range(messages):
        _, m = await read_frame(r)
        if first is None:
            first = time.monotonic() - t0
        assert json.loads(m)["offset"] == offset + 1 + i
    last = time.monotonic() - t0
    print(json.dumps({
        "messages": messages,
        "recovered": ack.get("recovered"),
        "first_ms": round(first * 1000, 2),
        "last_ms": round(last * 1000, 2),
    }))


def main():
    cmd, addr, *rest = sys.argv[1:]
    opts = {rest[i]: int(rest[i + 1]) for i in range(0, len(rest), 2) if rest[i].startswith("--")}
    pos = [a for i, a in enumerate(rest) if not a.startswith("--") and (i == 0 or not rest[i - 1].startswith("--"))]
    if cmd == "burst":
        asyncio.run(burst(addr, int(pos[0]), opts.get("--messages", 1024), opts.get("--size", 65536)))
    elif cmd == "stalled":
        asyncio.run(stalled(addr, int(pos[0]), pos[1]))
    elif cmd == "resume":
        asyncio.run(resume(addr, opts.get("--messages", 10000)))
    elif cmd == "inbound":
        asyncio.run(inbound(addr, int(pos[0]), opts.get("--clients", 1500), opts.get("--frame", 1 << 20)))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
