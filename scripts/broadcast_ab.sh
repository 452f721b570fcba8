#!/usr/bin/env bash
# Alternated broadcast runs of several corecast builds, one load generator.
# Usage: broadcast_ab.sh RUNS RATE NAME=BINARY...  (e.g. old=/tmp/old/corecast
# new=target/release/corecast): per run, each build in turn on CPU 0 with
# the same load generator ($BENCH, default target/release/corecast-bench)
# on CPU 1; the JSON reports go to $OUT (default target/ab).
set -euo pipefail
runs=$1; rate=$2; shift 2
. "$(dirname "$0")/lib.sh"
bench=${BENCH:-target/release/corecast-bench}
out_dir=${OUT:-target/ab}
mkdir -p "$out_dir"
for r in $(seq 1 "$runs"); do
  for spec in "$@"; do
    name=${spec%%=*}; bin=${spec#*=}
    start_corecast "$bin" "$out_dir/server_$name.log" --cpu 0
    out=$("$bench" broadcast --url "ws://$CORECAST_ADDR/ws/b" -n 1000 -p 2 --rate "$rate" --size 128 \
        --duration 10 --warmup 3 --cpu 1 --server-pid "$CORECAST_PID" --json --quiet)
    kill "$CORECAST_PID"; wait "$CORECAST_PID" 2>/dev/null || true
    echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin)
k=r['latency_kernel']; cpu=r['server']['cpu_percent']
print(f'run=$r $name lost={r[\"lost\"]} p50={k[\"p50_us\"]/1000:.2f}ms p99={k[\"p99_us\"]/1000:.2f}ms rate={r[\"delivered_per_second\"]:.0f} cpu={cpu:.1f}')"
    echo "$out" > "$out_dir/run_${r}_${name}_${rate}.json"
  done
done
