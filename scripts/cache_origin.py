#!/usr/bin/env python3
"""A slow HTTP/1.1 origin for the cache benchmarks (standard library only).

Every GET waits DELAY_MS, then answers 200 with a ~512-byte JSON body,
`Cache-Control: max-age=3600` and Content-Length, on keep-alive
connections. `GET /__count` answers how many other requests arrived (not
delayed, not counted).

    scripts/cache_origin.py PORT DELAY_MS
"""

import asyncio
import sys

COUNT = 0
PAD = "x" * 440


async def handle(reader, writer, delay):
    global COUNT
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1].decode()
            if target == "/__count":
                body = str(COUNT).encode()
            else:
                COUNT += 1
                await asyncio.sleep(delay)
                body = ('{"target":"%s","pad":"%s"}' % (target, PAD)).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Cache-Control: max-age=3600\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    port, delay = int(sys.argv[1]), int(sys.argv[2]) / 1000
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, delay), "127.0.0.1", port, backlog=4096
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
