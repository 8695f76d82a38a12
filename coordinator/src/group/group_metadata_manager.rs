//! What a group coordinator knows of each group (Kafka's `GroupMetadataManager`): the
//! [`GroupEntry`] of every group of a `__consumer_offsets` partition, with its classic or
//! consumer membership and its committed offsets, and the membership records that make a
//! reload resume it ([`membership_records`], [`forget_records`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;

use super::classic_group::{ClassicGroup, GroupState};
use super::consumer_group::ConsumerGroup;
use super::consumer_group_records;
use super::records::CommittedOffset;
use super::records::GroupMetadataChange;

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

#[cfg(test)]
#[path = "group_metadata_manager_tests.rs"]
mod tests;
