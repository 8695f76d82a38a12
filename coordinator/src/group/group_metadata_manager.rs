//! What a group coordinator knows of each group (Kafka's `GroupMetadataManager`): the
//! [`GroupEntry`] of every group of a `__consumer_offsets` partition, with its classic or
//! consumer membership and its committed offsets; which commits a group accepts
//! ([`check_member`]); the membership records that make a reload resume it
//! ([`membership_records`], [`forget_records`]); and the replay of a partition's log into
//! groups at load ([`Replayed`], [`restore_memberships`]).
//!
//! Sans-I/O: the broker reads the log, hands the bytes here, and appends what comes out.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use tracing::warn;

use super::classic_group::{ClassicGroup, GroupConfig, GroupState};
use super::consumer_group::{ConsumerGroup, ConsumerGroupConfig};
use super::consumer_group_records;
use super::offset_metadata_manager::{apply_change, check_simple_commit, CommittedOffset};
use super::records::{self, CoordinatorRecord, GroupMetadataChange, OffsetChange};

/// Largest string a coordinator record can hold (an i16 length).
pub const RECORD_STRING_BYTES_MAX: usize = i16::MAX as usize;

/// A group id a coordinator accepts: non-empty, and short enough for its records.
pub fn valid_group_id(group: &str) -> bool {
    !group.is_empty() && group.len() <= RECORD_STRING_BYTES_MAX
}

/// A request parked for a group's answer: the shard whose connection waits, and the token it
/// parked under there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiter {
    pub shard: usize,
    pub token: u64,
}

/// What a coordinator knows of one group.
#[derive(Debug, Default)]
pub struct GroupEntry {
    /// The `__consumer_offsets` partition holding this group's records.
    pub partition: i32,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// The classic membership, from the group's first JoinGroup; memory only (see the module
    /// documentation). `None` for a group that only commits ("simple" consumers).
    pub classic: Option<ClassicGroup>,
    /// The KIP-848 membership (`group.protocol=consumer`), from the group's first
    /// ConsumerGroupHeartbeat; memory only. A group is one or the other: a classic group with
    /// members refuses ConsumerGroupHeartbeat, a consumer group with members refuses JoinGroup.
    pub consumer: Option<ConsumerGroup>,
    /// Requests parked for `classic`'s answer, by ticket number. Each is answered when the
    /// group yields its ticket, or with an error when the group is unloaded.
    pub waiting: HashMap<u64, Waiter>,
    /// The deadline under which the coordinator's timer index holds this group, if any.
    pub scheduled_ms: Option<i64>,
    /// The membership records (classic `GroupMetadata`, consumer-group records) last
    /// appended for this group, by key: what a reload would restore. Tombstones go to the log
    /// for each key dropped, and for all of them when the group is forgotten.
    pub persisted: BTreeMap<Bytes, Bytes>,
}

impl GroupEntry {
    pub fn new(partition: i32) -> GroupEntry {
        GroupEntry {
            partition,
            ..GroupEntry::default()
        }
    }

    /// Whether the group has a classic membership with members (Kafka: not Empty or Dead).
    /// A group without one is "simple": it commits without a generation.
    pub fn has_active_members(&self) -> bool {
        self.classic
            .as_ref()
            .is_some_and(|c| !matches!(c.state(), GroupState::Empty | GroupState::Dead))
            || self.consumer.as_ref().is_some_and(|c| !c.is_empty())
    }

    /// The consumer group, if it has members (else the group may turn classic).
    pub fn active_consumer(&mut self) -> Option<&mut ConsumerGroup> {
        self.consumer.as_mut().filter(|c| !c.is_empty())
    }

    /// The earliest deadline of either membership.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        let classic = self
            .classic
            .as_ref()
            .and_then(ClassicGroup::next_deadline_ms);
        let consumer = self
            .consumer
            .as_ref()
            .and_then(ConsumerGroup::next_deadline_ms);
        match (classic, consumer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The live classic group, read-only.
    pub fn live_classic_ref(&self) -> Option<&ClassicGroup> {
        self.classic
            .as_ref()
            .filter(|c| c.state() != GroupState::Dead)
    }

    /// The live classic group: `None` when there is none or it was deleted (`Dead`).
    pub fn live_classic(&mut self) -> Option<&mut ClassicGroup> {
        self.classic
            .as_mut()
            .filter(|c| c.state() != GroupState::Dead)
    }

    /// Whether nothing is left to keep: no offsets, no parked request, and no classic group
    /// (or a deleted one). Such a group is forgotten at once.
    pub fn is_forgettable(&self) -> bool {
        self.offsets.is_empty()
            && self.waiting.is_empty()
            && self.consumer.is_none()
            && self
                .classic
                .as_ref()
                .is_none_or(|c| c.state() == GroupState::Dead)
    }

    /// Whether the group is a classic group left `Empty`, without offsets and with no timer
    /// running (no member id handed out). Kept, as Kafka keeps it, until the next expiry check
    /// (`offsets.retention.check.interval.ms`) forgets it: until then it is listed, described
    /// and can be deleted.
    pub fn is_idle(&self) -> bool {
        let classic_idle = self
            .classic
            .as_ref()
            .is_none_or(|c| c.is_empty() && c.next_deadline_ms().is_none());
        let consumer_idle = self.consumer.as_ref().is_none_or(ConsumerGroup::is_empty);
        self.offsets.is_empty()
            && self.waiting.is_empty()
            && (self.classic.is_some() || self.consumer.is_some())
            && classic_idle
            && consumer_idle
    }

    /// The topics the group's members subscribe to, read from their consumer protocol
    /// metadata (`ConsumerProtocolSubscription`); `None` for a group that is not an active
    /// consumer group, or whose metadata cannot be read.
    pub fn subscribed_topics(&self) -> Option<HashSet<String>> {
        if let Some(c) = self.consumer.as_ref().filter(|c| !c.is_empty()) {
            return Some(c.subscribed_topic_names());
        }
        let c = self.classic.as_ref()?;
        if c.protocol_type() != Some(CONSUMER_PROTOCOL_TYPE) {
            return None;
        }
        let mut topics = HashSet::new();
        for metadata in c.chosen_protocol_metadata() {
            topics.extend(subscription_topics(&metadata)?);
        }
        Some(topics)
    }

    /// The time of the group's latest commit, if it has offsets.
    pub fn latest_commit_ms(&self) -> Option<i64> {
        self.offsets.values().map(|o| o.commit_timestamp_ms).max()
    }
}

/// The protocol type of consumers (Kafka's `ConsumerProtocol.PROTOCOL_TYPE`).
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// The topics of a `ConsumerProtocolSubscription` (any version: they all start with
/// `version: i16`, `topics: [string]`, non-flexible). `None` if the bytes do not hold them.
pub fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        *b = rest;
        Some(head)
    }
    let mut b = metadata;
    let version = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
    if version < 0 {
        return None;
    }
    let count = i32::from_be_bytes(take(&mut b, 4)?.try_into().ok()?);
    // Each topic takes at least its 2-byte length: a count beyond that is corrupt.
    if count < 0 || count as usize > b.len() / 2 {
        return None;
    }
    let mut topics = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
        let name = take(&mut b, usize::try_from(len).ok()?)?;
        topics.push(String::from_utf8(name.to_vec()).ok()?);
    }
    Some(topics)
}

