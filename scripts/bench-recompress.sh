#!/usr/bin/env bash
# Recompression cost (`compression.type`): one release broker, the same fixed-rate workload for each
# topic compression.type, and the deltas of the broker's own counters over each run. Needs
# `cargo build --release -p keel-broker -p keel-bench`. Usage: scripts/bench-recompress.sh [OUTFILE]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/bench_recompress.txt}
DATA=$(mktemp -d); PORT=29092; ADMIN=29644
target/release/keel --listen 127.0.0.1:$PORT --admin 127.0.0.1:$ADMIN --data-dir $DATA --smp 2 > /tmp/bench_keel.log 2>&1 &
KPID=$!
trap 'kill $KPID 2>/dev/null; wait $KPID 2>/dev/null; rm -rf $DATA' EXIT
for i in $(seq 50); do curl -sf 127.0.0.1:$ADMIN/metrics >/dev/null && break; sleep 0.2; done
m() { curl -s 127.0.0.1:$ADMIN/metrics | awk -v n="$1" '$1 ~ "^"n"({|$)" {s+=$2} END {printf "%.6f", s}'; }
echo "# $(date -u +%FT%TZ) $(nproc) cores; workload max-throughput.toml at --rate 20000 (1 KiB records, payload_compressibility 0.5, producer codec none), 15 s, 4 partitions, one release broker --smp 2" | tee $OUT
printf "%-10s %10s %10s %10s %12s %12s %12s\n" type MB_in MB_rewr MB_out recomp_s/MB busy_s/MB append_s/MB | tee -a $OUT
for ct in producer zstd lz4 snappy gzip producer; do
  b0=$(m keel_bytes_in_total); r0=$(m keel_produce_recompress_seconds_total); ri0=$(m keel_produce_recompressed_bytes_in_total); ro0=$(m keel_produce_recompressed_bytes_out_total); s0=$(m keel_shard_busy_seconds_total); a0=$(m keel_produce_append_seconds_total)
  target/release/keel-bench run --bootstrap 127.0.0.1:$PORT --workload bench/workloads/max-throughput.toml \
     --set topic_prefix=ct-$ct-$RANDOM --set topic_configs.compression.type=$ct --rate 20000 --duration 15 --warmup 3 \
     --partitions 4 --no-probe --quiet --out /tmp/bench-rc-$ct > /tmp/bench-rc-$ct.log 2>&1 || { echo "bench failed: $ct"; tail /tmp/bench-rc-$ct.log; }
  b1=$(m keel_bytes_in_total); r1=$(m keel_produce_recompress_seconds_total); ri1=$(m keel_produce_recompressed_bytes_in_total); ro1=$(m keel_produce_recompressed_bytes_out_total); s1=$(m keel_shard_busy_seconds_total); a1=$(m keel_produce_append_seconds_total)
  python3 - "$ct" $b0 $b1 $r0 $r1 $ri0 $ri1 $ro0 $ro1 $s0 $s1 $a0 $a1 <<'PY' | tee -a $OUT
import sys
ct=sys.argv[1]; b0,b1,r0,r1,ri0,ri1,ro0,ro1,s0,s1,a0,a1=map(float,sys.argv[2:])
mb=(b1-b0)/1e6; rw=(ri1-ri0)/1e6; ro=(ro1-ro0)/1e6
print("%-10s %10.1f %10.1f %10.1f %12.5f %12.5f %12.5f" % (ct, mb, rw, ro, (r1-r0)/rw if rw else 0.0, (s1-s0)/mb, (a1-a0)/mb))
PY
done
