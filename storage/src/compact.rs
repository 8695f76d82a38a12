//! The pure core of log compaction (`cleanup.policy=compact`), after Kafka's `LogCleaner` and
//! `MemoryRecords.filterTo` for magic-2 batches. Bytes in, bytes out: no I/O, so the log can
//! hand it a closed segment's contents. It runs on the shard that owns the partition, off the
//! produce path (a background cleaning pass), never per request.
//!
//! Two steps: [`build_offset_map`] over the dirty segments records, per key, the last offset at
//! which the key appears; [`clean_segment`] then keeps only each key's latest record (and drops
//! tombstones older than the delete horizon). Both skip the data batches of aborted
//! transactions ([`AbortedTxns`], from the log's aborted transaction index): they are never
//! mapped, so they cannot hide a committed record, and they are dropped whole.
//!
//! Invariants:
//! - Offsets never move. A kept record keeps its bytes (offsetDelta, timestampDelta, headers);
//!   a rewritten batch keeps baseOffset, lastOffsetDelta, timestamps, producer fields, epoch
//!   and codec, so offsets after it stay valid and the log only gains gaps.
//! - A record is dropped only if a later record of the same key is known, it is a tombstone
//!   past the horizon, or its batch belongs to an aborted transaction. Unkeyed records and
//!   control batches (transaction markers) are kept: Keel keeps markers for good, where Kafka
//!   drops one after `delete.retention.ms` once nothing of its transaction is left. A map that
//!   covers only part of the dirty range (built up to any point) is therefore still safe to
//!   clean with.
//! - Every output batch passes `validate_one`; a batch whose records all stay is copied
//!   byte-for-byte, one left empty is dropped.
//! - The input is untrusted (it came from clients via disk): every length is checked, CRCs are
//!   verified before anything is rewritten, and bad bytes give `CorruptMessage`, never a panic.

use std::collections::HashMap;

use crate::batch::CONTROL_BIT;
use crate::batch::{
    compute_crc, validate_one, BatchHeader, BATCH_LENGTH_AT, CRC_AT, HEADER_BYTES, LOG_OVERHEAD,
    RECORDS_COUNT_AT,
};
use crate::error::StorageError;
use crate::records::{next_batch, parse_records, records_section, RecordView};
use crate::types::Offset;

/// Estimated bytes per map entry besides the key: the `(Vec<u8>, i64)` slot plus the hash
/// table's control byte (load factor ignored).
const MAP_ENTRY_OVERHEAD_BYTES: u64 = (std::mem::size_of::<(Vec<u8>, i64)>() + 1) as u64;

fn corrupt(msg: impl Into<String>) -> StorageError {
    StorageError::CorruptMessage(msg.into())
}

/// Key -> the last offset at which the key appears in the segments given to
/// [`build_offset_map`]. Keys are stored whole (no hash collisions to reason about); the
/// cleaner bounds it by checking [`OffsetMap::memory_bytes`] between segments, as Kafka stops
/// filling its map at a segment boundary.
#[derive(Debug, Default)]
pub struct OffsetMap {
    offsets: HashMap<Vec<u8>, i64>,
    key_bytes: u64,
}

impl OffsetMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `key` appears at `offset`. The larger offset wins, so feeding segments
    /// twice or out of order cannot make an older record look like the latest.
    pub fn insert(&mut self, key: &[u8], offset: Offset) {
        match self.offsets.get_mut(key) {
            Some(latest) => *latest = (*latest).max(offset.0),
            None => {
                self.key_bytes += key.len() as u64;
                self.offsets.insert(key.to_vec(), offset.0);
            }
        }
    }

    /// The last offset at which `key` was seen, if it was.
    pub fn get(&self, key: &[u8]) -> Option<Offset> {
        self.offsets.get(key).copied().map(Offset)
    }

    /// Distinct keys.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Estimated heap bytes held: keys plus a fixed overhead per entry.
    pub fn memory_bytes(&self) -> u64 {
        self.key_bytes + self.offsets.len() as u64 * MAP_ENTRY_OVERHEAD_BYTES
    }
}

/// What [`clean_segment`] may drop besides superseded records.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CleanParams<'a> {
    /// Tombstones (null value) in batches whose maxTimestamp is below this are dropped;
    /// `i64::MIN` keeps every tombstone (Kafka: now - `delete.retention.ms`).
    pub delete_horizon_ms: i64,
    /// The aborted transactions of the range cleaned: their data batches are dropped.
    pub aborted: &'a AbortedTxns,
}

/// The aborted transactions of a range of the log, as the cleaner asks about them: a
/// transactional data batch belongs to one iff its producer's aborted transaction spans its
/// base offset (a producer has one transaction open at a time, so its ranges do not overlap).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AbortedTxns {
    /// (producer id, first offset, marker offset), ascending.
    ranges: Vec<(i64, i64, i64)>,
}

