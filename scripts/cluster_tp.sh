#!/usr/bin/env bash
# Two corecast instances through a 3-master Redis Cluster vs through one
# Redis: broadcast p99, CPU of each process. Everything server-side on CPU 0,
# the generator on CPU 1. Usage: cluster_tp.sh RUNS RATE
set -u
runs=$1; rate=$2
cd "$(dirname "$0")/.."
B=target/release/corecast-bench; C=target/release/corecast
D=$(mktemp -d)
fp() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# Cluster nodes need port + 10000 free too (the bus): stay below 55000.
fpc() { python3 -c '
import socket,random
while True:
    p=random.randint(20000,54999)
    try:
        for q in (p,p+10000):
            s=socket.socket(); s.bind(("127.0.0.1",q)); s.close()
        print(p); break
    except OSError: pass'; }
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
addr_of() { for i in $(seq 100); do a=$(grep -o 'addr=127.0.0.1:[0-9]*' $1 | head -1 | cut -d= -f2); [ -n "$a" ] && { echo $a; return; }; sleep 0.1; done; }
for r in $(seq $runs); do for mode in single cluster; do
  pids=(); rp=()
  if [ $mode = single ]; then
    p=$(fp); taskset -c 0 redis-server --port $p --save '' --appendonly no > $D/r.log 2>&1 & pids+=($!); rp+=($!)
    until redis-cli -p $p ping >/dev/null 2>&1; do sleep 0.05; done
    flag="--redis-url redis://127.0.0.1:$p"
  else
    ports=(); for i in 1 2 3; do p=$(fpc); ports+=($p); mkdir -p $D/$p
      (cd $D/$p && exec taskset -c 0 redis-server --port $p --cluster-enabled yes --cluster-config-file nodes.conf --save '' --appendonly no) > $D/$p/log 2>&1 & pids+=($!); rp+=($!); done
    for p in ${ports[@]}; do until redis-cli -p $p ping >/dev/null 2>&1; do sleep 0.05; done; done
    redis-cli --cluster create 127.0.0.1:${ports[0]} 127.0.0.1:${ports[1]} 127.0.0.1:${ports[2]} --cluster-yes > $D/create.log 2>&1
    until redis-cli -p ${ports[0]} cluster info | grep -q 'cluster_state:ok'; do sleep 0.1; done
    flag="--redis-cluster 127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
  fi
  taskset -c 0 $C --listen 127.0.0.1:0 --cpu 0 --log-level info $flag 2> $D/a.log & A=$!; pids+=($A)
  taskset -c 0 $C --listen 127.0.0.1:0 --cpu 0 --log-level info $flag 2> $D/b.log & Bp=$!; pids+=($Bp)
  aa=$(addr_of $D/a.log); ba=$(addr_of $D/b.log)
  for a in $aa $ba; do until curl -sf http://$a/readyz >/dev/null; do sleep 0.1; done; done
  t0=(); for p in ${rp[@]} $A $Bp; do t0+=($(ticks $p)); done; s0=$(date +%s.%N)
  $B broadcast --cluster --url ws://$aa/ws/b --url ws://$ba/ws/b -n 1000 -p 2 --rate $rate --size 128 --duration 10 --warmup 3 --cpu 1 --json --quiet > $D/out.json
  s1=$(date +%s.%N); t1=(); for p in ${rp[@]} $A $Bp; do t1+=($(ticks $p)); done
  cpus=""; i=0; for p in ${rp[@]} $A $Bp; do cpus="$cpus $(python3 -c "print(round(((${t1[$i]})-(${t0[$i]}))/($s1-$s0),1))")"; i=$((i+1)); done
  python3 -c "
import json; r=json.load(open('$D/out.json')); k=r['latency_kernel']
print('run=$r $mode lost',r['lost'],'p50',round(k['p50_us']/1000,2),'p99',round(k['p99_us']/1000,2),'rate',round(r['delivered_per_second']),'cpu% (redis nodes..., a, b):$cpus')"
  kill ${pids[@]} 2>/dev/null; wait 2>/dev/null
done; done
