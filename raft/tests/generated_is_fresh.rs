//! Fails when the committed `raft/src/generated/metadata_generated.rs` is not what flatc makes
//! from `raft/schema/metadata.fbs` now: the schema was edited without regenerating, or the
//! generated file was edited by hand. Regenerates into a temporary directory with the same
//! invocation as `scripts/gen-flatbuffers.sh` and compares bytes.

use std::path::Path;

#[path = "support/flatc_invocation.rs"]
mod flatc_invocation;

const FIX: &str = "run scripts/gen-flatbuffers.sh and commit the result";

#[test]
fn committed_generated_code_matches_schema() {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let fresh_path = flatc_invocation::generate(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let fresh = std::fs::read(&fresh_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", fresh_path.display()));
    let committed_path =
        Path::new(flatc_invocation::COMMITTED_DIR).join(flatc_invocation::GENERATED_FILE);
    let committed = std::fs::read(&committed_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {FIX}", committed_path.display()));
    if fresh != committed {
        // Name the first differing line rather than dumping two 60 KiB files.
        let line = first_differing_line(&fresh, &committed);
        panic!(
            "{} differs from flatc's output for {} (first at line {line}): {FIX}",
            committed_path.display(),
            flatc_invocation::SCHEMA,
        );
    }
}

/// 1-based number of the first line where `a` and `b` differ.
fn first_differing_line(a: &[u8], b: &[u8]) -> usize {
    let same = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    1 + a[..same].iter().filter(|&&c| c == b'\n').count()
}
