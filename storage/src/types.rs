//! The partition log's types: offsets and epochs (from `keel-vocab`), the topic-level log
//! configuration and the values returned by appends and reads. Plain values, no I/O; used on
//! whichever shard owns the partition.

use std::str::FromStr;

pub use keel_vocab::{LeaderEpoch, Offset};

/// When an acknowledged append is made durable (`flush.policy`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Acknowledge after write + fdatasync; concurrent commits share one sync.
    Group,
    /// Acknowledge after the write reaches the file; fdatasync on a timer (`Log::sync`).
    Interval,
}

impl FromStr for FlushPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "group" => Ok(FlushPolicy::Group),
            "interval" => Ok(FlushPolicy::Interval),
            other => Err(format!(
                "unknown flush policy {other:?} (expected group|interval)"
            )),
        }
    }
}

/// Kafka `message.timestamp.type`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

impl FromStr for TimestampType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "CreateTime" => Ok(TimestampType::CreateTime),
            "LogAppendTime" => Ok(TimestampType::LogAppendTime),
            other => Err(format!(
                "unknown timestamp type {other:?} (expected CreateTime|LogAppendTime)"
            )),
        }
    }
}

/// The default [`LogConfig::write_bytes_max`]: 1 MiB.
pub const WRITE_BYTES_MAX_DEFAULT: u64 = 1024 * 1024;

/// Per-topic log configuration (Kafka names in the field docs).
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// `segment.bytes`: roll the active segment before it would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll the active segment once it is older than this.
    pub segment_ms: u64,
    /// `max.message.bytes`: largest accepted batch, header included.
    pub max_message_bytes: u32,
    /// `index.interval.bytes`: log bytes between sparse index entries.
    pub index_interval_bytes: u32,
    /// `flush.policy` (Keel): when `commit` makes an append durable.
    pub flush_policy: FlushPolicy,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
    /// `compression.type`: `producer` stores batches as sent; any other codec rewrites batches
    /// that differ (see `codec.rs`).
    pub compression_type: crate::compression_type::CompressionType,
    /// `compression.gzip.level`, `compression.lz4.level`, `compression.zstd.level` (KIP-390).
    pub compression_gzip_level: i32,
    pub compression_lz4_level: i32,
    pub compression_zstd_level: i32,
    /// Bytes of the most recent batches kept in memory per partition.
    pub tail_cache_bytes: usize,
    /// `retention.ms`: closed segments whose newest timestamp is older are deleted; -1 keeps
    /// forever.
    pub retention_ms: i64,
    /// `retention.bytes`: oldest closed segments are deleted while the log stays at least this
    /// big without them; -1 = no limit.
    pub retention_bytes: i64,
    /// `cleanup.policy` contains `delete`: retention applies.
    pub cleanup_delete: bool,
    /// `cleanup.policy` contains `compact`: the latest record per key is kept; records
    /// without a key are refused.
    pub cleanup_compact: bool,
    /// `delete.retention.ms`: tombstones older than this are removed by compaction.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`: compact when dirty bytes / cleanable bytes reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a record stays uncompacted at least this long.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty record is compacted within about this long, whatever
    /// the dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `producer.id.expiration.ms` (a broker setting in Kafka, not a topic one): a producer
    /// whose last batch's timestamp is at least this old, and with no open transaction, is
    /// forgotten (its next batch is accepted at any sequence).
    pub producer_id_expiration_ms: i64,
    /// Most bytes handed to one DMA `write_at` of the `.log` (bounds a flush's DMA buffer; one
    /// batch larger than this still goes in one write). The broker's `log.write.buffer.bytes`.
    pub write_bytes_max: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1_073_741_824,
            segment_ms: 604_800_000,
            max_message_bytes: 1_048_588,
            index_interval_bytes: 4096,
            flush_policy: FlushPolicy::Group,
            message_timestamp_type: TimestampType::CreateTime,
            compression_type: crate::compression_type::CompressionType::Producer,
            compression_gzip_level: crate::compression_type::GZIP_LEVEL_DEFAULT,
            compression_lz4_level: crate::compression_type::LZ4_LEVEL_DEFAULT,
            compression_zstd_level: crate::compression_type::ZSTD_LEVEL_DEFAULT,
            tail_cache_bytes: 4 * 1024 * 1024,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            cleanup_delete: true,
            cleanup_compact: false,
            delete_retention_ms: 86_400_000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            producer_id_expiration_ms: 86_400_000,
            write_bytes_max: WRITE_BYTES_MAX_DEFAULT,
        }
    }
}

