//! The records of `__transaction_state`, in Kafka's formats (`TransactionLogKey.json` and
//! `TransactionLogValue.json` of Kafka's transaction coordinator), so the log reads like
//! Kafka's. Plain functions over bytes, run on the shard that coordinates the partition.
//!
//! Key (not flexible): `version i16` (0; since Kafka 4.0 the coordinator record type, also 0),
//! `transactional_id STRING` (an i16 length and that many UTF-8 bytes).
//!
//! Value: `version i16`, then
//! - v0 (Kafka up to 3.9, and 4.x below `transaction.version` 1), not flexible:
//!   `producer_id i64, producer_epoch i16, transaction_timeout_ms i32, transaction_status i8,
//!   transaction_partitions [topic STRING, partition_ids [i32]] (nullable), last_update_timestamp_ms
//!   i64, start_timestamp_ms i64`; arrays are an i32 count (-1 for null);
//! - v1 (Kafka 4.x at `transaction.version` 1 and 2, the default of a new 4.x cluster; KIP-890,
//!   KIP-915), flexible: the same fields as `COMPACT_*` types (unsigned varint length + 1, 0 for
//!   null), every struct ending in tagged fields; the value's tags are 0 `PreviousProducerId`
//!   i64 (default -1), 1 `NextProducerId` i64 (-1), 2 `ClientTransactionVersion` i16 (0) and 3
//!   `NextProducerEpoch` i16 (-1, Kafka 4.2). Tags are written only when not at their default;
//!   unknown tags are read past.
//!
//! Keel writes v1, as Kafka 4.x does: it carries the previous producer id, which InitProducerId
//! needs to recognise a retry across a producer id rotation after a coordinator failover. Kafka
//! 3.5 and later read v1 (KIP-915).
//!
//! `transaction_status` is Kafka's `TransactionState` id ([`TxnState::id`]). The partitions
//! of an `Empty` transaction are written as null and ignored on read, as Kafka does. A record
//! with a null value (a tombstone) says the transactional id expired and was removed.
//!
//! Bytes read back come from the disk: every decoder returns `None` on anything malformed
//! (trailing bytes included) and never panics, and allocates no more than the bytes it was
//! given justify.

use std::collections::BTreeSet;

use bytes::{BufMut, Bytes, BytesMut};

use super::transaction_state::TxnState;
use keel_vocab::wire::{
    put_array_len, put_compact_string, put_string, put_unsigned_varint, Reader,
};
use keel_vocab::TopicPartition;

/// The one key version (Kafka's `TransactionLogKey` v0, coordinator record type 0).
pub const KEY_VERSION: i16 = 0;
/// The value version Keel writes.
pub const VALUE_VERSION_WRITTEN: i16 = 1;
/// The newest value version Keel reads (it reads 0 through this).
pub const VALUE_VERSION_MAX: i16 = 1;
/// Longest transactional id a key can hold (an i16 length).
pub const TRANSACTIONAL_ID_BYTES_MAX: usize = i16::MAX as usize;

/// The producer id of "none" (Kafka's `RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
/// The producer epoch of "none" (Kafka's `RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;
const TAG_NEXT_PRODUCER_EPOCH: u32 = 3;
const NO_TAGGED_FIELDS: u8 = 0;

/// Fewest bytes of one topic in v0: a string length and an array count.
const TOPIC_BYTES_MIN_V0: usize = 2 + 4;
/// Fewest bytes of one topic in v1: an empty string, an empty array, no tagged fields.
const TOPIC_BYTES_MIN_V1: usize = 1 + 1 + 1;

/// A `TransactionLogValue`: what the log holds of one transactional id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionLogValue {
    /// The producer id in use by the transactional id.
    pub producer_id: i64,
    /// The producer id before the transition that wrote this record (v1; -1 in v0).
    pub previous_producer_id: i64,
    /// Transactions V2 only (KIP-890): the producer id the next epoch overflow moves to; Keel
    /// keeps it as read and otherwise writes -1.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// Kafka 4.2 (tag 3); kept as read, -1 otherwise.
    pub next_producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    pub state: TxnState,
    /// The partitions in the transaction; empty (written as null) in `Empty`.
    pub partitions: BTreeSet<TopicPartition>,
    pub last_update_timestamp_ms: i64,
    /// When the transaction's first partition was added; -1 when none is open.
    pub start_timestamp_ms: i64,
    /// The transaction version of the client that last moved the state (v1, tag 2; 0 in v0).
    pub client_transaction_version: i16,
}