impl AbortedTxns {
    pub const NONE: AbortedTxns = AbortedTxns { ranges: Vec::new() };

    /// From (producer id, first offset, marker offset) triples, in any order.
    pub fn new(ranges: impl IntoIterator<Item = (i64, Offset, Offset)>) -> AbortedTxns {
        let mut ranges: Vec<(i64, i64, i64)> = ranges
            .into_iter()
            .map(|(pid, first, last)| (pid, first.0, last.0))
            .collect();
        ranges.sort_unstable();
        AbortedTxns { ranges }
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The batch is transactional data of an aborted transaction.
    pub fn holds(&self, h: &BatchHeader) -> bool {
        if h.attributes & CONTROL_BIT != 0 || !h.is_transactional() || !h.has_producer_id() {
            return false;
        }
        let key = (h.producer_id, h.base_offset);
        let i = self.ranges.partition_point(|&(p, f, _)| (p, f) <= key);
        i > 0 && {
            let (p, _, last) = self.ranges[i - 1];
            p == h.producer_id && h.base_offset <= last
        }
    }
}

/// The result of cleaning one segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanOutcome {
    /// The retained batches, concatenated, in their original order.
    pub bytes: Vec<u8>,
    /// Records written to `bytes`, control records included.
    pub records_kept: u64,
    pub records_dropped: u64,
    /// Size of the input segment.
    pub bytes_in: u64,
}

/// Adds every keyed record of every data batch in `segment` to `map`. Control batches,
/// batches of `aborted` transactions and unkeyed records are skipped. On error `map` holds the
/// records before the bad batch, which is still a valid (shorter) map: see the module
/// invariants.
pub fn build_offset_map(
    map: &mut OffsetMap,
    segment: &[u8],
    aborted: &AbortedTxns,
) -> Result<(), StorageError> {
    let mut pos = 0usize;
    while pos < segment.len() {
        let (batch, header) = next_batch(segment, &mut pos)?;
        if header.attributes & CONTROL_BIT != 0 || aborted.holds(&header) {
            continue;
        }
        let section = records_section(batch, &header)?;
        for record in parse_records(&section, &header)? {
            if let Some(key) = record.key {
                map.insert(key, Offset(record.offset));
            }
        }
    }
    Ok(())
}

/// Filters `segment` against `map`: a keyed record stays iff no later offset of its key is in
/// the map (Kafka keeps `offset >= map[key]`, so records past the mapped range also stay), it
/// is not a tombstone in a batch older than `params.delete_horizon_ms`, and its batch is not
/// one of `params.aborted`'s.
pub fn clean_segment(
    segment: &[u8],
    map: &OffsetMap,
    params: &CleanParams,
) -> Result<CleanOutcome, StorageError> {
    let mut outcome = CleanOutcome {
        bytes: Vec::with_capacity(segment.len()),
        bytes_in: segment.len() as u64,
        ..CleanOutcome::default()
    };
    let mut pos = 0usize;
    while pos < segment.len() {
        let (batch, header) = next_batch(segment, &mut pos)?;
        if header.attributes & CONTROL_BIT != 0 {
            outcome.bytes.extend_from_slice(batch);
            outcome.records_kept += header.records_count as u64;
            continue;
        }
        if params.aborted.holds(&header) {
            outcome.records_dropped += header.records_count.max(0) as u64;
            continue;
        }
        let section = records_section(batch, &header)?;
        let records = parse_records(&section, &header)?;
        let tombstones_expired = header.max_timestamp < params.delete_horizon_ms;
        let kept: Vec<&[u8]> = records
            .iter()
            .filter(|r| retain(r, map, tombstones_expired))
            .map(|r| r.bytes)
            .collect();
        outcome.records_kept += kept.len() as u64;
        outcome.records_dropped += (records.len() - kept.len()) as u64;
        if kept.len() == records.len() {
            outcome.bytes.extend_from_slice(batch);
        } else if !kept.is_empty() {
            rewrite_batch(batch, &header, &kept, &mut outcome.bytes)?;
        }
    }
    Ok(outcome)
}

fn retain(record: &RecordView<'_>, map: &OffsetMap, tombstones_expired: bool) -> bool {
    let Some(key) = record.key else {
        // Compacted topics refuse unkeyed records at produce time; never lose any that exist.
        return true;
    };
    let latest = map.get(key).is_none_or(|latest| record.offset >= latest.0);
    latest && !(tombstones_expired && record.value.is_none())
}

