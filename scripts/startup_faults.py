#!/usr/bin/env python3
"""Maps the user page faults a `perf record -e exceptions:page_fault_user`
trace holds to the symbols of `binary` they fell in.

usage: startup_faults.py PERF_DATA BINARY
prints: KIND VADDR PROT SYMBOL per fault in the binary's mappings, KIND
`x` for an instruction fetch, `d` for data (used by startup_order.sh).
"""
import bisect, re, subprocess, sys
data, binary = sys.argv[1], sys.argv[2]
out = subprocess.run(["perf", "script", "-i", data, "--show-mmap-events", "-F", "trace"],
                     capture_output=True, text=True).stdout
maps = []  # (start, end, pgoff, prot)
for m in re.finditer(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+|0) [^\]]*\]: (\S+) (\S+)", out):
    if m.group(5).endswith("/" + binary.split("/")[-1]) or m.group(5) == binary:
        s, l, off = int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)
        maps.append((s, s + l, off, m.group(4)))
# file offset -> vaddr: from program headers
ph = subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True).stdout
loads = []
for line in ph.splitlines():
    f = line.split()
    if f and f[0] == "LOAD":
        loads.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))  # off, vaddr, filesz
def vaddr(off):
    for o, v, sz in loads:
        if o <= off < o + sz:
            return v + off - o
nm = subprocess.run(["nm", "-n", "--defined-only", "--no-demangle", "-S", binary], capture_output=True, text=True).stdout
syms = []
for line in nm.splitlines():
    f = line.split()
    if len(f) == 4 and f[2] in "tTrRdDbB":
        syms.append((int(f[0], 16), int(f[1], 16), f[3], f[2]))
addrs = [s[0] for s in syms]
seen = []
for line in out.splitlines():
    m = re.search(r"address=(0x[0-9a-f]+) ip=(0x[0-9a-f]+) error_code=(0x[0-9a-f]+)", line)
    if not m:
        continue
    a = int(m.group(1), 16)
    for s, e, off, prot in maps:
        if s <= a < e:
            v = vaddr(a - s + off)
            i = bisect.bisect_right(addrs, v) - 1
            name = syms[i][2] if i >= 0 and v < syms[i][0] + max(syms[i][1], 1) else "?"
            kind = "x" if int(m.group(3), 16) & 0x10 else "d"
            seen.append((kind, hex(v), prot, name))
for k, v, p, n in seen:
    print(k, v, p, n)
