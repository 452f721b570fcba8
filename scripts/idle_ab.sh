#!/usr/bin/env bash
# Idle memory per connection, side by side: the uWebSockets peer
# (../shared/peers/uws, built with its build.sh; UWS=path to the binary)
# and corecast at its defaults (parking after 2 s), alternated. Server on
# CPU 0, corecast-bench on CPU 1; N connections held HOLD seconds; the RSS
# per connection is taken at the end of the hold; the server CPU (user and
# system) over connecting, holding and closing them is printed too.
#   scripts/idle_ab.sh            # N=19000 HOLD=6, 2 runs
#   TLS=1 scripts/idle_ab.sh      # the same over wss://: uws-peer-tls
#                                 # (build.sh --tls) beside corecast
#                                 # --tls-cert, a fresh test CA's leaf
set -u
cd "$(dirname "$0")/.."
N=${N:-19000}; HOLD=${HOLD:-6}; RUNS=${RUNS:-2}
TLS=${TLS:-0}
if [ "$TLS" = 1 ]; then UWS=${UWS:-/tmp/uws-peer/tls/uws-peer-tls}; else UWS=${UWS:-/tmp/uws-peer/uws-peer}; fi
CORECAST=${CORECAST:-target/release/corecast}   # another build to measure
[ -x "$UWS" ] || { echo "no uWS peer at $UWS (build ../shared/peers/uws/build.sh, set UWS)" >&2; exit 1; }
cargo build --release --quiet -p corecast -p corecast-bench --bins
B=target/release/corecast-bench
. scripts/lib.sh
cpu_ticks() { awk '{print $14, $15}' /proc/$1/stat; }
mkdir -p target/idle_ab
SCHEME=ws; TLS_FLAGS=(); BENCH_TLS=()
if [ "$TLS" = 1 ]; then
  P=target/idle_ab/pki; mkdir -p $P
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -subj /CN=idle-ab-ca -keyout $P/ca.key -out $P/ca.pem 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
      -keyout $P/key.pem -out $P/leaf.csr 2>/dev/null
  echo "subjectAltName=IP:127.0.0.1,DNS:localhost" > $P/leaf.ext
  openssl x509 -req -days 2 -in $P/leaf.csr -CA $P/ca.pem -CAkey $P/ca.key -CAcreateserial \
      -extfile $P/leaf.ext -out $P/cert.pem 2>/dev/null
  export TLS_CERT=$P/cert.pem TLS_KEY=$P/key.pem
  SCHEME=wss; TLS_FLAGS=(--tls-cert $P/cert.pem --tls-key $P/key.pem); BENCH_TLS=(--tls-ca $P/ca.pem)
fi
for run in $(seq "$RUNS"); do for n in uws corecast; do
  if [ $n = uws ]; then start_uws "$UWS" target/idle_ab/$n.log; SPID=$UWS_PID; ADDR=$UWS_ADDR
  else start_corecast "$CORECAST" target/idle_ab/$n.log --cpu 0 --max-connections 30000 "${TLS_FLAGS[@]}"
    SPID=$CORECAST_PID; ADDR=$CORECAST_ADDR; fi
  read -r au as < <(cpu_ticks $SPID)
  $B connect --url $SCHEME://$ADDR/ws/idle "${BENCH_TLS[@]}" -n "$N" --hold "$HOLD" --cpu 1 --server-pid $SPID \
      --source-ips 127.0.0.2-127.0.0.40 --json --quiet > target/idle_ab/$n.json
  read -r bu bs < <(cpu_ticks $SPID); kill $SPID; wait $SPID 2>/dev/null
  python3 -c "
import json; r=json.load(open('target/idle_ab/$n.json')); s=r['server']
print('$SCHEME N=$N run=$run $n: connected', r['connected'], '| RSS KiB fresh', s['rss_before_kib'], 'connected', s['rss_connected_kib'], 'held', s['rss_held_kib'], '| B/conn held', round(s['rss_bytes_per_connection']), '| accept+hold+close CPU s', ($bu+$bs-$au-$as)/100, '(user', ($bu-$au)/100, 'system', ($bs-$as)/100, end=')\n')"
done; done