/// What one record of `__transaction_state` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnLogRecord {
    /// The latest state of a transactional id.
    Value {
        transactional_id: String,
        value: TransactionLogValue,
    },
    /// The transactional id expired and was removed.
    Tombstone { transactional_id: String },
    /// A key or value this broker cannot read: counted and skipped by the loader.
    Unreadable,
}

/// The key of a transactional id's records.
pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    put_string(&mut buf, transactional_id);
    buf.freeze()
}

/// The transactional id of a key; `None` for another key version or malformed bytes.
pub fn decode_key(key: &[u8]) -> Option<String> {
    let mut r = Reader::new(key);
    if r.i16()? != KEY_VERSION {
        return None;
    }
    let id = r.string()?;
    r.finish()?;
    Some(id)
}

/// A value at the version Keel writes.
pub fn encode_value(value: &TransactionLogValue) -> Bytes {
    encode_value_at(value, VALUE_VERSION_WRITTEN)
}

/// A value at `version` (0 or 1). v0 loses the previous and next producer ids, the next
/// producer epoch and the client transaction version.
pub fn encode_value_at(value: &TransactionLogValue, version: i16) -> Bytes {
    assert!(
        (0..=VALUE_VERSION_MAX).contains(&version),
        "value v{version}"
    );
    let flexible = version >= 1;
    let mut buf = BytesMut::with_capacity(64 + 16 * value.partitions.len());
    buf.put_i16(version);
    buf.put_i64(value.producer_id);
    buf.put_i16(value.producer_epoch);
    buf.put_i32(value.transaction_timeout_ms);
    buf.put_i8(value.state.id());
    if value.state == TxnState::Empty {
        // Kafka writes an `Empty` transaction's partitions as null.
        if flexible {
            put_unsigned_varint(&mut buf, 0);
        } else {
            buf.put_i32(-1);
        }
    } else {
        let topics = group_by_topic(&value.partitions);
        put_array_len(&mut buf, topics.len(), flexible);
        for (topic, partitions) in topics {
            if flexible {
                put_compact_string(&mut buf, topic);
            } else {
                put_string(&mut buf, topic);
            }
            put_array_len(&mut buf, partitions.len(), flexible);
            for p in partitions {
                buf.put_i32(p);
            }
            if flexible {
                buf.put_u8(NO_TAGGED_FIELDS);
            }
        }
    }
    buf.put_i64(value.last_update_timestamp_ms);
    buf.put_i64(value.start_timestamp_ms);
    if flexible {
        let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
        if value.previous_producer_id != NO_PRODUCER_ID {
            let bytes = value.previous_producer_id.to_be_bytes().to_vec();
            tags.push((TAG_PREVIOUS_PRODUCER_ID, bytes));
        }
        if value.next_producer_id != NO_PRODUCER_ID {
            let bytes = value.next_producer_id.to_be_bytes().to_vec();
            tags.push((TAG_NEXT_PRODUCER_ID, bytes));
        }
        if value.client_transaction_version != 0 {
            let bytes = value.client_transaction_version.to_be_bytes().to_vec();
            tags.push((TAG_CLIENT_TRANSACTION_VERSION, bytes));
        }
        if value.next_producer_epoch != NO_PRODUCER_EPOCH {
            let bytes = value.next_producer_epoch.to_be_bytes().to_vec();
            tags.push((TAG_NEXT_PRODUCER_EPOCH, bytes));
        }
        put_unsigned_varint(&mut buf, tags.len() as u32);
        for (tag, bytes) in tags {
            put_unsigned_varint(&mut buf, tag);
            put_unsigned_varint(&mut buf, bytes.len() as u32);
            buf.put_slice(&bytes);
        }
    }
    buf.freeze()
}

