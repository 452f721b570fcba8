#!/usr/bin/env bash
# The whole test suite: what CI runs and what the README tells you to run.
#
# Installs what it needs when missing (redis-server from Debian, a Python
# venv with the Autobahn runner `kosoku`), then: format check, clippy with
# -D warnings, every cargo test, benches compiled, and the Autobahn
# conformance cases diffed against the committed baseline.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

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

command -v redis-server >/dev/null || need_apt redis-server
if [ ! -x .venv/bin/kosoku ]; then
    step "creating .venv with kosoku"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -r scripts/requirements.txt
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings

# --all-targets also builds the criterion benches and runs each once in
# test mode, so they cannot rot.
step "cargo test --all-targets"
mkdir -p target
set +e
cargo test --all-targets 2>&1 | tee target/test-output.txt
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || exit "$status"

step "Autobahn conformance (kosoku, sections 1-10)"
scripts/autobahn.sh

passed=$(grep -o 'test result: ok. [0-9]* passed' target/test-output.txt | awk '{s+=$4} END {print s+0}')
printf '\nsummary: %s passed, 0 failed\n' "$passed"
