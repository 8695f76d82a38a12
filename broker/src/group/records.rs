//! The records a group coordinator writes to `__consumer_offsets`, in Kafka's own format so
//! Kafka's tools (kafka-console-consumer's offsets formatter, Burrow, ...) read them.
//!
//! Key `OffsetCommitKey` (written at version 1; versions 0 and 1 are the same layout):
//! `version i16, group STRING, topic STRING, partition i32`. Value `OffsetCommitValue`
//! (written at version 3; versions 0-3 are read): `version i16, offset i64, leader_epoch i32
//! (v3), metadata STRING, commit_timestamp i64, expire_timestamp i64 (v1 only)`. A STRING is an
//! i16 length and that many UTF-8 bytes. A record without a value is a tombstone: the offset
//! was deleted. Key version 2 is `GroupMetadataKey` (the classic group's membership), which
//! the offsets code skips.
//!
//! Bytes read back come from the disk: every decoder here returns `None` on anything
//! malformed and never panics.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::CommittedOffset;

/// The key version this broker writes for offset commits.
pub const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
/// The value version this broker writes for offset commits.
pub const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// `GroupMetadataKey`: the classic group's membership record.
pub const GROUP_METADATA_KEY_VERSION: i16 = 2;

/// Offsets of the fields of a record batch header (magic 2) this module reads.
const BATCH_LENGTH_AT: usize = 8;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BATCH_HEADER_BYTES: usize = 61;
/// Bytes before the batch length field counts from: base offset and the length itself.
const BATCH_LOG_OVERHEAD: usize = 12;

/// The key of a committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetKey {
    pub group: String,
    pub topic: String,
    pub partition: i32,
}

/// One change to the committed offsets: a commit or a deletion (tombstone).
#[derive(Debug, Clone, PartialEq)]
pub enum OffsetChange {
    Commit(OffsetKey, CommittedOffset),
    Delete(OffsetKey),
}

impl OffsetChange {
    pub fn key(&self) -> &OffsetKey {
        match self {
            OffsetChange::Commit(k, _) | OffsetChange::Delete(k) => k,
        }
    }
}

/// What a record of `__consumer_offsets` holds, as far as offsets are concerned.
#[derive(Debug, Clone, PartialEq)]
pub enum CoordinatorRecord {
    Offset(OffsetChange),
    /// A `GroupMetadataKey` record (classic membership), for the group named.
    GroupMetadata(String),
    /// A key version this broker does not know, or bytes it cannot read.
    Unreadable,
}

fn put_string(buf: &mut BytesMut, s: &str) {
    // Callers bound every string: group ids and topic names by the request frame, metadata by
    // offset.metadata.max.bytes; longer ones cannot be represented and are refused earlier.
    debug_assert!(s.len() <= i16::MAX as usize);
    buf.put_i16(s.len().min(i16::MAX as usize) as i16);
    buf.put_slice(&s.as_bytes()[..s.len().min(i16::MAX as usize)]);
}

fn get_string(buf: &mut Bytes) -> Option<String> {
    if buf.remaining() < 2 {
        return None;
    }
    let len = buf.get_i16();
    if len < 0 {
        // A null string: Kafka never writes one in these fields; read it as empty.
        return Some(String::new());
    }
    let len = len as usize;
    if buf.remaining() < len {
        return None;
    }
    let bytes = buf.split_to(len);
    String::from_utf8(bytes.to_vec()).ok()
}

/// The key of an offset commit record.
pub fn encode_key(key: &OffsetKey) -> Bytes {
    let mut buf = BytesMut::with_capacity(10 + key.group.len() + key.topic.len());
    buf.put_i16(OFFSET_COMMIT_KEY_VERSION);
    put_string(&mut buf, &key.group);
    put_string(&mut buf, &key.topic);
    buf.put_i32(key.partition);
    buf.freeze()
}

