#!/usr/bin/env python3
"""Presence churn for the cost-of-presence figure (issue 15).

Keeps USERS JSON-protocol subscribers of CHANNEL (a presence channel
other than the benchmark's, so this script receives no deliveries)
connected, each a
distinct user (anonymous connections are their own user), subscribed with
`"presence": true`, and replaces RATE of them per second (close one, open a
new one), for SECONDS. Run it beside `corecast-bench broadcast` on the
same channel to see what presence costs the deliveries.

    presence_churn.py ws://127.0.0.1:PORT CHANNEL --users 1000 --rate 100 --seconds 20

Prints one JSON line: connections opened and closed, join/leave events
received, errors. Needs the `websockets` package (scripts/requirements.txt).
"""

import argparse
import asyncio
import json
import random
import time

import websockets


async def member(url, channel, stats, stop):
    """One user: connect, subscribe with presence, read until told to go."""
    try:
        async with websockets.connect(url + "/ws", max_size=None) as ws:
            await ws.send(json.dumps({"op": "subscribe", "channel": channel, "presence": True}))
            stats["opened"] += 1

            async def read():
                async for msg in ws:
                    if isinstance(msg, str) and '"type":"join"' in msg:
                        stats["joins_seen"] += 1
                    elif isinstance(msg, str) and '"type":"leave"' in msg:
                        stats["leaves_seen"] += 1

            reader = asyncio.create_task(read())
            await stop.wait()
            reader.cancel()
        stats["closed"] += 1
    except Exception as e:  # counted, the churn goes on
        stats["errors"] += 1
        stats["last_error"] = repr(e)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("channel")
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    stats = {"opened": 0, "closed": 0, "joins_seen": 0, "leaves_seen": 0, "errors": 0}
    live = []

    def spawn():
        stop = asyncio.Event()
        live.append((stop, asyncio.create_task(member(a.url, a.channel, stats, stop))))

    for _ in range(a.users):
        spawn()
    start = time.monotonic()
    interval = 1.0 / a.rate
    n = 0
    while time.monotonic() - start < a.seconds:
        n += 1
        # Absolute schedule: replace one user every `interval`.
        await asyncio.sleep(max(0.0, start + n * interval - time.monotonic()))
        stop, _ = live.pop(random.randrange(len(live)))
        stop.set()
        spawn()
    for stop, _ in live:
        stop.set()
    await asyncio.gather(*(t for _, t in live), return_exceptions=True)
    stats["seconds"] = round(time.monotonic() - start, 2)
    print(json.dumps(stats))


asyncio.run(main())
