//! `keel-storage`: the per-partition segmented log of Keel, in Kafka's on-disk layout
//! (`<base>.log`, `.index`, `.timeindex`, `leader-epoch-checkpoint`).
//!
//! A [`Log`] is owned by the shard (glommio executor) that owns the partition and is never sent
//! across threads. Record batches stay opaque bytes: the log validates their header and CRC,
//! stamps baseOffset / partitionLeaderEpoch (and LogAppendTime), and only walks records for
//! ListOffsets by timestamp. Each log keeps its idempotent producers' state (epoch, last
//! sequences) to refuse out-of-order batches and answer retries with the original offsets.
//! Invariant: `log_start_offset <= high_watermark <= log_end_offset`.

mod batch;
pub mod compact;
mod epoch;
mod error;
pub mod file_cache;
mod index;
mod io;
mod log;
mod producer_state;
mod records;
mod recovery;
mod segment;
pub mod tail_budget;
mod types;

#[cfg(test)]
mod producer_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests;

pub use batch::validate_batches;
pub use error::StorageError;
pub use log::Log;
pub use producer_state::ProducerInfo;
pub use types::{
    AppendInfo, BatchesSummary, CompactionOutcome, FlushPolicy, LeaderEpoch, LogConfig, LogOffsets,
    Offset, ReadResult, RetentionOutcome, TimestampType,
};
