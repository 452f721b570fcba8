#!/usr/bin/env bash
# Idle memory per connection, side by side: the uWebSockets peer
# (../shared/peers/uws, built with its build.sh; UWS=path to the binary)
# and corecast at its defaults (parking after 2 s), alternated. Server on
# CPU 0, corecast-bench on CPU 1; N connections held HOLD seconds; the RSS
# per connection is taken at the end of the hold; the server CPU (user and
# system) over connecting, holding and closing them is printed too.
#   scripts/idle_ab.sh            # N=19000 HOLD=6, 2 runs
set -u
cd "$(dirname "$0")/.."
N=${N:-19000}; HOLD=${HOLD:-6}; RUNS=${RUNS:-2}
UWS=${UWS:-/tmp/uws-peer/uws-peer}
CORECAST=${CORECAST:-target/release/corecast}   # another build to measure
[ -x "$UWS" ] || { echo "no uWS peer at $UWS (build ../shared/peers/uws/build.sh, set UWS)" >&2; exit 1; }
cargo build --release --quiet -p corecast -p corecast-bench --bins
B=target/release/corecast-bench
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14, $15}' /proc/$1/stat; }
mkdir -p target/idle_ab
for run in $(seq "$RUNS"); do for n in uws corecast; do
  P=$(free_port)
  if [ $n = uws ]; then PORT=$P taskset -c 0 "$UWS" > target/idle_ab/$n.log 2>&1 &
  else taskset -c 0 "$CORECAST" --listen 127.0.0.1:$P --cpu 0 --max-connections 30000 > target/idle_ab/$n.log 2>&1 & fi
  SPID=$!
  for i in $(seq 50); do python3 -c "import socket;socket.create_connection(('127.0.0.1',$P),0.2)" 2>/dev/null && break; sleep 0.1; done
  read -r au as < <(cpu_ticks $SPID)
  $B connect --url ws://127.0.0.1:$P/ws/idle -n "$N" --hold "$HOLD" --cpu 1 --server-pid $SPID \
      --source-ips 127.0.0.2-127.0.0.40 --json --quiet > target/idle_ab/$n.json
  read -r bu bs < <(cpu_ticks $SPID); kill $SPID; wait $SPID 2>/dev/null
  python3 -c "
import json; r=json.load(open('target/idle_ab/$n.json')); s=r['server']
print('N=$N run=$run $n: connected', r['connected'], '| RSS KiB fresh', s['rss_before_kib'], 'connected', s['rss_connected_kib'], 'held', s['rss_held_kib'], '| B/conn held', round(s['rss_bytes_per_connection']), '| accept+hold+close CPU s', ($bu+$bs-$au-$as)/100, '(user', ($bu-$au)/100, 'system', ($bs-$as)/100, end=')\n')"
done; done
