//! Kafka's `DefaultRecord` inside a magic-2 batch's records section: length, attributes,
//! timestampDelta, offsetDelta, key, value, headers. The bytes are untrusted: every varint and
//! length is bounds-checked, a record's fields must fill exactly its declared length, and no
//! count read from the bytes sizes an allocation.

use super::header::BatchHeader;
use crate::error::RecordsError;
use crate::wire::Reader;

fn corrupt(msg: impl Into<String>) -> RecordsError {
    RecordsError::Corrupt(msg.into())
}

/// Reads a zigzag varint (Kafka `ByteUtils.readVarlong`) at `*pos`.
pub fn read_varlong(b: &[u8], pos: &mut usize) -> Result<i64, RecordsError> {
    let mut r = Reader::new(b.get(*pos..).unwrap_or_default());
    let value = r
        .varlong()
        .ok_or_else(|| corrupt("truncated or overlong varint"))?;
    *pos += r.position();
    Ok(value)
}

/// A varint length and that many bytes; a negative length is null (as Kafka reads it).
pub fn read_nullable_bytes<'a>(
    b: &'a [u8],
    pos: &mut usize,
) -> Result<Option<&'a [u8]>, RecordsError> {
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

/// One record of a batch, borrowed from its (decompressed) records section.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// The whole record as stored: length varint and body.
    pub bytes: &'a [u8],
    /// The batch's base offset plus the record's offsetDelta.
    pub offset: i64,
    pub timestamp_delta: i64,
    pub key: Option<&'a [u8]>,
    /// `None` is a tombstone.
    pub value: Option<&'a [u8]>,
    /// The record's headers, already checked by [`parse_record`]; read with [`Self::headers`].
    headers: &'a [u8],
    header_count: i64,
}

impl<'a> RecordView<'a> {
    /// The record's headers in order: key, and value (`None` for a null value).
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let bytes = self.headers;
        let mut pos = 0usize;
        // Checked whole when the record was parsed: a failure here cannot happen, and ends
        // the walk rather than panicking.
        (0..self.header_count).map_while(move |_| {
            let key = read_nullable_bytes(bytes, &mut pos).ok()??;
            let value = read_nullable_bytes(bytes, &mut pos).ok()?;
            Some((key, value))
        })
    }
}

/// Parses exactly `recordsCount` records filling the whole section (Kafka rejects a batch
/// with bytes left over). The count is not trusted for allocation.
pub fn parse_records<'a>(
    records: &'a [u8],
    header: &BatchHeader,
) -> Result<Vec<RecordView<'a>>, RecordsError> {
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
pub fn parse_record<'a>(
    records: &'a [u8],
    pos: &mut usize,
    base_offset: i64,
) -> Result<RecordView<'a>, RecordsError> {
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
    let timestamp_delta = read_varlong(body, &mut p)?;
    let offset_delta = read_varlong(body, &mut p)?;
    let key = read_nullable_bytes(body, &mut p)?;
    let value = read_nullable_bytes(body, &mut p)?;
    let header_count = read_varlong(body, &mut p)?;
    if header_count < 0 || header_count as u64 > (end - p) as u64 {
        return Err(corrupt(format!(
            "header count {header_count} out of bounds"
        )));
    }
    let headers_at = p;
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
        timestamp_delta,
        key,
        value,
        headers: &records[headers_at..end],
        header_count,
    })
}
