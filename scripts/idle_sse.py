#!/usr/bin/env python3
"""RSS per idle connection at N, Server-Sent Events streams or WebSockets
(issue 33): opens N connections to a running corecast (`GET /sse?channel=idle`
or `GET /ws/idle`), waits until all of them are parked (`/stats`), and
reports the server's RSS growth per connection.

    corecast --listen 127.0.0.1:0 --cpu 0 --max-connections 30000 &
    python3 scripts/idle_sse.py 127.0.0.1:PORT sse|ws 19000 PID
"""
import socket, sys, time, os, resource
addr, port = sys.argv[1].split(":"); port = int(port)
mode, n, pid = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 200, n + 200))
def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): return int(l.split()[1])
WS = (b"GET /ws/idle HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
SSE = b"GET /sse?channel=idle HTTP/1.1\r\nHost: x\r\n\r\n"
req = SSE if mode == "sse" else WS
end = b"\n\n\r\n" if mode == "sse" else b"\r\n\r\n"
time.sleep(0.5)
before = rss(pid)
socks = []
for i in range(n):
    s = socket.create_connection((addr, port))
    s.sendall(req)
    buf = b""
    while not buf.endswith(end):
        buf += s.recv(4096)
    socks.append(s)
import json, urllib.request
deadline = time.time() + 60
while True:  # --park-after 2s: wait until every connection parked
    st = json.load(urllib.request.urlopen(f"http://{addr}:{port}/stats"))
    if st["parked_connections"] >= n or time.time() > deadline: break
    time.sleep(0.2)
after = rss(pid)
print("parked", st["parked_connections"])
print(f"{mode}: {n} held, RSS {before} -> {after} KiB, {(after-before)*1024/n:.0f} B per connection")
