//! Record batch (magic 2) validation for the log, and the in-place rewrites the broker is
//! allowed (baseOffset, partitionLeaderEpoch, and for LogAppendTime the timestamps + CRC). The
//! header's layout, [`BatchHeader`] and the CRC are keel-vocab's one codec
//! (`keel_vocab::records`), re-exported here for the crate. Records are never walked here.
//! Every length is checked before it is used: the bytes come from the network or the disk.
//! Runs on the shard owning the partition.

pub use keel_vocab::records::header::*;

use crate::error::StorageError;
use crate::types::BatchesSummary;

/// Checks the batch at the start of `b` and returns its header. Checks, in order: enough bytes
/// for a header, batchLength >= 49, the batch lies within `b`, magic 2, size <=
/// `max_message_bytes`, lastOffsetDelta >= 0 and recordsCount consistent, CRC32C.
pub fn validate_one(b: &[u8], max_message_bytes: u32) -> Result<BatchHeader, StorageError> {
    if b.len() < LOG_OVERHEAD {
        return Err(StorageError::CorruptMessage(format!(
            "truncated batch: {} bytes left, need at least {LOG_OVERHEAD}",
            b.len()
        )));
    }
    let batch_length = be_i32(b, BATCH_LENGTH_AT);
    if batch_length < MIN_BATCH_LENGTH {
        return Err(StorageError::CorruptMessage(format!(
            "batchLength {batch_length} below minimum {MIN_BATCH_LENGTH}"
        )));
    }
    let size = LOG_OVERHEAD + batch_length as usize;
    if size > b.len() {
        return Err(StorageError::CorruptMessage(format!(
            "truncated batch: declares {size} bytes, {} available",
            b.len()
        )));
    }
    let header = BatchHeader::parse(b)
        .ok_or_else(|| StorageError::CorruptMessage("batch shorter than its header".to_string()))?;
    if header.magic != MAGIC_V2 {
        return Err(StorageError::CorruptMessage(format!(
            "unsupported magic {}",
            header.magic
        )));
    }
    if size > max_message_bytes as usize {
        return Err(StorageError::MessageTooLarge {
            size,
            max: max_message_bytes,
        });
    }
    if header.last_offset_delta < 0 {
        return Err(StorageError::InvalidRecord(format!(
            "negative lastOffsetDelta {}",
            header.last_offset_delta
        )));
    }
    if header.records_count < 0 || header.records_count as i64 > header.last_offset_delta as i64 + 1
    {
        return Err(StorageError::InvalidRecord(format!(
            "recordsCount {} inconsistent with lastOffsetDelta {}",
            header.records_count, header.last_offset_delta
        )));
    }
    let crc = compute_crc(&b[..size]);
    if crc != header.crc {
        return Err(StorageError::CorruptMessage(format!(
            "crc mismatch: stored {:#010x}, computed {crc:#010x}",
            header.crc
        )));
    }
    Ok(header)
}

/// Validates one buffer of concatenated batches without a Log (same checks as `Log::append`).
pub fn validate_batches(
    batches: &[u8],
    max_message_bytes: u32,
) -> Result<BatchesSummary, StorageError> {
    if batches.is_empty() {
        return Err(StorageError::InvalidRecord("no record batches".to_string()));
    }
    let mut summary = BatchesSummary {
        batch_count: 0,
        record_count: 0,
        max_timestamp_ms: -1,
        producer_batches: 0,
        transactional_batches: 0,
    };
    let mut pos = 0usize;
    while pos < batches.len() {
        let header = validate_one(&batches[pos..], max_message_bytes)?;
        summary.batch_count += 1;
        summary.record_count += header.last_offset_delta as u64 + 1;
        summary.max_timestamp_ms = summary.max_timestamp_ms.max(header.max_timestamp);
        summary.producer_batches += u32::from(header.has_producer_id());
        summary.transactional_batches +=
            u32::from(header.is_transactional() || header.is_control());
        pos += header.size;
    }
    Ok(summary)
}

/// The offset after the last whole batch of `batches` (as a log read returns them), reading
/// headers only; `None` when there is no whole batch.
pub fn end_offset_of(batches: &[u8]) -> Option<i64> {
    let mut pos = 0usize;
    let mut end = None;
    while let Some(header) = batches.get(pos..).and_then(BatchHeader::parse) {
        match pos.checked_add(header.size) {
            Some(next) if next <= batches.len() => pos = next,
            _ => break,
        }
        end = Some(header.last_offset().saturating_add(1));
    }
    end
}

/// Whether any batch in `batches` is a control batch (a transaction marker), reading headers
/// only: the broker refuses markers from clients before the log validates anything. Stops
/// at the first header that does not parse or runs past the buffer (the log refuses those).
pub fn contains_control_batch(batches: &[u8]) -> bool {
    let mut pos = 0usize;
    while let Some(header) = batches.get(pos..).and_then(BatchHeader::parse) {
        pos = match pos.checked_add(header.size) {
            Some(next) if next <= batches.len() => next,
            _ => return false,
        };
        if header.is_control() {
            return true;
        }
    }
    false
}

/// Stamps the fields the CRC does not cover.
pub fn set_base_offset_and_epoch(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    batch[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&leader_epoch.to_be_bytes());
}

/// LogAppendTime: marks the timestamp type, sets base and max timestamp to `now_ms` and
/// recomputes the CRC (these fields are covered by it).
pub fn stamp_log_append_time(batch: &mut [u8], now_ms: i64) {
    let attributes = be_i16(batch, ATTRIBUTES_AT) | TIMESTAMP_TYPE_BIT;
    batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[BASE_TIMESTAMP_AT..BASE_TIMESTAMP_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
    batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}
