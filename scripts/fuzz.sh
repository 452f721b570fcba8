#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60), starting from
# the committed seed corpus in fuzz/corpus/TARGET. Installs cargo-fuzz when
# missing. cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP=1 enables
# them on the stable toolchain (AddressSanitizer included).
#
#   scripts/fuzz.sh            # 60 s per target
#   scripts/fuzz.sh 3600       # an hour per target
#   scripts/fuzz.sh 30 receiver resp   # chosen targets only
#
# A crash leaves its input in fuzz/artifacts/TARGET/; turn it into a unit
# test next to the code it broke, then fix the code.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
export RUSTC_BOOTSTRAP=1
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cd fuzz && cargo fuzz list)
fi
for t in "${targets[@]}"; do
    corpus=$(mktemp -d)
    cp -r "fuzz/corpus/$t/." "$corpus/" 2>/dev/null || true
    echo "==> fuzz $t for ${secs}s"
    log=$(mktemp)
    set +e
    (cd fuzz && cargo fuzz run "$t" "$corpus" -- -max_total_time="$secs" -print_final_stats=1) >"$log" 2>&1
    rc=$?
    set -e
    grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added)" "$log" || true
    if [ $rc -ne 0 ]; then
        tail -n 40 "$log" >&2
        echo "fuzz target $t failed (exit $rc): see fuzz/artifacts/$t/" >&2
        exit 1
    fi
    rm -rf "$corpus" "$log"
done
