#!/usr/bin/env bash
# Alternated broadcast runs of several servers, one load generator.
# Usage: broadcast_ab.sh RUNS RATE|fan NAME=BINARY...
#   RATE: 1,000 subscribers, 2 of them publishing RATE msg/s in total
#         (RATE x 1,000 deliveries/s), 128 B, 10 s measured after 3 s
#   fan:  10,000 subscribers, 1 publishing 10 msg/s, 15 s after 3 s
#   NAME=BINARY: a corecast build (old=/tmp/old/corecast
#   new=target/release/corecast; BINARY@FLAGS runs it with FLAGS, commas
#   for spaces, instead of --cpu 0: w2=target/release/corecast@--workers,2,--cpus,0-1),
#   or, for a NAME starting with "uws", the
#   uWebSockets peer (uws=/tmp/uws-peer/uws-peer, from
#   ../shared/peers/uws/build.sh).
# Per run, each server in turn on CPU 0 (corecast with --cpu 0, the peer
# under taskset) with the same load generator ($BENCH, default
# target/release/corecast-bench) on CPU 1; prints lost, p50 / p99 at kernel
# receive time and server CPU per run; the JSON reports go to $OUT
# (default target/ab).
# TLS=1: the same over wss:// (a fresh test CA's P-256 leaf; corecast with
# --tls-cert, the peer built with build.sh --tls and TLS_CERT/TLS_KEY);
# publishers then POST /publish over TLS on connections of their own.
set -euo pipefail
runs=$1; rate=$2; shift 2
. "$(dirname "$0")/lib.sh"
bench=${BENCH:-target/release/corecast-bench}
out_dir=${OUT:-target/ab}
mkdir -p "$out_dir"
scheme=ws; tls_flags=(); bench_tls=()
if [ "${TLS:-0}" = 1 ]; then
  p=$out_dir/pki; mkdir -p "$p"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -subj /CN=ab-ca -keyout "$p/ca.key" -out "$p/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
      -keyout "$p/key.pem" -out "$p/leaf.csr" 2>/dev/null
  echo "subjectAltName=IP:127.0.0.1,DNS:localhost" > "$p/leaf.ext"
  openssl x509 -req -days 2 -in "$p/leaf.csr" -CA "$p/ca.pem" -CAkey "$p/ca.key" \
      -CAcreateserial -extfile "$p/leaf.ext" -out "$p/cert.pem" 2>/dev/null
  export TLS_CERT=$p/cert.pem TLS_KEY=$p/key.pem
  scheme=wss; tls_flags=(--tls-cert "$p/cert.pem" --tls-key "$p/key.pem")
  bench_tls=(--tls-ca "$p/ca.pem" --via http)
fi
case $rate in
  fan) load=(-n 10000 -p 1 --rate 10 --duration 15 --warmup 3 --source-ips 127.0.0.2-127.0.0.20) ;;
  *) load=(-n 1000 -p 2 --rate "$rate" --duration 10 --warmup 3) ;;
esac
for r in $(seq 1 "$runs"); do
  for spec in "$@"; do
    name=${spec%%=*}; bin=${spec#*=}; pin=(--cpu 0)
    if [[ $bin == *@* ]]; then IFS=, read -r -a pin <<< "${bin#*@}"; bin=${bin%%@*}; fi
    if [[ $name == uws* ]]; then
      start_uws "$bin" "$out_dir/server_$name.log"
      pid=$UWS_PID; addr=$UWS_ADDR
    else
      start_corecast "$bin" "$out_dir/server_$name.log" "${pin[@]}" --max-connections 30000 "${tls_flags[@]}"
      pid=$CORECAST_PID; addr=$CORECAST_ADDR
    fi
    out=$("$bench" broadcast --url "$scheme://$addr/ws/b" "${bench_tls[@]}" "${load[@]}" --size 128 \
        --cpu 1 --server-pid "$pid" --json --quiet)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$out" | python3 -c "
import json,sys; r=json.load(sys.stdin)
k=r['latency_kernel']; cpu=r['server']['cpu_percent']
print(f'$scheme run=$r $name lost={r[\"lost\"]} p50={k[\"p50_us\"]/1000:.2f}ms p99={k[\"p99_us\"]/1000:.2f}ms rate={r[\"delivered_per_second\"]:.0f} cpu={cpu:.1f}')"
    echo "$out" > "$out_dir/run_${r}_${name}_${rate}.json"
  done
done