/// The value of an offset commit record.
pub fn encode_value(value: &CommittedOffset) -> Bytes {
    let mut buf = BytesMut::with_capacity(24 + value.metadata.len());
    buf.put_i16(OFFSET_COMMIT_VALUE_VERSION);
    buf.put_i64(value.offset);
    buf.put_i32(value.leader_epoch);
    put_string(&mut buf, &value.metadata);
    buf.put_i64(value.commit_timestamp_ms);
    buf.freeze()
}

fn decode_offset_key(mut buf: Bytes) -> Option<OffsetKey> {
    let group = get_string(&mut buf)?;
    let topic = get_string(&mut buf)?;
    if buf.remaining() < 4 {
        return None;
    }
    Some(OffsetKey {
        group,
        topic,
        partition: buf.get_i32(),
    })
}

/// Reads an `OffsetCommitValue` of versions 0-3.
pub fn decode_value(mut buf: Bytes) -> Option<CommittedOffset> {
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16();
    if !(0..=3).contains(&version) || buf.remaining() < 8 {
        return None;
    }
    let offset = buf.get_i64();
    let leader_epoch = if version >= 3 {
        if buf.remaining() < 4 {
            return None;
        }
        buf.get_i32()
    } else {
        -1
    };
    let metadata = get_string(&mut buf)?;
    if buf.remaining() < 8 {
        return None;
    }
    let commit_timestamp_ms = buf.get_i64();
    Some(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
    })
}

/// What one record of `__consumer_offsets` says.
pub fn decode_record(key: Option<Bytes>, value: Option<Bytes>) -> CoordinatorRecord {
    let Some(mut key) = key else {
        return CoordinatorRecord::Unreadable;
    };
    if key.remaining() < 2 {
        return CoordinatorRecord::Unreadable;
    }
    match key.get_i16() {
        0 | 1 => {
            let Some(k) = decode_offset_key(key) else {
                return CoordinatorRecord::Unreadable;
            };
            match value {
                None => CoordinatorRecord::Offset(OffsetChange::Delete(k)),
                Some(v) => match decode_value(v) {
                    Some(v) => CoordinatorRecord::Offset(OffsetChange::Commit(k, v)),
                    None => CoordinatorRecord::Unreadable,
                },
            }
        }
        GROUP_METADATA_KEY_VERSION => match get_string(&mut key) {
            Some(group) => CoordinatorRecord::GroupMetadata(group),
            None => CoordinatorRecord::Unreadable,
        },
        _ => CoordinatorRecord::Unreadable,
    }
}

/// One uncompressed record batch (magic 2) holding `changes` in order, stamped `now_ms`.
pub fn encode_batch(changes: &[OffsetChange], now_ms: i64) -> anyhow::Result<BytesMut> {
    let records: Vec<Record> = changes
        .iter()
        .enumerate()
        .map(|(i, change)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch wherever `offset - sequence` changes; keeping it
            // constant keeps every record in one batch, whose base sequence stays -1 (no
            // producer id: not idempotent).
            sequence: (i as i32).wrapping_sub(1),
            timestamp: now_ms,
            key: Some(encode_key(change.key())),
            value: match change {
                OffsetChange::Commit(_, v) => Some(encode_value(v)),
                OffsetChange::Delete(_) => None,
            },
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )?;
    Ok(buf)
}

