#!/usr/bin/env python3
"""N concurrent GETs for one cold key, each on its own connection, all
sent at once; prints the status counts and the Cache-Status kinds seen.

    scripts/cache_stampede.py HOST:PORT PATH [N]
"""

import asyncio
import collections
import sys


async def request(conn, path):
    reader, writer = conn
    writer.write(f"GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head = data.split(b"\r\n\r\n", 1)[0].decode()
    status = int(head.split(" ", 2)[1])
    cs = next(
        (l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("cache-status:")),
        "",
    )
    if "collapsed" in cs:
        kind = "collapsed"
    elif "; hit" in cs:
        kind = "hit"
    else:
        kind = cs.split(";")[1].strip() if ";" in cs else "-"
    return status, kind


async def main():
    host, port = sys.argv[1].rsplit(":", 1)
    path, n = sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    # Connect everything first, then fire every request in one burst.
    conns = await asyncio.gather(*(asyncio.open_connection(host, int(port)) for _ in range(n)))
    results = await asyncio.gather(*(request(c, path) for c in conns))
    print("statuses", dict(collections.Counter(s for s, _ in results)))
    print("kinds", dict(collections.Counter(k for _, k in results)))


if __name__ == "__main__":
    asyncio.run(main())
