//! The host checks of `keel-tune` (crate keel-tuning), run once at start against the data dir
//! and the shard count, before the shards launch. They read a few `/proc` and `/sys` files and
//! this process's limits (after the broker raised them) and never fail the start:
//! - a failing check is a WARN line, with its fix;
//! - a check that only warns (a recommendation) is an INFO line;
//! - a check that cannot be read (VMs, containers) is a DEBUG line: it says nothing about the
//!   host, so it is not worth alarming anyone;
//! - one INFO line sums them up.

use std::path::Path;

use keel_tuning::{report, run_all, Host, Needs, Status};
use tracing::{debug, info, warn};

/// Runs every host check for a broker of `shards` shards with `io_memory_bytes` per shard
/// and logs what it found.
pub fn log_findings(data_dir: &Path, shards: usize, io_memory_bytes: usize) {
    let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let needs = Needs {
        data_dir,
        shards: shards as u64,
        partitions: Needs::PARTITIONS_DEFAULT,
        io_memory_bytes: io_memory_bytes as u64,
        ballast_path: None,
        ballast_bytes_min: Needs::BALLAST_BYTES_DEFAULT,
    };
    let findings = run_all(&Host::live(), &needs);
    for f in &findings {
        match f.status {
            Status::Ok => {}
            Status::Fail => warn!(
                check = f.check,
                "host check failed: {} is {}, want {}; fix: {}",
                f.check,
                f.current,
                f.recommended,
                f.fix
            ),
            Status::Warn => info!(
                check = f.check,
                "host check: {} is {}, recommended {}; fix: {}",
                f.check,
                f.current,
                f.recommended,
                f.fix
            ),
            Status::Unknown => debug!(
                check = f.check,
                "host check not readable here: {}: {}", f.check, f.current
            ),
        }
    }
    info!(
        "host checks: {} (run keel-tune --data-dir {} for the table)",
        report::summary(&findings),
        needs.data_dir.display()
    );
}
