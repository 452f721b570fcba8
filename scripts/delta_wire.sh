#!/usr/bin/env bash
# Deltas on the wire (issue 43), one release build: corecast on CPU 0
# (--cpu 0, --compression true, namespace doc with delta = "fossil"), the
# load (examples/delta_wire.rs, built here) on CPU 1.
#
#   scripts/delta_wire.sh bytes SUBS MSGS RATE     # the four modes at once
#   scripts/delta_wire.sh cpu RUNS SUBS MSGS RATE  # plain vs delta, alternated
#
# `bytes`: SUBS subscribers per mode (plain, deflate, delta, delta-deflate)
# on one server, one stream of MSGS documents: bytes per message per
# subscriber. `cpu`: RUNS pairs of runs, each on a fresh server, with
# SUBS subscribers that are all plain or all delta: the server's CPU and
# µs per delivery for the same documents (deflate off in both).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cargo build --release --quiet --bin corecast --example delta_wire
bin=target/release/corecast
load=target/release/examples/delta_wire
log=$(mktemp)
run() { # MODES SUBS MSGS RATE
    start_corecast "$bin" "$log" --cpu 0 --compression true --namespace 'doc:delta=fossil' \
        --max-connections 20000
    taskset -c 1 "$load" "$CORECAST_ADDR" "$CORECAST_PID" "$@"
    kill "$CORECAST_PID"; wait "$CORECAST_PID" 2>/dev/null || true
}
case $1 in
bytes) run plain,deflate,delta,delta-deflate "$2" "$3" "$4" ;;
cpu)
    for i in $(seq 1 "$2"); do
        for mode in plain delta; do
            echo "== run $i: $mode"
            run "$mode" "$3" "$4" "$5" 2>&1 | grep -E 'server CPU|^\{'
        done
    done ;;
*) echo "usage: $0 bytes SUBS MSGS RATE | cpu RUNS SUBS MSGS RATE" >&2; exit 2 ;;
esac
