//! The records a group coordinator writes to `__consumer_offsets`, in Kafka's own format so
//! Kafka's tools (kafka-console-consumer's offsets formatter, Burrow, ...) read them.
//!
//! Key `OffsetCommitKey` (written at version 1; versions 0 and 1 are the same layout):
//! `version i16, group STRING, topic STRING, partition i32`. Value `OffsetCommitValue`
//! (written at version 3; versions 0-3 are read): `version i16, offset i64, leader_epoch i32
//! (v3), metadata STRING, commit_timestamp i64, expire_timestamp i64 (v1 only)`. A record
//! without a value is a tombstone: the offset was deleted.
//!
//! Key `GroupMetadataKey` (version 2): `version i16, group STRING`. Value `GroupMetadataValue`
//! (a classic group's membership; written at version 3, versions 0-3 are read):
//! `version i16, protocol_type STRING, generation i32, protocol NULLABLE_STRING,
//! leader NULLABLE_STRING, current_state_timestamp i64 (v2+), members ARRAY`, each member
//! `member_id STRING, group_instance_id NULLABLE_STRING (v3+), client_id STRING,
//! client_host STRING, rebalance_timeout i32 (v1+), session_timeout i32, subscription BYTES,
//! assignment BYTES`. A record without a value is a tombstone: the group was deleted. Version 4
//! (the flexible encoding newer Kafka schemas define) is not read.
//!
//! A STRING is an i16 length and that many UTF-8 bytes (length -1: null, in a NULLABLE_STRING);
//! BYTES an i32 length and that many bytes; an ARRAY an i32 count and that many elements.
//!
//! Bytes read back come from the disk: every decoder here returns `None` on anything
//! malformed and never panics, and allocates no more than the bytes it was given justify.

use bytes::{BufMut, Bytes, BytesMut};
use keel_vocab::records::{
    compute_crc, for_each_record_of, BatchBuilder, BatchHeader, Codec, ProducerStamp, MAGIC_V2,
};
use keel_vocab::wire::{put_bytes, put_nullable_string, put_string, Reader};

/// One committed offset, as OffsetCommit stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1 = unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    /// The coordinator's clock when the commit was written.
    pub commit_timestamp_ms: i64,
}

/// The key version this broker writes for offset commits.
pub const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
/// The value version this broker writes for offset commits.
pub const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// `GroupMetadataKey`: the classic group's membership record.
pub const GROUP_METADATA_KEY_VERSION: i16 = 2;
/// The value version this broker writes for a classic group's membership.
pub const GROUP_METADATA_VALUE_VERSION: i16 = 3;
/// The fewest bytes one member of a `GroupMetadataValue` takes (version 0: three empty
/// strings, the session timeout and two empty byte arrays); bounds what a count preallocates.
const MEMBER_METADATA_BYTES_MIN: usize = 3 * 2 + 4 + 2 * 4;

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
    /// The deletion (tombstone) of `group`'s offset of `topic`-`partition`.
    pub fn delete(group: &str, topic: &str, partition: i32) -> OffsetChange {
        OffsetChange::Delete(OffsetKey {
            group: group.to_owned(),
            topic: topic.to_owned(),
            partition,
        })
    }

    pub fn key(&self) -> &OffsetKey {
        match self {
            OffsetChange::Commit(k, _) | OffsetChange::Delete(k) => k,
        }
    }

    /// The record's key and value (`None`: a tombstone).
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        let value = match self {
            OffsetChange::Commit(_, v) => Some(encode_value(v)),
            OffsetChange::Delete(_) => None,
        };
        (encode_key(self.key()), value)
    }
}

/// A classic group's persisted membership (Kafka's `GroupMetadataValue`): what the coordinator
/// writes when a generation completes with the leader's assignment and when the group empties.
/// Field names are `classic`'s; Kafka's schema name follows in quotes where it differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    /// Empty for a group whose members never set one (Kafka reads that as none).
    pub protocol_type: String,
    /// "generation".
    pub generation_id: i32,
    /// "protocol": the protocol chosen for the generation; `None` while `Empty`.
    pub protocol_name: Option<String>,
    /// "leader": the leader's member id; `None` while `Empty`.
    pub leader_id: Option<String>,
    /// "currentStateTimestamp" (v2+): when the group entered its current state; -1 when unknown
    /// (and when read from versions 0 and 1).
    pub current_state_timestamp_ms: i64,
    /// In join order.
    pub members: Vec<MemberMetadata>,
}

