#!/usr/bin/env bash
# The fuzz targets' part of the test command: builds them (cargo-fuzz, stable toolchain,
# sanitizer off) and runs each over its checked-in corpus, fuzz/corpus/<target>, then for a fixed
# number of mutations from a fixed seed. The corpus is only read: what libFuzzer finds goes to a
# temporary directory that is removed afterwards. Exits non-zero if any target crashes; the
# crashing input is left in fuzz/artifacts/<target>/ (git-ignored) and printed in hex.
#
# Usage: scripts/fuzz-replay.sh [target...]   (default: every target in fuzz/Cargo.toml)
# FUZZ_REPLAY_RUNS_SCALE=N multiplies every target's run count (default 1).
#
# Deterministic as far as the code under test is: the seed, the run counts and the length limit
# are fixed, but std's HashMap (compaction's OffsetMap) seeds itself at random, so the coverage
# of one run, and so which mutations are kept, can differ slightly between runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every cargo-fuzz call uses these: the dev profile (-D; fuzz/Cargo.toml sets it to opt-level 1
# without debug info), debug assertions and overflow checks (-a), no sanitizer (-s none: the
# only mode stable Rust supports). cargo-fuzz builds -O with one codegen unit: cold, 602 s to
# build and 81 s to replay on 2 cores, against 428 s and 105 s this way (2026-12-02).
# Campaigns (scripts/fuzz.sh) still build -O.
FUZZ_FLAGS=(-s none -D -a)
SEED=1
# Mutations per target after the corpus, sized for about 10-25 s each on one core (measured
# 2026-12-02 in a CI run: record_batch 300k in 9 s, storage_files 3M in 11 s; controller_frames
# 2M took 26 s, request_decode 1.5M 33 s and coordinator_records 4M 53 s, so those three were
# cut back to the budget; scram_server 2M in 9 s on a 2-core dev machine, 2026-12-02;
# oauthbearer_server 1M in 11 s there, 2026-12-02).
# `FUZZ_REPLAY_RUNS_SCALE` or scripts/fuzz.sh run longer.
declare -A RUNS=(
  [record_batch]=300000
  [storage_files]=3000000
  [controller_frames]=1500000
  [request_decode]=1000000
  [coordinator_records]=1600000
  [scram_server]=2000000
  [oauthbearer_server]=1000000
)
MAX_LEN=16384
SCALE=${FUZZ_REPLAY_RUNS_SCALE:-1}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is missing: cargo install cargo-fuzz --version 0.13.2 --locked" >&2
  exit 1
fi

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

echo "== cargo fuzz build ${FUZZ_FLAGS[*]}"
start=$(date +%s)
cargo fuzz build "${FUZZ_FLAGS[@]}"
echo "   built in $(($(date +%s) - start)) s"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in "${targets[@]}"; do
  corpus=fuzz/corpus/$t
  if [ ! -d "$corpus" ]; then
    echo "no corpus for $t at $corpus" >&2
    failed+=("$t")
    continue
  fi
  runs=$(( ${RUNS[$t]:-100000} * SCALE ))
  artifacts=fuzz/artifacts/$t
  mkdir -p "$artifacts" "$scratch/$t"
  touch "$scratch/$t.start"
  echo "== $t: $(ls "$corpus" | wc -l) corpus inputs, then $runs runs from seed $SEED"
  start=$(date +%s)
  if cargo fuzz run "${FUZZ_FLAGS[@]}" "$t" "$scratch/$t" "$corpus" -- \
      -seed=$SEED -runs="$runs" -max_len=$MAX_LEN -timeout=60 -rss_limit_mb=2048 \
      -print_final_stats=1 >"$scratch/$t.log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^Done' "$scratch/$t.log" | tr '\n' ' '
    echo "($(($(date +%s) - start)) s)"
  else
    echo "!! $t crashed ($(($(date +%s) - start)) s):"
    grep -v -E '^(INFO|WARNING|#[0-9])' "$scratch/$t.log" | tail -60
    # cargo-fuzz writes the failing input to fuzz/artifacts/<target>/.
    find "$artifacts" -type f -newer "$scratch/$t.start" | while read -r crash; do
      echo "-- $crash"
      od -A x -t x1z -v "$crash" | head -40
    done
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz replay: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}"
  exit 1
fi
echo "fuzz replay: ${#targets[@]} targets passed"