/// A value of any version Keel reads; `None` for another version or malformed bytes.
pub fn decode_value(bytes: &[u8]) -> Option<TransactionLogValue> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if !(0..=VALUE_VERSION_MAX).contains(&version) {
        return None;
    }
    let flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let transaction_timeout_ms = r.i32()?;
    let state = TxnState::from_id(r.i8()?)?;
    let mut partitions = BTreeSet::new();
    let topic_bytes_min = if flexible {
        TOPIC_BYTES_MIN_V1
    } else {
        TOPIC_BYTES_MIN_V0
    };
    // Null reads as no partitions; Kafka only writes null for `Empty`.
    let topics = r
        .nullable_array_len(flexible, topic_bytes_min)?
        .unwrap_or(0);
    for _ in 0..topics {
        let topic = if flexible {
            r.compact_string()?
        } else {
            r.string()?
        };
        let count = r.nullable_array_len(flexible, 4)??;
        for _ in 0..count {
            let partition = r.i32()?;
            if partition < 0 {
                return None;
            }
            partitions.insert(TopicPartition::new(topic.clone(), partition));
        }
        if flexible {
            r.tagged_fields(|_, _| Some(()))?;
        }
    }
    if state == TxnState::Empty {
        // As Kafka: an `Empty` transaction has no partitions, whatever the record says.
        partitions.clear();
    }
    let last_update_timestamp_ms = r.i64()?;
    let start_timestamp_ms = r.i64()?;
    let mut value = TransactionLogValue {
        producer_id,
        previous_producer_id: NO_PRODUCER_ID,
        next_producer_id: NO_PRODUCER_ID,
        producer_epoch,
        next_producer_epoch: NO_PRODUCER_EPOCH,
        transaction_timeout_ms,
        state,
        partitions,
        last_update_timestamp_ms,
        start_timestamp_ms,
        client_transaction_version: 0,
    };
    if flexible {
        r.tagged_fields(|tag, data| {
            match tag {
                TAG_PREVIOUS_PRODUCER_ID => {
                    value.previous_producer_id = i64::from_be_bytes(data.try_into().ok()?);
                }
                TAG_NEXT_PRODUCER_ID => {
                    value.next_producer_id = i64::from_be_bytes(data.try_into().ok()?);
                }
                TAG_CLIENT_TRANSACTION_VERSION => {
                    value.client_transaction_version = i16::from_be_bytes(data.try_into().ok()?);
                }
                TAG_NEXT_PRODUCER_EPOCH => {
                    value.next_producer_epoch = i16::from_be_bytes(data.try_into().ok()?);
                }
                _ => {}
            }
            Some(())
        })?;
    }
    r.finish()?;
    Some(value)
}

/// What one record of `__transaction_state` says (its key and value as read from the log).
pub fn decode_record(key: Option<&[u8]>, value: Option<&[u8]>) -> TxnLogRecord {
    let Some(transactional_id) = key.and_then(decode_key) else {
        return TxnLogRecord::Unreadable;
    };
    match value {
        None => TxnLogRecord::Tombstone { transactional_id },
        Some(bytes) => match decode_value(bytes) {
            Some(value) => TxnLogRecord::Value {
                transactional_id,
                value,
            },
            None => TxnLogRecord::Unreadable,
        },
    }
}

