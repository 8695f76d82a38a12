//! The `__consumer_offsets` records of KIP-848 consumer groups (`group.protocol=consumer`), in
//! Kafka's formats (the `ConsumerGroup*` schemas of Kafka's group coordinator), so a restarted
//! coordinator rebuilds members, epochs and assignments
//! ([`ConsumerGroup::to_records`](super::consumer_group::ConsumerGroup::to_records) and
//! [`ConsumerGroup::from_records`](super::consumer_group::ConsumerGroup::from_records)). Plain
//! functions over bytes, run on the shard that coordinates the group.
//!
//! A key is not flexible: its leading `version i16` is the record type, then `STRING`s (an i16
//! length and that many UTF-8 bytes):
//! - 3 `ConsumerGroupMetadataKey`: `group`;
//! - 4 `ConsumerGroupPartitionMetadataKey`: `group`;
//! - 5 `ConsumerGroupMemberMetadataKey`: `group, member`;
//! - 6 `ConsumerGroupTargetAssignmentMetadataKey`: `group`;
//! - 7 `ConsumerGroupTargetAssignmentMemberKey`: `group, member`;
//! - 8 `ConsumerGroupCurrentMemberAssignmentKey`: `group, member`.
//!
//! A value is `version i16` (0, the only version of each) and a flexible body: `COMPACT_STRING`
//! (unsigned varint length + 1, 0 for null), `COMPACT_ARRAY` (unsigned varint count + 1),
//! `UUID` (16 bytes), and every struct, array elements included, ends in its tagged fields
//! (an unsigned varint count, then tag, size and bytes of each). Keel writes no tagged fields
//! and reads past any:
//! - 3 `ConsumerGroupMetadataValue`: `epoch i32` (the group epoch); tags 0 (`MetadataHash`) and
//!   1 (`CreationTimeMs`) are not written;
//! - 4 `ConsumerGroupPartitionMetadataValue`: `topics [topic_id UUID, topic_name STRING,
//!   num_partitions i32, partition_metadata [partition i32, racks [STRING]]]`: the metadata of
//!   the subscribed topics, from which the group's epoch was computed. Kafka 4.1 replaced it by
//!   a hash in the metadata value (KIP-1101); Keel keeps it, as Kafka 3.7-4.0 did, so a restored
//!   group knows what it saw and the next heartbeat bumps the epoch only if the topics really
//!   changed. Racks are not tracked: `partition_metadata` is written empty, which Kafka reads as
//!   "no rack information";
//! - 5 `ConsumerGroupMemberMetadataValue`: `instance_id NULLABLE_STRING, rack_id
//!   NULLABLE_STRING, client_id STRING, client_host STRING, subscribed_topic_names [STRING],
//!   subscribed_topic_regex NULLABLE_STRING, rebalance_timeout_ms i32, server_assignor
//!   NULLABLE_STRING`; tag 0 (`ClassicMemberMetadata`, a member of the classic protocol) is
//!   read past: Keel has no such members;
//! - 6 `ConsumerGroupTargetAssignmentMetadataValue`: `assignment_epoch i32`; tag 0
//!   (`AssignmentTimestamp`) is not written;
//! - 7 `ConsumerGroupTargetAssignmentMemberValue`: `topic_partitions [topic_id UUID,
//!   partitions [i32]]`;
//! - 8 `ConsumerGroupCurrentMemberAssignmentValue`: `member_epoch i32, previous_member_epoch
//!   i32, state i8 (0 stable, 1 unrevoked partitions, 2 unreleased partitions),
//!   assigned_partitions [topic_id UUID, partitions [i32]], partitions_pending_revocation
//!   (the same)`; tag 0 of a topic (`AssignmentEpochs`, KIP-1251) is not written.
//!
//! A record with a null value is a tombstone: the group (3, 4, 6) or the member (5, 7, 8) is
//! gone. As Kafka replays them, a group's tombstone comes after its members' tombstones.
//!
//! Bytes read back come from the disk: every decoder returns `None` on anything malformed
//! (trailing bytes included) and never panics, and allocates no more than the bytes it was
//! given justify.

