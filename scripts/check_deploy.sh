#!/usr/bin/env bash
# Checks what can be checked here of the deployment files (no Docker engine
# runs on the development machines): the GitHub workflows and the compose
# file against their JSON schemas, the nginx config with `nginx -t`
# (upstream host and certificate paths swapped for local ones), and the
# systemd unit with `systemd-analyze verify` (when systemd is there; the
# binary's path swapped for the debug build's).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
.venv/bin/check-jsonschema --builtin-schema vendor.compose-spec docker/compose.yml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
    -keyout "$tmp/privkey.pem" -out "$tmp/fullchain.pem" 2>/dev/null
sed -e "s|server corecast:8080|server 127.0.0.1:8080|" \
    -e "s|/etc/nginx/certs|$tmp|g" docker/nginx.conf > "$tmp/nginx.conf"
nginx -t -c "$tmp/nginx.conf" -g "pid $tmp/nginx.pid; error_log stderr;"
if command -v systemd-analyze >/dev/null; then
    cargo build --quiet --bin corecast
    sed "s|/usr/local/bin/corecast|$PWD/target/debug/corecast|" deploy/corecast.service \
        > "$tmp/corecast.service"
    systemd-analyze verify "$tmp/corecast.service"
fi
echo "deploy files: ok"
