#!/usr/bin/env bash
# Headless Chromium tests (tests/browser): the /status page and browser
# WebSocket interop, against a debug build of corecast. Installs Debian's
# chromium and the npm package playwright-core when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
if [ ! -d tests/browser/node_modules/playwright-core ]; then
    (cd tests/browser && npm install --no-audit --no-fund --silent)
fi
cargo build --quiet --bin corecast
mkdir -p target/browser
log=target/browser/server.log
./target/debug/corecast --listen 127.0.0.1:0 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
addr=""
for _ in $(seq 1 100); do
    addr=$(grep -o 'addr=127.0.0.1:[0-9]*' "$log" | head -1 | cut -d= -f2 || true)
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || { echo "server did not start"; cat "$log"; exit 1; }
cd tests/browser
CORECAST_ADDR="$addr" node --test --test-reporter=spec status.test.mjs
