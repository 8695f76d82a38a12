#!/usr/bin/env bash
# The fault simulation's long campaign (issue 20): `scripts/simulate.sh [--replicated
# [--disk-faults] [--disk-full] [--idempotent] [--controller-network] [--metadata-network] [--slow-take-up]
# [--timers]]
# --seeds N [--from S] [--steps K]` runs N seeds of the one-log simulation, or of the replicated partition with what
# the flags add (release build), and prints the counts the docs publish, or the first violation
# with the command that replays it. The test command runs a bounded budget of the same (sim/tests/seeds.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p keel-sim -q
exec target/release/keel-sim "$@"
