#!/usr/bin/env bash
# What presence costs the deliveries (issue 15), Redis mode, runs alternated:
#   presence_cost.sh RUNS
# Each run, with presence off and then on (`--presence-channels room`):
# redis-server and corecast on CPU 0, and on CPU 1 scripts/presence_churn.py
# (1,000 users in `room`, 100 replaced per second) beside
# `corecast-bench broadcast` (1,000 path-mode subscribers of `b`, 100 msg/s
# = 100k deliveries/s). Prints p50/p99 of the deliveries, corecast's CPU,
# and Redis commands (inside scripts too) and script calls per second
# during the measured window.
set -euo pipefail
runs=$1
. "$(dirname "$0")/lib.sh"
bench=${BENCH:-target/release/corecast-bench}
corecast=${CORECAST:-target/release/corecast}
python=${PYTHON:-.venv/bin/python}
out_dir=${OUT:-target/presence_cost}
mkdir -p "$out_dir"
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# Commands Redis ran (those inside scripts included), and script calls.
commands() { redis-cli -p "$1" info stats | awk -F: '/^total_commands_processed/ {print $2+0}'; }
scripts() { redis-cli -p "$1" info commandstats | awk -F'[=,]' '/^cmdstat_evalsha:/ {print $2+0; f=1} END {if (!f) print 0}'; }

for r in $(seq 1 "$runs"); do
  for mode in off on; do
    rport=$(free_port)
    taskset -c 0 redis-server --port "$rport" --save '' --appendonly no >"$out_dir/redis.log" 2>&1 &
    rpid=$!
    until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.05; done
    flags=(--cpu 0 --redis-url "redis://127.0.0.1:$rport")
    [ "$mode" = on ] && flags+=(--presence-channels room)
    start_corecast "$corecast" "$out_dir/corecast.log" "${flags[@]}"
    taskset -c 1 "$python" scripts/presence_churn.py "ws://$CORECAST_ADDR" room \
        --users 1000 --rate 100 --seconds 25 >"$out_dir/churn_${r}_$mode.json" &
    churn=$!
    # Let the 1,000 users connect before measuring.
    until [ "$(curl -s "http://$CORECAST_ADDR/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"])')" -ge 1000 ]; do sleep 0.2; done
    c0=$(commands "$rport"); e0=$(scripts "$rport"); t0=$(date +%s.%N)
    out=$("$bench" broadcast --url "ws://$CORECAST_ADDR/ws/b" -n 1000 -p 2 --rate 100 --size 128 \
        --duration 10 --warmup 3 --cpu 1 --server-pid "$CORECAST_PID" --json --quiet)
    c1=$(commands "$rport"); e1=$(scripts "$rport"); t1=$(date +%s.%N)
    wait "$churn"
    kill "$CORECAST_PID"; wait "$CORECAST_PID" 2>/dev/null || true
    kill "$rpid"; wait "$rpid" 2>/dev/null || true
    echo "$out" >"$out_dir/run_${r}_$mode.json"
    echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin); k=r['latency_kernel']; cpu=r['server']['cpu_percent']
churn=json.load(open('$out_dir/churn_${r}_$mode.json'))
print(f'run=$r presence=$mode lost={r[\"lost\"]} p50={k[\"p50_us\"]/1000:.2f}ms p99={k[\"p99_us\"]/1000:.2f}ms '
      f'cpu={cpu:.1f} redis_cmds_per_s={($c1-$c0)/($t1-$t0):.0f} evalsha_per_s={($e1-$e0)/($t1-$t0):.0f} churn_opened={churn[\"opened\"]} churn_errors={churn[\"errors\"]}')"
  done
done
