//! The one error enum of `keel-storage`. The broker maps each variant to a Kafka error code in
//! one place (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, OFFSET_OUT_OF_RANGE,
//! INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE,
//! TRANSACTION_COORDINATOR_FENCED, KAFKA_STORAGE_ERROR). Errors are logged where they are
//! handled, not here.

use crate::types::Offset;

/// Everything a partition log can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Bad magic, length or CRC: Kafka CORRUPT_MESSAGE.
    #[error("corrupt message: {0}")]
    CorruptMessage(String),
    /// Structurally valid batch whose fields are inconsistent: Kafka INVALID_RECORD.
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Some records of a batch are invalid (for example unkeyed records in a compacted topic):
    /// Kafka INVALID_RECORD with per-record errors (KIP-467), so a client fails exactly those
    /// records and retries none of the batch.
    #[error("invalid record: {message}")]
    InvalidRecords {
        message: String,
        /// The offending records, by index in the appended batches (in order), at most
        /// [`RECORD_ERRORS_MAX`].
        record_errors: Vec<RecordError>,
    },
    /// One batch is larger than `max_message_bytes`: Kafka MESSAGE_TOO_LARGE.
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: u32 },
    /// The fetch offset lies outside `[log_start_offset, log_end_offset]`.
    #[error("offset {requested:?} out of range [{log_start_offset:?}, {log_end_offset:?}]")]
    OffsetOutOfRange {
        requested: Offset,
        log_start_offset: Offset,
        log_end_offset: Offset,
    },
    /// The disk is full (ENOSPC on a write): the log refuses appends until a retry writes its
    /// staged bytes; reads go on. Kafka KAFKA_STORAGE_ERROR.
    #[error("disk full: {0}")]
    DiskFull(String),
    /// An earlier write or fsync failed: the log refuses writes until it is reopened.
    #[error("log poisoned by an earlier I/O failure: {0}")]
    Poisoned(String),
    /// Recovery found a bad batch in a segment with valid batches after it: mid-segment
    /// corruption, not a torn tail, so nothing is truncated and the log does not open. The
    /// partition stays offline until an operator repairs or removes the segment. Kafka
    /// KAFKA_STORAGE_ERROR.
    #[error(
        "corrupt segment {segment}: bad batch at byte position {position} ({reason}) with valid \
         batches after it; nothing was truncated, the partition stays offline until an operator \
         repairs or removes the segment"
    )]
    CorruptSegment {
        /// Path of the segment's `.log` file.
        segment: String,
        /// Byte position of the bad batch in the file.
        position: u64,
        reason: String,
    },
    /// A batch from an idempotent producer whose epoch is older than the producer's latest
    /// (a fenced zombie): Kafka INVALID_PRODUCER_EPOCH.
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    /// A batch from an idempotent producer whose sequence does not follow the producer's last
    /// (a gap, or a new epoch not starting at 0): Kafka OUT_OF_ORDER_SEQUENCE_NUMBER.
    #[error("out of order sequence number: {0}")]
    OutOfOrderSequence(String),
    /// A data batch that does not fit its producer's transaction: a non-transactional batch
    /// from a producer with an open transaction (Kafka `appendDataBatch`). Kafka
    /// INVALID_TXN_STATE.
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// A transaction marker written by a coordinator older than the one that wrote the
    /// producer's last marker (a zombie coordinator). Kafka TRANSACTION_COORDINATOR_FENCED.
    #[error("transaction coordinator fenced: {0}")]
    TransactionCoordinatorFenced(String),
    /// A follower's append of the leader's batches that does not continue this log (an
    /// overlap, a gap the log cannot hold, leader epochs going backwards or past the
    /// leader's), or a write while the log is being truncated: nothing was appended. Never
    /// sent to a client; the replication layer truncates or refetches.
    #[error("replica append refused: {0}")]
    ReplicaAppend(String),
    /// An append to a log whose `close` has begun (the broker is stopping or the partition
    /// left this shard): nothing was appended. Kafka NOT_LEADER_OR_FOLLOWER, so a client asks
    /// for the new leader.
    #[error("the log is closed")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// One rejected record of a batch (Kafka's `RecordError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// The record's index in its batch, counting from 0 (Kafka's `batchIndex`).
    pub batch_index: i32,
    pub message: String,
}

/// Most per-record errors one rejection carries: a batch may hold millions of records, and the
/// answer must stay bounded.
pub const RECORD_ERRORS_MAX: usize = 10_000;

impl From<glommio::GlommioError<()>> for StorageError {
    fn from(e: glommio::GlommioError<()>) -> Self {
        StorageError::Io(e.into())
    }
}

impl From<keel_vocab::RecordsError> for StorageError {
    fn from(e: keel_vocab::RecordsError) -> StorageError {
        match e {
            keel_vocab::RecordsError::Corrupt(msg) => StorageError::CorruptMessage(msg),
        }
    }
}
