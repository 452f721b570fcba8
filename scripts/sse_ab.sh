#!/usr/bin/env bash
# Server-Sent Events vs WebSocket subscribers, alternated (issue 33):
# 1,000 subscribers, 2 HTTP publishers at 100 msg/s in total (100k
# deliveries/s), 128 B, 10 s measured after 3 s; corecast on CPU 0, the
# generator on CPU 1. Usage: scripts/sse_ab.sh [RUNS] (release builds of
# corecast and corecast-bench); JSON reports in target/sse_ab.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
runs=${1:-3}
mkdir -p target/sse_ab
for r in $(seq 1 "$runs"); do
  for mode in ws sse; do
    rm -f target/sse_ab/server_$mode.log
    start_corecast target/release/corecast target/sse_ab/server_$mode.log --cpu 0 --max-connections 30000
    extra=(); [ $mode = sse ] && extra=(--sse)
    out=$(target/release/corecast-bench broadcast --url "ws://$CORECAST_ADDR/ws/b" -n 1000 -p 2 --rate 100 \
        --size 128 --duration 10 --warmup 3 --via http "${extra[@]}" --cpu 1 --server-pid "$CORECAST_PID" --json --quiet)
    kill "$CORECAST_PID"; wait "$CORECAST_PID" 2>/dev/null || true
    echo "$out" > target/sse_ab/run${r}_$mode.json
    echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin)
k=r['latency_kernel']; cpu=r['server']['cpu_percent']
print(f'run=$r $mode lost={r[\"lost\"]} p50={k[\"p50_us\"]/1000:.2f}ms p99={k[\"p99_us\"]/1000:.2f}ms rate={r[\"delivered_per_second\"]:.0f} cpu={cpu:.1f}')"
  done
done
