"""A backend for corecast's hooks (Centrifugo's HTTP proxy shapes), used
by tests/hooks.rs: a real HTTP/1.1 keep-alive server on a free port.

It prints `port N`, then serves:
- /connect: the `sid` cookie decides — good-<user> is admitted (info,
  channels, data), expired -> error 401, banned -> disconnect 4403,
  slow -> answers after 3 s, garbage -> not JSON, huge -> a 10 MB body,
  short-<user> -> expires in 2 s; no cookie -> error 403;
- /subscribe, /publish, /rpc, /refresh: see the handlers (a channel
  `secret` or `NS:secret` is refused, `deny` or `NS:deny` may not be
  published on; a subscribe to `eu-only…` gets the tag filter
  region = eu, one to `bad-filter` a malformed filter);
- /subscribe-strict, /publish-strict: named proxies' hooks (tests of
  per-namespace hooks);
- /seen: what it saw so far (requests per path, distinct client
  connections, the last request's headers and body per path).
Every hook request must carry `X-Hook-Secret: s3cret` (else 400).
"""

import http.server
import json
import sys
import threading
import time

LOCK = threading.Lock()
SEEN = {"requests": {}, "peers": [], "last": {}, "refreshes": 0}


def cookie(headers, name):
    for part in (headers.get("Cookie") or "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return None


def connect(req, headers):
    sid = cookie(headers, "sid")
    if sid is None:
        return {"error": {"code": 403, "message": "no session"}}
    if sid.startswith("good-"):
        return {"result": {"user": sid[5:], "info": {"name": sid[5:].upper()},
                           "channels": ["news"], "data": {"motd": "hello " + sid[5:]}}}
    if sid.startswith("short-"):
        return {"result": {"user": sid[6:], "expire_at": int(time.time()) + 2}}
    if sid == "expired":
        return {"error": {"code": 401, "message": "session expired"}}
    if sid == "banned":
        return {"disconnect": {"code": 4403, "reason": "banned"}}
    if sid == "slow":
        time.sleep(3)
        return {"result": {"user": "late"}}
    if sid == "garbage":
        return b"<html>this is not json"
    if sid == "huge":
        return b'{"result":{"user":"' + b"x" * (10 * 1024 * 1024) + b'"}}'
    return {"error": {"code": 403, "message": "unknown session"}}


def subscribe(req, headers):
    ch = req["channel"]
    if ch.rpartition(":")[2] == "secret":
        return {"error": {"code": 403, "message": "not a member"}}
    if ch == "kick":
        return {"disconnect": {"code": 4999, "reason": "kicked by backend"}}
    if ch == "slow":
        time.sleep(3)
    if ch.startswith("eu-only"):
        # A server-enforced tag filter: only publications tagged region=eu.
        return {"result": {"filter": {"key": "region", "cmp": "eq", "val": "eu"}}}
    if ch == "bad-filter":
        return {"result": {"filter": {"op": "xor", "nodes": []}}}
    return {"result": {}}


def publish(req, headers):
    ch = req["channel"]
    if ch.rpartition(":")[2] == "deny":
        return {"error": {"code": 4003, "message": "not allowed to post"}}
    if ch == "rewrite":
        return {"result": {"data": "rewritten: " + req.get("data", "")}}
    if ch == "ephemeral":
        return {"result": {"skip_history": True}}
    return {"result": {}}


def rpc(req, headers):
    m = req["method"]
    if m == "sum":
        d = req.get("data") or {}
        return {"result": {"data": {"sum": d.get("a", 0) + d.get("b", 0), "user": req.get("user")}}}
    if m == "whoami":
        return {"result": {"data": req.get("user")}}
    return {"error": {"code": 404, "message": "no such method"}}


def refresh(req, headers):
    with LOCK:
        SEEN["refreshes"] += 1
    if req.get("user") == "keep":
        return {"result": {"expire_at": int(time.time()) + 2}}
    return {"result": {"expired": True}}


def subscribe_strict(req, headers):
    """A named proxy's subscribe hook: only `*:member` channels."""
    if req["channel"].endswith(":member"):
        return {"result": {}}
    return {"error": {"code": 4004, "message": "strict: members only"}}


def publish_strict(req, headers):
    """A named proxy's publish hook: marks what it lets through."""
    return {"result": {"data": "strict: " + req.get("data", "")}}


HOOKS = {"/connect": connect, "/subscribe": subscribe, "/publish": publish,
         "/rpc": rpc, "/refresh": refresh,
         "/subscribe-strict": subscribe_strict, "/publish-strict": publish_strict}


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with LOCK:
            body = dict(SEEN, connections=len(SEEN["peers"]))
        self.answer(200, body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        with LOCK:
            if list(self.client_address) not in SEEN["peers"]:
                SEEN["peers"].append(list(self.client_address))
            SEEN["requests"][self.path] = SEEN["requests"].get(self.path, 0) + 1
            SEEN["last"][self.path] = {"headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": json.loads(raw or b"null")}
        hook = HOOKS.get(self.path)
        if hook is None:
            return self.answer(404, {"error": "no hook here"})
        if self.headers.get("X-Hook-Secret") != "s3cret":
            return self.answer(400, {"error": "missing shared secret"})
        self.answer(200, hook(json.loads(raw), self.headers))


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # corecast hanging up on the 10 MB answer is expected


srv = Server(("127.0.0.1", 0), H)
print("port", srv.server_address[1], flush=True)
srv.serve_forever()
