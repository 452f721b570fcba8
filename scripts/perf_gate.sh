#!/usr/bin/env bash
# Performance gate: runs the broadcast scenario in perf/thresholds.json
# against a release build (server on CPU 0, load generator on CPU 1) and
# fails when deliveries are lost, p99 latency (kernel receive time) is over
# its threshold, or throughput is under its floor; then the idle-memory
# scenario (a fresh server, N idle WebSockets held past --park-after) fails
# when a connection costs more RSS than its bound; then a fresh server
# (started fresh_starts times, each sampled after fresh_idle_seconds with
# nothing connected) fails when the median VmRSS is over its bound.
# Reports: target/perf/broadcast.json, idle.json, fresh.json.
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
kill "$CORECAST_PID"; wait "$CORECAST_PID" 2>/dev/null || true
# One sample is at the mercy of the page cache and the machine's proactive
# reclaim (DAMON); the median of a few fresh starts is not.
fresh=()
for _ in $(seq 1 "$(get fresh_starts)"); do
    start_corecast ./target/release/corecast target/perf/fresh-server.log --cpu "$server_cpu"
    sleep "$(get fresh_idle_seconds)" # the measurement point: start-up done, idle since
    fresh+=("$(awk '/^VmRSS:/{print $2}' "/proc/$CORECAST_PID/status")")
    kill "$CORECAST_PID"; wait "$CORECAST_PID" 2>/dev/null || true
done
printf '{"vmrss_kib": [%s]}\n' "$(IFS=,; echo "${fresh[*]}")" > target/perf/fresh.json
python3 - "$cfg" target/perf/broadcast.json target/perf/idle.json target/perf/fresh.json <<'PY'
import json, statistics, sys
t = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
idle = json.load(open(sys.argv[3]))
fresh = json.load(open(sys.argv[4]))["vmrss_kib"]
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
    (f"fresh server RSS, median of {fresh} (KiB)", statistics.median(fresh), "<=",
     t["max_fresh_rss_kib"]),
]
failed = 0
for name, got, op, limit in checks:
    ok = got <= limit if op == "<=" else got >= limit
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {got:.1f} (limit {op} {limit})")
print(f"perf_gate: {len(checks) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
