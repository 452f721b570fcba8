#!/usr/bin/env python3
"""The module import graph of the corecast workspace must have no loops, and
files and functions must stay short.

    python3 scripts/check_imports.py             # check the tree, exit 1 on a violation
    python3 scripts/check_imports.py --self-test # prove the checker catches what it should
    python3 scripts/check_imports.py --graph     # also print every edge

What it reads: every `.rs` file of the library crates `src/` (corecast) and
`bench/src/` (corecast_bench); binaries (`src/bin/`, `bench/src/main.rs`) are
leaves and are skipped. A file is one node (inline modules belong to their
file). An edge A -> B is any path in A that names B:
  - `use crate::b::..`, `use super::..`, `use self::..`, `use child::..`
    (a `use` may span lines and nest braces), `pub use` included;
  - the same paths in code (`crate::b::f()`, `super::X`, `child::f()`).
Code under `#[cfg(test)]` (an inline `mod tests { .. }` or a file declared as
`#[cfg(test)] mod x;`) is not part of the graph: tests may import anything.

The rule for parents and children. A parent module that declares `mod child;`
and uses it is an edge parent -> child. A child that imports from its parent
(`super::X`, `crate::parent::X`) is then a loop — unless the parent is a
*facade*: a file with nothing but `mod` declarations, `use`/`pub use`,
attributes and comments (no fn, struct, enum, impl, const, ...). Importing a
name through a facade is importing the module the facade re-exports it from,
so the edge is followed through the facade's `pub use` to its source (and a
loop through a facade is still found); a name the facade does not re-export
adds no edge.

The rule for the server's feature folders. Each folder under `src/server/`
(`conn/`, `pusher/`, `presence/`, ...) is the edge of one feature. A file in
one imports no file of a sibling folder, except a seam: a file named in
SEAMS (`worker.rs`, `publish.rs`, ... at the top of `src/server/`, and the
Redis link's face `redis/mod.rs`), or an edge EXCEPTIONS names — each with
the reason the code needs it. Files at the top of `src/server/` (the seams
and the boot in `mod.rs`) may import any folder; loops are still loops.

Fails on: any strongly connected component of more than one file (2-cycles and
longer), printed with one `file:line` per edge; an import between feature
folders that no seam or exception allows; a file over 700 lines; a function
over 80 lines. A `// long: reason` comment on the line before a `fn` (before
its attributes) exempts that function; one in a file's first 10 lines
exempts the file.
"""

import os
import re
import sys
import tempfile

MAX_FILE_LINES = 700
MAX_FN_LINES = 80
CRATES = [("src", "corecast"), ("bench/src", "corecast_bench")]
SKIP_DIRS = {"bin"}
SKIP_FILES = {"main.rs"}

# The server's feature folders: src/server/<feature>/.
FEATURE_ROOT = ("corecast", "server")

# Modules of src/server any feature folder may import (paths below
# FEATURE_ROOT; a folder's `mod.rs` is the folder's own path).
SEAMS = {
    ("admission",): "the one admission of a (connection identity, channel) pair",
    ("worker",): "what a worker's tasks share: hub, config, Redis link, cache, parking",
    ("publish",): "the one publish path (in-process, through a channel's owner worker, or through Redis)",
    ("mesh",): "the rings between workers: what crosses them, channels' owners, the acceptor's loads",
    ("endpoints",): "probes, stats, the status channel's name",
    ("formats",): "the wire formats' ids and encoders the hub is built with",
    ("resolve",): "host names resolved off the worker thread",
    ("sys",): "the few raw syscalls",
    ("iovec",): "the owning iovec list (client writes and Redis commands)",
    ("redis",): "the Redis link's face (RedisLink, ReplyWaiter, history reads)",
}

