//! Regenerates the flatbuffers code of the metadata records from `raft/schema/metadata.fbs`.
//!
//! `cargo run -p keel-raft --example flatc_gen [-- OUT_DIR]`, OUT_DIR defaulting to
//! `raft/src/generated` (wherever it is run from). `scripts/gen-flatbuffers.sh` runs this; the
//! invocation itself is shared with the freshness test.

use std::path::PathBuf;
use std::process::ExitCode;

#[path = "../tests/support/flatc_invocation.rs"]
mod flatc_invocation;

fn main() -> ExitCode {
    let out_dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(flatc_invocation::COMMITTED_DIR));
    match flatc_invocation::generate(&out_dir) {
        Ok(path) => {
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flatc_gen: {e}");
            ExitCode::FAILURE
        }
    }
}