/// Walks the whole batches in `bytes` (as a log read returns them), calling `each` with every
/// record's key and value. Returns the offset after the last batch walked (so the next read
/// starts there), or `None` if there was no whole batch. A batch that cannot be decoded is
/// skipped (counted in `unreadable`), its offsets still passed.
pub fn walk_batches(
    bytes: &Bytes,
    unreadable: &mut u64,
    mut each: impl FnMut(Option<Bytes>, Option<Bytes>),
) -> Option<i64> {
    let mut pos = 0usize;
    let mut next = None;
    while bytes.len() - pos >= BATCH_HEADER_BYTES {
        let at = |o: usize, n: usize| &bytes[pos + o..pos + o + n];
        let base_offset = i64::from_be_bytes(at(0, 8).try_into().ok()?);
        let length = i32::from_be_bytes(at(BATCH_LENGTH_AT, 4).try_into().ok()?);
        let last_offset_delta = i32::from_be_bytes(at(LAST_OFFSET_DELTA_AT, 4).try_into().ok()?);
        let size = usize::try_from(length).ok()? + BATCH_LOG_OVERHEAD;
        if size < BATCH_HEADER_BYTES || bytes.len() - pos < size {
            break;
        }
        let mut batch = bytes.slice(pos..pos + size);
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            RecordBatchDecoder::decode(&mut batch)
        }));
        match decoded {
            Ok(Ok(set)) => {
                for r in set.records.into_iter().filter(|r| !r.control) {
                    each(r.key, r.value);
                }
            }
            _ => *unreadable += 1,
        }
        next = Some(base_offset.saturating_add(i64::from(last_offset_delta.max(0)) + 1));
        pos += size;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(g: &str, t: &str, p: i32) -> OffsetKey {
        OffsetKey {
            group: g.into(),
            topic: t.into(),
            partition: p,
        }
    }

    #[test]
    fn key_and_value_layout_is_kafkas() {
        let k = encode_key(&key("g", "tp", 7));
        assert_eq!(&k[..], &[0, 1, 0, 1, b'g', 0, 2, b't', b'p', 0, 0, 0, 7]);
        let v = encode_value(&CommittedOffset {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp_ms: 1000,
        });
        let mut want = vec![0, 3];
        want.extend(42i64.to_be_bytes());
        want.extend(3i32.to_be_bytes());
        want.extend([0, 1, b'm']);
        want.extend(1000i64.to_be_bytes());
        assert_eq!(&v[..], &want[..]);
    }

    #[test]
    fn older_value_versions_decode() {
        // v1: offset, metadata, commit timestamp, expire timestamp.
        let mut v1 = vec![0, 1];
        v1.extend(5i64.to_be_bytes());
        v1.extend([0, 0]);
        v1.extend(77i64.to_be_bytes());
        v1.extend(99i64.to_be_bytes());
        let got = decode_value(Bytes::from(v1)).unwrap();
        assert_eq!(
            (got.offset, got.leader_epoch, got.commit_timestamp_ms),
            (5, -1, 77)
        );
        assert!(decode_value(Bytes::from_static(&[0, 9, 0])).is_none());
        assert!(decode_value(Bytes::from_static(&[0, 3, 0, 0])).is_none());
    }

    #[test]
    fn batch_round_trip_with_tombstone() {
        let changes = vec![
            OffsetChange::Commit(
                key("g1", "a", 0),
                CommittedOffset {
                    offset: 10,
                    leader_epoch: -1,
                    metadata: "x".repeat(100),
                    commit_timestamp_ms: 5,
                },
            ),
            OffsetChange::Delete(key("g1", "a", 1)),
        ];
        let mut batch = encode_batch(&changes, 5).unwrap();
        // Pretend the log stamped base offset 100.
        batch[0..8].copy_from_slice(&100i64.to_be_bytes());
        let bytes = batch.freeze();
        let mut seen = Vec::new();
        let mut bad = 0;
        let next = walk_batches(&bytes, &mut bad, |k, v| seen.push(decode_record(k, v)));
        assert_eq!(next, Some(102));
        let batch_length = i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        assert_eq!(batch_length + 12, bytes.len(), "one batch");
        assert_eq!(&bytes[53..57], &(-1i32).to_be_bytes(), "base sequence");
        assert_eq!(bad, 0);
        let want: Vec<CoordinatorRecord> =
            changes.into_iter().map(CoordinatorRecord::Offset).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn garbage_is_unreadable_not_a_panic() {
        for len in 0..80 {
            let junk = Bytes::from(vec![0x7fu8; len]);
            let mut bad = 0;
            let _ = walk_batches(&junk, &mut bad, |_, _| {});
            let _ = decode_record(Some(junk.clone()), Some(junk.clone()));
        }
        assert_eq!(
            decode_record(Some(Bytes::from_static(&[0, 1, 0, 5, b'a'])), None),
            CoordinatorRecord::Unreadable
        );
        assert_eq!(decode_record(None, None), CoordinatorRecord::Unreadable);
    }
}
