//! Reading records inside a batch: decompression (gzip, snappy raw and xerial-framed, lz4
//! frame, zstd) and a walk over the varint-encoded records. Used only off the produce path
//! (ListOffsets by timestamp / max timestamp); the bytes are untrusted, so every varint and
//! length is bounds-checked and decompressed output is capped. Runs on the owning shard.

use std::io::Read;

use crate::batch::{BatchHeader, HEADER_BYTES};
use crate::error::StorageError;

/// Upper bound on one batch's decompressed records; a larger output is treated as corrupt.
const DECOMPRESSED_BYTES_MAX: u64 = 256 * 1024 * 1024;
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\0";
const XERIAL_HEADER_BYTES: usize = 16;

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
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *b.get(*pos).ok_or_else(|| corrupt("truncated varint"))?;
        *pos += 1;
        value |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return Err(corrupt("varint too long"));
        }
    }
    Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
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
