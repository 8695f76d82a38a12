//! The vocabulary of a check: what the broker will need ([`Needs`]), and what one check found
//! ([`Finding`]). A finding always carries a fix an operator can paste, or says why there is none.

use std::path::PathBuf;

use serde::Serialize;

use crate::host::Host;

/// How a knob compares with what Keel wants. Ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    /// The knob could not be read (missing, unreadable, unparsable); says nothing about the host.
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Unknown => "unknown",
        }
    }
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable name, e.g. `cpu.governor`, `disk.scheduler`; scripts key on it.
    pub check: &'static str,
    pub current: String,
    pub recommended: String,
    pub status: Status,
    /// How to fix it; empty when the status is ok.
    pub fix: String,
}

impl Finding {
    pub fn new(
        check: &'static str,
        current: impl Into<String>,
        recommended: impl Into<String>,
        status: Status,
        fix: impl Into<String>,
    ) -> Finding {
        let fix = if status == Status::Ok {
            String::new()
        } else {
            fix.into()
        };
        Finding {
            check,
            current: current.into(),
            recommended: recommended.into(),
            status,
            fix,
        }
    }

    /// A knob that could not be read: `reason` becomes the current value.
    pub fn unknown(
        check: &'static str,
        reason: impl Into<String>,
        recommended: impl Into<String>,
    ) -> Finding {
        Finding::new(
            check,
            reason,
            recommended,
            Status::Unknown,
            "cannot be read here (VM, container or missing driver?); check on the host",
        )
    }
}

/// What the broker that will run on this host needs; sizes the limit checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// The broker's `--data-dir`, absolute, as seen from the host's root.
    pub data_dir: PathBuf,
    pub shards: u64,
    pub partitions: u64,
    /// io_uring registered memory per shard (`io.memory.bytes`).
    pub io_memory_bytes: u64,
    /// The ballast file (absolute, as seen from the host's root); `None`: `<data_dir>/ballast`.
    pub ballast_path: Option<PathBuf>,
    /// The least a ballast must hold on disk to count as headroom.
    pub ballast_bytes_min: u64,
}

impl Needs {
    /// The broker's default `io.memory.bytes`.
    pub const IO_MEMORY_BYTES_DEFAULT: u64 = 4 * 1024 * 1024;
    /// The partition count assumed when the operator does not say.
    pub const PARTITIONS_DEFAULT: u64 = 1000;
    /// The ballast size wanted when the operator does not say: 1 GiB.
    pub const BALLAST_BYTES_DEFAULT: u64 = 1 << 30;

    /// Where the ballast file is (or should be).
    pub fn ballast(&self) -> PathBuf {
        self.ballast_path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("ballast"))
    }

    /// The cores the shards are pinned to, ascending. The broker puts shard `i` on the `i`-th
    /// core it may use (wrapping when there are more shards than cores), so these are the first
    /// `shards` of the host's allowed CPUs; `0..shards` when those are not known (a fixture root
    /// without `--cpus`).
    pub fn shard_cores(&self, host: &Host) -> Vec<u64> {
        let take = usize::try_from(self.shards).unwrap_or(usize::MAX);
        match host.allowed_cpus() {
            Some(allowed) => allowed.into_iter().take(take).collect(),
            None => (0..self.shards).collect(),
        }
    }
}
