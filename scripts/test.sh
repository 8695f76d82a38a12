#!/usr/bin/env bash
# Runs every Keel test: installs what the tests need (Debian packages, the Python
# requirements, cargo-fuzz), checks formatting (rustfmt), lints (clippy, warnings are errors) and
# that no crate's modules import each other in a cycle (scripts/module-cycles.py),
# builds the workspace, runs the Rust tests (unit, property, integration with
# librdkafka), replays the fuzz targets' corpora (fixed seed and run count), the kafkajs tests and the Python integration tests (kafka-python, confluent-kafka,
# kcat, Sarama) against the real binary.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# The flatc crate (raft's generated-code freshness test) builds flatbuffers' compiler.
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
# The disk-full test loop-mounts a small ext4 image.
command -v mkfs.ext4 >/dev/null 2>&1 || need_apt+=(e2fsprogs)
# The split-brain test puts brokers in network namespaces (ip netns, veth, a bridge).
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
# The Sarama test (tests/python/test_sarama.py) builds a Go program offline from Debian's
# packaged Sarama sources.
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
test -d /usr/share/gocode/src/github.com/Shopify/sarama || need_apt+=(golang-github-shopify-sarama-dev)
# The TLS tests generate their CA and certificates at test time with the openssl CLI.
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# The rdkafka crate's `ssl` feature (broker/tests/tls.rs: SSL and SASL_SSL from librdkafka)
# links the system OpenSSL: openssl-sys finds its headers and library with pkg-config.
[ "$(dpkg-query -W -f='${Status}' libssl-dev 2>/dev/null)" = "install ok installed" ] ||
  need_apt+=(libssl-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
# The kafkajs test (tests/js) runs on node's built-in test runner and installs kafkajs with npm.
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

echo "== installing Python requirements"
python3 -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt

export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo build"
cargo build --workspace --all-targets
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== module import cycles"
python3 scripts/module-cycles.py vocab auth client simdisk lazyfs storage sim coordinator shard raft broker cli bench tuning
echo "== cargo test"
cargo test --workspace -- --test-threads=2
echo "== fuzz corpus replay"
# cargo-fuzz on the stable toolchain (sanitizer off); pinned, built once per machine.
cargo fuzz --version 2>/dev/null | grep -q '0.13.2' || cargo install cargo-fuzz --version 0.13.2 --locked
(cd fuzz && cargo fmt -- --check)
scripts/fuzz-replay.sh
echo "== kafkajs"
KEEL_BIN="$PWD/target/debug/keel" tests/js/run.sh
echo "== pytest"
KEEL_BIN="$PWD/target/debug/keel" python3 -m pytest -q tests/python
