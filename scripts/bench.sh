#!/usr/bin/env bash
# Reproduces the throughput and latency figures of docs/performance.md on this machine:
#   1. keel-bench probe: the disk's sequential O_DIRECT write bandwidth, 4 KiB write+fdatasync
#      latency, loopback TCP bandwidth and round trip;
#   2. Keel (flush.policy=group, durable) at max throughput: 1 KiB, acks=all,
#      partitions = 2 x shards;
#   3. Keel at a fixed rate of half that maximum (publish latency percentiles);
#   4. keel-bench compare: Keel against tansu with in-memory and with sqlite storage
#      (../shared/peers/tansu-start.sh; tansu is built by cargo the first time, ~15 min).
# Results (JSON, HTML reports) go to ./keel-bench-results/<name>/.
# Usage: scripts/bench.sh [probe|max|rate|compare|all] (default all). DURATION=seconds overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-5}
PEERS=${PEERS:-../shared/peers}
cargo build --release -p keel-broker -p keel-bench
KEEL=$PWD/target/release/keel
BENCH=$PWD/target/release/keel-bench
SHARDS=$(nproc)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench.XXXXXX")
OUT=keel-bench-results
mkdir -p "$OUT"
pids=()
cleanup() {
  [ -f "$WORK/keel.log" ] && cp "$WORK/keel.log" "$OUT/keel.log"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  if [ -n "${TANSU_MEM:-}" ]; then "$PEERS/tansu-stop.sh" "$WORK/tansu-mem" >/dev/null 2>&1 || true; fi
  if [ -n "${TANSU_SQL:-}" ]; then "$PEERS/tansu-stop.sh" "$WORK/tansu-sql" >/dev/null 2>&1 || true; fi
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

start_keel() {
  "$KEEL" --data-dir "$WORK/keel-data" --listen 127.0.0.1:29092 --admin 127.0.0.1:29644 >"$WORK/keel.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    [ "$(grep -c 'shard serving' "$WORK/keel.log" || true)" -ge "$SHARDS" ] && return 0
    sleep 0.1
  done
  echo "keel did not start; log:" >&2; cat "$WORK/keel.log" >&2; exit 1
}

if [[ $what == probe || $what == all ]]; then
  "$BENCH" probe --dir "$WORK" --out "$OUT/probe"
fi
if [[ $what == max || $what == rate || $what == all || $what == compare ]]; then
  start_keel
fi
if [[ $what == max || $what == all ]]; then
  "$BENCH" run --name keel --bootstrap 127.0.0.1:29092 --metrics 127.0.0.1:29644 \
    --workload bench/workloads/max-throughput.toml --partitions $((2 * SHARDS)) \
    --warmup "$WARMUP" --duration "$DURATION" --probe-dir "$WORK" --out "$OUT/max-throughput"
fi
if [[ $what == rate || $what == all ]]; then
  "$BENCH" run --name keel --bootstrap 127.0.0.1:29092 --metrics 127.0.0.1:29644 \
    --workload bench/workloads/fixed-rate-latency.toml --partitions $((2 * SHARDS)) \
    --warmup "$WARMUP" --duration "$DURATION" --probe-dir "$WORK" --out "$OUT/fixed-rate-latency"
fi
if [[ $what == compare || $what == all ]]; then
  TANSU_MEM=1 TANSU_STORAGE=memory "$PEERS/tansu-start.sh" 19092 "$WORK/tansu-mem" >/dev/null
  TANSU_SQL=1 TANSU_STORAGE=sqlite "$PEERS/tansu-start.sh" 19093 "$WORK/tansu-sql" >/dev/null
  TANSU_MEM=1 TANSU_SQL=1
  "$BENCH" compare keel=127.0.0.1:29092 tansu-memory=127.0.0.1:19092 tansu-sqlite=127.0.0.1:19093 \
    --metrics keel=127.0.0.1:29644 --workload bench/workloads/max-throughput.toml \
    --partitions $((2 * SHARDS)) --rounds 2 --warmup "$WARMUP" --duration "$DURATION" \
    --probe-dir "$WORK" --quick-probe --out "$OUT/compare-tansu"
fi
