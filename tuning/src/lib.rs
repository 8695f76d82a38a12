//! keel-tuning: checks the host Keel runs on against what a thread-per-core broker on NVMe
//! wants (CPU governor, data-disk queue, kernel knobs, resource limits, filesystem).
//!
//! Every check reads the machine through [`Host`], which is rooted at a directory (`/` on a live
//! host, a fixture tree in tests). A check never fails and never panics: a knob that cannot be
//! read (a VM, a container, a missing driver) is reported as [`Status::Unknown`] with the reason.
//! Only [`apply`] writes, through the same [`Host`], and only when asked (`--apply`).
//! [`iotune`] (`keel-tune iotune`) measures the data disk with a probe file it removes, and
//! writes the io-properties file the broker sizes its I/O from.
//! Nothing here runs on a shard; `keel-tune` is a plain single-threaded binary.

pub mod apply;
pub mod check;
pub mod checks;
pub mod host;
pub mod iotune;
pub mod mounts;
pub mod report;

pub use check::{Finding, Needs, Status};
pub use checks::run_all;
pub use host::{Host, Limit, Resource, Rlimit};
