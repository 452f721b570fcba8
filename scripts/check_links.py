#!/usr/bin/env python3
"""Fails on a dead relative link or anchor in the project's Markdown.

Checks every `[text](target)` in README.md, SECURITY.md, BENCHMARKS.md,
clients/js/README.md and the Markdown under docs/ (the book, when it
exists): a relative file must exist; an anchor (`#section`, or
`file.md#section`) must name a heading of that file, slugged as GitHub
and mdBook do (lower case, punctuation dropped, spaces to hyphens,
repeats numbered). Links with a scheme (https:, mailto:) are not
fetched. Code spans and fenced blocks are skipped.

usage: scripts/check_links.py [--self-test | FILE.md ...]
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT = ["README.md", "SECURITY.md", "BENCHMARKS.md", "clients/js/README.md"]
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """The lines outside fenced code blocks, with inline code removed."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "", line)


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        fenced = False
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
                continue
            m = None if fenced else HEADING.match(line)
            if m:
                s = slug(m.group(2).replace("`", ""))
                k = seen.get(s, 0)
                seen[s] = k + 1
                found.add(s if k == 0 else f"{s}-{k}")
        cache[path] = found
    return cache[path]


def check(path):
    errors = []
    text = path.read_text(encoding="utf-8")
    for n, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{n}: {target}"
            if not dest.exists():
                errors.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                errors.append(f"{where}: no such heading in {dest.relative_to(ROOT)}")
    return errors


def self_test():
    """The checker finds what it must and nothing else."""
    probe = ROOT / "target" / "check_links_probe.md"
    probe.parent.mkdir(exist_ok=True)
    probe.write_text(
        "# T\n\n## A b `c`\n\n## A b c\n\n"
        "[ok](#a-b-c) [ok2](#a-b-c-1) [bad](#nope) [gone](nope.md)\n"
        "[ok3](../README.md) [web](https://example.com/x) `[code](#skip)`\n"
        "```\n[fenced](#skip)\n```\n",
        encoding="utf-8",
    )
    try:
        found = [e.split(": ", 1)[1] for e in check(probe)]
    finally:
        probe.unlink()
    want = ["#nope: no such heading in target/check_links_probe.md", "nope.md: no such file"]
    assert found == want, found
    print("check_links: self-test passed")


def main(args):
    if args == ["--self-test"]:
        self_test()
        return 0
    files = [ROOT / a for a in args] if args else [ROOT / f for f in DEFAULT]
    if not args:
        files += sorted((ROOT / "docs").rglob("*.md"))
    errors = [e for f in files if f.exists() for e in check(f)]
    for e in errors:
        print(e)
    print(f"check_links: {len(files)} files, {len(errors)} dead link(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
