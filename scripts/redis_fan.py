#!/usr/bin/env python3
# Redis's own CPU per message delivered to N subscriber connections (the
# hop a uWS-per-thread deployment pays between threads): redis-server on
# CPU 0, this script (publisher + N readers) on CPU 1.
import os, socket, subprocess, sys, threading, time
N = int(sys.argv[1]); MSGS = int(sys.argv[2]); port = 6399 + N
srv = subprocess.Popen(["taskset", "-c", "0", "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
time.sleep(0.5)
def conn():
    s = socket.create_connection(("127.0.0.1", port)); return s
subs = []
for i in range(N):
    s = conn(); s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n"); s.recv(100); subs.append(s)
payload = b"x" * 128
msg = b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$128\r\n" + payload + b"\r\n"
one = len(b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$128\r\n") + 130
got = [0] * N
def reader(i):
    s = subs[i]; need = one * MSGS; n = 0
    while n < need:
        d = s.recv(1 << 20)
        if not d: break
        n += len(d)
    got[i] = n // one
ts = [threading.Thread(target=reader, args=(i,)) for i in range(N)]
for t in ts: t.start()
p = conn()
def ticks():
    f = open(f"/proc/{srv.pid}/stat").read().split(); return int(f[13]) + int(f[14])
t0 = ticks(); w0 = time.time()
batch = msg * 100
for _ in range(MSGS // 100):
    p.sendall(batch)
def drain_replies():
    need = len(b":") ; left = MSGS; buf = b""
    while left > 0:
        buf += p.recv(1 << 16); c = buf.count(b"\r\n"); left -= c; buf = buf[buf.rfind(b"\r\n")+2:]
drain_replies()
for t in ts: t.join()
t1 = ticks(); w1 = time.time()
hz = os.sysconf("SC_CLK_TCK")
cpu = (t1 - t0) / hz
print(f"N={N} messages={MSGS} delivered={sum(got)} redis_cpu={cpu:.2f}s wall={w1-w0:.2f}s ns_per_message_delivery={cpu/ (MSGS*N) * 1e9:.0f} us_per_publish={cpu/MSGS*1e6:.2f}")
srv.kill()
