//! Reading the records of a Fetch answer as a consumer does: whole batches one after another
//! (the broker may cut the last one short at its byte limit; that tail is left for the next
//! fetch), each checked (length, magic 2, CRC32C) before its records are decompressed and
//! walked. Control batches (transaction markers) are not data; a read_committed consumer also
//! skips the batches of aborted transactions. The bytes come from the network: anything
//! malformed is an error, never a panic.

use std::borrow::Cow;

use super::compression::decompress;
use super::header::{
    compute_crc, BatchHeader, BATCH_LENGTH_AT, HEADER_BYTES, LOG_OVERHEAD, MAGIC_AT, MAGIC_V2,
};
use super::record::{parse_record, RecordView};
use crate::error::RecordsError;

fn corrupt(msg: impl Into<String>) -> RecordsError {
    RecordsError::Corrupt(msg.into())
}

/// The next whole batch of `data` at `*pos`, checked, and moves past it; `None` at the end or
/// at a partial batch (a fetch answer cut at its byte limit).
pub fn next_fetched_batch<'a>(
    data: &'a [u8],
    pos: &mut usize,
) -> Result<Option<(BatchHeader, &'a [u8])>, RecordsError> {
    let rest = data.get(*pos..).unwrap_or_default();
    if rest.len() < LOG_OVERHEAD {
        return Ok(None);
    }
    let batch_length = super::header::be_i32(rest, BATCH_LENGTH_AT);
    if batch_length < 0 {
        return Err(corrupt(format!("negative batch length {batch_length}")));
    }
    let total = LOG_OVERHEAD + batch_length as usize;
    if rest.len() < total {
        return Ok(None);
    }
    if total < HEADER_BYTES {
        return Err(corrupt(format!(
            "batch of {total} bytes is shorter than its header"
        )));
    }
    let batch = &rest[..total];
    let header = BatchHeader::parse(batch)
        .ok_or_else(|| corrupt(format!("batch of {total} bytes is shorter than its header")))?;
    if batch[MAGIC_AT] as i8 != MAGIC_V2 {
        return Err(corrupt(format!(
            "record batch magic {} at offset {} (only magic 2 is read)",
            batch[MAGIC_AT] as i8, header.base_offset
        )));
    }
    let crc = compute_crc(batch);
    if crc != header.crc {
        return Err(corrupt(format!(
            "batch at offset {}: crc mismatch: stored {:#010x}, computed {crc:#010x}",
            header.base_offset, header.crc
        )));
    }
    *pos += total;
    Ok(Some((header, batch)))
}

/// One record as a consumer sees it.
#[derive(Debug, Clone, Copy)]
pub struct FetchedRecord<'a> {
    pub offset: i64,
    /// The batch's base timestamp plus the record's delta.
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    view: RecordView<'a>,
}

impl<'a> FetchedRecord<'a> {
    /// The record's headers in order: key, and value (`None` for a null value).
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        self.view.headers()
    }
}

/// Calls `f` for each record of one whole, checked batch (from [`next_fetched_batch`]).
pub fn for_each_record_of(
    header: &BatchHeader,
    batch: &[u8],
    mut f: impl FnMut(FetchedRecord<'_>),
) -> Result<(), RecordsError> {
    let section = &batch[HEADER_BYTES..header.size];
    let records: Cow<'_, [u8]> = match header.compression() {
        0 => Cow::Borrowed(section),
        codec => Cow::Owned(decompress(codec, section)?),
    };
    let mut pos = 0usize;
    for _ in 0..header.records_count.max(0) {
        let view = parse_record(&records, &mut pos, header.base_offset)?;
        f(FetchedRecord {
            offset: view.offset,
            timestamp_ms: header.base_timestamp.saturating_add(view.timestamp_delta),
            key: view.key,
            value: view.value,
            view,
        });
    }
    Ok(())
}

/// Calls `f` for every record of every whole batch in `data` (a Fetch response's records),
/// skipping control batches. Returns the offset after the last whole batch (control batches
/// included): where the next fetch starts.
pub fn for_each_record(
    data: &[u8],
    f: impl FnMut(FetchedRecord<'_>),
) -> Result<Option<i64>, RecordsError> {
    for_each_committed_record(data, &[], f)
}

/// As [`for_each_record`] for a read_committed fetch: also skips the records of aborted
/// transactions, given the partition's aborted list from the Fetch answer as (producer id,
/// first offset), as Kafka's consumer does: a transactional batch of a producer whose
/// aborted transaction began at or before the batch is skipped until that producer's next
/// control batch (its abort marker).
pub fn for_each_committed_record(
    data: &[u8],
    aborted: &[(i64, i64)],
    mut f: impl FnMut(FetchedRecord<'_>),
) -> Result<Option<i64>, RecordsError> {
    let mut aborted: Vec<(i64, i64)> = aborted.to_vec();
    aborted.sort_by_key(|&(_, first)| std::cmp::Reverse(first));
    let mut open_aborted: Vec<i64> = Vec::new();
    let mut pos = 0;
    let mut next = None;
    while let Some((header, batch)) = next_fetched_batch(data, &mut pos)? {
        let last_offset = header.last_offset();
        next = Some(last_offset.saturating_add(1));
        while let Some(&(pid, first)) = aborted.last() {
            if first > last_offset {
                break;
            }
            aborted.pop();
            open_aborted.push(pid);
        }
        if header.is_control() {
            // A transaction marker: ends the producer's aborted transaction.
            open_aborted.retain(|&pid| pid != header.producer_id);
            continue;
        }
        if header.is_transactional() && open_aborted.contains(&header.producer_id) {
            continue; // a record of an aborted transaction
        }
        for_each_record_of(&header, batch, &mut f)?;
    }
    Ok(next)
}
