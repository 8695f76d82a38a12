//! `keel-storage`: the per-partition segmented log of Keel, in Kafka's on-disk layout
//! (`<base>.log`, `.index`, `.timeindex`, `.txnindex`, `leader-epoch-checkpoint`).
//!
//! A [`Log`] is owned by the shard (glommio executor) that owns the partition and is never sent
//! across threads. Record batches stay opaque bytes: the log validates their header and CRC,
//! stamps baseOffset / partitionLeaderEpoch (and LogAppendTime), and only walks records for
//! ListOffsets by timestamp and for transaction markers. An append decompresses only to
//! recompress into a topic's `compression.type` (`codec.rs`) or to check that every record of a
//! compacted topic has a key. Each log keeps its idempotent
//! producers' state (epoch, last sequences) to refuse out-of-order batches and answer retries
//! with the original offsets, and their open transactions, which hold the last stable offset;
//! aborted transactions are indexed per segment for read_committed fetches and compaction.
//! Invariant: `log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset`.

mod batch;
pub mod codec;
pub mod compact;
pub mod compression_type;
mod epoch;
mod error;
pub mod file_cache;
mod index;
mod io;
pub use io::{create_dir_all_durable, Disk, SimHandle};
pub use keel_simdisk as simdisk;
pub mod io_depth;
mod log;
pub mod poison;
mod producer_state;
mod records;
mod recovery;
pub mod replication;
mod segment;
pub mod tail_budget;
pub mod trash;
mod txn_index;
mod types;
pub mod write_slots;

#[cfg(test)]
mod producer_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod replica_proptests;
#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_tests;

pub use recovery::set_previous_stop_clean;

/// The decoders of untrusted bytes that are private to the crate, for the fuzz targets in
/// `fuzz/` (feature `fuzzing`; nothing else turns it on). Each item is the code the log runs,
/// re-exported unchanged.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    pub use crate::batch::{
        compute_crc, validate_one, BatchHeader, BATCH_LENGTH_AT, CRC_AT, HEADER_BYTES, LOG_OVERHEAD,
    };
    pub use crate::epoch::EpochCache;
    pub use crate::index::{OffsetIndex, TimeIndex};
    pub use crate::producer_state::ProducerStateManager;
    pub use crate::records::{decompress, find_record, unkeyed_records};
    pub use crate::txn_index::TxnIndex;
}

pub use batch::{contains_control_batch, end_offset_of, validate_batches};
pub use error::{RecordError, StorageError, RECORD_ERRORS_MAX};
pub use log::Log;
pub use producer_state::ProducerInfo;
pub use records::{end_txn_marker, EndTxnMarker, MarkerType};
pub use types::{
    AppendInfo, BatchesSummary, CompactionOutcome, FlushPolicy, LeaderEpoch, LogConfig, LogOffsets,
    Offset, ReadResult, RecompressStats, RetentionOutcome, TimestampType, TruncateOutcome,
};
