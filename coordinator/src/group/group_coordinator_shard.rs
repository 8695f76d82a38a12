//! A `__consumer_offsets` partition's log replayed into groups at load (the replay half of
//! Kafka's `GroupCoordinatorShard`): offsets apply as they are read ([`Replayed`]), each group's
//! latest membership records restore its classic or consumer membership at the end
//! ([`restore_memberships`]). Sans-I/O: the broker reads the log and hands the bytes here.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use tracing::warn;

use super::classic_group::{ClassicGroup, GroupConfig};
use super::consumer_group::{ConsumerGroup, ConsumerGroupConfig};
use super::consumer_group_records;
use super::group_metadata_manager::GroupEntry;
use super::offset_metadata_manager::apply_change;
use super::records::{self, CoordinatorRecord, GroupMetadataChange, OffsetChange};

/// What replaying a coordinator partition's log found.
#[derive(Default)]
pub struct Replayed {
    pub groups: HashMap<String, GroupEntry>,
    /// The latest classic `GroupMetadata` value per group (`None`: a tombstone).
    pub classic: HashMap<String, Option<records::GroupMetadataValue>>,
    /// The latest consumer-group records per group, by key (tombstones remove keys).
    pub consumer: HashMap<String, BTreeMap<Bytes, Bytes>>,
    /// Transactional offset commits without their marker yet, by producer id.
    pub txn_pending: HashMap<i64, Vec<OffsetChange>>,
    pub records: u64,
    pub unreadable_records: u64,
    pub unreadable_batches: u64,
}

impl Replayed {
    /// Replays one read of partition `p`'s log (whole batches): offsets and tombstones apply
    /// at once, membership records are kept by key for [`restore_memberships`], transactional
    /// offset commits wait for their producer's marker. Returns the offset after the last
    /// batch read, `None` if no batch could be read.
    pub fn replay_batches(&mut self, p: i32, batches: &Bytes) -> Option<i64> {
        let (mut count, mut unreadable) = (0u64, 0u64);
        let groups = &mut self.groups;
        let classic = &mut self.classic;
        let consumer = &mut self.consumer;
        let txn_pending = &mut self.txn_pending;
        let next =
            records::walk_batches_with(batches, &mut self.unreadable_batches, |kind, k, v| {
                if kind.control {
                    // A transaction marker: the producer's pending offsets take effect or go.
                    let pending = txn_pending.remove(&kind.producer_id).unwrap_or_default();
                    if records::marker_commits(k.as_ref()) == Some(true) {
                        for change in pending {
                            apply_change(groups, p, change);
                        }
                    }
                    return;
                }
                count += 1;
                if kind.transactional {
                    match records::decode_record(k, v) {
                        CoordinatorRecord::Offset(change) => txn_pending
                            .entry(kind.producer_id)
                            .or_default()
                            .push(change),
                        _ => unreadable += 1,
                    }
                    return;
                }
                if let Some(group) = k.as_ref().and_then(consumer_group_records::record_group) {
                    let keys = consumer.entry(group).or_default();
                    let key = k.unwrap_or_default();
                    match v {
                        Some(v) => keys.insert(key, v),
                        None => keys.remove(&key),
                    };
                    return;
                }
                match records::decode_record(k, v) {
                    CoordinatorRecord::Offset(change) => apply_change(groups, p, change),
                    CoordinatorRecord::GroupMetadata(change) => match change {
                        GroupMetadataChange::Store(group, value) => {
                            classic.insert(group, Some(value));
                        }
                        GroupMetadataChange::Delete(group) => {
                            classic.insert(group, None);
                        }
                    },
                    CoordinatorRecord::Unreadable => unreadable += 1,
                }
            });
        self.records += count;
        self.unreadable_records += unreadable;
        next
    }
}

/// The groups of a replayed partition with their memberships restored from the latest
/// membership records: a classic group loads `Stable` at its generation (sessions restart
/// now) or `Empty` ([`ClassicGroup::from_metadata`]).
pub fn restore_memberships(
    p: i32,
    r: Replayed,
    config: &GroupConfig,
    consumer_config: &ConsumerGroupConfig,
    now: i64,
) -> HashMap<String, GroupEntry> {
    let mut groups = r.groups;
    for (name, value) in r.classic {
        let Some(value) = value else { continue };
        let change = GroupMetadataChange::Store(name.clone(), value.clone());
        let (key, encoded) = change.encode();
        let g = groups
            .entry(name.clone())
            .or_insert_with(|| GroupEntry::new(p));
        g.classic = Some(ClassicGroup::from_metadata(
            name,
            config.clone(),
            value,
            now,
        ));
        if let Some(v) = encoded {
            g.persisted.insert(key, v);
        }
    }
    for (name, keys) in r.consumer {
        if keys.is_empty() {
            continue;
        }
        let records: Vec<(Bytes, Bytes)> = keys.into_iter().collect();
        let Some(c) = ConsumerGroup::from_records(
            name.clone(),
            consumer_config.clone(),
            records.clone(),
            now,
        ) else {
            warn!(
                partition = p,
                group = name,
                "consumer group records unreadable; the group starts empty"
            );
            continue;
        };
        let g = groups
            .entry(name.clone())
            .or_insert_with(|| GroupEntry::new(p));
        g.consumer = Some(c);
        g.persisted.extend(records);
    }
    groups
}