/// Result of one `Log::append`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub base_offset: Offset,
    /// Offset of the last record appended (inclusive).
    pub last_offset: Offset,
    /// The broker time stamped into the batches, or -1 under CreateTime.
    pub log_append_time_ms: i64,
    pub log_start_offset: Offset,
    /// Offsets consumed: sum of `lastOffsetDelta + 1` over the batches; 0 for a duplicate.
    pub record_count: u32,
    /// The batch repeats one of its producer's last five (a retry of a batch already
    /// appended): nothing was appended, and the offsets and time above are the original
    /// batch's. Kafka answers such a produce with NONE and these offsets.
    pub duplicate: bool,
    /// Set when `compression.type` made the append rewrite batches into the topic's codec.
    pub recompressed: Option<RecompressStats>,
}

/// The cost of one append's recompression (`compression.type` other than `producer`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RecompressStats {
    /// Bytes of the rewritten batches as produced, and as stored.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Time spent decompressing and compressing, on the owner shard.
    pub nanos: u64,
}

/// Result of one `Log::read`.
#[derive(Clone, Debug)]
pub struct ReadResult {
    /// Zero or more whole record batches.
    pub records: bytes::Bytes,
    pub high_watermark: Offset,
    pub last_stable_offset: Offset,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
}

/// The offsets of a partition:
/// `log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LogOffsets {
    pub log_start_offset: Offset,
    /// Kafka's LSO (exclusive): every offset below it is below the high watermark and in no
    /// open transaction, so a read_committed consumer reads up to here. The first offset of
    /// the earliest transaction whose marker is not yet below the high watermark (never below
    /// the log start offset), else the high watermark.
    pub last_stable_offset: Offset,
    pub high_watermark: Offset,
    pub log_end_offset: Offset,
}

/// What `validate_batches` learned about a buffer of batches without touching records.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BatchesSummary {
    pub batch_count: u32,
    /// Sum of `lastOffsetDelta + 1`: the offsets the batches will consume.
    pub record_count: u64,
    /// Largest `maxTimestamp` among the batches (-1 when all are -1).
    pub max_timestamp_ms: i64,
    /// Batches with a producer id (idempotent or transactional).
    pub producer_batches: u32,
    /// Batches with the transactional or the control attribute bit.
    pub transactional_batches: u32,
}

/// What one retention pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    /// The log start offset after the pass.
    pub log_start_offset: Offset,
}

/// What one compaction pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactionOutcome {
    pub segments_in: usize,
    pub segments_out: usize,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub records_dropped: u64,
    /// Everything below is clean (the cleaner checkpoint).
    pub cleaned_up_to: Offset,
}

/// What one `Log::truncate_to` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TruncateOutcome {
    /// The log end offset afterwards: the requested offset, or the base offset of the batch
    /// holding it (truncation keeps whole batches).
    pub log_end_offset: Offset,
    /// Whether anything was removed (false when the log ended at or before the offset).
    pub truncated: bool,
    /// The truncation removed offsets below the high watermark (Kafka allows it with a
    /// warning: an unclean leader election or a lost acknowledged write).
    pub below_high_watermark: bool,
    /// Whole segments deleted.
    pub segments_deleted: usize,
}
