//! Reading records inside a batch for the log: a walk over records' offsets and timestamps
//! (ListOffsets by timestamp / max timestamp), the one record of a transaction marker, and
//! the key check of a compacted topic's appends. Decompression and the parse of Kafka's
//! `DefaultRecord`s are keel-vocab's one codec (`keel_vocab::records`), re-exported here for
//! the crate. The bytes are untrusted, so every varint and length is bounds-checked and
//! decompressed output is capped. Runs on the owning shard.

use std::borrow::Cow;

pub use keel_vocab::records::{parse_records, read_nullable_bytes, read_varlong, RecordView};

use crate::batch::{validate_one, BatchHeader, CONTROL_BIT, HEADER_BYTES};
use crate::error::StorageError;

fn corrupt(msg: impl Into<String>) -> StorageError {
    StorageError::CorruptMessage(msg.into())
}

/// Decompresses the records section of a batch with compression code `codec` (attributes 0-2).
pub fn decompress(codec: u8, data: &[u8]) -> Result<Vec<u8>, StorageError> {
    Ok(keel_vocab::records::decompress(codec, data)?)
}

/// One record's position in time and offset space.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RecordStamp {
    pub offset: i64,
    pub timestamp_ms: i64,
}

/// Walks the records of one whole, validated batch and returns the first for which `pred`
/// holds. LogAppendTime batches carry one timestamp (maxTimestamp) for all records.
pub fn find_record(
    batch: &[u8],
    pred: impl Fn(RecordStamp) -> bool,
) -> Result<Option<RecordStamp>, StorageError> {
    let header = BatchHeader::parse(batch).ok_or_else(|| corrupt("batch header too short"))?;
    if header.size > batch.len() {
        return Err(corrupt("batch truncated"));
    }
    let records: &[u8] = &records_section(batch, &header)?;
    let mut pos = 0usize;
    for _ in 0..header.records_count.max(0) {
        let len = read_varlong(records, &mut pos)?;
        let start = pos;
        if len < 0 || len as u64 > (records.len() - start) as u64 {
            return Err(corrupt("record length out of bounds"));
        }
        let end = start + len as usize;
        let body = &records[..end];
        pos += 1; // attributes
        let ts_delta = read_varlong(body, &mut pos)?;
        let offset_delta = read_varlong(body, &mut pos)?;
        let stamp = RecordStamp {
            offset: header.base_offset.saturating_add(offset_delta),
            timestamp_ms: if header.is_log_append_time() {
                header.max_timestamp
            } else {
                header.base_timestamp.saturating_add(ts_delta)
            },
        };
        if pred(stamp) {
            return Ok(Some(stamp));
        }
        pos = end;
    }
    Ok(None)
}

/// The outcome a transaction marker records (Kafka `ControlRecordType` ABORT / COMMIT).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MarkerType {
    Abort,
    Commit,
}

/// Kafka's `EndTransactionMarker`: the one record of a transaction's control batch. Its key
/// is version i16 (0) + type i16 (0 = ABORT, 1 = COMMIT); its value version i16 (0) +
/// coordinator epoch i32.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub kind: MarkerType,
    pub coordinator_epoch: i32,
}

/// Reads the marker of the control batch `batch` (whole, validated). As Kafka's
/// `EndTransactionMarker.deserialize`: a negative key or value version, a key type other
/// than ABORT or COMMIT, or a key or value too short is `InvalidRecord`; later versions are
/// read as version 0 (their extra bytes ignored). The batch must hold exactly one record.
pub fn end_txn_marker(batch: &[u8]) -> Result<EndTxnMarker, StorageError> {
    let header = BatchHeader::parse(batch).ok_or_else(|| corrupt("batch header too short"))?;
    if header.size > batch.len() {
        return Err(corrupt("batch truncated"));
    }
    let invalid = |why: String| StorageError::InvalidRecord(format!("transaction marker: {why}"));
    if header.records_count != 1 {
        return Err(invalid(format!(
            "a control batch holds {} records, not 1",
            header.records_count
        )));
    }
    let records: &[u8] = &records_section(batch, &header)?;
    let mut pos = 0usize;
    let len = read_varlong(records, &mut pos)?;
    if len < 0 || len as u64 > (records.len() - pos) as u64 {
        return Err(corrupt("record length out of bounds"));
    }
    let body = &records[..pos + len as usize];
    pos += 1; // attributes
    read_varlong(body, &mut pos)?; // timestampDelta
    read_varlong(body, &mut pos)?; // offsetDelta
    let key = read_nullable_bytes(body, &mut pos)?.unwrap_or_default();
    let value = read_nullable_bytes(body, &mut pos)?.unwrap_or_default();
    if key.len() < 4 {
        return Err(invalid(format!("key of {} bytes, need 4", key.len())));
    }
    let key_version = i16::from_be_bytes([key[0], key[1]]);
    if key_version < 0 {
        return Err(invalid(format!("key version {key_version}")));
    }
    let kind = match i16::from_be_bytes([key[2], key[3]]) {
        0 => MarkerType::Abort,
        1 => MarkerType::Commit,
        other => return Err(invalid(format!("control record type {other}"))),
    };
    if value.len() < 6 {
        return Err(invalid(format!("value of {} bytes, need 6", value.len())));
    }
    let value_version = i16::from_be_bytes([value[0], value[1]]);
    if value_version < 0 {
        return Err(invalid(format!("value version {value_version}")));
    }
    Ok(EndTxnMarker {
        kind,
        coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]),
    })
}

