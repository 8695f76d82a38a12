#!/usr/bin/env bash
# kafkajs tests against the real keel binary (KEEL_BIN, default ../../target/debug/keel).
# Installs the pinned kafkajs (package-lock.json) when node_modules is missing or older than
# the lock file, then runs keel.test.mjs with node's built-in test runner.
set -euo pipefail
cd "$(dirname "$0")"

stamp=node_modules/.package-lock.json   # npm writes it on every install
if [ ! -d node_modules/kafkajs ] || [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] \
    || [ package.json -nt "$stamp" ]; then
  npm ci --no-audit --no-fund
fi

exec node --test --test-reporter=spec keel.test.mjs