# Imports between feature folders that are neither through a seam: (from,
# to, why), each a path below FEATURE_ROOT; an edge is allowed when its
# file is `from` or below it and its target is `to` or below it.
EXCEPTIONS = [
    (("conn",), ("tls",), "a connection's bytes may be TLS: the HTTP phase (conn::stream) and a WebSocket's transport read and write through its session"),
    (("redis",), ("tls", "client"), "a Redis connection's bytes may be TLS (rediss://): it reads and writes through tls::client's stream"),
    (("conn", "http"), ("cache",), "the HTTP router answers the cache's routes"),
    (("conn", "http"), ("history",), "the HTTP router answers GET /history"),
    (("conn", "http"), ("presence",), "the HTTP router answers GET /presence"),
    (("conn", "http"), ("pusher", "api"), "the HTTP router answers the Pusher HTTP API"),
    (("conn", "http"), ("sse",), "the HTTP router answers GET /sse and hands the event stream on"),
    (("conn", "websocket", "parked"), ("sse",), "the parked-connections poller resumes a parked event stream through its edge"),
    (("sse",), ("conn",), "an event stream is a connection: its socket (stream, transport) and its parking are conn's"),
    (("sse", "open"), ("history", "resume"), "a stream's subscribe in Redis mode with history resumes from Redis as the JSON subscribe does"),
    (("sse", "open"), ("history", "owner"), "a stream's subscribe on a worker without a copy of the channel's ring asks its owner as the JSON subscribe does"),
    (("conn", "websocket"), ("native",), "a WebSocket runs its session: corecast's own protocol"),
    (("conn", "websocket"), ("pusher", "ws"), "a WebSocket runs its session: Pusher's"),
    (("native",), ("history",), "the JSON subscribe replays history (and resumes it from Redis)"),
    (("native",), ("presence",), "the JSON protocol's presence ops (join on subscribe, query)"),
    (("history", "resume"), ("presence", "edge"), "a deferred subscribe refused meanwhile leaves presence as ws_control would"),
    (("history", "owner"), ("presence", "edge"), "a subscribe waiting for an owner worker, refused, answers and leaves presence as the JSON subscribe would"),
    (("history", "owner"), ("presence", "owner"), "a subscribe on another worker than its channel's owner joins presence there before it is answered"),
    (("presence", "redis"), ("pusher", "occupancy"), "a Pusher presence subscription Redis refuses gives its occupancy back at once"),
    (("pusher", "presence"), ("presence", "redis"), "Pusher presence channels keep their members through the same Redis scripts"),
    (("pusher", "presence"), ("presence", "owner"), "with several workers and no Redis, Pusher presence channels keep their members at the channel's owner worker as JSON presence does"),
    (("presence", "owner"), ("pusher", "owner"), "an owner worker announces a Pusher channel's member events and webhooks the Pusher way"),
    (("cache", "origin"), ("tls", "client"), "an https:// origin's bytes are TLS: the client reads and writes through tls::client's stream"),
    (("pusher", "webhook"), ("cache", "origin"), "webhooks are sent with the cache's pooled, bounded HTTP client"),
    (("auth", "jwks"), ("cache", "origin"), "the identity provider's key set is fetched with the cache's bounded HTTP client"),
    (("hooks",), ("cache", "origin"), "hook calls go through the cache's pooled, bounded HTTP client (and its FIFO slots)"),
    (("conn", "upgrade"), ("hooks",), "the connect hook decides an upgrade before the 101"),
    (("conn", "websocket"), ("hooks", "session"), "a hook-admitted WebSocket gets its welcome (connected frame, server-side channels)"),
    (("native",), ("hooks",), "the JSON protocol's subscribe, publish and rpc ask their hooks"),
    (("hooks", "session"), ("history",), "a server-side subscription (connect channels) is answered with its position, and resumed from Redis, as the JSON subscribe is"),
    (("hooks", "session"), ("presence", "edge"), "a server-side subscription joins presence with the user and info, as the JSON subscribe does"),
    (("conn", "http"), ("hooks", "api"), "the HTTP router answers the server API (/api/...)"),
    (("pusher", "api"), ("hooks", "api"), "the Pusher API's terminate_connections is the server API's disconnect"),
    (("conn", "http"), ("console",), "the HTTP router answers the console's routes and checks its session before the feed's upgrade"),
    (("console", "actions"), ("history",), "the console reads a channel's history as GET /history does"),
    (("console", "actions"), ("presence", "edge"), "the console lists a channel's presence as GET /presence does"),
    (("console", "actions"), ("hooks", "api"), "the console's disconnect is the server API's (every instance in Redis mode)"),
]


# ---------------------------------------------------------------- lexing