/// The records without a key in the data batches of `batches` (Kafka refuses them in a
/// compacted topic), by index within their batch, and how many there are in all; at most
/// `indexes_max` indexes are listed. Control batches are skipped. Bytes are validated as the
/// cleaner validates them.
pub fn unkeyed_records(
    batches: &[u8],
    indexes_max: usize,
) -> Result<(u64, Vec<i32>), StorageError> {
    let mut pos = 0usize;
    let mut unkeyed = 0u64;
    let mut indexes = Vec::new();
    while pos < batches.len() {
        let (batch, header) = next_batch(batches, &mut pos)?;
        if header.attributes & CONTROL_BIT != 0 {
            continue;
        }
        let section = records_section(batch, &header)?;
        for (index, record) in parse_records(&section, &header)?.iter().enumerate() {
            if record.key.is_none() {
                unkeyed += 1;
                if indexes.len() < indexes_max {
                    // parse_records bounds a batch's records by i32 (records_count).
                    indexes.push(i32::try_from(index).unwrap_or(i32::MAX));
                }
            }
        }
    }
    Ok((unkeyed, indexes))
}

/// Validates (header, bounds, magic, CRC) the batch at `*pos` and moves past it.
pub(crate) fn next_batch<'a>(
    segment: &'a [u8],
    pos: &mut usize,
) -> Result<(&'a [u8], BatchHeader), StorageError> {
    let at = *pos;
    let header = validate_one(&segment[at..], u32::MAX).map_err(|e| match e {
        StorageError::CorruptMessage(msg) => corrupt(format!("batch at byte {at}: {msg}")),
        other => corrupt(format!("batch at byte {at}: {other}")),
    })?;
    *pos = at + header.size;
    Ok((&segment[at..at + header.size], header))
}

/// The batch's records, decompressed (borrowed when uncompressed).
pub(crate) fn records_section<'a>(
    batch: &'a [u8],
    header: &BatchHeader,
) -> Result<Cow<'a, [u8]>, StorageError> {
    let section = &batch[HEADER_BYTES..header.size];
    match header.compression() {
        0 => Ok(Cow::Borrowed(section)),
        codec => decompress(codec, section).map(Cow::Owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::RECORDS_COUNT_AT;
    use crate::test_util::marker_batch;
    use keel_vocab::records::{frame_batch, put_record, BatchFields};

    /// `marker_batch`'s layout with another key and value.
    fn control(key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut section = bytes::BytesMut::new();
        put_record(&mut section, 0, 0, Some(key), Some(value), &[]);
        let h = BatchHeader::parse(&marker_batch(7, 0, true, 0, 1_000)).unwrap();
        let fields = BatchFields {
            base_offset: h.base_offset,
            leader_epoch: h.leader_epoch,
            attributes: h.attributes,
            last_offset_delta: h.last_offset_delta,
            base_timestamp: h.base_timestamp,
            max_timestamp: h.max_timestamp,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            records_count: h.records_count,
        };
        frame_batch(&fields, &section).to_vec()
    }

    #[test]
    fn markers_read_as_kafka_writes_them() {
        let m = end_txn_marker(&marker_batch(7, 0, true, 42, 1_000)).unwrap();
        assert_eq!((m.kind, m.coordinator_epoch), (MarkerType::Commit, 42));
        let m = end_txn_marker(&marker_batch(7, 0, false, -1, 1_000)).unwrap();
        assert_eq!((m.kind, m.coordinator_epoch), (MarkerType::Abort, -1));
        // A later version with more bytes reads as version 0.
        let m = end_txn_marker(&control(&[0, 1, 0, 1, 9], &[0, 1, 0, 0, 0, 5, 9])).unwrap();
        assert_eq!((m.kind, m.coordinator_epoch), (MarkerType::Commit, 5));
    }

    #[test]
    fn malformed_markers_are_invalid_records() {
        let epoch5 = [0u8, 0, 0, 0, 0, 5];
        for (key, value) in [
            (&[0u8, 0, 0, 2][..], &epoch5[..]), // type 2: not an end marker
            (&[0xff, 0xff, 0, 1], &epoch5),     // negative key version
            (&[0, 0, 0], &epoch5),              // short key
            (&[0, 0, 0, 1], &[0xff, 0xff, 0, 0, 0, 5]),
            (&[0, 0, 0, 1], &[0, 0, 0, 0, 5]),
        ] {
            let r = end_txn_marker(&control(key, value));
            assert!(
                matches!(r, Err(StorageError::InvalidRecord(_))),
                "{key:?} {value:?}: {r:?}"
            );
        }
        let mut two = marker_batch(7, 0, true, 0, 1_000);
        two[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&2i32.to_be_bytes());
        assert!(matches!(
            end_txn_marker(&two),
            Err(StorageError::InvalidRecord(_))
        ));
        let cut = marker_batch(7, 0, true, 0, 1_000);
        assert!(end_txn_marker(&cut[..cut.len() - 3]).is_err());
    }
}
