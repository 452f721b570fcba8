"""A wss:// client on Python's own TLS (ssl, OpenSSL) and `websockets`:
trusts only the test CA, checks the host name, subscribes to a channel,
publishes on it and prints what it got back and what TLS it spoke.

    python3 tls_client.py HOST:PORT CA_FILE CHANNEL
"""

import asyncio
import json
import ssl
import sys

import websockets


async def main(addr, cafile, channel):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["http/1.1"])
    port = addr.rsplit(":", 1)[1]
    url = f"wss://localhost:{port}/ws/{channel}"
    async with websockets.connect(url, ssl=ctx, compression=None) as ws:
        tls = ws.transport.get_extra_info("ssl_object")
        big = "x" * 100_000
        await ws.send("hello over tls")
        first = await asyncio.wait_for(ws.recv(), 10)
        await ws.send(big)
        second = await asyncio.wait_for(ws.recv(), 10)
        print(json.dumps({
            "version": tls.version(),
            "alpn": tls.selected_alpn_protocol(),
            "first": first,
            "big_back": second == big,
        }), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
