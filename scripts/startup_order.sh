#!/usr/bin/env bash
# Makes perf/startup.order: the functions a fresh `corecast` runs, then the
# ones serving its first idle connections runs, which build.rs has the
# linker place first in the text, in that order. A fresh process then maps
# a few 64 KiB windows of code instead of most of the text, and the code
# its first connections bring in sits together right after.
#
# Each round builds the release binary and traces the page faults
# (`perf record -e exceptions:page_fault_user`) of a fresh start: 1.5 s
# idle, then `corecast-bench connect` holding 200 WebSockets for 3 s (past
# --park-after, so they park), then SIGINT. It appends the functions whose
# code faulted and are not in the file yet; once grouped, the next round's
# faults name the code that was still elsewhere. It stops when a round
# finds nothing new or after MAX_ROUNDS.
#
# usage: scripts/startup_order.sh [MAX_ROUNDS]   (default 8; needs perf)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-8}
order=perf/startup.order
bin=target/release/corecast
data=$(mktemp /tmp/corecast-startup.XXXXXX)
trap 'rm -f "$data"' EXIT
touch "$order"
for round in $(seq 1 "$rounds"); do
    cargo build --release -q -p corecast -p corecast-bench
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    perf record -q -o "$data" -e exceptions:page_fault_user -- \
        "$bin" --listen "127.0.0.1:$port" --log-level error &
    sleep 1.5
    target/release/corecast-bench connect --url "ws://127.0.0.1:$port/ws/idle" \
        -n 200 --hold 3 --quiet >/dev/null
    pkill -INT -f "^$bin --listen 127.0.0.1:$port" || true
    wait || true
    faults=$(python3 scripts/startup_faults.py "$data" "$bin")
    code=$(awk '$1 == "x" && $4 != "?" {print $4}' <<<"$faults")
    new=$(grep -vxFf "$order" <<<"$code" | awk '!seen[$0]++' || true)
    echo "round $round: $(wc -l <<<"$code") code faults, $(grep -c . <<<"$new" || true) new functions"
    [ -z "$new" ] && break
    echo "$new" >>"$order"
done
echo "$order: $(wc -l <"$order") functions"
