//! Reading records inside a batch, the one home of record parsing: decompression (gzip,
//! snappy raw and xerial-framed, lz4 frame, zstd), a full parse of Kafka's `DefaultRecord`s
//! ([`parse_records`], for compaction and the key check of a compacted topic's appends), a
//! walk over records' offsets and timestamps (ListOffsets by timestamp / max timestamp), and
//! the one record of a transaction marker. The bytes are untrusted, so every
//! varint and length is bounds-checked and decompressed output is capped. Runs on the owning
//! shard.

use std::borrow::Cow;
use std::io::Read;

use crate::batch::{validate_one, BatchHeader, CONTROL_BIT, HEADER_BYTES};
use crate::error::StorageError;

/// Upper bound on one batch's decompressed records; a larger output is treated as corrupt.
const DECOMPRESSED_BYTES_MAX: u64 = 256 * 1024 * 1024;
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\0";
const XERIAL_HEADER_BYTES: usize = 16;
/// Most output per input byte of a raw snappy block: its densest element is a 3-byte copy of
/// 64 bytes (64 / 3 < 22).
const SNAPPY_EXPANSION_MAX: usize = 22;

fn corrupt(msg: impl Into<String>) -> StorageError {
    StorageError::CorruptMessage(msg.into())
}

/// Decompresses the records section of a batch with compression code `codec` (attributes 0-2).
pub fn decompress(codec: u8, data: &[u8]) -> Result<Vec<u8>, StorageError> {
    let mut out = Vec::new();
    match codec {
        0 => out.extend_from_slice(data),
        1 => {
            flate2::read::MultiGzDecoder::new(data)
                .take(DECOMPRESSED_BYTES_MAX)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("gzip: {e}")))?;
        }
        2 => out = decompress_snappy(data)?,
        3 => {
            lz4_flex::frame::FrameDecoder::new(data)
                .take(DECOMPRESSED_BYTES_MAX)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("lz4: {e}")))?;
        }
        4 => {
            zstd::stream::read::Decoder::new(data)
                .map_err(|e| corrupt(format!("zstd: {e}")))?
                .take(DECOMPRESSED_BYTES_MAX)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("zstd: {e}")))?;
        }
        other => return Err(corrupt(format!("unknown compression codec {other}"))),
    }
    Ok(out)
}

fn snappy_raw(data: &[u8], out: &mut Vec<u8>) -> Result<(), StorageError> {
    let len = snap::raw::decompress_len(data).map_err(|e| corrupt(format!("snappy: {e}")))?;
    if (out.len() + len) as u64 > DECOMPRESSED_BYTES_MAX {
        return Err(corrupt("snappy: decompressed size too large"));
    }
    // The output is allocated and zeroed at the size the block claims: a claim no block of
    // this many bytes can reach is refused first (a 6-byte block claiming 256 MiB cost that
    // much memory and time on every read, found by the record_batch fuzz target).
    if len > data.len().saturating_mul(SNAPPY_EXPANSION_MAX) {
        return Err(corrupt(format!(
            "snappy: {len} bytes claimed by a {}-byte block",
            data.len()
        )));
    }
    let start = out.len();
    out.resize(start + len, 0);
    snap::raw::Decoder::new()
        .decompress(data, &mut out[start..])
        .map_err(|e| corrupt(format!("snappy: {e}")))?;
    Ok(())
}

fn decompress_snappy(data: &[u8]) -> Result<Vec<u8>, StorageError> {
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        snappy_raw(data, &mut out)?;
        return Ok(out);
    }
    // Xerial framing: 16-byte header, then blocks of [u32 BE length][raw snappy block].
    let mut pos = XERIAL_HEADER_BYTES.min(data.len());
    while pos < data.len() {
        if data.len() - pos < 4 {
            return Err(corrupt("snappy: truncated xerial block length"));
        }
        let len =
            u32::from_be_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]) as usize;
        pos += 4;
        if len > data.len() - pos {
            return Err(corrupt("snappy: truncated xerial block"));
        }
        snappy_raw(&data[pos..pos + len], &mut out)?;
        pos += len;
    }
    Ok(out)
}

/// Reads a zigzag varint (Kafka `ByteUtils.readVarlong`) at `*pos`.
pub fn read_varlong(b: &[u8], pos: &mut usize) -> Result<i64, StorageError> {
    let mut r = keel_vocab::wire::Reader::new(b.get(*pos..).unwrap_or_default());
    let value = r
        .varlong()
        .ok_or_else(|| corrupt("truncated or overlong varint"))?;
    *pos += r.position();
    Ok(value)
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
    let section = &batch[HEADER_BYTES..header.size];
    let owned;
    let records: &[u8] = if header.compression() == 0 {
        section
    } else {
        owned = decompress(header.compression(), section)?;
        &owned
    };
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
    let section = &batch[HEADER_BYTES..header.size];
    let owned;
    let records: &[u8] = if header.compression() == 0 {
        section
    } else {
        owned = decompress(header.compression(), section)?;
        &owned
    };
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

/// One record of a batch, borrowed from its records section.
#[derive(Debug)]
pub(crate) struct RecordView<'a> {
    /// The whole record as stored: length varint and body.
    pub bytes: &'a [u8],
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    /// `None` is a tombstone.
    pub value: Option<&'a [u8]>,
}