/// One member of a [`GroupMetadataValue`] (Kafka's `MemberMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    /// A static member's `group.instance.id` (v3+; `None` from older versions).
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// "rebalanceTimeout" (v1+); read from version 0 as the session timeout, as Kafka does.
    pub rebalance_timeout_ms: i32,
    /// "sessionTimeout".
    pub session_timeout_ms: i32,
    /// "subscription": the member's metadata for the chosen protocol.
    pub subscription: Bytes,
    /// The leader's assignment to this member.
    pub assignment: Bytes,
}

/// One change to a classic group's persisted membership: a new value or a deletion
/// (tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupMetadataChange {
    Store(String, GroupMetadataValue),
    Delete(String),
}

impl GroupMetadataChange {
    /// The group's id.
    pub fn group(&self) -> &str {
        match self {
            GroupMetadataChange::Store(g, _) | GroupMetadataChange::Delete(g) => g,
        }
    }

    /// The record's key and value (`None`: a tombstone).
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        let value = match self {
            GroupMetadataChange::Store(_, v) => Some(encode_group_metadata_value(v)),
            GroupMetadataChange::Delete(_) => None,
        };
        (encode_group_metadata_key(self.group()), value)
    }
}

/// What a record of `__consumer_offsets` holds.
#[derive(Debug, Clone, PartialEq)]
pub enum CoordinatorRecord {
    Offset(OffsetChange),
    /// A `GroupMetadataKey` record: a classic group's membership, or its deletion.
    GroupMetadata(GroupMetadataChange),
    /// A key version this broker does not know, or bytes it cannot read.
    Unreadable,
}

/// A non-nullable STRING as Kafka's group records hold it: a null reads as empty.
fn get_string(r: &mut Reader<'_>) -> Option<String> {
    r.nullable_string().map(Option::unwrap_or_default)
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

fn decode_offset_key(r: &mut Reader<'_>) -> Option<OffsetKey> {
    Some(OffsetKey {
        group: get_string(r)?,
        topic: get_string(r)?,
        partition: r.i32()?,
    })
}

/// Reads an `OffsetCommitValue` of versions 0-3.
pub fn decode_value(buf: Bytes) -> Option<CommittedOffset> {
    let mut r = Reader::new(&buf);
    let version = r.i16()?;
    if !(0..=3).contains(&version) {
        return None;
    }
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = get_string(&mut r)?;
    let commit_timestamp_ms = r.i64()?;
    Some(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
    })
}

/// The key of a classic group's membership record.
pub fn encode_group_metadata_key(group: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + group.len());
    buf.put_i16(GROUP_METADATA_KEY_VERSION);
    put_string(&mut buf, group);
    buf.freeze()
}

/// The value of a classic group's membership record, at [`GROUP_METADATA_VALUE_VERSION`].
pub fn encode_group_metadata_value(value: &GroupMetadataValue) -> Bytes {
    encode_group_metadata_value_at(value, GROUP_METADATA_VALUE_VERSION)
}

/// A `GroupMetadataValue` at `version` (0-3): the fields a version lacks are left out.
fn encode_group_metadata_value_at(value: &GroupMetadataValue, version: i16) -> Bytes {
    assert!((0..=3).contains(&version), "GroupMetadataValue v{version}");
    let members_bytes: usize = value
        .members
        .iter()
        .map(|m| {
            MEMBER_METADATA_BYTES_MIN
                + 6
                + m.member_id.len()
                + m.client_id.len()
                + m.client_host.len()
                + m.group_instance_id.as_ref().map_or(0, String::len)
                + m.subscription.len()
                + m.assignment.len()
        })
        .sum();
    let mut buf = BytesMut::with_capacity(32 + value.protocol_type.len() + members_bytes);
    buf.put_i16(version);
    put_string(&mut buf, &value.protocol_type);
    buf.put_i32(value.generation_id);
    put_nullable_string(&mut buf, value.protocol_name.as_deref());
    put_nullable_string(&mut buf, value.leader_id.as_deref());
    if version >= 2 {
        buf.put_i64(value.current_state_timestamp_ms);
    }
    // A group holds at most group.max.size (an i32) members.
    let count = i32::try_from(value.members.len()).expect("member count fits an i32");
    buf.put_i32(count);
    for m in &value.members {
        put_string(&mut buf, &m.member_id);
        if version >= 3 {
            put_nullable_string(&mut buf, m.group_instance_id.as_deref());
        }
        put_string(&mut buf, &m.client_id);
        put_string(&mut buf, &m.client_host);
        if version >= 1 {
            buf.put_i32(m.rebalance_timeout_ms);
        }
        buf.put_i32(m.session_timeout_ms);
        put_bytes(&mut buf, &m.subscription);
        put_bytes(&mut buf, &m.assignment);
    }
    buf.freeze()
}

