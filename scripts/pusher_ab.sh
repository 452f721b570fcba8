#!/usr/bin/env bash
# Alternated Pusher-protocol broadcast runs: corecast against sockudo (or
# any Pusher server), one load generator.
# Usage: pusher_ab.sh RUNS RATE SOCKUDO_BIN
#   per run: corecast (--pusher-app) then sockudo, each alone on CPU 0,
#   `corecast-bench broadcast --via pusher` on CPU 1: 1,000 subscribers on
#   /app/KEY subscribed to `bench`, 2 publishers POSTing signed
#   /apps/ID/events; RATE messages/s (deliveries = RATE x 1,000).
# Then idle memory: 10,000 Pusher connections on a fresh server of each.
# JSON reports go to $OUT (default target/pusher_ab).
set -euo pipefail
runs=$1; rate=$2; sockudo=$3
. "$(dirname "$0")/lib.sh"
bench=${BENCH:-target/release/corecast-bench}
corecast=${CORECAST:-target/release/corecast}
out_dir=${OUT:-target/pusher_ab}
mkdir -p "$out_dir"
app=1:bench-key:bench-secret

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# sockudo 5.2 reads config.json from its working directory.
start_sockudo() {
    local port dir
    port=$(free_port); dir=$(mktemp -d)
    cat >"$dir/config.json" <<EOF
{"host":"127.0.0.1","port":$port,"debug":false,
 "adapter":{"driver":"local"},"cache":{"driver":"memory"},"queue":{"driver":"none"},
 "metrics":{"enabled":false},
 "app_manager":{"driver":"memory","array":{"apps":[{"id":"1","key":"bench-key","secret":"bench-secret",
   "enabled":true,"max_connections":100000,"enable_client_messages":false,
   "max_backend_events_per_second":1000000,"max_client_events_per_second":1000,
   "max_read_requests_per_second":1000000}]}},
 "rate_limiter":{"enabled":false}}
EOF
    (cd "$dir" && exec taskset -c 0 "$sockudo" --config "$dir/config.json") >"$out_dir/sockudo.log" 2>&1 &
    SERVER_PID=$!
    SERVER_ADDR=127.0.0.1:$port
    for _ in $(seq 1 100); do
        if python3 -c "import socket;socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "sockudo did not start:" >&2; cat "$out_dir/sockudo.log" >&2; return 1
}

start() {
    case $1 in
      corecast) start_corecast "$corecast" "$out_dir/corecast.log" --cpu 0 --pusher-app $app \
                    --pusher-max-app-connections 100000 --max-connections 30000
                SERVER_PID=$CORECAST_PID; SERVER_ADDR=$CORECAST_ADDR ;;
      sockudo) start_sockudo ;;
    esac
}

stop() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }

for r in $(seq 1 "$runs"); do
  for name in corecast sockudo; do
    start $name
    out=$("$bench" broadcast --url "ws://$SERVER_ADDR/ws/bench" -n 1000 -p 2 --rate "$rate" \
        --size 128 --duration 10 --warmup 3 --cpu 1 --via pusher --pusher-app $app \
        --server-pid "$SERVER_PID" --json --quiet)
    stop
    echo "$out" > "$out_dir/run_${r}_${name}_${rate}.json"
    echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin)
k=r['latency_kernel']; cpu=r['server']['cpu_percent']
print(f'run=$r $name lost={r[\"lost\"]} p50={k[\"p50_us\"]/1000:.2f}ms p99={k[\"p99_us\"]/1000:.2f}ms rate={r[\"delivered_per_second\"]:.0f} cpu={cpu:.1f}')"
  done
done

for name in corecast sockudo; do
    start $name
    out=$("$bench" connect --url "ws://$SERVER_ADDR/app/bench-key?protocol=7" -n 10000 --hold 1 \
        --cpu 1 --server-pid "$SERVER_PID" --source-ips 127.0.0.2-127.0.0.20 --json --quiet)
    stop
    echo "$out" > "$out_dir/idle_${name}.json"
    echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin); s=r['server']
print(f'idle $name connected={r[\"connected\"]} bytes_per_connection={s[\"rss_bytes_per_connection\"]:.0f}')"
done
