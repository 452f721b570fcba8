"""Python `websockets` (an independent RFC 7692 implementation, compression
on by default) against a running corecast: a compressed subscriber, a
compressed publisher using context takeover, and what the server agreed.

Usage: deflate_clients.py HOST:PORT  (run by tests/python_websockets.rs,
which starts the server, publishes over HTTP and checks the counters).
Prints one JSON object on stdout.
"""
import asyncio
import json
import sys

from websockets.asyncio.client import connect

ADDR = sys.argv[1]


def big(i):
    return json.dumps([{"id": n, "sym": "ETH-USD", "px": 2000 + n % 7, "msg": i}
                       for n in range(60)])


async def main():
    async with connect(f"ws://{ADDR}/ws/py") as sub, \
            connect(f"ws://{ADDR}/ws/py") as pub:
        sent = [big(i) for i in range(3)] + ["short"]
        for text in sent:
            await pub.send(text)
        got = []
        while len(got) < len(sent):
            got.append(await asyncio.wait_for(sub.recv(), 10))
        # Drain what the publisher hears of itself (it is subscribed too).
        for _ in sent:
            await asyncio.wait_for(pub.recv(), 10)
        # Then a message published over HTTP by the test.
        print(json.dumps({"ready": True}), flush=True)
        http_published = await asyncio.wait_for(sub.recv(), 10)
        print(json.dumps({
            "extensions": sub.response.headers.get("Sec-WebSocket-Extensions"),
            "identical": got == sent,
            "http_published": http_published,
        }), flush=True)


asyncio.run(main())
