#!/usr/bin/env bash
# Headless Chromium tests (tests/browser): the /status page, the /console (its screenshots go to docs/src/console/ with
# UPDATE_SCREENSHOTS=1, else to target/console-shots/), browser
# WebSocket interop and corecast's own TLS (wss://, https://), against a debug build of corecast. Installs Debian's
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
. scripts/lib.sh
start_corecast ./target/debug/corecast "$log"
addr=$CORECAST_ADDR
cd tests/browser
CORECAST_ADDR="$addr" CORECAST_BIN=../../target/debug/corecast \
    node --test --test-concurrency=1 --test-reporter=spec status.test.mjs deflate.test.mjs tls.test.mjs sse.test.mjs console.test.mjs readme.test.mjs
