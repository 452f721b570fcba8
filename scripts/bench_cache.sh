#!/usr/bin/env bash
# HTTP cache benchmarks (BENCHMARKS.md, "HTTP cache"): corecast (release)
# pinned to CPU 0; the origin (scripts/cache_origin.py, 20 ms per request),
# redis-server and the load (wrk, scripts/cache_stampede.py) on CPU 1.
#
# For the in-memory store and the Redis store:
#   1. miss latency: wrk -c1, a new key per request (every request a miss)
#   2. hit latency:  wrk -c1 on one stored key, 3 rounds, each after a
#      /healthz control round (see the comment there)
#   3. hit throughput: wrk -t1 -c64 on one stored key, 3 rounds
#   4. origin requests caused by 1,000 concurrent requests for a cold key
#
#   scripts/bench_cache.sh [SECONDS] [STORES]
#       SECONDS per wrk run (default 10); STORES "memory redis" (default both)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
STORES=${2:-memory redis}
DELAY_MS=20
BIN=target/release/corecast
command -v wrk >/dev/null || { echo "needs wrk (apt-get install -y wrk)"; exit 1; }
cargo build --release --quiet --bin corecast

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # url expected-status
    for _ in $(seq 200); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = "$2" ] && return 0
        sleep 0.05
    done
    echo "no $2 from $1"; exit 1
}

origin_port=$(free_port)
taskset -c 1 python3 scripts/cache_origin.py "$origin_port" "$DELAY_MS" & pids+=($!)
wait_http "http://127.0.0.1:$origin_port/__count" 200
origin_count() { curl -s "http://127.0.0.1:$origin_port/__count"; }

lua=$(mktemp --suffix=.lua)
cat >"$lua" <<'EOF'
-- every request a new key: every request a miss
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/api/miss/" .. wrk.thread:get("id") .. "/" .. n)
end
setup = function(thread) thread:set("id", tostring(math.random(1e9))) end
EOF

run_store() { # memory | redis
    local store=$1 port args=() redis_port
    port=$(free_port)
    args=(--listen "127.0.0.1:$port" --cpu 0 --log-level warn
          --origin "http://127.0.0.1:$origin_port" --max-connections 5000)
    if [ "$store" = redis ]; then
        redis_port=$(free_port)
        taskset -c 1 redis-server --port "$redis_port" --bind 127.0.0.1 --save '' \
            --appendonly no >/dev/null & pids+=($!)
        args+=(--redis-url "redis://127.0.0.1:$redis_port")
    fi
    "$BIN" "${args[@]}" & local server=$!
    pids+=("$server")
    wait_http "http://127.0.0.1:$port/readyz" 200
    local base="http://127.0.0.1:$port"

    echo "=== $store: miss latency (wrk -t1 -c1 -d${SECS}s, new key per request)"
    taskset -c 1 wrk -t1 -c1 -d"${SECS}s" --latency -s "$lua" "$base/" | sed -n '/Latency Distribution/,/Requests\/sec/p'

    # This machine (a shared 2-vCPU VM) has stretches of several seconds in
    # which every request, /healthz included, sees 1-5 ms stalls; each hit
    # latency round is therefore paired with a /healthz control.
    curl -s -o /dev/null "$base/api/hot"
    for round in 1 2 3; do
        echo "=== $store: round $round: control GET /healthz (wrk -t1 -c1 -d5s)"
        taskset -c 1 wrk -t1 -c1 -d5s --latency "$base/healthz" | grep -E '50%|75%|90%|99%|Requests/sec'
        echo "=== $store: round $round: hit latency (wrk -t1 -c1 -d5s, one key)"
        taskset -c 1 wrk -t1 -c1 -d5s --latency "$base/api/hot" | grep -E '50%|75%|90%|99%|Requests/sec'
    done

    for round in 1 2 3; do
        echo "=== $store: round $round: hit throughput (wrk -t1 -c64 -d${SECS}s, one key)"
        taskset -c 1 wrk -t1 -c64 -d"${SECS}s" --latency "$base/api/hot" | grep -E '50%|75%|90%|99%|Requests/sec'
    done

    echo "=== $store: 1000 concurrent requests for one cold key (5 runs)"
    for run in 1 2 3 4 5; do
        local before after
        before=$(origin_count)
        taskset -c 1 python3 scripts/cache_stampede.py "127.0.0.1:$port" "/api/cold/$store/$run" 1000
        after=$(origin_count)
        echo "run $run: origin requests $((after - before))"
    done
    curl -s "$base/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin); print({k: v for k, v in s.items() if k.startswith("cache_")})'
    kill "$server"
    wait "$server" 2>/dev/null || true
}

for store in $STORES; do run_store "$store"; done
rm -f "$lua"
