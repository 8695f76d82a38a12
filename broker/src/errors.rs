//! The one place where Keel's errors become Kafka error codes.

use kafka_protocol::ResponseError;
use keel_storage::StorageError;
use keel_vocab::ErrorCode;

pub const NONE: i16 = ErrorCode::NONE.code();

pub fn code(e: ResponseError) -> i16 {
    e.code()
}

/// Kafka error code for a storage error, as the wire carries it.
pub fn storage_code(e: &StorageError) -> i16 {
    storage_error(e).code()
}

/// Kafka's error for a storage error.
pub fn storage_error(e: &StorageError) -> ErrorCode {
    ErrorCode::of(match e {
        StorageError::CorruptMessage(_) => ResponseError::CorruptMessage,
        StorageError::InvalidRecord(_) | StorageError::InvalidRecords { .. } => {
            ResponseError::InvalidRecord
        }
        StorageError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        StorageError::InvalidProducerEpoch(_) => ResponseError::InvalidProducerEpoch,
        StorageError::OutOfOrderSequence(_) => ResponseError::OutOfOrderSequenceNumber,
        StorageError::InvalidTxnState(_) => ResponseError::InvalidTxnState,
        StorageError::TransactionCoordinatorFenced(_) => {
            ResponseError::TransactionCoordinatorFenced
        }
        StorageError::Poisoned(_)
        | StorageError::DiskFull(_)
        | StorageError::CorruptSegment { .. }
        | StorageError::Io(_) => ResponseError::KafkaStorageError,
        StorageError::Closed => ResponseError::NotLeaderOrFollower,
        #[allow(unreachable_patterns)]
        _ => ResponseError::UnknownServerError,
    })
}

/// Kafka error code for a failed write of a group coordinator's records (Kafka's mapping):
/// a log that cannot take writes means "ask again for the coordinator", a batch that is too
/// large is the commit's fault.
pub fn coordinator_write_error(e: &StorageError) -> ErrorCode {
    ErrorCode::of(match e {
        StorageError::MessageTooLarge { .. } => ResponseError::InvalidCommitOffsetSize,
        StorageError::Poisoned(_)
        | StorageError::DiskFull(_)
        | StorageError::CorruptSegment { .. }
        | StorageError::Closed
        | StorageError::Io(_) => ResponseError::NotCoordinator,
        #[allow(unreachable_patterns)]
        _ => ResponseError::UnknownServerError,
    })
}
