#!/usr/bin/env bash
# Reproduces docs/performance.md's "TLS and SASL" figures: one Keel broker (release build,
# defaults: one shard per core, flush.policy=group) with a PLAINTEXT, an SSL and a SASL_SSL
# listener (SCRAM-SHA-512 user from --add-scram; certificates made with the openssl CLI as
# tests/python/conftest.py's `certs` fixture does), and in that one process:
#   1. produce throughput: keel-bench compare of the three listeners, max-throughput.toml
#      (consumers reading along; medians over ROUNDS rounds, rotating order);
#   2. fetch throughput: the same compare, fetch-drain.toml (consumers drain a 3 GB backlog
#      while producers write 100 MB/s; "fetch MB/s" counts what they read);
#   3. publish p99 at a fixed rate of half the PLAINTEXT maximum of step 1
#      (fixed-rate-latency.toml, the same shape as max-throughput.toml);
#   4. connection setups per second (TCP, TLS, SaslHandshake + SCRAM, ApiVersions) per shard,
#      the shard count from the broker's /metrics: keel-bench setups on each listener (TLS
#      sessions resumed, as clients do), and on SASL_SSL with full TLS handshakes.
# Results (JSON, HTML, the broker's log) go to ./keel-bench-results/security/.
# Usage: scripts/bench-security.sh   (ROUNDS, DURATION, WARMUP, SETUPS override the defaults;
# SKIP_BUILD=1 runs the release binaries already built)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-3}
SETUPS=${SETUPS:-2000}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -j2 -p keel-broker -p keel-bench
KEEL=$PWD/target/release/keel
BENCH=$PWD/target/release/keel-bench
SHARDS=$(nproc)
PARTITIONS=$((2 * SHARDS))
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keel-bench-security.XXXXXX")
OUT=keel-bench-results/security
mkdir -p "$OUT"
KEEL_PID=
cleanup() {
  [ -f "$WORK/keel.log" ] && cp "$WORK/keel.log" "$OUT/keel.log"
  if [ -n "$KEEL_PID" ]; then kill -TERM "$KEEL_PID" 2>/dev/null || true; wait "$KEEL_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# Certificates: a CA, the broker's key and certificate for 127.0.0.1 (Kafka's PEM keystore).
(
  cd "$WORK"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
    -subj "/CN=Keel Bench CA" 2>/dev/null
  echo "subjectAltName=IP:127.0.0.1,DNS:localhost" >san.cnf
  openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj "/CN=localhost" 2>/dev/null
  openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.pem \
    -days 2 -extfile san.cnf 2>/dev/null
  cat broker.key broker.pem >keystore.pem
)
# The SCRAM user's password: random, for this run only; keel-bench reads it from a variable.
export BENCH_SASL_PASSWORD
BENCH_SASL_PASSWORD=$(openssl rand -hex 16)

PLAIN=127.0.0.1:29092 SSL=127.0.0.1:29093 SASL_SSL=127.0.0.1:29094 ADMIN=127.0.0.1:29644
"$KEEL" --data-dir "$WORK/keel-data" --admin "$ADMIN" \
  --set "listeners=PLAINTEXT://$PLAIN,SSL://$SSL,SASL_SSL://$SASL_SSL" \
  --set "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL" \
  --set "ssl.keystore.location=$WORK/keystore.pem" \
  --set "sasl.enabled.mechanisms=SCRAM-SHA-512" \
  --add-scram "SCRAM-SHA-512=[name=bench,password=$BENCH_SASL_PASSWORD]" \
  >"$WORK/keel.log" 2>&1 &
KEEL_PID=$!
for _ in $(seq 1 300); do
  [ "$(grep -c 'shard serving' "$WORK/keel.log" || true)" -ge "$SHARDS" ] && break
  sleep 0.1
done
grep -q 'shard serving' "$WORK/keel.log" || { echo "keel did not start:" >&2; cat "$WORK/keel.log" >&2; exit 1; }

SECURITY=(--ssl-ca "$WORK/ca.pem" --sasl-mechanism SCRAM-SHA-512 --sasl-username bench
          --sasl-password-env BENCH_SASL_PASSWORD)
TARGETS=(plaintext="PLAINTEXT://$PLAIN" ssl="SSL://$SSL" sasl_ssl="SASL_SSL://$SASL_SSL")
PER_TARGET=()
for t in plaintext ssl sasl_ssl; do
  PER_TARGET+=(--metrics "$t=$ADMIN" --target-pid "$t=$KEEL_PID")
done
compare() { # NAME WORKLOAD [flags...]
  local name=$1 workload=$2; shift 2
  "$BENCH" compare "${TARGETS[@]}" "${SECURITY[@]}" "${PER_TARGET[@]}" \
    --workload "$workload" --partitions "$PARTITIONS" --rounds "$ROUNDS" \
    --no-probe --quiet --out "$OUT/$name" "$@"
}

echo "== 1. produce throughput (max-throughput.toml)"
compare produce bench/workloads/max-throughput.toml --warmup "$WARMUP" --duration "$DURATION"
echo "== 2. fetch throughput (fetch-drain.toml)"
compare fetch bench/workloads/fetch-drain.toml
RATE=$(python3 -c '
import json, statistics, sys
runs = [r for r in json.load(open(sys.argv[1]))["runs"] if r["target"] == "plaintext"]
print(int(statistics.median(r["produce_records_per_s"] for r in runs) / 2))' "$OUT/produce/compare.json")
echo "== 3. publish p99 at $RATE records/s (half the PLAINTEXT maximum of step 1)"
compare fixed-rate bench/workloads/fixed-rate-latency.toml --rate "$RATE" --set rate_fraction_of_max=0 \
  --warmup "$WARMUP" --duration "$DURATION"
echo "== 4. connection setups per shard"
setups() { # NAME ADDRESS [flags...]
  local name=$1 address=$2; shift 2
  "$BENCH" setups --name "$name" --bootstrap "$address" "${SECURITY[@]}" --metrics "$ADMIN" \
    --target-pid "$KEEL_PID" --connections "$SETUPS" --concurrency 16 --threads "$SHARDS" \
    --out "$OUT/setups-$name" "$@"
}
for t in "${TARGETS[@]}"; do
  setups "${t%%=*}" "${t#*=}"
done
setups sasl_ssl-full-handshakes "SASL_SSL://$SASL_SSL" --full-handshakes