use bytes::{BufMut, Bytes, BytesMut};

use keel_vocab::wire::{
    put_compact_len, put_compact_nullable_string, put_compact_string, put_string, Reader,
    NO_TAGGED_FIELDS,
};

use keel_vocab::TopicId;

/// Where a member is in its reconciliation (Kafka's `MemberState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberState {
    /// Holds its target at its epoch, or has not looked at a newer target yet.
    Stable,
    /// Must revoke `pending_revocation` before going on; its epoch stays.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

/// An assignment as the wire carries it: per topic id (ascending), partitions (ascending).
pub type TopicPartitions = Vec<(TopicId, Vec<i32>)>;

/// The record types (key versions) of consumer groups.
pub const METADATA_KEY_VERSION: i16 = 3;
pub const PARTITION_METADATA_KEY_VERSION: i16 = 4;
pub const MEMBER_METADATA_KEY_VERSION: i16 = 5;
pub const TARGET_ASSIGNMENT_METADATA_KEY_VERSION: i16 = 6;
pub const TARGET_ASSIGNMENT_MEMBER_KEY_VERSION: i16 = 7;
pub const CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION: i16 = 8;
/// The one version of every consumer group value.
pub const VALUE_VERSION: i16 = 0;

/// Fewest bytes of one topic in an assignment: a UUID, an empty array, no tagged fields.
const TOPIC_PARTITIONS_BYTES_MIN: usize = 16 + 1 + 1;
/// Fewest bytes of one topic in `ConsumerGroupPartitionMetadataValue`.
const TOPIC_METADATA_BYTES_MIN: usize = 16 + 1 + 4 + 1 + 1;
/// Fewest bytes of one partition's racks: the partition, an empty array, no tagged fields.
const PARTITION_RACKS_BYTES_MIN: usize = 4 + 1 + 1;

/// The key of a consumer group record.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConsumerGroupKey {
    /// 3: the group epoch.
    Metadata { group_id: String },
    /// 4: the metadata of the subscribed topics.
    PartitionMetadata { group_id: String },
    /// 5: a member's subscription and identity.
    MemberMetadata { group_id: String, member_id: String },
    /// 6: the epoch of the target assignment.
    TargetAssignmentMetadata { group_id: String },
    /// 7: a member's partitions in the target assignment.
    TargetAssignmentMember { group_id: String, member_id: String },
    /// 8: a member's epochs, reconciliation state and partitions.
    CurrentMemberAssignment { group_id: String, member_id: String },
}

impl ConsumerGroupKey {
    pub fn group_id(&self) -> &str {
        match self {
            ConsumerGroupKey::Metadata { group_id }
            | ConsumerGroupKey::PartitionMetadata { group_id }
            | ConsumerGroupKey::MemberMetadata { group_id, .. }
            | ConsumerGroupKey::TargetAssignmentMetadata { group_id }
            | ConsumerGroupKey::TargetAssignmentMember { group_id, .. }
            | ConsumerGroupKey::CurrentMemberAssignment { group_id, .. } => group_id,
        }
    }

    /// The member of a per-member record (versions 5, 7 and 8).
    pub fn member_id(&self) -> Option<&str> {
        match self {
            ConsumerGroupKey::MemberMetadata { member_id, .. }
            | ConsumerGroupKey::TargetAssignmentMember { member_id, .. }
            | ConsumerGroupKey::CurrentMemberAssignment { member_id, .. } => Some(member_id),
            _ => None,
        }
    }

    /// The key version: the record type.
    pub fn version(&self) -> i16 {
        match self {
            ConsumerGroupKey::Metadata { .. } => METADATA_KEY_VERSION,
            ConsumerGroupKey::PartitionMetadata { .. } => PARTITION_METADATA_KEY_VERSION,
            ConsumerGroupKey::MemberMetadata { .. } => MEMBER_METADATA_KEY_VERSION,
            ConsumerGroupKey::TargetAssignmentMetadata { .. } => {
                TARGET_ASSIGNMENT_METADATA_KEY_VERSION
            }
            ConsumerGroupKey::TargetAssignmentMember { .. } => TARGET_ASSIGNMENT_MEMBER_KEY_VERSION,
            ConsumerGroupKey::CurrentMemberAssignment { .. } => {
                CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION
            }
        }
    }

