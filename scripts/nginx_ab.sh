#!/usr/bin/env bash
# TLS through nginx or by corecast itself, on the lone core, alternated:
#   direct: corecast --tls-cert on CPU 0
#   nginx:  nginx (one worker) terminating TLS on CPU 0, in front of a
#           plain corecast on CPU 0 (the deployment this round removes)
# Same load each time (corecast-bench on CPU 1 over wss://: 1,000
# subscribers, 2 HTTP publishers at RATE msg/s in total, 128 B, 10 s after
# 3 s). Prints, per run, p50 / p99 at kernel receive time and the CPU
# seconds of every server process over the whole run (connect, load,
# close): corecast alone, or corecast + nginx.
#   scripts/nginx_ab.sh [RUNS] [RATE]      # 3 runs at 50 msg/s (50k deliveries/s)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}; rate=${2:-50}
out=target/nginx_ab; mkdir -p "$out"
cargo build --release --quiet -p corecast -p corecast-bench --bins
bench=target/release/corecast-bench; bin=target/release/corecast
. scripts/lib.sh
p=$out/pki; mkdir -p "$p"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=nginx-ab-ca -keyout "$p/ca.key" -out "$p/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
    -keyout "$p/key.pem" -out "$p/leaf.csr" 2>/dev/null
echo "subjectAltName=IP:127.0.0.1,DNS:localhost" > "$p/leaf.ext"
openssl x509 -req -days 2 -in "$p/leaf.csr" -CA "$p/ca.pem" -CAkey "$p/ca.key" \
    -CAcreateserial -extfile "$p/leaf.ext" -out "$p/cert.pem" 2>/dev/null
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
ticks() { local t=0; for pid in "$@"; do read -r u s < <(awk '{print $14, $15}' /proc/$pid/stat); t=$((t+u+s)); done; echo $t; }
nginx_conf() { # $1 listen port, $2 upstream host:port
  cat > "$out/nginx.conf" <<EOF
worker_processes 1;
pid $PWD/$out/nginx.pid;
error_log $PWD/$out/nginx.err warn;
events { worker_connections 20000; }
http {
  access_log off;
  map \$http_upgrade \$connection_upgrade { default upgrade; '' close; }
  upstream corecast { server $2; keepalive 32; }
  server {
    listen 127.0.0.1:$1 ssl;
    ssl_certificate $PWD/$p/cert.pem;
    ssl_certificate_key $PWD/$p/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / {
      proxy_pass http://corecast;
      proxy_http_version 1.1;
      proxy_set_header Upgrade \$http_upgrade;
      proxy_set_header Connection \$connection_upgrade;
      proxy_set_header Host \$host;
      proxy_read_timeout 3600s;
      proxy_buffering off;
    }
  }
}
EOF
}
load=(-n 1000 -p 2 --rate "$rate" --duration 10 --warmup 3 --size 128 --via http --tls-ca "$p/ca.pem" --cpu 1 --json --quiet)
report() { # $1 name, $2 json, $3 cpu seconds
  python3 -c "
import json,sys; r=json.load(open('$2')); k=r['latency_kernel']
print(f'run=$run $1 lost={r[\"lost\"]} p50={k[\"p50_us\"]/1000:.2f}ms p99={k[\"p99_us\"]/1000:.2f}ms rate={r[\"delivered_per_second\"]:.0f} server CPU s=$3')"
}
for run in $(seq "$runs"); do
  # direct
  start_corecast "$bin" "$out/direct.log" --cpu 0 --max-connections 30000 \
      --tls-cert "$p/cert.pem" --tls-key "$p/key.pem"
  t0=$(ticks $CORECAST_PID)
  "$bench" broadcast --url "wss://$CORECAST_ADDR/ws/b" "${load[@]}" > "$out/direct_$run.json"
  t1=$(ticks $CORECAST_PID); kill $CORECAST_PID; wait $CORECAST_PID 2>/dev/null || true
  report direct "$out/direct_$run.json" "$(python3 -c "print(($t1-$t0)/100)")"
  # nginx in front
  start_corecast "$bin" "$out/behind.log" --cpu 0 --max-connections 30000
  port=$(free_port); nginx_conf "$port" "$CORECAST_ADDR"
  taskset -c 0 nginx -c "$PWD/$out/nginx.conf" -g 'daemon off;' &
  NGINX_PID=$!
  for _ in $(seq 100); do
    python3 -c "import socket;socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null && break
    sleep 0.1
  done
  workers=$(pgrep -P $NGINX_PID | tr '\n' ' ')
  t0=$(ticks $CORECAST_PID $NGINX_PID $workers)
  "$bench" broadcast --url "wss://127.0.0.1:$port/ws/b" "${load[@]}" > "$out/nginx_$run.json"
  t1=$(ticks $CORECAST_PID $NGINX_PID $workers)
  kill $NGINX_PID; wait $NGINX_PID 2>/dev/null || true
  kill $CORECAST_PID; wait $CORECAST_PID 2>/dev/null || true
  report nginx+corecast "$out/nginx_$run.json" "$(python3 -c "print(($t1-$t0)/100)")"
done
