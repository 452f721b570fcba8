#!/usr/bin/env bash
# Outbox figures (issue 44), one release build: a PostgreSQL cluster of
# its own (initdb in a temporary directory, as the postgres user when
# root; the book's DDL), corecast on CPU 0 consuming it, the load
# (examples/outbox_bench.rs) on CPU 1.
#
#   scripts/outbox_bench.sh MODE SUBS ROWS SINGLES GAP_MS
#     MODE: notify (LISTEN/NOTIFY) or poll (notify= off, poll=1s)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cargo build --release --quiet --bin corecast --example outbox_bench
mode=$1; shift
bin=target/release/corecast
load=target/release/examples/outbox_bench
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
dir=$(mktemp -d /tmp/corecast-pgbench.XXXXXX)
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown postgres "$dir"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
as_pg "$pgbin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
as_pg "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
cleanup() { kill "${CORECAST_PID:-0}" 2>/dev/null || true; as_pg "$pgbin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
pg="postgres://postgres@127.0.0.1:$port/postgres"
python3 - "$dir" <<'PY' > "$dir/ddl.sql"
import sys
out, inside = [], False
for line in open("docs/src/outbox.md"):
    line = line.rstrip("\n")
    if line == "```sql": inside = True
    elif line.startswith("```"): inside = False
    elif inside: out.append(line)
print("\n".join(out))
PY
psql -q "$pg" -f "$dir/ddl.sql" >/dev/null
case $mode in
notify) q="" ;;
poll) q="&notify=" ;;
*) echo "usage: $0 notify|poll SUBS ROWS SINGLES GAP_MS" >&2; exit 2 ;;
esac
log=$(mktemp)
start_corecast "$bin" "$log" --cpu 0 --max-connections 20000 --consumer "$pg?batch=100$q"
trap 'cleanup; rm -f "$log"' EXIT
taskset -c 1 "$load" "$CORECAST_ADDR" "$pg" "$@"
