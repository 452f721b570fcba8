#!/usr/bin/env bash
# Connect-storm CPU (issue 31): 10,000 WebSocket upgrades against corecast pinned to
# CPU 0, the load generator on CPU 1; modes alternated, 3 rounds:
#   open  (no token), hs256 (--token-secret), rs256 (--token-jwks-url, RS256 2048).
# Server CPU = utime+stime of the corecast process over the whole run
# (10,000 accept + upgrade + token check + hold 1 s + close).
# Needs release builds (cargo build --release -p corecast -p corecast-bench),
# node (the test identity provider, tests/jwks/provider.js), curl, bc.
#   scripts/token_storm.sh [ROUNDS]    # default 5
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mktemp -d)
BIN=target/release
TICK=$(getconf CLK_TCK)
node tests/jwks/provider.js > $OUT/provider.out &
PROV=$!
trap 'kill $PROV 2>/dev/null || true' EXIT
until grep -q PORT $OUT/provider.out; do sleep 0.1; done
JPORT=$(awk '{print $2}' $OUT/provider.out)
CLAIMS='%7B%22exp%22%3A9999999999%2C%22sub%22%3A%22ana%22%7D'
RS=$(curl -s "http://127.0.0.1:$JPORT/control/sign?claims=$CLAIMS")
SECRET=0123456789abcdef0123456789abcdef-bench
HS=$(node -e '
const c=require("crypto");const b=s=>Buffer.from(s).toString("base64url");
const s=b(JSON.stringify({alg:"HS256",typ:"JWT"}))+"."+b(JSON.stringify({exp:9999999999,sub:"ana"}));
process.stdout.write(s+"."+c.createHmac("sha256",process.argv[1]).update(s).digest("base64url"))' "$SECRET")
PORT=9611
cpu() { awk -v t="$TICK" '{printf "%.3f", ($14+$15)/t}' /proc/$1/stat; }
one() {
  local mode=$1 args=() token=
  case $mode in
    open) ;;
    hs256) args=(--token-secret "$SECRET"); token="?token=$HS" ;;
    rs256) args=(--token-jwks-url "http://127.0.0.1:$JPORT/jwks.json"); token="?token=$RS" ;;
  esac
  taskset -c 0 $BIN/corecast --listen 127.0.0.1:$PORT --cpu 0 --log-level warn "${args[@]}" &
  local pid=$!
  until curl -sf http://127.0.0.1:$PORT/healthz >/dev/null; do sleep 0.05; done
  if [ $mode = rs256 ]; then
    until curl -s http://127.0.0.1:$PORT/stats | grep -q '"token_jwks_keys":1'; do sleep 0.05; done
  fi
  local before; before=$(cpu $pid)
  taskset -c 1 $BIN/corecast-bench connect --url "ws://127.0.0.1:$PORT/ws$token" \
      -n 10000 --hold 1 --source-ips 127.0.0.2-127.0.0.11 --cpu 1 --quiet --json > $OUT/$mode.json
  local after; after=$(cpu $pid)
  local st; st=$(curl -s http://127.0.0.1:$PORT/stats)
  local opened auth; opened=$(echo "$st" | grep -o '"websockets_opened":[0-9]*' | cut -d: -f2)
  auth=$(echo "$st" | grep -o '"auth_failures":[0-9]*' | cut -d: -f2)
  local conn; conn=$(python3 -c "import json;d=json.load(open('$OUT/$mode.json'));print(d['connected'], round(d['open_seconds'],2), round(d['handshake']['p50_us']/1000,1))")
  echo "$mode cpu_s=$(echo "$after - $before" | bc) connected/open_s/p50_ms=$conn upgrades=$opened auth_failures=$auth"
  kill $pid; wait $pid 2>/dev/null || true
}
for _ in $(seq "${1:-5}"); do
  for mode in open hs256 rs256; do one $mode; done
done