/// Whether a commit by `member_id` at `generation_id` may write offsets of `group`: NONE, or
/// the Kafka error code. A group with a live classic membership decides
/// ([`ClassicGroup::can_commit`]: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
/// REBALANCE_IN_PROGRESS; a commit outside any generation while the group is `Empty`). A group
/// without one takes only "simple" commits (generation -1, no member id). The caller settles
/// the group afterwards (`can_commit` applies due timeouts, which may answer waiting requests).
pub fn check_member(
    group: &mut GroupEntry,
    member_id: &str,
    generation_id: i32,
    instance_id: Option<&str>,
    now_ms: i64,
) -> i16 {
    if let Some(c) = group.consumer.as_mut() {
        c.tick(now_ms);
    }
    if let Some(c) = group.active_consumer() {
        return c.can_commit(member_id, generation_id);
    }
    match group.live_classic() {
        Some(c) => c.can_commit(member_id, instance_id, generation_id, now_ms),
        None => check_simple_commit(member_id, generation_id),
    }
}

/// The records that bring `g.persisted` to what the group's memberships hold now (changed
/// keys, and tombstones for keys gone), and `g.persisted` updated to match. `classic_change`
/// is what the classic group reported since the last call.
pub fn membership_records(
    g: &mut GroupEntry,
    classic_change: Option<GroupMetadataChange>,
) -> Vec<(Bytes, Option<Bytes>)> {
    let mut out = Vec::new();
    if let Some(change) = classic_change {
        let (key, value) = change.encode();
        match &value {
            Some(v) => {
                g.persisted.insert(key.clone(), v.clone());
            }
            None => {
                if g.persisted.remove(&key).is_none() {
                    return out;
                }
            }
        }
        out.push((key, value));
    }
    if let Some(c) = g.consumer.as_ref() {
        let now: BTreeMap<Bytes, Bytes> = c.to_records().into_iter().collect();
        let consumer_keys: Vec<Bytes> = g
            .persisted
            .keys()
            .filter(|k| consumer_group_records::record_group(k).is_some() && !now.contains_key(*k))
            .cloned()
            .collect();
        for key in tombstone_order(consumer_keys) {
            g.persisted.remove(&key);
            out.push((key, None));
        }
        for (key, value) in now {
            if g.persisted.get(&key) != Some(&value) {
                g.persisted.insert(key.clone(), value.clone());
                out.push((key, Some(value)));
            }
        }
    } else {
        // The consumer membership was dropped (deleted, or the group turned classic).
        let gone: Vec<Bytes> = g
            .persisted
            .keys()
            .filter(|k| consumer_group_records::record_group(k).is_some())
            .cloned()
            .collect();
        for key in tombstone_order(gone) {
            g.persisted.remove(&key);
            out.push((key, None));
        }
    }
    out
}

/// Tombstones for every membership record of a group being forgotten.
pub fn forget_records(g: &mut GroupEntry) -> Vec<(Bytes, Option<Bytes>)> {
    let keys = std::mem::take(&mut g.persisted).into_keys().collect();
    tombstone_order(keys)
        .into_iter()
        .map(|k| (k, None))
        .collect()
}

/// Keys in the order their tombstones go to the log: by key version, highest first, so a
/// consumer group's member records (versions 5, 7, 8) are deleted before the group-level ones
/// (3, 4, 6), the order Kafka's coordinator requires when it replays them.
fn tombstone_order(mut keys: Vec<Bytes>) -> Vec<Bytes> {
    keys.sort_by_key(|k| std::cmp::Reverse(k.get(..2).map(|v| i16::from_be_bytes([v[0], v[1]]))));
    keys
}

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

#[cfg(test)]
#[path = "group_metadata_manager_tests.rs"]
mod tests;