def strip_code(text):
    """Blanks comments, string and char literals (keeping line breaks and
    columns), so braces and paths are only ever real code."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:  # a char literal; otherwise a lifetime
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(code, open_idx):
    depth = 0
    for j in range(open_idx, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def blank(code, a, b):
    return code[:a] + re.sub(r"[^\n]", " ", code[a:b]) + code[b:]


def strip_tests(code):
    """Blanks `#[cfg(test)] mod x { .. }`; returns the code and the names of
    `#[cfg(test)] mod x;` file modules."""
    test_files = set()
    for m in list(re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])", code)):
        if m.group(2) == ";":
            test_files.add(m.group(1))
        else:
            end = matching_brace(code, m.end() - 1)
            code = blank(code, m.start(), end + 1)
    return code, test_files


# ---------------------------------------------------------------- modules

class Module:
    def __init__(self, crate, path, file, text):
        self.crate, self.path, self.file = crate, path, file
        self.text = text
        self.code, self.test_children = strip_tests(strip_code(text))
        self.is_test = False

    @property
    def key(self):
        return (self.crate,) + self.path

    def line_of(self, idx):
        return self.code.count("\n", 0, idx) + 1

    def is_facade(self):
        body = re.sub(r"#!?\[[^\]]*\]", " ", self.code)
        body = re.sub(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*;", " ", body)
        body = re.sub(r"(?:pub(?:\([^)]*\))?\s+)?use\s+[^;]*;", " ", body)
        return body.strip() == ""


def load(root):
    mods = {}
    for base, crate in CRATES:
        top = os.path.join(root, base)
        if not os.path.isdir(top):
            continue
        for d, dirs, files in os.walk(top):
            dirs[:] = sorted(x for x in dirs if not (d == top and x in SKIP_DIRS))
            for f in sorted(files):
                if not f.endswith(".rs") or (d == top and f in SKIP_FILES):
                    continue
                full = os.path.join(d, f)
                rel = os.path.relpath(full, top)[:-3].split(os.sep)
                if rel[-1] in ("mod", "lib"):
                    rel = rel[:-1]
                with open(full, encoding="utf-8") as fh:
                    text = fh.read()
                m = Module(crate, tuple(rel), os.path.relpath(full, root), text)
                mods[m.key] = m
    for m in mods.values():  # files declared as `#[cfg(test)] mod x;`
        for child in m.test_children:
            k = m.key + (child,)
            if k in mods:
                mods[k].is_test = True
    for k, m in list(mods.items()):  # and everything below them
        if any(mods.get(k[:i]) is not None and mods[k[:i]].is_test for i in range(2, len(k))):
            m.is_test = True
    return mods


# ---------------------------------------------------------------- paths

def expand_use(tree):
    """`a::{b, c::{d, e as f}, self}` -> [[a, b], [a, c, d], [a, c, e], [a]]."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    out = []

    def walk(prefix, s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        parts.append(cur)
        for p in filter(None, parts):
            m = re.match(r"^((?:\w+::)*)\{(.*)\}$", p)
            if m:
                walk(prefix + [x for x in m.group(1).split("::") if x], m.group(2))
            else:
                segs = [x for x in p.split("::") if x]
                if segs and segs[-1] == "self":
                    segs = segs[:-1]
                if segs and segs[-1] == "*":
                    segs = segs[:-1]
                out.append(prefix + segs)

    walk([], tree)
    return out


def paths_in(m, mods):
    """(segments, index) of every module path in `m`'s non-test code."""
    code = m.code
    found = []
    use_spans = []
    for u in re.finditer(r"\buse\s+([^;]*);", code):
        use_spans.append((u.start(), u.end()))
        # `use a::b as c`: keep `a::b`.
        tree = re.sub(r"\s+as\s+\w+", "", u.group(1))
        for segs in expand_use(tree):
            found.append((segs, u.start()))
    children = {k[-1] for k in mods if k[:-1] == m.key and len(k) == len(m.key) + 1}
    # `use crate::paper;` then `paper::opts::parse()`: the alias names a module.
    aliases = {}
    for segs, _ in found:
        if segs and segs[0] in ("crate", "super", "self") and resolve(m, segs, mods, exact=True):
            aliases[segs[-1]] = segs
    for p in re.finditer(r"(?<![\w:])((?:crate|super|self|\w+)(?:::(?:\w+))+)", code):
        if any(a <= p.start() < b for a, b in use_spans):
            continue
        segs = p.group(1).split("::")
        if segs[0] in ("crate", "super", "self") or segs[0] in children:
            found.append((segs, p.start()))
        elif segs[0] in aliases:
            found.append((aliases[segs[0]] + segs[1:], p.start()))
    return found


def resolve(m, segs, mods, seen=None, exact=False):
    """The file module a path from `m` lands in (following facades' `pub
    use` when the path goes up into one), or None. With `exact`, only
    whether the whole path names a module."""
    seen = seen or set()
    cur = m.key
    segs = list(segs)
    if not segs:
        return None
    if segs[0] == "crate":
        cur, segs = (m.crate,), segs[1:]
    elif segs[0] in ("super", "self"):
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                cur = cur[:-1]
            segs = segs[1:]
        if len(cur) < 1:
            return None
    elif (m.key + (segs[0],)) not in mods:
        return None  # std, an extern crate, or a local name
    while segs and (cur + (segs[0],)) in mods:
        cur, segs = cur + (segs[0],), segs[1:]
    if exact:
        return cur if not segs and cur in mods else None
    target = mods[cur]
    # Up into an ancestor that is only a facade: follow its re-export.
    if m.key[:len(cur)] == cur and cur != m.key and target.is_facade():
        if not segs or (cur, segs[0]) in seen:
            return None
        seen.add((cur, segs[0]))
        for u in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]*);", target.code):
            for src in expand_use(re.sub(r"\s+as\s+\w+", "", u.group(1))):
                if src and src[-1] == segs[0]:
                    return resolve(target, src + segs[1:], mods, seen)
        return None
    return cur


