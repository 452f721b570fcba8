#!/usr/bin/env bash
# The TypeScript client (clients/js, package corecast-client): installs its
# pinned dev tools from its lockfile (npm ci) when missing, type-checks and
# builds it, checks that `npm pack` ships the build and only that, runs its
# node:test tests against the real corecast binary (with redis-server),
# then headless Chromium loading the built client (tests/browser/client.test.mjs),
# the SSE transport's tests with both (test/sse.test.mjs, client_sse.test.mjs).
# Installs Debian's chromium and redis-server, and playwright-core, when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v redis-server >/dev/null || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# npm ci when node_modules is missing or older than the lockfile.
stamp=clients/js/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ clients/js/package-lock.json -nt "$stamp" ]; then
    (cd clients/js && npm ci --no-audit --no-fund --silent)
fi
if [ ! -d tests/browser/node_modules/playwright-core ]; then
    (cd tests/browser && npm install --no-audit --no-fund --silent)
fi
cargo build --quiet --bin corecast
cd clients/js
npm run --silent build
# The issue's API, its names a contract, type-checked against the built
# declarations, with the DOM's WebSocket and the ws package's.
node_modules/.bin/tsc -p test/types
# The package holds the built ESM and its declarations, the README and
# package.json: no sources, tests or lockfile.
npm pack --dry-run --json 2>/dev/null | node -e '
  const files = JSON.parse(require("fs").readFileSync(0, "utf8"))[0].files.map((f) => f.path).sort();
  const need = ["README.md", "dist/index.d.ts", "dist/index.js", "dist/client.js", "package.json"];
  const missing = need.filter((f) => !files.includes(f));
  const stray = files.filter((f) => !/^(dist\/[a-z]+\.(js|d\.ts)|README\.md|package\.json)$/.test(f));
  if (missing.length || stray.length) {
    console.error("npm pack: missing", missing, "unexpected", stray);
    process.exit(1);
  }
  console.log(`npm pack: ${files.length} files`);
'
# What a user gets: the packed tarball installs into an empty project
# (no dependencies to fetch) and imports with its types.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
npm pack --silent --pack-destination "$tmp" >/dev/null
(cd "$tmp" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent ./corecast-client-*.tgz &&
    test -f node_modules/corecast-client/dist/index.d.ts &&
    node --input-type=module -e 'import { Client } from "corecast-client"; if (typeof Client !== "function") process.exit(1);')
echo "npm pack: the tarball installs and imports"
node --test --test-concurrency=1 --test-reporter=spec test/unit.test.mjs test/client.test.mjs test/sse.test.mjs \
    test/sending_less.test.mjs
cd ../../tests/browser
node --test --test-concurrency=1 --test-reporter=spec client.test.mjs client_sse.test.mjs client_docs.test.mjs \
    client_sending_less.test.mjs
