#!/usr/bin/env bash
# Tag filters on vs off, alternated, one release build: server CPU at
# RATE x 1,000 deliveries/s.
# Usage: filter_ab.sh RUNS RATE BINARY
# Per run, two servers in turn on CPU 0 (--token-secret, --cpu 0), the
# load generator ($BENCH, default target/release/corecast-bench) on CPU 1:
# 1,000 path-mode subscribers whose token grants `b`, 2 publishers
# POSTing RATE msg/s in all, each message tagged sym=BTC, price=50100,
# side=buy (--publish-query). `off`: the token has no filters; `on`: its
# `filters` claim gives every subscriber a 3-node filter (and: sym in
# [BTC,ETH], price gt 100, side neq sell) that every message passes, so
# both deliver the same and the difference is the filter's cost. Prints
# lost, p50 / p99 and server CPU per run; JSON reports go to $OUT
# (default target/filter-ab).
set -euo pipefail
runs=$1; rate=$2; bin=$3
. "$(dirname "$0")/lib.sh"
bench=${BENCH:-target/release/corecast-bench}
out_dir=${OUT:-target/filter-ab}
mkdir -p "$out_dir"
secret=filter-ab-secret-of-at-least-32-bytes
token() {
    python3 - "$secret" "$1" <<'PY'
import base64, hashlib, hmac, json, sys
secret, filters = sys.argv[1].encode(), json.loads(sys.argv[2])
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
claims = {"exp": 4102444800, "subscribe": ["*"]}
if filters:
    claims["filters"] = filters
head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
body = b64(json.dumps(claims).encode())
sig = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
print(f"{head}.{body}.{b64(sig)}")
PY
}
filter='{"b":{"op":"and","nodes":[{"key":"sym","cmp":"in","vals":["BTC","ETH"]},{"key":"price","cmp":"gt","val":"100"},{"key":"side","cmp":"neq","val":"sell"}]}}'
declare -A tokens=([off]=$(token '{}') [on]=$(token "$filter"))
for r in $(seq 1 "$runs"); do
  for name in off on; do
    start_corecast "$bin" "$out_dir/server_$name.log" --cpu 0 --max-connections 30000 \
        --token-secret "$secret"
    pid=$CORECAST_PID; addr=$CORECAST_ADDR
    out=$("$bench" broadcast --url "ws://$addr/ws/b?token=${tokens[$name]}" -n 1000 -p 2 \
        --via http --publish-query 'tag.sym=BTC&tag.price=50100&tag.side=buy' \
        --rate "$rate" --duration 10 --warmup 3 --size 128 \
        --cpu 1 --server-pid "$pid" --json --quiet)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin)
k=r['latency_kernel']; cpu=r['server']['cpu_percent']
print(f'run=$r $name lost={r[\"lost\"]} p50={k[\"p50_us\"]/1000:.2f}ms p99={k[\"p99_us\"]/1000:.2f}ms rate={r[\"delivered_per_second\"]:.0f} cpu={cpu:.1f}')"
    echo "$out" > "$out_dir/run_${r}_${name}_${rate}.json"
  done
done
