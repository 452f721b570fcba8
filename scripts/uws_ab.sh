#!/usr/bin/env bash
# The delivery rows of issue 19's table, corecast beside the uWebSockets
# peer (../shared/peers/uws, built with its build.sh), runs alternated.
# Usage: uws_ab.sh RUNS SCENARIO [NAME=BINARY...]
#   SCENARIO: r100 | r200  1,000 subscribers, 2 publishing, 128 B, 100 or
#                          200 msg/s (100k / 200k deliveries/s), 10 s + 3 s
#             fan          10,000 subscribers, 1 publishing, 10 msg/s, 15 s
#   default servers: uws=$UWS (default /tmp/uws-peer/uws-peer) and
#   corecast=target/release/corecast; a NAME starting with "uws" runs its
#   BINARY as the peer (PORT=...), any other as corecast.
# Server on CPU 0 (the peer under taskset, corecast with --cpu 0), the
# generator ($BENCH, default target/release/corecast-bench) on CPU 1. Prints
# one line per run: lost, p50 / p99 at kernel receive time, server CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
runs=$1; scenario=$2; shift 2
[ $# -gt 0 ] || set -- "uws=${UWS:-/tmp/uws-peer/uws-peer}" corecast=target/release/corecast
bench=${BENCH:-target/release/corecast-bench}
out_dir=${OUT:-target/uws_ab}
mkdir -p "$out_dir"
case $scenario in
  r100) load=(-n 1000 -p 2 --rate 100 --duration 10 --warmup 3) ;;
  r200) load=(-n 1000 -p 2 --rate 200 --duration 10 --warmup 3) ;;
  fan) load=(-n 10000 -p 1 --rate 10 --duration 15 --warmup 3 --source-ips 127.0.0.2-127.0.0.20) ;;
  *) echo "unknown scenario $scenario (r100, r200, fan)" >&2; exit 2 ;;
esac
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
for r in $(seq 1 "$runs"); do
  for spec in "$@"; do
    name=${spec%%=*}; bin=${spec#*=}
    [ -x "$bin" ] || { echo "no binary at $bin" >&2; exit 1; }
    if [[ $name == uws* ]]; then
      port=$(free_port)
      PORT=$port taskset -c 0 "$bin" > "$out_dir/server_$name.log" 2>&1 &
      pid=$!; addr=127.0.0.1:$port
      for _ in $(seq 1 100); do
        python3 -c "import socket;socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null && break
        sleep 0.1
      done
    else
      start_corecast "$bin" "$out_dir/server_$name.log" --cpu 0 --max-connections 30000
      pid=$CORECAST_PID; addr=$CORECAST_ADDR
    fi
    out=$("$bench" broadcast --url "ws://$addr/ws/b" "${load[@]}" --size 128 --cpu 1 \
        --server-pid "$pid" --json --quiet)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$out" > "$out_dir/run_${r}_${name}_${scenario}.json"
    echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin)
k=r['latency_kernel']; cpu=r['server']['cpu_percent']
print(f'run=$r $scenario $name lost={r[\"lost\"]} p50={k[\"p50_us\"]/1000:.2f}ms p99={k[\"p99_us\"]/1000:.2f}ms rate={r[\"delivered_per_second\"]:.0f} cpu={cpu:.1f}')"
  done
done