/// Reads a `GroupMetadataValue` of versions 0-3.
pub fn decode_group_metadata_value(buf: Bytes) -> Option<GroupMetadataValue> {
    let mut r = Reader::new(&buf);
    let version = r.i16()?;
    if !(0..=3).contains(&version) {
        return None;
    }
    let protocol_type = get_string(&mut r)?;
    let generation_id = r.i32()?;
    let protocol_name = r.nullable_string()?;
    let leader_id = r.nullable_string()?;
    let current_state_timestamp_ms = if version >= 2 { r.i64()? } else { -1 };
    // A null array in a non-nullable field is malformed. Each member takes bytes, so the
    // loop ends with the buffer whatever the count says.
    let count = usize::try_from(r.i32()?).ok()?;
    let mut members = Vec::with_capacity(count.min(r.remaining() / MEMBER_METADATA_BYTES_MIN));
    for _ in 0..count {
        members.push(decode_member_metadata(&buf, &mut r, version)?);
    }
    Some(GroupMetadataValue {
        protocol_type,
        generation_id,
        protocol_name,
        leader_id,
        current_state_timestamp_ms,
        members,
    })
}

/// One member of a `GroupMetadataValue` read by `r` off `buf`; its subscription and
/// assignment stay views of `buf`.
fn decode_member_metadata(buf: &Bytes, r: &mut Reader<'_>, version: i16) -> Option<MemberMetadata> {
    let member_id = get_string(r)?;
    let group_instance_id = if version >= 3 {
        r.nullable_string()?
    } else {
        None
    };
    let client_id = get_string(r)?;
    let client_host = get_string(r)?;
    let rebalance_timeout_ms = if version >= 1 { Some(r.i32()?) } else { None };
    let session_timeout_ms = r.i32()?;
    let subscription = buf.slice_ref(r.bytes_field()?);
    let assignment = buf.slice_ref(r.bytes_field()?);
    Some(MemberMetadata {
        member_id,
        group_instance_id,
        client_id,
        client_host,
        rebalance_timeout_ms: rebalance_timeout_ms.unwrap_or(session_timeout_ms),
        session_timeout_ms,
        subscription,
        assignment,
    })
}

/// What one record of `__consumer_offsets` says.
pub fn decode_record(key: Option<Bytes>, value: Option<Bytes>) -> CoordinatorRecord {
    let Some(key) = key else {
        return CoordinatorRecord::Unreadable;
    };
    let mut key = Reader::new(&key);
    let Some(key_version) = key.i16() else {
        return CoordinatorRecord::Unreadable;
    };
    match key_version {
        0 | 1 => {
            let Some(k) = decode_offset_key(&mut key) else {
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
        GROUP_METADATA_KEY_VERSION => {
            let Some(group) = get_string(&mut key) else {
                return CoordinatorRecord::Unreadable;
            };
            match value {
                None => CoordinatorRecord::GroupMetadata(GroupMetadataChange::Delete(group)),
                Some(v) => match decode_group_metadata_value(v) {
                    Some(v) => {
                        CoordinatorRecord::GroupMetadata(GroupMetadataChange::Store(group, v))
                    }
                    None => CoordinatorRecord::Unreadable,
                },
            }
        }
        _ => CoordinatorRecord::Unreadable,
    }
}

/// One uncompressed record batch (magic 2) holding `changes` in order, stamped `now_ms`.
#[cfg(test)]
pub fn encode_batch(changes: &[OffsetChange], now_ms: i64) -> BytesMut {
    let records: Vec<_> = changes.iter().map(OffsetChange::encode).collect();
    encode_records_batch(&records, now_ms)
}

/// One uncompressed record batch (magic 2) holding the (key, value) records in order (from
/// [`OffsetChange::encode`] and [`GroupMetadataChange::encode`], mixed as a write needs:
/// deleting a group writes its offsets' tombstones and its own together), stamped `now_ms`.
pub fn encode_records_batch(records: &[(Bytes, Option<Bytes>)], now_ms: i64) -> BytesMut {
    encode_batch_of(records, None, now_ms)
}

/// One batch of `records` with keel-vocab's codec, uncompressed; with `producer` (id, epoch) a
/// transactional one of that producer, base sequence 0 (as Kafka's coordinator writes it).
/// Without one, no producer id and base sequence -1 (not idempotent).
fn encode_batch_of(
    records: &[(Bytes, Option<Bytes>)],
    producer: Option<(i64, i16)>,
    now_ms: i64,
) -> BytesMut {
    let mut batch = BatchBuilder::new();
    for (key, value) in records {
        batch.push_record(now_ms, Some(key), value.as_deref(), &[]);
    }
    let stamp = producer.map(|(producer_id, epoch)| ProducerStamp {
        producer_id,
        epoch,
        base_sequence: 0,
        transactional: true,
    });
    let framed = batch
        .finish_stamped(Codec::None, stamp)
        .expect("an uncompressed batch always frames");
    framed
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]))
}