    pub fn encode(&self) -> Bytes {
        let member_id = self.member_id();
        let mut buf =
            BytesMut::with_capacity(6 + self.group_id().len() + member_id.map_or(0, str::len));
        buf.put_i16(self.version());
        put_string(&mut buf, self.group_id());
        if let Some(member_id) = member_id {
            put_string(&mut buf, member_id);
        }
        buf.freeze()
    }

    /// A key of versions 3-8; `None` for another version or malformed bytes.
    pub fn decode(bytes: &[u8]) -> Option<ConsumerGroupKey> {
        let mut r = Reader::new(bytes);
        let version = r.i16()?;
        let group_id = r.string()?;
        let key = match version {
            METADATA_KEY_VERSION => ConsumerGroupKey::Metadata { group_id },
            PARTITION_METADATA_KEY_VERSION => ConsumerGroupKey::PartitionMetadata { group_id },
            TARGET_ASSIGNMENT_METADATA_KEY_VERSION => {
                ConsumerGroupKey::TargetAssignmentMetadata { group_id }
            }
            MEMBER_METADATA_KEY_VERSION => ConsumerGroupKey::MemberMetadata {
                group_id,
                member_id: r.string()?,
            },
            TARGET_ASSIGNMENT_MEMBER_KEY_VERSION => ConsumerGroupKey::TargetAssignmentMember {
                group_id,
                member_id: r.string()?,
            },
            CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION => ConsumerGroupKey::CurrentMemberAssignment {
                group_id,
                member_id: r.string()?,
            },
            _ => return None,
        };
        r.finish()?;
        Some(key)
    }
}

/// The group id of a consumer group record's key (versions 3-8), so a loader can route the
/// record to its group; `None` for any other key.
pub fn record_group(key: &Bytes) -> Option<String> {
    ConsumerGroupKey::decode(key).map(|key| key.group_id().to_owned())
}

/// `ConsumerGroupMetadataValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataValue {
    /// The group epoch.
    pub epoch: i32,
}

/// One topic of `ConsumerGroupPartitionMetadataValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMetadata {
    pub topic_id: TopicId,
    pub topic_name: String,
    /// "NumPartitions".
    pub partition_count: i32,
}

/// `ConsumerGroupPartitionMetadataValue` (without racks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMetadataValue {
    pub topics: Vec<TopicMetadata>,
}

/// `ConsumerGroupMemberMetadataValue` (without the classic member metadata).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberMetadataValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
}

/// `ConsumerGroupTargetAssignmentMetadataValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetAssignmentMetadataValue {
    pub assignment_epoch: i32,
}

/// `ConsumerGroupTargetAssignmentMemberValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetAssignmentMemberValue {
    pub topic_partitions: TopicPartitions,
}

/// `ConsumerGroupCurrentMemberAssignmentValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentMemberAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub assigned_partitions: TopicPartitions,
    pub partitions_pending_revocation: TopicPartitions,
}

/// The value of a consumer group record, one variant per key version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsumerGroupValue {
    Metadata(MetadataValue),
    PartitionMetadata(PartitionMetadataValue),
    MemberMetadata(MemberMetadataValue),
    TargetAssignmentMetadata(TargetAssignmentMetadataValue),
    TargetAssignmentMember(TargetAssignmentMemberValue),
    CurrentMemberAssignment(CurrentMemberAssignmentValue),
}