/// The partitions by topic, in order, as the value's array holds them.
pub fn group_by_topic(partitions: &BTreeSet<TopicPartition>) -> Vec<(&str, Vec<i32>)> {
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for tp in partitions {
        match topics.last_mut() {
            Some((topic, ids)) if *topic == tp.topic => ids.push(tp.partition),
            _ => topics.push((&tp.topic, vec![tp.partition])),
        }
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn ongoing() -> TransactionLogValue {
        TransactionLogValue {
            producer_id: 4000,
            previous_producer_id: 3999,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: 7,
            next_producer_epoch: NO_PRODUCER_EPOCH,
            transaction_timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: [
                tp("b", 2),
                tp("a", 1),
                tp("a", 0),
                tp("__consumer_offsets", 12),
            ]
            .into_iter()
            .collect(),
            last_update_timestamp_ms: 1_700_000_000_500,
            start_timestamp_ms: 1_700_000_000_000,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn key_layout_is_kafkas() {
        assert_eq!(&encode_key("tx")[..], &[0, 0, 0, 2, b't', b'x']);
        assert_eq!(decode_key(&[0, 0, 0, 2, b't', b'x']), Some("tx".into()));
        // Another record type, a null string, trailing bytes.
        assert_eq!(decode_key(&[0, 1, 0, 2, b't', b'x']), None);
        assert_eq!(decode_key(&[0, 0, 0xff, 0xff]), None);
        assert_eq!(decode_key(&[0, 0, 0, 1, b't', b'x']), None);
    }

    #[test]
    fn v0_layout_is_kafkas() {
        let value = TransactionLogValue {
            partitions: [tp("t", 1), tp("t", 0)].into_iter().collect(),
            ..ongoing()
        };
        let mut want = vec![0, 0];
        want.extend(4000i64.to_be_bytes());
        want.extend(7i16.to_be_bytes());
        want.extend(60_000i32.to_be_bytes());
        want.push(1); // Ongoing
        want.extend(1i32.to_be_bytes()); // one topic
        want.extend([0, 1, b't']);
        want.extend(2i32.to_be_bytes());
        want.extend(0i32.to_be_bytes());
        want.extend(1i32.to_be_bytes());
        want.extend(1_700_000_000_500i64.to_be_bytes());
        want.extend(1_700_000_000_000i64.to_be_bytes());
        assert_eq!(&encode_value_at(&value, 0)[..], &want[..]);
    }

    #[test]
    fn v1_layout_is_kafkas() {
        let value = TransactionLogValue {
            partitions: [tp("t", 1), tp("t", 0)].into_iter().collect(),
            ..ongoing()
        };
        let mut want = vec![0, 1];
        want.extend(4000i64.to_be_bytes());
        want.extend(7i16.to_be_bytes());
        want.extend(60_000i32.to_be_bytes());
        want.push(1); // Ongoing
        want.push(2); // one topic
        want.extend([2, b't']);
        want.push(3); // two partitions
        want.extend(0i32.to_be_bytes());
        want.extend(1i32.to_be_bytes());
        want.push(0); // the topic's tagged fields
        want.extend(1_700_000_000_500i64.to_be_bytes());
        want.extend(1_700_000_000_000i64.to_be_bytes());
        want.extend([1, 0, 8]); // one tagged field: PreviousProducerId, 8 bytes
        want.extend(3999i64.to_be_bytes());
        assert_eq!(&encode_value(&value)[..], &want[..]);

        // Every tag at its default: none written. `Empty` writes null partitions.
        let empty = TransactionLogValue {
            previous_producer_id: NO_PRODUCER_ID,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_timestamp_ms: -1,
            ..value
        };
        let bytes = encode_value(&empty);
        assert_eq!(bytes[2 + 8 + 2 + 4 + 1], 0, "null array");
        assert_eq!(bytes.last(), Some(&0), "no tagged fields");
        assert_eq!(decode_value(&bytes), Some(empty));
    }

    #[test]
    fn every_state_round_trips_at_every_version() {
        for state in TxnState::ALL {
            for version in 0..=VALUE_VERSION_MAX {
                let mut value = TransactionLogValue {
                    state,
                    next_producer_id: 5000,
                    next_producer_epoch: 3,
                    client_transaction_version: 2,
                    ..ongoing()
                };
                let got = decode_value(&encode_value_at(&value, version));
                if state == TxnState::Empty {
                    value.partitions.clear();
                }
                if version == 0 {
                    value.previous_producer_id = NO_PRODUCER_ID;
                    value.next_producer_id = NO_PRODUCER_ID;
                    value.next_producer_epoch = NO_PRODUCER_EPOCH;
                    value.client_transaction_version = 0;
                }
                assert_eq!(got, Some(value), "{state:?} v{version}");
            }
        }
    }

    #[test]
    fn records_and_tombstones_decode() {
        let key = encode_key("tx");
        let value = encode_value(&ongoing());
        assert_eq!(
            decode_record(Some(&key), Some(&value)),
            TxnLogRecord::Value {
                transactional_id: "tx".into(),
                value: ongoing(),
            }
        );
        assert_eq!(
            decode_record(Some(&key), None),
            TxnLogRecord::Tombstone {
                transactional_id: "tx".into()
            }
        );
        assert_eq!(decode_record(None, Some(&value)), TxnLogRecord::Unreadable);
        // A value version this broker does not read; an unknown state id.
        let mut v2 = value.to_vec();
        v2[1] = 2;
        assert_eq!(
            decode_record(Some(&key), Some(&v2)),
            TxnLogRecord::Unreadable
        );
        let mut bad_state = value.to_vec();
        bad_state[2 + 8 + 2 + 4] = 8;
        assert_eq!(decode_value(&bad_state), None);
    }

    #[test]
    fn unknown_tags_are_read_past_and_known_tags_checked() {
        let mut bytes = encode_value(&ongoing()).to_vec();
        // Replace the one tagged field (PreviousProducerId) by it and an unknown tag 9.
        let tags_at = bytes.len() - 11;
        bytes.truncate(tags_at);
        bytes.extend([2, 0, 8]);
        bytes.extend(3999i64.to_be_bytes());
        bytes.extend([9, 3, 1, 2, 3]);
        assert_eq!(decode_value(&bytes), Some(ongoing()));
        // PreviousProducerId of the wrong size.
        bytes.truncate(tags_at);
        bytes.extend([1, 0, 4, 0, 0, 0, 1]);
        assert_eq!(decode_value(&bytes), None);
    }

    #[test]
    fn hostile_values_are_none_not_a_panic() {
        for version in 0..=VALUE_VERSION_MAX {
            let good = encode_value_at(&ongoing(), version);
            for len in 0..good.len() {
                assert_eq!(decode_value(&good[..len]), None, "v{version} {len}");
            }
            let mut trailing = good.to_vec();
            trailing.push(0);
            assert_eq!(decode_value(&trailing), None);
        }
        // A topic count far beyond the bytes, and negative counts and partition ids.
        let mut huge = vec![0, 0];
        huge.extend(1i64.to_be_bytes());
        huge.extend(0i16.to_be_bytes());
        huge.extend(1000i32.to_be_bytes());
        huge.push(1);
        let count_at = huge.len();
        huge.extend(i32::MAX.to_be_bytes());
        huge.extend([0u8; 40]);
        assert_eq!(decode_value(&huge), None);
        huge[count_at..count_at + 4].copy_from_slice(&(-2i32).to_be_bytes());
        assert_eq!(decode_value(&huge), None);
        let mut negative = encode_value_at(&ongoing(), 0).to_vec();
        // The first partition id of the first topic ("__consumer_offsets").
        let at = 2 + 8 + 2 + 4 + 1 + 4 + 2 + "__consumer_offsets".len() + 4;
        negative[at..at + 4].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(decode_value(&negative), None);
        // A varint longer than 32 bits.
        let mut varint = vec![0, 1];
        varint.extend([0u8; 15]);
        varint.extend([0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(decode_value(&varint), None);

        // Random corruption of good values, replayable from the seed: never a panic, and
        // whatever decodes re-encodes to a value that decodes the same.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let goods = [
            encode_value_at(&ongoing(), 0),
            encode_value_at(&ongoing(), 1),
            encode_key("some-transactional-id"),
        ];
        for round in 0..30_000 {
            let mut bytes = goods[round % goods.len()].to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
            }
            bytes.truncate(bytes.len() - (next() % 3) as usize);
            let _ = decode_record(Some(&bytes), Some(&bytes));
            let _ = decode_key(&bytes);
            if let Some(v) = decode_value(&bytes) {
                let again = decode_value(&encode_value(&v));
                assert_eq!(again, Some(v));
            }
        }
        for len in 0..64 {
            let junk = vec![0xffu8; len];
            assert_eq!(decode_value(&junk), None);
            let _ = decode_record(Some(&junk), Some(&junk));
        }
    }
}