/// Appends to `out` a copy of `batch` holding only `kept` (record bytes, in order): header
/// fields unchanged but batchLength, recordsCount and CRC; same codec.
fn rewrite_batch(
    batch: &[u8],
    header: &BatchHeader,
    kept: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), StorageError> {
    let raw: Vec<u8> = kept.concat();
    let payload = crate::codec::compress(
        header.compression(),
        &raw,
        &crate::codec::CompressionLevels::default(),
    )?;
    let batch_length = i32::try_from(HEADER_BYTES - LOG_OVERHEAD + payload.len())
        .map_err(|_| corrupt("rewritten batch longer than i32::MAX"))?;
    // `kept` is a subset of the batch's records, whose count is an i32.
    let records_count = kept.len() as i32;
    let at = out.len();
    out.extend_from_slice(&batch[..HEADER_BYTES]);
    out.extend_from_slice(&payload);
    let new = &mut out[at..];
    new[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&batch_length.to_be_bytes());
    new[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&records_count.to_be_bytes());
    let crc = compute_crc(new);
    new[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    debug_assert!(validate_one(new, u32::MAX).is_ok());
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::batch::{validate_batches, ATTRIBUTES_AT};
    use crate::test_util::{batch_with, GZIP, LZ4, SNAPPY, SNAPPY_XERIAL, ZSTD};
    use keel_vocab::records::{frame_batch, put_record, BatchFields};

    const CODECS: [u8; 5] = [0, GZIP, SNAPPY, LZ4, ZSTD];
    const KEEP_TOMBSTONES: CleanParams<'static> = CleanParams {
        delete_horizon_ms: i64::MIN,
        aborted: &AbortedTxns::NONE,
    };

    #[derive(Clone, Debug)]
    struct Rec {
        offset_delta: i64,
        timestamp_delta: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    }

    fn rec(offset_delta: i64, key: Option<&str>, value: Option<&str>) -> Rec {
        Rec {
            offset_delta,
            timestamp_delta: offset_delta * 10,
            key: key.map(|k| k.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: Vec::new(),
        }
    }

    fn encode_record(r: &Rec) -> Vec<u8> {
        let headers: Vec<(&[u8], Option<&[u8]>)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        let mut out = bytes::BytesMut::new();
        put_record(
            &mut out,
            r.timestamp_delta,
            r.offset_delta,
            r.key.as_deref(),
            r.value.as_deref(),
            &headers,
        );
        out.to_vec()
    }

    /// Test-side compression: the module's own codecs, plus xerial-framed snappy.
    fn test_compress(codec: u8, raw: Vec<u8>) -> Vec<u8> {
        if codec != SNAPPY_XERIAL {
            return crate::codec::compress(codec, &raw, &Default::default()).unwrap();
        }
        let mut out = b"\x82SNAPPY\0".to_vec();
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        for block in raw.chunks(50) {
            let c = snap::raw::Encoder::new().compress_vec(block).unwrap();
            out.extend_from_slice(&(c.len() as u32).to_be_bytes());
            out.extend_from_slice(&c);
        }
        out
    }

    /// A magic-2 batch to encode; producer fields and epoch are fixed, recognisable values.
    #[derive(Clone, Debug)]
    struct Spec {
        base_offset: i64,
        base_timestamp: i64,
        max_timestamp: i64,
        last_offset_delta: i32,
        codec: u8,
        control: bool,
        records: Vec<Rec>,
    }

    impl Spec {
        fn new(base_offset: i64, codec: u8, records: Vec<Rec>) -> Spec {
            let base_timestamp = 1_000;
            Spec {
                base_offset,
                base_timestamp,
                max_timestamp: base_timestamp
                    + records.iter().map(|r| r.timestamp_delta).max().unwrap_or(0),
                last_offset_delta: records.iter().map(|r| r.offset_delta).max().unwrap_or(0) as i32,
                codec,
                control: false,
                records,
            }
        }

        fn encode(&self) -> Vec<u8> {
            let raw: Vec<u8> = self.records.iter().flat_map(encode_record).collect();
            let payload = test_compress(self.codec, raw);
            let mut attributes = (self.codec & 0x07) as i16;
            if self.control {
                attributes |= CONTROL_BIT | 0x10;
            }
            let fields = BatchFields {
                base_offset: self.base_offset,
                leader_epoch: 5,
                attributes,
                last_offset_delta: self.last_offset_delta,
                base_timestamp: self.base_timestamp,
                max_timestamp: self.max_timestamp,
                producer_id: 4711,
                producer_epoch: 3,
                base_sequence: 17,
                records_count: self.records.len() as i32,
            };
            frame_batch(&fields, &payload).to_vec()
        }
    }

    fn segment(specs: &[Spec]) -> Vec<u8> {
        specs.iter().flat_map(Spec::encode).collect()
    }

    #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
    struct Seen {
        offset: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
    }

    /// Every batch of `bytes` (each asserted valid) with its records.
    fn decode(bytes: &[u8]) -> Vec<(BatchHeader, Vec<Seen>, Vec<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let header = validate_one(&bytes[pos..], u32::MAX).expect("output batch validates");
            let batch = &bytes[pos..pos + header.size];
            let section = records_section(batch, &header).unwrap();
            let views = parse_records(&section, &header).unwrap();
            let seen = views
                .iter()
                .map(|v| Seen {
                    offset: v.offset,
                    key: v.key.map(<[u8]>::to_vec),
                    value: v.value.map(<[u8]>::to_vec),
                })
                .collect();
            let raw = views.iter().map(|v| v.bytes.to_vec()).collect();
            out.push((header, seen, raw));
            pos += header.size;
        }
        out
    }

    fn records_of(bytes: &[u8]) -> Vec<Seen> {
        decode(bytes).into_iter().flat_map(|(_, r, _)| r).collect()
    }

    fn seen(offset: i64, key: &str, value: Option<&str>) -> Seen {
        Seen {
            offset,
            key: Some(key.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
        }
    }

    fn map_over(segments: &[&[u8]]) -> OffsetMap {
        let mut map = OffsetMap::new();
        for s in segments {
            build_offset_map(&mut map, s, &AbortedTxns::NONE).unwrap();
        }
        map
    }

    #[test]
    fn latest_value_per_key_survives_across_batches_and_segments() {
        let older = segment(&[
            Spec::new(
                0,
                0,
                vec![
                    rec(0, Some("a"), Some("a0")),
                    rec(1, Some("b"), Some("b1")),
                    rec(2, Some("c"), Some("c2")),
                ],
            ),
            Spec::new(
                3,
                0,
                vec![rec(0, Some("a"), Some("a3")), rec(1, Some("d"), Some("d4"))],
            ),
        ]);
        let newer = segment(&[Spec::new(
            5,
            0,
            vec![rec(0, Some("b"), Some("b5")), rec(1, Some("e"), Some("e6"))],
        )]);
        let map = map_over(&[&older, &newer]);
        assert_eq!(map.len(), 5);
        assert_eq!(map.get(b"a"), Some(Offset(3)));
        assert_eq!(map.get(b"b"), Some(Offset(5)));
        assert_eq!(map.get(b"z"), None);

        let cleaned = clean_segment(&older, &map, &KEEP_TOMBSTONES).unwrap();
        assert_eq!(
            records_of(&cleaned.bytes),
            vec![
                seen(2, "c", Some("c2")),
                seen(3, "a", Some("a3")),
                seen(4, "d", Some("d4"))
            ]
        );
        assert_eq!((cleaned.records_kept, cleaned.records_dropped), (3, 2));
        assert_eq!(cleaned.bytes_in, older.len() as u64);

        let cleaned = clean_segment(&newer, &map, &KEEP_TOMBSTONES).unwrap();
        assert_eq!(cleaned.bytes, newer);
        assert_eq!((cleaned.records_kept, cleaned.records_dropped), (2, 0));
    }

    #[test]
    fn rewritten_batch_keeps_offsets_record_bytes_and_header_fields() {
        let mut records = vec![
            rec(0, Some("a"), Some("old")),
            rec(2, Some("b"), Some("b2")),
            rec(3, Some("a"), Some("new")),
            rec(7, Some("c"), Some("c7")),
        ];
        records[1].headers = vec![
            (b"h1".to_vec(), Some(b"v".to_vec())),
            (b"h2".to_vec(), None),
        ];
        records[1].timestamp_delta = 99;
        let mut spec = Spec::new(100, 0, records.clone());
        spec.last_offset_delta = 9; // the batch ends past its last record, as after compaction
        let input = spec.encode();
        let map = map_over(&[&input]);
        let cleaned = clean_segment(&input, &map, &KEEP_TOMBSTONES).unwrap();

        let batches = decode(&cleaned.bytes);
        assert_eq!(batches.len(), 1);
        let (header, kept, raw) = &batches[0];
        assert_eq!(header.base_offset, 100);
        assert_eq!(header.last_offset(), 109);
        assert_eq!(header.records_count, 3);
        let offsets: Vec<i64> = kept.iter().map(|s| s.offset).collect();
        assert_eq!(offsets, vec![102, 103, 107]);
        let expected_raw: Vec<Vec<u8>> = records[1..].iter().map(encode_record).collect();
        assert_eq!(raw, &expected_raw, "kept records are copied byte-for-byte");

        let out = &cleaned.bytes;
        // Everything but batchLength, CRC and recordsCount is the original header.
        assert_eq!(out[..BATCH_LENGTH_AT], input[..BATCH_LENGTH_AT]);
        assert_eq!(
            out[BATCH_LENGTH_AT + 4..CRC_AT],
            input[BATCH_LENGTH_AT + 4..CRC_AT]
        );
        assert_eq!(
            out[ATTRIBUTES_AT..RECORDS_COUNT_AT],
            input[ATTRIBUTES_AT..RECORDS_COUNT_AT]
        );
        validate_batches(out, u32::MAX).unwrap();
    }

    #[test]
    fn tombstones_kept_before_horizon_dropped_after() {
        let mut with_tombstone = Spec::new(
            2,
            0,
            vec![rec(0, Some("a"), None), rec(1, Some("b"), Some("b3"))],
        );
        with_tombstone.max_timestamp = 1_000;
        let input = segment(&[
            Spec::new(
                0,
                0,
                vec![rec(0, Some("a"), Some("a0")), rec(1, Some("b"), Some("b1"))],
            ),
            with_tombstone,
        ]);
        let map = map_over(&[&input]);
        for (horizon, tombstone_kept) in [(i64::MIN, true), (1_000, true), (1_001, false)] {
            let params = CleanParams {
                delete_horizon_ms: horizon,
                aborted: &AbortedTxns::NONE,
            };
            let cleaned = clean_segment(&input, &map, &params).unwrap();
            let mut expected = vec![seen(3, "b", Some("b3"))];
            if tombstone_kept {
                expected.insert(0, seen(2, "a", None));
            }
            assert_eq!(records_of(&cleaned.bytes), expected, "horizon {horizon}");
        }
    }

    #[test]
    fn tombstones_in_newer_batches_survive_a_horizon_older_than_them() {
        let mut spec = Spec::new(0, 0, vec![rec(0, Some("a"), None)]);
        spec.base_timestamp = 5_000;
        spec.max_timestamp = 5_000;
        let input = spec.encode();
        let map = map_over(&[&input]);
        let params = CleanParams {
            delete_horizon_ms: 4_000,
            aborted: &AbortedTxns::NONE,
        };
        assert_eq!(clean_segment(&input, &map, &params).unwrap().bytes, input);
    }

    #[test]
    fn every_codec_round_trips_with_the_same_codec() {
        for codec in CODECS.into_iter().chain([SNAPPY_XERIAL]) {
            let records = (0..40)
                .map(|i| {
                    let value = format!("value-{i}-{}", "x".repeat(i as usize));
                    rec(i, Some(&format!("k{}", i % 10)), Some(&value))
                })
                .collect();
            let input = Spec::new(50, codec, records).encode();
            let map = map_over(&[&input]);
            let cleaned = clean_segment(&input, &map, &KEEP_TOMBSTONES).unwrap();
            let batches = decode(&cleaned.bytes);
            assert_eq!(batches.len(), 1, "codec {codec}");
            let header = &batches[0].0;
            assert_eq!(header.compression(), codec & 0x07, "codec {codec}");
            assert_eq!(header.last_offset(), 89);
            let offsets: Vec<i64> = batches[0].1.iter().map(|s| s.offset).collect();
            assert_eq!(offsets, (80..90).collect::<Vec<_>>(), "codec {codec}");
            assert_eq!(
                batches[0].1[0],
                seen(80, "k0", Some(&format!("value-30-{}", "x".repeat(30))))
            );
        }
    }

    #[test]
    fn control_batches_are_kept_and_not_mapped() {
        let mut marker = Spec::new(1, 0, vec![rec(0, Some("a"), Some("commit"))]);
        marker.control = true;
        let input = segment(&[
            Spec::new(0, 0, vec![rec(0, Some("a"), Some("a0"))]),
            marker.clone(),
            Spec::new(2, 0, vec![rec(0, Some("a"), Some("a2"))]),
        ]);
        let mut map = OffsetMap::new();
        build_offset_map(&mut map, &marker.encode(), &AbortedTxns::NONE).unwrap();
        assert!(map.is_empty());
        let map = map_over(&[&input]);
        assert_eq!(map.get(b"a"), Some(Offset(2)));
        let cleaned = clean_segment(&input, &map, &KEEP_TOMBSTONES).unwrap();
        let expected = segment(&[marker, Spec::new(2, 0, vec![rec(0, Some("a"), Some("a2"))])]);
        assert_eq!(cleaned.bytes, expected);
        assert_eq!((cleaned.records_kept, cleaned.records_dropped), (2, 1));
    }

    #[test]
    fn aborted_transactions_are_dropped_and_never_mapped() {
        use crate::batch::TRANSACTIONAL_BIT;
        // `Spec` batches carry producer id 4711: made transactional, they are its
        // transaction's.
        let txn = |spec: Spec| {
            let mut b = spec.encode();
            assert_eq!(BatchHeader::parse(&b).unwrap().producer_id, 4711);
            let attrs = i16::from_be_bytes([b[ATTRIBUTES_AT], b[ATTRIBUTES_AT + 1]]);
            b[ATTRIBUTES_AT..ATTRIBUTES_AT + 2]
                .copy_from_slice(&(attrs | TRANSACTIONAL_BIT).to_be_bytes());
            let crc = compute_crc(&b);
            b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
            b
        };
        let mut marker = Spec::new(2, 0, vec![rec(0, Some("m"), Some("abort"))]);
        marker.control = true;
        let input = [
            Spec::new(0, 0, vec![rec(0, Some("a"), Some("a0"))]).encode(),
            txn(Spec::new(1, GZIP, vec![rec(0, Some("a"), Some("a1"))])),
            marker.encode(),
            txn(Spec::new(3, 0, vec![rec(0, Some("b"), Some("b3"))])),
        ]
        .concat();
        // Producer 4711 aborted [1, 2]; its transaction at 3 is committed (not listed).
        let aborted = AbortedTxns::new([(4711, Offset(1), Offset(2)), (9, Offset(0), Offset(5))]);
        assert_eq!(aborted.len(), 2);
        let mut map = OffsetMap::new();
        build_offset_map(&mut map, &input, &aborted).unwrap();
        assert_eq!(
            map.get(b"a"),
            Some(Offset(0)),
            "the aborted a1 is not mapped"
        );
        let params = CleanParams {
            delete_horizon_ms: i64::MIN,
            aborted: &aborted,
        };
        let cleaned = clean_segment(&input, &map, &params).unwrap();
        assert_eq!(
            records_of(&cleaned.bytes),
            vec![
                seen(0, "a", Some("a0")),
                seen(2, "m", Some("abort")),
                seen(3, "b", Some("b3"))
            ]
        );
        assert_eq!((cleaned.records_kept, cleaned.records_dropped), (3, 1));
        // Non-transactional batches of the producer, and other producers, are not aborted.
        let plain = BatchHeader::parse(&input).unwrap();
        assert!(!aborted.holds(&plain));
    }

    #[test]
    fn unkeyed_records_are_kept() {
        let input = segment(&[Spec::new(
            0,
            LZ4,
            vec![
                rec(0, None, Some("n0")),
                rec(1, Some("a"), Some("a1")),
                rec(2, None, None),
                rec(3, Some("a"), Some("a3")),
            ],
        )]);
        let map = map_over(&[&input]);
        assert_eq!(map.len(), 1);
        let params = CleanParams {
            delete_horizon_ms: i64::MAX,
            aborted: &AbortedTxns::NONE,
        };
        let cleaned = clean_segment(&input, &map, &params).unwrap();
        let unkeyed = |offset, value: Option<&str>| Seen {
            offset,
            key: None,
            value: value.map(|v| v.as_bytes().to_vec()),
        };
        assert_eq!(
            records_of(&cleaned.bytes),
            vec![
                unkeyed(0, Some("n0")),
                unkeyed(2, None),
                seen(3, "a", Some("a3"))
            ]
        );

        // A client-built unkeyed batch (test_util) is copied as it is.
        let unkeyed_batch = batch_with(&[(1, b"x".to_vec()), (2, b"y".to_vec())], ZSTD);
        let cleaned = clean_segment(&unkeyed_batch, &map, &params).unwrap();
        assert_eq!(cleaned.bytes, unkeyed_batch.to_vec());
    }

    #[test]
    fn a_batch_with_every_record_dropped_disappears() {
        let input = segment(&[
            Spec::new(
                0,
                GZIP,
                vec![rec(0, Some("a"), Some("a0")), rec(1, Some("b"), Some("b1"))],
            ),
            Spec::new(
                2,
                GZIP,
                vec![rec(0, Some("a"), Some("a2")), rec(1, Some("b"), Some("b3"))],
            ),
        ]);
        let map = map_over(&[&input]);
        let cleaned = clean_segment(&input, &map, &KEEP_TOMBSTONES).unwrap();
        let second = Spec::new(
            2,
            GZIP,
            vec![rec(0, Some("a"), Some("a2")), rec(1, Some("b"), Some("b3"))],
        );
        assert_eq!(cleaned.bytes, second.encode());
        assert_eq!((cleaned.records_kept, cleaned.records_dropped), (2, 2));

        let tombstones = Spec::new(0, 0, vec![rec(0, Some("a"), None)]).encode();
        let map = map_over(&[&tombstones]);
        let params = CleanParams {
            delete_horizon_ms: i64::MAX,
            aborted: &AbortedTxns::NONE,
        };
        let cleaned = clean_segment(&tombstones, &map, &params).unwrap();
        assert!(cleaned.bytes.is_empty());
    }

    #[test]
    fn records_past_the_mapped_range_are_kept() {
        let older = Spec::new(0, 0, vec![rec(0, Some("a"), Some("a0"))]).encode();
        let newer = Spec::new(1, 0, vec![rec(0, Some("a"), Some("a1"))]).encode();
        let map = map_over(&[&older]);
        let both = [older.clone(), newer.clone()].concat();
        let cleaned = clean_segment(&both, &map, &KEEP_TOMBSTONES).unwrap();
        assert_eq!(cleaned.bytes, both);
        let map = map_over(&[&newer, &older]); // order does not matter: the larger offset wins
        assert_eq!(map.get(b"a"), Some(Offset(1)));
    }

    #[test]
    fn offset_map_estimates_its_memory() {
        let mut map = OffsetMap::new();
        assert_eq!(map.memory_bytes(), 0);
        map.insert(b"abc", Offset(1));
        let one = map.memory_bytes();
        assert!(one >= 3 + 8);
        map.insert(b"abc", Offset(9));
        assert_eq!(map.memory_bytes(), one);
        map.insert(b"abcd", Offset(2));
        assert_eq!(map.memory_bytes(), 2 * one + 1);
    }

    fn assert_corrupt(r: Result<impl std::fmt::Debug, StorageError>, what: &str) {
        match r {
            Err(StorageError::CorruptMessage(_)) => {}
            other => panic!("{what}: expected CorruptMessage, got {other:?}"),
        }
    }

    fn check_both(bytes: &[u8], what: &str) {
        let map = OffsetMap::new();
        assert_corrupt(
            build_offset_map(&mut OffsetMap::new(), bytes, &AbortedTxns::NONE),
            what,
        );
        assert_corrupt(clean_segment(bytes, &map, &KEEP_TOMBSTONES), what);
    }

    /// A batch with a correct header and CRC around `payload` (already compressed).
    fn batch_around(payload: &[u8], codec: u8, records_count: i32) -> Vec<u8> {
        let mut b = Spec::new(0, 0, vec![rec(0, None, None)]).encode();
        b.truncate(HEADER_BYTES);
        b[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&(codec as i16 & 0x07).to_be_bytes());
        b[RECORDS_COUNT_AT..RECORDS_COUNT_AT + 4].copy_from_slice(&records_count.to_be_bytes());
        b[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4]
            .copy_from_slice(&records_count.max(0).to_be_bytes());
        b.extend_from_slice(payload);
        let len = (b.len() - LOG_OVERHEAD) as i32;
        b[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&len.to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    const LAST_OFFSET_DELTA: usize = crate::batch::LAST_OFFSET_DELTA_AT;

    #[test]
    fn bad_bytes_are_corrupt_message() {
        let good = segment(&[
            Spec::new(
                0,
                0,
                vec![rec(0, Some("a"), Some("a0")), rec(1, Some("b"), None)],
            ),
            Spec::new(2, ZSTD, vec![rec(0, Some("a"), Some("a2"))]),
        ]);
        let first_len = BatchHeader::parse(&good).unwrap().size;
        for cut in 1..good.len() {
            if cut != first_len {
                check_both(&good[..cut], &format!("cut at {cut}"));
            }
        }
        let mut flipped = good.clone();
        flipped[HEADER_BYTES + 3] ^= 0x40;
        check_both(&flipped, "flipped record byte (crc)");

        let raw = encode_record(&rec(0, Some("a"), Some("a0")));
        let mut trailing = raw.clone();
        trailing.push(0);
        check_both(
            &batch_around(&trailing, 0, 1),
            "bytes after the last record",
        );
        check_both(&batch_around(&raw, 0, 2), "fewer records than recordsCount");
        check_both(
            &batch_around(&raw[..raw.len() - 1], 0, 1),
            "truncated record",
        );
        let mut long = raw.clone();
        long[0] += 2; // declares 1 byte more than its fields use
        long.push(0);
        check_both(&batch_around(&long, 0, 1), "record length mismatch");
        check_both(&batch_around(&raw, LZ4, 1), "not lz4");
        check_both(&batch_around(&raw, 6, 1), "unknown codec");
    }

    #[derive(Clone, Debug)]
    struct GenBatch {
        codec: u8,
        gap: i64,
        max_timestamp: i64,
        /// (offset step, key index or unkeyed, value or tombstone)
        records: Vec<(i64, Option<u8>, Option<Vec<u8>>)>,
    }

    fn gen_batch() -> impl Strategy<Value = GenBatch> {
        (
            0usize..5,
            0i64..3,
            0i64..100,
            prop::collection::vec(
                (
                    1i64..3,
                    prop::option::weighted(0.9, 0u8..8),
                    prop::option::weighted(0.8, prop::collection::vec(any::<u8>(), 0..12)),
                ),
                1..8,
            ),
        )
            .prop_map(|(codec, gap, max_timestamp, records)| GenBatch {
                codec: CODECS[codec],
                gap,
                max_timestamp,
                records,
            })
    }

    /// Encodes the generated batches at increasing offsets; returns each batch's bytes and
    /// every record as (offset, key, value, batch maxTimestamp).
    fn encode_gen(batches: &[GenBatch]) -> (Vec<Vec<u8>>, Vec<(Seen, i64)>) {
        let mut next_offset = 0;
        let mut encoded = Vec::new();
        let mut written = Vec::new();
        for b in batches {
            let base_offset = next_offset + b.gap;
            let mut delta = -1;
            let records: Vec<Rec> = b
                .records
                .iter()
                .map(|(step, key, value)| {
                    delta += step;
                    let r = Rec {
                        offset_delta: delta,
                        timestamp_delta: 0,
                        key: key.map(|k| vec![b'k', k]),
                        value: value.clone(),
                        headers: Vec::new(),
                    };
                    let s = Seen {
                        offset: base_offset + delta,
                        key: r.key.clone(),
                        value: r.value.clone(),
                    };
                    written.push((s, b.max_timestamp));
                    r
                })
                .collect();
            let mut spec = Spec::new(base_offset, b.codec, records);
            spec.base_timestamp = 0;
            spec.max_timestamp = b.max_timestamp;
            next_offset = base_offset + delta + 1;
            encoded.push(spec.encode());
        }
        (encoded, written)
    }

    /// Last write per key (minus expired tombstones) plus every unkeyed record.
    fn model(written: &[(Seen, i64)], horizon_ms: i64) -> Vec<Seen> {
        let mut last: HashMap<Vec<u8>, (Seen, i64)> = HashMap::new();
        let mut out = Vec::new();
        for (s, max_ts) in written {
            match &s.key {
                Some(k) => {
                    last.insert(k.clone(), (s.clone(), *max_ts));
                }
                None => out.push(s.clone()),
            }
        }
        out.extend(
            last.into_values()
                .filter(|(s, max_ts)| s.value.is_some() || *max_ts >= horizon_ms)
                .map(|(s, _)| s),
        );
        out.sort();
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        #[test]
        fn cleaning_matches_last_write_model(
            batches in prop::collection::vec(gen_batch(), 1..12),
            split in any::<prop::sample::Index>(),
            horizon_ms in prop_oneof![Just(i64::MIN), 0i64..110, Just(i64::MAX)],
        ) {
            let (encoded, written) = encode_gen(&batches);
            let split = split.index(encoded.len() + 1);
            let older = encoded[..split].concat();
            let newer = encoded[split..].concat();
            let map = map_over(&[&older, &newer]);
            let params = CleanParams { delete_horizon_ms: horizon_ms, aborted: &AbortedTxns::NONE };
            let mut kept = Vec::new();
            let (mut records_kept, mut records_dropped) = (0, 0);
            for s in [&older, &newer] {
                let cleaned = clean_segment(s, &map, &params).unwrap();
                prop_assert_eq!(cleaned.bytes_in, s.len() as u64);
                records_kept += cleaned.records_kept;
                records_dropped += cleaned.records_dropped;
                let input_batches = decode(s);
                for (header, records, _) in decode(&cleaned.bytes) {
                    // Each output batch is an input batch with the same offset range and codec.
                    let original = input_batches
                        .iter()
                        .find(|(h, _, _)| h.base_offset == header.base_offset)
                        .expect("output batch comes from an input batch");
                    prop_assert_eq!(original.0.last_offset(), header.last_offset());
                    prop_assert_eq!(original.0.attributes, header.attributes);
                    prop_assert!(!records.is_empty());
                    kept.extend(records);
                }
                if !cleaned.bytes.is_empty() {
                    validate_batches(&cleaned.bytes, u32::MAX).unwrap();
                }
            }
            kept.sort();
            prop_assert_eq!(records_kept, kept.len() as u64);
            prop_assert_eq!(records_kept + records_dropped, written.len() as u64);
            prop_assert_eq!(kept, model(&written, horizon_ms));
        }

        #[test]
        fn garbage_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = build_offset_map(&mut OffsetMap::new(), &bytes, &AbortedTxns::NONE);
            let _ = clean_segment(&bytes, &OffsetMap::new(), &KEEP_TOMBSTONES);
        }

        #[test]
        fn garbage_records_with_a_valid_crc_never_panic(
            payload in prop::collection::vec(any::<u8>(), 0..200),
            codec in 0u8..8,
            records_count in -2i32..40,
        ) {
            let batch = batch_around(&payload, codec, records_count);
            let mut map = OffsetMap::new();
            let _ = build_offset_map(&mut map, &batch, &AbortedTxns::NONE);
            let _ = clean_segment(&batch, &map, &KEEP_TOMBSTONES);
        }

        #[test]
        fn flipped_or_cut_segments_never_panic(
            batches in prop::collection::vec(gen_batch(), 1..4),
            at in any::<prop::sample::Index>(),
            xor in 1u8..=255,
            cut in any::<bool>(),
        ) {
            let mut bytes = encode_gen(&batches).0.concat();
            let at = at.index(bytes.len());
            if cut {
                bytes.truncate(at);
            } else {
                bytes[at] ^= xor;
            }
            let mut map = OffsetMap::new();
            let _ = build_offset_map(&mut map, &bytes, &AbortedTxns::NONE);
            let _ = clean_segment(&bytes, &map, &KEEP_TOMBSTONES);
        }
    }
}