impl ConsumerGroupValue {
    /// The key version this value goes with.
    pub fn key_version(&self) -> i16 {
        match self {
            ConsumerGroupValue::Metadata(_) => METADATA_KEY_VERSION,
            ConsumerGroupValue::PartitionMetadata(_) => PARTITION_METADATA_KEY_VERSION,
            ConsumerGroupValue::MemberMetadata(_) => MEMBER_METADATA_KEY_VERSION,
            ConsumerGroupValue::TargetAssignmentMetadata(_) => {
                TARGET_ASSIGNMENT_METADATA_KEY_VERSION
            }
            ConsumerGroupValue::TargetAssignmentMember(_) => TARGET_ASSIGNMENT_MEMBER_KEY_VERSION,
            ConsumerGroupValue::CurrentMemberAssignment(_) => CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(64);
        buf.put_i16(VALUE_VERSION);
        match self {
            ConsumerGroupValue::Metadata(v) => buf.put_i32(v.epoch),
            ConsumerGroupValue::PartitionMetadata(v) => {
                put_compact_len(&mut buf, v.topics.len());
                for t in &v.topics {
                    buf.put_slice(&t.topic_id);
                    put_compact_string(&mut buf, &t.topic_name);
                    buf.put_i32(t.partition_count);
                    put_compact_len(&mut buf, 0); // partition_metadata: no racks
                    buf.put_u8(NO_TAGGED_FIELDS);
                }
            }
            ConsumerGroupValue::MemberMetadata(v) => {
                put_compact_nullable_string(&mut buf, v.instance_id.as_deref());
                put_compact_nullable_string(&mut buf, v.rack_id.as_deref());
                put_compact_string(&mut buf, &v.client_id);
                put_compact_string(&mut buf, &v.client_host);
                put_compact_len(&mut buf, v.subscribed_topic_names.len());
                for name in &v.subscribed_topic_names {
                    put_compact_string(&mut buf, name);
                }
                put_compact_nullable_string(&mut buf, v.subscribed_topic_regex.as_deref());
                buf.put_i32(v.rebalance_timeout_ms);
                put_compact_nullable_string(&mut buf, v.server_assignor.as_deref());
            }
            ConsumerGroupValue::TargetAssignmentMetadata(v) => buf.put_i32(v.assignment_epoch),
            ConsumerGroupValue::TargetAssignmentMember(v) => {
                put_topic_partitions(&mut buf, &v.topic_partitions);
            }
            ConsumerGroupValue::CurrentMemberAssignment(v) => {
                buf.put_i32(v.member_epoch);
                buf.put_i32(v.previous_member_epoch);
                buf.put_i8(member_state_value(v.state));
                put_topic_partitions(&mut buf, &v.assigned_partitions);
                put_topic_partitions(&mut buf, &v.partitions_pending_revocation);
            }
        }
        buf.put_u8(NO_TAGGED_FIELDS);
        buf.freeze()
    }

    /// The value of a record with `key`; `None` when malformed or of an unknown version.
    pub fn decode(key: &ConsumerGroupKey, bytes: &[u8]) -> Option<ConsumerGroupValue> {
        let mut r = Reader::new(bytes);
        if r.i16()? != VALUE_VERSION {
            return None;
        }
        let value = match key {
            ConsumerGroupKey::Metadata { .. } => {
                ConsumerGroupValue::Metadata(MetadataValue { epoch: r.i32()? })
            }
            ConsumerGroupKey::PartitionMetadata { .. } => {
                ConsumerGroupValue::PartitionMetadata(decode_partition_metadata(&mut r)?)
            }
            ConsumerGroupKey::MemberMetadata { .. } => {
                ConsumerGroupValue::MemberMetadata(decode_member_metadata(&mut r)?)
            }
            ConsumerGroupKey::TargetAssignmentMetadata { .. } => {
                ConsumerGroupValue::TargetAssignmentMetadata(TargetAssignmentMetadataValue {
                    assignment_epoch: r.i32()?,
                })
            }
            ConsumerGroupKey::TargetAssignmentMember { .. } => {
                ConsumerGroupValue::TargetAssignmentMember(TargetAssignmentMemberValue {
                    topic_partitions: read_topic_partitions(&mut r)?,
                })
            }
            ConsumerGroupKey::CurrentMemberAssignment { .. } => {
                ConsumerGroupValue::CurrentMemberAssignment(CurrentMemberAssignmentValue {
                    member_epoch: r.i32()?,
                    previous_member_epoch: r.i32()?,
                    state: member_state_from_value(r.i8()?)?,
                    assigned_partitions: read_topic_partitions(&mut r)?,
                    partitions_pending_revocation: read_topic_partitions(&mut r)?,
                })
            }
        };
        r.skip_tagged_fields()?;
        r.finish()?;
        Some(value)
    }
}

/// One record's key and value bytes.
pub fn encode_record(key: &ConsumerGroupKey, value: &ConsumerGroupValue) -> (Bytes, Bytes) {
    assert_eq!(key.version(), value.key_version(), "{key:?} with {value:?}");
    (key.encode(), value.encode())
}

/// A record's key and value, if it is a readable consumer group record.
pub fn decode_record(key: &[u8], value: &[u8]) -> Option<(ConsumerGroupKey, ConsumerGroupValue)> {
    let key = ConsumerGroupKey::decode(key)?;
    let value = ConsumerGroupValue::decode(&key, value)?;
    Some((key, value))
}

/// Kafka's `MemberState` values.
fn member_state_value(state: MemberState) -> i8 {
    match state {
        MemberState::Stable => 0,
        MemberState::UnrevokedPartitions => 1,
        MemberState::UnreleasedPartitions => 2,
    }
}

/// `None` for Kafka's `UNKNOWN` (127) and anything else this broker does not know.
fn member_state_from_value(value: i8) -> Option<MemberState> {
    match value {
        0 => Some(MemberState::Stable),
        1 => Some(MemberState::UnrevokedPartitions),
        2 => Some(MemberState::UnreleasedPartitions),
        _ => None,
    }
}

fn decode_partition_metadata(r: &mut Reader<'_>) -> Option<PartitionMetadataValue> {
    let count = r.compact_array_len(TOPIC_METADATA_BYTES_MIN)?;
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let topic_id = r.uuid()?;
        let topic_name = r.compact_string()?;
        let partition_count = r.i32()?;
        // The racks per partition: read past (Keel's assignors ignore racks).
        for _ in 0..r.compact_array_len(PARTITION_RACKS_BYTES_MIN)? {
            r.i32()?;
            for _ in 0..r.compact_array_len(1)? {
                r.compact_string()?;
            }
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
        topics.push(TopicMetadata {
            topic_id,
            topic_name,
            partition_count,
        });
    }
    Some(PartitionMetadataValue { topics })
}

fn decode_member_metadata(r: &mut Reader<'_>) -> Option<MemberMetadataValue> {
    let instance_id = r.compact_nullable_string()?;
    let rack_id = r.compact_nullable_string()?;
    let client_id = r.compact_string()?;
    let client_host = r.compact_string()?;
    let count = r.compact_array_len(1)?;
    let mut subscribed_topic_names = Vec::with_capacity(count);
    for _ in 0..count {
        subscribed_topic_names.push(r.compact_string()?);
    }
    Some(MemberMetadataValue {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
        subscribed_topic_regex: r.compact_nullable_string()?,
        rebalance_timeout_ms: r.i32()?,
        server_assignor: r.compact_nullable_string()?,
    })
}

fn put_topic_partitions(buf: &mut BytesMut, topics: &TopicPartitions) {
    put_compact_len(buf, topics.len());
    for (topic_id, partitions) in topics {
        buf.put_slice(topic_id);
        put_compact_len(buf, partitions.len());
        for &p in partitions {
            buf.put_i32(p);
        }
        buf.put_u8(NO_TAGGED_FIELDS);
    }
}

/// An assignment's topics: each topic id and its partitions, ending in tagged fields.
fn read_topic_partitions(r: &mut Reader<'_>) -> Option<TopicPartitions> {
    let count = r.compact_array_len(TOPIC_PARTITIONS_BYTES_MIN)?;
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let topic_id = r.uuid()?;
        let n = r.compact_array_len(4)?;
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            partitions.push(r.i32()?);
        }
        r.skip_tagged_fields()?;
        topics.push((topic_id, partitions));
    }
    Some(topics)
}

#[cfg(test)]
#[path = "consumer_group_records_tests.rs"]
mod tests;
