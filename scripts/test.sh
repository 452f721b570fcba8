#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run) and what the README tells you
# to run on a fresh Debian machine with Rust.
#
# Installs what it needs when missing: redis-server, postgresql, chromium
# and nginx from Debian; a Python venv (.venv) with kosoku (Autobahn cases) and
# check-jsonschema; playwright-core from npm; cargo-fuzz. Then: format
# check, the import-graph and size check, the Markdown's links and the
# book (mdBook, installed from crates.io), clippy -D warnings, every cargo
# test of the workspace (benches run once) and the doc tests, the embedding
# example, Autobahn
# against the committed baseline, headless-browser tests, the TypeScript
# client (clients/js: built, packed, tested in Node and Chromium against the
# real binary; scripts/client_test.sh), a fuzz smoke run
# of every target, deployment-file checks, and the performance gate.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# The book's builder (docs/book.toml), installed from crates.io when missing.
MDBOOK_VERSION=0.5.4

need_apt() {
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        step "installing ${missing[*]}"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# openssl and curl: the TLS tests' test CA and clients (tests/tls.rs);
# postgresql: the outbox tests start clusters of their own (tests/pg_support).
need_apt redis-server redis-tools postgresql nginx chromium openssl curl python3-venv
# Node.js may come from elsewhere (NodeSource bundles npm): check the commands.
command -v node >/dev/null || need_apt nodejs
command -v npm >/dev/null || need_apt npm
if [ ! -x .venv/bin/kosoku ] || [ ! -x .venv/bin/check-jsonschema ]; then
    step "creating .venv (kosoku, check-jsonschema)"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -r scripts/requirements.txt
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "import graph, file and function sizes (scripts/check_imports.py)"
python3 scripts/check_imports.py --self-test
python3 scripts/check_imports.py

step "relative links and anchors in the Markdown (scripts/check_links.py)"
python3 scripts/check_links.py --self-test
python3 scripts/check_links.py

step "the book (docs/, mdBook $MDBOOK_VERSION; a warning fails it)"
mdbook="${CARGO_HOME:-$HOME/.cargo}/bin/mdbook"
if ! "$mdbook" --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
    cargo install --quiet --locked mdbook --version "$MDBOOK_VERSION"
fi
book_log=$("$mdbook" build docs 2>&1) || { echo "$book_log"; exit 1; }
if grep -E "WARN|ERROR" <<<"$book_log"; then
    echo "mdbook build docs: warnings are errors" >&2
    exit 1
fi

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

# --all-targets also builds the criterion benches and runs each once in
# test mode, so they cannot rot; --workspace includes corecast-bench
# (bench/), whose CLI tests run the corecast binary built alongside.
step "cargo test --workspace --all-targets"
mkdir -p target
set +e
{
    cargo test --workspace --all-targets 2>&1 &&
        cargo test --workspace --doc 2>&1
} | tee target/test-output.txt
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || exit "$status"

# The whole-server suites whose settings several workers serve, again
# with two workers (issue 42): connections alternate between them, so
# every publish in them crosses workers (or, in Redis mode, where each
# worker is an instance, goes through Redis between them).
# tests/workers.rs and tests/redis_workers.rs run two workers in the pass
# above; a test that counts one instance's Redis connections keeps one
# worker (common::one_worker_per_server); idle_memory, not listed,
# measures one worker's memory.
step "the whole-server suites again with --workers 2 (CORECAST_TEST_WORKERS=2)"
set +e
CORECAST_TEST_WORKERS=2 cargo test -p corecast --test access --test broadcast --test control \
    --test http_api --test identity_tokens --test isolation --test metrics --test namespaces \
    --test parking --test pressure --test protocol --test resources --test shutdown \
    --test smuggling --test sse --test tls --test compression --test python_websockets \
    --test redis --test redis_ack --test redis_history --test redis_cluster --test redis_hostile \
    --test redis_tls --test redis_drivers --test presence_redis --test pusher_redis \
    --test sse_redis --test console --test hooks --test hooks_admission --test hooks_api \
    --test hooks_namespaces --test hooks_server_subscriptions --test hooks_session --test jwks \
    --test limits --test tls_abuse --test history --test presence --test presence_refusals \
    --test pusher_protocol --test pusher_js --test cache --test origin_tls --test filters \
    --test filters_redis --test conflation --test deltas --test deltas_redis --test redis_sentinel \
    --test outbox --test outbox_stream --test outbox_tls 2>&1 |
    tee target/test-output-workers.txt
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || exit "$status"

step "examples/embed.rs: the embedding example runs and exits"
cargo run --quiet --example embed

step "Autobahn conformance (kosoku, sections 1-10 and 12-13)"
scripts/autobahn.sh

step "headless Chromium: status page and browser WebSocket interop"
scripts/browser_test.sh

step "clients/js: TypeScript client (npm ci, build, npm pack, node tests, headless Chromium)"
scripts/client_test.sh

step "fuzz smoke (every target, ${FUZZ_SECONDS:-5}s each)"
scripts/fuzz.sh "${FUZZ_SECONDS:-5}"

step "deployment files (workflow and compose schemas, nginx -t)"
scripts/check_deploy.sh

step "performance gate (perf/thresholds.json)"
scripts/perf_gate.sh

passed=$(grep -o 'test result: ok. [0-9]* passed' target/test-output.txt | awk '{s+=$4} END {print s+0}')
printf '\nsummary: %s passed, 0 failed\n' "$passed"
