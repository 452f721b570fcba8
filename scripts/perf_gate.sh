#!/usr/bin/env bash
# Performance gate: runs the broadcast scenario in perf/thresholds.json
# against a release build (server on CPU 0, load generator on CPU 1) and
# fails when deliveries are lost, p99 latency (kernel receive time) is over
# its threshold, or throughput is under its floor; then the idle-memory
# scenario (a fresh server, N idle WebSockets held past --park-after) fails
# when a connection costs more RSS than its bound, or the fresh server
# (before its first connection) holds more than its bound. Reports: target/perf/broadcast.json, idle.json.
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=perf/thresholds.json
get() { python3 -c "import json,sys; print(json.load(open('$cfg'))['$1'])"; }
cargo build --release --quiet -p corecast -p corecast-bench --bins
mkdir -p target/perf
ncpu=$(nproc)
server_cpu=0; load_cpu=$(( ncpu > 1 ? 1 : 0 ))
. scripts/lib.sh
start_corecast ./target/release/corecast target/perf/server.log --cpu "$server_cpu"
addr=$CORECAST_ADDR
pid=$CORECAST_PID
./target/release/corecast-bench broadcast --url "ws://$addr/ws/perf" \
    -n "$(get subscribers)" -p "$(get publishers)" --rate "$(get rate)" --size "$(get size)" \
    --duration "$(get duration_seconds)" --warmup "$(get warmup_seconds)" \
    --cpu "$load_cpu" --server-pid "$pid" --json --quiet > target/perf/broadcast.json
kill "$pid"; wait "$pid" 2>/dev/null || true
start_corecast ./target/release/corecast target/perf/idle-server.log --cpu "$server_cpu"
./target/release/corecast-bench connect --url "ws://$CORECAST_ADDR/ws/idle" \
    -n "$(get idle_connections)" --hold "$(get idle_hold_seconds)" --cpu "$load_cpu" --server-pid "$CORECAST_PID" \
    --json --quiet > target/perf/idle.json
python3 - "$cfg" target/perf/broadcast.json target/perf/idle.json <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
idle = json.load(open(sys.argv[3]))
p99 = r["latency_kernel"]["p99_us"]
rate = r["delivered_per_second"]
checks = [
    ("lost deliveries", r["lost"], "<=", t["max_lost"]),
    ("p99 latency at kernel receive (us)", p99, "<=", t["max_p99_kernel_us"]),
    ("delivered per second", rate, ">=", t["min_delivered_per_second"]),
    ("idle connections failed", idle["failed"], "<=", 0),
    ("heap per idle connection (anonymous RSS, bytes)",
     idle["server"]["anon_bytes_per_connection"], "<=", t["max_idle_bytes_per_connection"]),
    ("server RSS with the idle connections held (KiB)", idle["server"]["rss_held_kib"], "<=",
     t["max_idle_held_rss_kib"]),
    ("fresh server RSS (KiB)", idle["server"]["rss_before_kib"], "<=", t["max_fresh_rss_kib"]),
]
failed = 0
for name, got, op, limit in checks:
    ok = got <= limit if op == "<=" else got >= limit
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {got:.1f} (limit {op} {limit})")
print(f"perf_gate: {len(checks) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