/// A transactional offset commit (TxnOffsetCommit): the records in one batch carrying the
/// producer's id and epoch, transactional, base sequence 0 (as Kafka's coordinator writes it;
/// appended with `Log::append_from_coordinator`). They take effect with the producer's COMMIT
/// marker in the same partition, and are dropped by an ABORT.
pub fn encode_transactional_batch(
    records: &[(Bytes, Option<Bytes>)],
    producer_id: i64,
    producer_epoch: i16,
    now_ms: i64,
) -> BytesMut {
    encode_batch_of(records, Some((producer_id, producer_epoch)), now_ms)
}

/// What a record's batch says of it, for the replay of transactional offset commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchKind {
    pub producer_id: i64,
    pub transactional: bool,
    /// A control record (a transaction marker): its key holds the marker type.
    pub control: bool,
}

/// A transaction marker's decision from a control record's key (version i16, type i16: 0
/// abort, 1 commit); `None` for another control record or malformed bytes.
pub fn marker_commits(key: Option<&Bytes>) -> Option<bool> {
    let k = key?;
    if k.len() < 4 {
        return None;
    }
    match i16::from_be_bytes([k[2], k[3]]) {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Walks the whole batches in `bytes` (as a log read returns them), calling `each` with every
/// record's key and value (control records left out). Returns the offset after the last batch
/// walked (so the next read starts there), or `None` if there was no whole batch. A batch that
/// cannot be decoded is skipped (counted in `unreadable`), its offsets still passed.
pub fn walk_batches(
    bytes: &Bytes,
    unreadable: &mut u64,
    mut each: impl FnMut(Option<Bytes>, Option<Bytes>),
) -> Option<i64> {
    walk_batches_with(bytes, unreadable, |kind, k, v| {
        if !kind.control {
            each(k, v);
        }
    })
}

/// [`walk_batches`] with what each record's batch says of it, control records included.
pub fn walk_batches_with(
    bytes: &Bytes,
    unreadable: &mut u64,
    mut each: impl FnMut(BatchKind, Option<Bytes>, Option<Bytes>),
) -> Option<i64> {
    let mut pos = 0usize;
    let mut next = None;
    while let Some(header) = bytes.get(pos..).and_then(BatchHeader::parse) {
        if bytes.len() - pos < header.size {
            break;
        }
        let batch = &bytes[pos..pos + header.size];
        // A batch is read whole or not at all: its records are collected first.
        let mut records = Vec::new();
        let read = if header.magic != MAGIC_V2 || compute_crc(batch) != header.crc {
            Err(())
        } else {
            for_each_record_of(&header, batch, |r| {
                let copy = |b: Option<&[u8]>| b.map(Bytes::copy_from_slice);
                records.push((copy(r.key), copy(r.value)));
            })
            .map_err(|_| ())
        };
        match read {
            Ok(()) => {
                let kind = BatchKind {
                    producer_id: header.producer_id,
                    transactional: header.is_transactional(),
                    control: header.is_control(),
                };
                for (k, v) in records {
                    each(kind, k, v);
                }
            }
            Err(()) => *unreadable += 1,
        }
        next = Some(
            header
                .base_offset
                .saturating_add(i64::from(header.last_offset_delta.max(0)) + 1),
        );
        pos += header.size;
    }
    next
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