/// Parses exactly `recordsCount` records filling the whole section (Kafka rejects a batch
/// with bytes left over). The count is not trusted for allocation.
pub(crate) fn parse_records<'a>(
    records: &'a [u8],
    header: &BatchHeader,
) -> Result<Vec<RecordView<'a>>, StorageError> {
    let mut views = Vec::new();
    let mut pos = 0usize;
    for _ in 0..header.records_count.max(0) {
        views.push(parse_record(records, &mut pos, header.base_offset)?);
    }
    if pos != records.len() {
        return Err(corrupt(format!(
            "{} bytes after the last of {} records",
            records.len() - pos,
            header.records_count
        )));
    }
    Ok(views)
}

/// Kafka `DefaultRecord`: length, attributes, timestampDelta, offsetDelta, key, value,
/// headers; the fields must fill exactly `length` bytes.
pub(crate) fn parse_record<'a>(
    records: &'a [u8],
    pos: &mut usize,
    base_offset: i64,
) -> Result<RecordView<'a>, StorageError> {
    let start = *pos;
    let len = read_varlong(records, pos)?;
    let body_at = *pos;
    if len < 0 || len as u64 > (records.len() - body_at) as u64 {
        return Err(corrupt(format!("record length {len} out of bounds")));
    }
    let end = body_at + len as usize;
    let body = &records[..end];
    let mut p = body_at + 1; // attributes: unused in magic 2
    if p > end {
        return Err(corrupt("empty record"));
    }
    read_varlong(body, &mut p)?; // timestampDelta
    let offset_delta = read_varlong(body, &mut p)?;
    let key = read_nullable_bytes(body, &mut p)?;
    let value = read_nullable_bytes(body, &mut p)?;
    let header_count = read_varlong(body, &mut p)?;
    if header_count < 0 || header_count as u64 > (end - p) as u64 {
        return Err(corrupt(format!(
            "header count {header_count} out of bounds"
        )));
    }
    for _ in 0..header_count {
        if read_nullable_bytes(body, &mut p)?.is_none() {
            return Err(corrupt("null header key"));
        }
        read_nullable_bytes(body, &mut p)?;
    }
    if p != end {
        return Err(corrupt(format!(
            "record declares {len} bytes, fields use {}",
            p - body_at
        )));
    }
    *pos = end;
    Ok(RecordView {
        bytes: &records[start..end],
        offset: base_offset.saturating_add(offset_delta),
        key,
        value,
    })
}

/// A varint length and that many bytes; a negative length is null (as Kafka reads it).
pub(crate) fn read_nullable_bytes<'a>(
    b: &'a [u8],
    pos: &mut usize,
) -> Result<Option<&'a [u8]>, StorageError> {
    let len = read_varlong(b, pos)?;
    if len < 0 {
        return Ok(None);
    }
    if len as u64 > (b.len() - *pos) as u64 {
        return Err(corrupt(format!("field length {len} out of bounds")));
    }
    let at = *pos;
    *pos += len as usize;
    Ok(Some(&b[at..*pos]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{compute_crc, CRC_AT, RECORDS_COUNT_AT};
    use crate::test_util::{marker_batch, put_varlong};

    /// `marker_batch`'s layout with another key and value.
    fn control(key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut b = marker_batch(7, 0, true, 0, 1_000).to_vec();
        b.truncate(HEADER_BYTES);
        let mut body = vec![0u8];
        put_varlong(&mut body, 0);
        put_varlong(&mut body, 0);
        put_varlong(&mut body, key.len() as i64);
        body.extend_from_slice(key);
        put_varlong(&mut body, value.len() as i64);
        body.extend_from_slice(value);
        put_varlong(&mut body, 0);
        put_varlong(&mut b, body.len() as i64);
        b.extend_from_slice(&body);
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn snappy_claims_past_the_densest_block_are_corrupt() {
        // Zeros compress at snappy's densest (one 3-byte copy per 64 bytes) and still read.
        let zeros = vec![0u8; 1 << 20];
        let packed = snap::raw::Encoder::new().compress_vec(&zeros).unwrap();
        assert_eq!(decompress(2, &packed).unwrap(), zeros);
        // A block that claims 200 MiB from 6 bytes is refused before any allocation.
        let mut claim = Vec::new();
        let mut len = 200u64 << 20;
        while len >= 0x80 {
            claim.push((len as u8) | 0x80);
            len >>= 7;
        }
        claim.push(len as u8);
        claim.extend_from_slice(&[0, 0]);
        let err = decompress(2, &claim).unwrap_err().to_string();
        assert!(err.contains("claimed by a 6-byte block"), "{err}");
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
