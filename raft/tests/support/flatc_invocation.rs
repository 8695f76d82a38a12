//! The one flatc invocation that makes `raft/src/generated/metadata_generated.rs` from
//! `raft/schema/metadata.fbs`. Included (`#[path]`) by `examples/flatc_gen.rs`, which rewrites
//! the committed file, and by `tests/generated_is_fresh.rs`, which checks that it is current, so
//! the two cannot drift apart. flatc is the one the `flatc` crate builds (23.5.26, the release of
//! the `flatbuffers` runtime we pin). flatc writes no path into its Rust output, so the result
//! does not depend on where the checkout lives.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The schema.
pub const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/metadata.fbs");
/// Where the generated code is committed.
pub const COMMITTED_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/generated");
/// The file flatc names after the schema.
pub const GENERATED_FILE: &str = "metadata_generated.rs";

/// Runs flatc on [`SCHEMA`] into `out_dir` (created if missing); returns the generated file.
pub fn generate(out_dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let flatc = flatc::flatc();
    let output = Command::new(flatc)
        .arg("--rust")
        .arg("-o")
        .arg(out_dir)
        .arg(SCHEMA)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", flatc.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed ({}): {}{}",
            flatc.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        ));
    }
    let generated = out_dir.join(GENERATED_FILE);
    if !generated.is_file() {
        return Err(format!(
            "flatc succeeded but wrote no {}",
            generated.display()
        ));
    }
    Ok(generated)
}
