#!/usr/bin/env bash
# Regenerates raft/src/generated/metadata_generated.rs from raft/schema/metadata.fbs with the
# flatc that the `flatc` crate builds (23.5.26, the release of the pinned `flatbuffers` runtime).
# Run it after editing the schema and commit both; raft/tests/generated_is_fresh.rs checks that
# they agree. Extra arguments go to the generator (an output directory other than the default).
# The example links keel-raft, so the crate must build with the committed generated code: if it
# does not, restore that file from git first, then regenerate.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q -p keel-raft --example flatc_gen -- "$@"