def graph(mods):
    edges = {}
    for m in mods.values():
        if m.is_test:
            continue
        for segs, idx in paths_in(m, mods):
            t = resolve(m, segs, mods)
            if t is None or t == m.key or mods[t].is_test:
                continue
            edges.setdefault(m.key, {}).setdefault(t, "%s:%d" % (m.file, m.line_of(idx)))
    return edges


def cycles(nodes, edges):
    """Tarjan's strongly connected components with more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


# ---------------------------------------------------------------- features

def feature_violations(mods, edges):
    """Imports from one feature folder into a sibling that neither a seam nor
    an exception allows."""
    root = FEATURE_ROOT
    # A folder: a module below the root with its own directory.
    folders = {k[len(root)] for k, m in mods.items()
               if k[:len(root)] == root and len(k) > len(root)
               and (len(k) > len(root) + 1 or m.file.endswith(os.sep + "mod.rs"))}

    def place(key):
        """(folder, path below the root) of a module in a feature folder."""
        if key[:len(root)] != root or len(key) <= len(root):
            return None, None
        rel = key[len(root):]
        return (rel[0] if rel[0] in folders else None), rel

    out = []
    for a in sorted(edges):
        fa, ra = place(a)
        if fa is None:
            continue
        for b, where in sorted(edges[a].items()):
            fb, rb = place(b)
            if fb is None or fb == fa or rb in SEAMS:
                continue
            if any(ra[:len(f)] == f and rb[:len(t)] == t for f, t, _ in EXCEPTIONS):
                continue
            out.append("feature folders: %s -> %s at %s (import through a seam, or add an exception with its reason)" % ("::".join(a), "::".join(b), where))
    return out


# ---------------------------------------------------------------- sizes

FN_RE_STRIPPED = re.compile(r"^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\s*)?fn\s+(\w+)", re.M)


def exempt_before(lines, i):
    """A `// long: reason` on the line before line `i` (0-based), skipping
    attributes and doc comments."""
    j = i - 1
    while j >= 0 and re.match(r"\s*(#\[|///|//!)", lines[j]) and not re.match(r"\s*// long:", lines[j]):
        j -= 1
    return j >= 0 and re.match(r"\s*// long:\s*\S", lines[j]) is not None


def size_violations(mods):
    out = []
    for m in sorted(mods.values(), key=lambda x: x.file):
        lines = m.text.split("\n")
        count = len(lines) - (1 if lines and lines[-1] == "" else 0)
        head_exempt = any(re.match(r"\s*//!?\s*long:\s*\S", l) for l in lines[:10])
        if count > MAX_FILE_LINES and not head_exempt:
            out.append("%s: %d lines (max %d; split it, or `// long: reason` in its first lines)" % (m.file, count, MAX_FILE_LINES))
        full = strip_code(m.text)  # sizes count test code too
        for f in FN_RE_STRIPPED.finditer(full):
            brace = full.find("{", f.end())
            semi = full.find(";", f.end())
            if brace < 0 or (0 <= semi < brace):
                continue  # a declaration without a body
            start = full.count("\n", 0, f.start())
            end = full.count("\n", 0, matching_brace(full, brace))
            n = end - start + 1
            if n > MAX_FN_LINES and not exempt_before(lines, start):
                out.append("%s:%d: fn %s is %d lines (max %d; split it, or `// long: reason` on the line before)" % (m.file, start + 1, f.group(1), n, MAX_FN_LINES))
    return out


# ---------------------------------------------------------------- main

def check(root, show_graph=False, quiet=False):
    mods = load(root)
    edges = graph(mods)
    problems = []
    name = lambda k: "::".join(k)
    if show_graph:
        for a in sorted(edges):
            for b, where in sorted(edges[a].items()):
                print("  %s -> %s  (%s)" % (name(a), name(b), where))
    for comp in cycles(mods.keys(), edges):
        lines = ["import loop: " + " <-> ".join(name(c) for c in comp)]
        s = set(comp)
        for a in comp:
            for b, where in sorted(edges.get(a, {}).items()):
                if b in s:
                    lines.append("    %s -> %s at %s" % (name(a), name(b), where))
        problems.append("\n".join(lines))
    problems += feature_violations(mods, edges)
    problems += size_violations(mods)
    if not quiet:
        nedges = sum(len(v) for v in edges.values())
        print("check_imports: %d files, %d import edges, %d problem(s)" % (len(mods), nedges, len(problems)))
        for p in problems:
            print("  " + p)
    return problems


def write(root, files):
    for rel, text in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as fh:
            fh.write(text)


def self_test():
    long_body = "\n".join("    let _x%d = %d;" % (i, i) for i in range(85))
    cases = [
        ("two files importing each other", False, {
            "src/lib.rs": "mod a;\nmod b;\n",
            "src/a.rs": "use crate::b::B;\npub struct A;\n",
            "src/b.rs": "pub struct B;\nfn f() { let _ = crate::a::A; }\n"}),
        ("a three-file loop", False, {
            "src/lib.rs": "mod a;\nmod b;\nmod c;\n",
            "src/a.rs": "use crate::b::B;\npub struct A;\n",
            "src/b.rs": "use crate::c::{C, D};\npub struct B;\n",
            "src/c.rs": "use crate::a::A;\npub struct C;\npub struct D;\n"}),
        ("a loop in the bench crate", False, {
            "bench/src/lib.rs": "pub mod args;\npub mod paper;\n",
            "bench/src/args.rs": "pub fn num() {}\npub fn parse() { paper::opts::parse() }\nuse crate::paper;\n",
            "bench/src/paper/mod.rs": "pub mod opts;\n",
            "bench/src/paper/opts.rs": "use super::super::args::num;\npub fn parse() { num() }\n"}),
        ("a child importing a parent that uses it", False, {
            "src/lib.rs": "mod server;\n",
            "src/server/mod.rs": "mod conn;\npub struct Ctx;\nfn run() { conn::handle(); }\n",
            "src/server/conn.rs": "use super::Ctx;\npub fn handle() {}\n"}),
        ("a loop through a facade's re-export", False, {
            "src/lib.rs": "mod hub;\n",
            "src/hub/mod.rs": "mod a;\nmod b;\npub use a::A;\npub use b::B;\n",
            "src/hub/a.rs": "use super::B;\npub struct A;\n",
            "src/hub/b.rs": "use super::A;\npub struct B;\n"}),
        ("a tree: facade, children using siblings through it, tests importing anything", True, {
            "src/lib.rs": "pub mod hub;\npub mod ws;\npub use hub::Hub;\n",
            "src/hub/mod.rs": "//! A facade.\nmod registry;\nmod outbox;\npub use outbox::Outbox;\npub use registry::Hub;\n",
            "src/hub/registry.rs": "use super::Outbox;\nuse crate::ws::{frame::Frame, Limits};\npub struct Hub(Outbox);\n",
            "src/hub/outbox.rs": "pub struct Outbox;\n#[cfg(test)]\nmod tests {\n    use super::super::Hub;\n    use crate::hub::registry::Hub as H;\n}\n",
            "src/ws/mod.rs": "pub mod frame;\npub struct Limits;\n#[cfg(test)]\nmod tests;\n",
            "src/ws/tests.rs": "use crate::hub::Hub;\n",
            "src/ws/frame.rs": "pub struct Frame;\nconst S: &str = \"crate::hub::Hub\"; // crate::hub::Hub in a comment\n"}),
        ("a feature folder importing a sibling folder", False, {
            "src/lib.rs": "mod server;\n",
            "src/server/mod.rs": "mod worker;\nmod presence;\nmod pusher;\n",
            "src/server/worker.rs": "pub struct Worker;\n",
            "src/server/presence/mod.rs": "pub mod edge;\n",
            "src/server/presence/edge.rs": "use crate::server::pusher::ws::Session;\npub fn join() {}\n",
            "src/server/pusher/mod.rs": "pub mod ws;\n",
            "src/server/pusher/ws.rs": "pub struct Session;\n"}),
        ("a feature folder's code path into a sibling's redis file", False, {
            "src/lib.rs": "mod server;\n",
            "src/server/mod.rs": "mod redis;\nmod cache;\n",
            "src/server/redis/mod.rs": "pub mod link;\npub struct RedisLink;\n",
            "src/server/redis/link.rs": "pub fn send() {}\n",
            "src/server/cache/mod.rs": "fn f() { crate::server::redis::link::send(); }\n"}),
        ("feature folders through seams, an exception, and the top importing any", True, {
            "src/lib.rs": "mod server;\n",
            "src/server/mod.rs": "mod worker;\nmod redis;\nmod cache;\nmod conn;\nmod pusher;\nfn boot() { pusher::webhook::send(); conn::http::handle(); }\n",
            "src/server/worker.rs": "pub struct Worker;\n",
            "src/server/redis/mod.rs": "mod link;\npub struct RedisLink;\n",
            "src/server/redis/link.rs": "pub fn send() {}\n",
            "src/server/cache/mod.rs": "pub mod origin;\nuse crate::server::redis::RedisLink;\nuse crate::server::worker::Worker;\n",
            "src/server/cache/origin.rs": "pub struct OriginClient;\n",
            "src/server/conn/mod.rs": "pub mod http;\n",
            "src/server/conn/http.rs": "use crate::server::cache::origin::OriginClient;\npub fn handle() {}\n",
            "src/server/pusher/mod.rs": "pub mod webhook;\n",
            "src/server/pusher/webhook.rs": "use crate::server::cache::origin::OriginClient;\nuse crate::server::worker::Worker;\npub fn send() {}\n#[cfg(test)]\nmod tests {\n    use crate::server::conn::http::handle;\n}\n"}),
        ("a function over 80 lines", False, {
            "src/lib.rs": "fn big() {\n%s\n}\n" % long_body}),
        ("a function over 80 lines with a reason", True, {
            "src/lib.rs": "// long: one table, read top to bottom\n#[allow(dead_code)]\nfn big() {\n%s\n}\n" % long_body}),
        ("a file over 700 lines", False, {
            "src/lib.rs": "".join("pub const C%d: u32 = %d;\n" % (i, i) for i in range(701))}),
    ]
    failed = 0
    for title, ok, files in cases:
        with tempfile.TemporaryDirectory() as root:
            write(root, files)
            problems = check(root, quiet=True)
        if (not problems) != ok:
            failed += 1
            print("self-test FAILED: %s: expected %s, got %s" % (title, "pass" if ok else "a failure", problems or "pass"))
    # Brace expansion of `use` trees.
    got = expand_use("a::{b, c::{d, e as f}, self, g::*}")
    want = [["a", "b"], ["a", "c", "d"], ["a", "c", "e"], ["a"], ["a", "g"]]
    if sorted(got) != sorted(want):
        failed += 1
        print("self-test FAILED: expand_use: %s" % got)
    print("check_imports self-test: %d of %d cases behave" % (len(cases) + 1 - failed, len(cases) + 1))
    return failed == 0


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--self-test" in argv:
        return 0 if self_test() else 1
    return 1 if check(root, show_graph="--graph" in argv) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
