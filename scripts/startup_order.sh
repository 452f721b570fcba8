#!/usr/bin/env bash
# Makes perf/startup.order: the functions a fresh `corecast` runs, which
# build.rs has the linker place first in the text (a fresh process then
# maps a few 64 KiB windows of code instead of most of it).
#
# Each round builds the release binary, traces the page faults of a fresh
# start (`perf record -e exceptions:page_fault_user`, 1.5 s, then SIGINT),
# and appends the functions whose code faulted and are not in the file
# yet. Once they are grouped, the next round's faults name the start-up
# code that was still elsewhere; it stops when a round finds nothing new.
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
    cargo build --release -q -p corecast
    perf record -q -o "$data" -e exceptions:page_fault_user -- \
        "$bin" --listen 127.0.0.1:0 --log-level error &
    sleep 1.5
    pkill -INT -f "^$bin --listen 127.0.0.1:0 --log-level error" || true
    wait || true
    faults=$(python3 scripts/startup_faults.py "$data" "$bin")
    code=$(awk '$1 == "x" && $4 != "?" {print $4}' <<<"$faults")
    new=$(grep -vxFf "$order" <<<"$code" | awk '!seen[$0]++' || true)
    echo "round $round: $(wc -l <<<"$code") code faults, $(grep -c . <<<"$new" || true) new functions"
    [ -z "$new" ] && break
    echo "$new" >>"$order"
done
echo "$order: $(wc -l <"$order") functions"
