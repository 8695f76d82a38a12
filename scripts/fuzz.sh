#!/usr/bin/env bash
# Open-ended fuzzing campaigns: runs a fuzz target (or each in turn) for a time, growing its
# corpus, until the time is up or it crashes. New inputs go to fuzz/corpus/<target>, or to the
# directory given (which then reads the checked-in corpus as seeds without changing it).
# A crash stops the campaign with the input in fuzz/artifacts/<target>/; minimize it
# (`cargo fuzz tmin -s none -O -a <target> <file>`), add it to fuzz/corpus/<target>/ and add a
# unit test in the crate that owns the code (see fuzz/README.md).
#
# Usage: scripts/fuzz.sh [target|all] [seconds] [corpus-dir]
#   target      one of `cargo fuzz list`, or all (default: all, one after another)
#   seconds     per target (default 600)
#   corpus-dir  where new inputs go (default: fuzz/corpus/<target>); with `all` a
#               <target>/ subdirectory of it
# Before committing a grown corpus, shrink it: cargo fuzz cmin -s none -O -a <target>
# (keep each file under 64 KiB and fuzz/corpus under ~2 MB).
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_FLAGS=(-s none -O -a)
target=${1:-all}
seconds=${2:-600}
out=${3:-}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is missing: cargo install cargo-fuzz --version 0.13.2 --locked" >&2
  exit 1
fi

if [ "$target" = all ]; then
  mapfile -t targets < <(cargo fuzz list)
else
  targets=("$target")
fi

cargo fuzz build "${FUZZ_FLAGS[@]}"
for t in "${targets[@]}"; do
  seeds=()
  if [ -z "$out" ]; then
    dir=fuzz/corpus/$t
  else
    dir=$out
    [ "$target" = all ] && dir=$out/$t
    seeds=(fuzz/corpus/"$t")
  fi
  mkdir -p "$dir" "fuzz/artifacts/$t"
  echo "== $t for ${seconds} s, corpus $dir"
  cargo fuzz run "${FUZZ_FLAGS[@]}" "$t" "$dir" "${seeds[@]}" -- \
    -max_total_time="$seconds" -max_len=16384 -timeout=60 -rss_limit_mb=2048 \
    -print_final_stats=1
done
