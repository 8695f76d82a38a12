//! Consumer-group coordination: where a group's coordinator runs, and the offsets it commits.
//!
//! Group `g` is coordinated by partition `p = abs(java_hashcode(g)) % partitions` of the
//! internal topic `__consumer_offsets` (Kafka's `Utils.abs`, see [`partition_for`]), on the
//! broker that leads `p`, on the shard that owns `p`'s log there. That shard alone holds the
//! state of `p`'s groups ([`GroupCoordinator`], a field of the shard): handlers on other shards
//! reach it with a mesh call ([`on_coordinator`]).
//!
//! Durability: every change (commit, deletion, expiry) is appended to `p`'s log as Kafka's own
//! coordinator records ([`records`]) and committed (fsync'ed under flush.policy=group) before
//! the answer and before memory changes. Memory is applied in log order: each append queues its
//! changes, and whoever sees the high watermark move applies the queue up to it, so memory
//! always equals a replay of the log's committed prefix. When `p`'s log is opened on a shard,
//! the log is replayed from its start into memory (latest record per key wins, a tombstone
//! deletes); until that finishes, requests for `p`'s groups get COORDINATOR_LOAD_IN_PROGRESS.
//! The topic is compacted, so the log keeps the latest record per key.
//!
//! Expiry: a task on each coordinator shard deletes (with tombstones) the offsets of groups
//! without active members whose latest commit is older than `offsets.retention.minutes`.
//!
//! Membership: a group's classic membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) is a
//! [`classic::ClassicGroup`] in its [`GroupEntry`], created by the group's first JoinGroup and
//! driven by [`membership`] (waiting requests, timers, DescribeGroups, ListGroups,
//! DeleteGroups); a KIP-848 membership (ConsumerGroupHeartbeat) is a
//! [`consumer::ConsumerGroup`] driven by [`consumer_membership`]. Memberships are persisted as
//! Kafka does, as records of the group's partition (classic: `GroupMetadata`, written when a
//! generation completes or the group empties): after every call into a group the records that
//! changed are appended in the same step ([`persist`]) and committed with the next group commit;
//! answers do not wait for them (a change lost in a crash only makes members rejoin). A reload
//! restores each group from its latest records (sessions restart at load), so members keep
//! their generation, assignments and commits across a coordinator restart.
//!
//! All state is shard-local (`RefCell`); no borrow is held across an `.await`.

pub mod classic;
pub mod consumer;
pub mod consumer_membership;
pub mod consumer_records;
pub mod lag;
pub mod membership;
pub mod records;
pub mod topic_regex;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;
use keel_shard::Event;
use keel_storage::{LeaderEpoch, Offset, StorageError};
use tracing::{error, info, warn};

use crate::controller::{self, OpError};
use crate::errors::{code, coordinator_write_code, NONE};
use crate::shard::{BrokerShard, Partition};
use classic::{ClassicGroup, GroupState};
use consumer::ConsumerGroup;
use membership::{GroupAnswer, Waiter};
use records::{CoordinatorRecord, GroupMetadataChange, OffsetChange, OffsetKey};

/// The internal topic that holds the groups' committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Bytes one log read asks for while a coordinator partition loads.
const LOAD_READ_BYTES_MAX: usize = 1 << 20;
/// A write's records are split into batches of about this many bytes (one append, so they
/// are validated and committed together).
const WRITE_BATCH_BYTES_TARGET: usize = 256 * 1024;
/// Largest string a coordinator record can hold (an i16 length).
pub const RECORD_STRING_BYTES_MAX: usize = i16::MAX as usize;

/// Java's `String.hashCode()`: over UTF-16 code units, `h = 31 * h + c`, wrapping.
pub fn java_string_hashcode(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The `__consumer_offsets` partition of `group` among `partitions`: Kafka's
/// `Utils.abs(groupId.hashCode) % partitions` (`Utils.abs(i32::MIN)` is 0).
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    assert!(partitions > 0, "offsets topic has no partitions");
    let h = java_string_hashcode(group);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions
}

/// A group id a coordinator accepts: non-empty, and short enough for its records.
pub fn valid_group_id(group: &str) -> bool {
    !group.is_empty() && group.len() <= RECORD_STRING_BYTES_MAX
}

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
    waiting: HashMap<u64, Waiter>,
    /// The deadline under which the coordinator's timer index holds this group, if any.
    scheduled_ms: Option<i64>,
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
    fn next_deadline_ms(&self) -> Option<i64> {
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
    pub(crate) fn is_forgettable(&self) -> bool {
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
    fn is_idle(&self) -> bool {
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
    fn subscribed_topics(&self) -> Option<HashSet<String>> {
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

    fn latest_commit_ms(&self) -> Option<i64> {
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

/// A commit to a group without a live classic membership: only a "simple" one passes; a
/// member's commit names a member the coordinator does not know.
fn check_simple_commit(member_id: &str, generation_id: i32) -> i16 {
    if generation_id == -1 && member_id.is_empty() {
        NONE
    } else {
        code(ResponseError::UnknownMemberId)
    }
}

/// Applies one change to a group map (live state and replay alike). A group left without
/// offsets or members is forgotten.
fn apply_change(groups: &mut HashMap<String, GroupEntry>, partition: i32, change: OffsetChange) {
    match change {
        OffsetChange::Commit(k, v) => {
            groups
                .entry(k.group)
                .or_insert_with(|| GroupEntry::new(partition))
                .offsets
                .insert((k.topic, k.partition), v);
        }
        OffsetChange::Delete(k) => {
            let Some(g) = groups.get_mut(&k.group) else {
                return;
            };
            g.offsets.remove(&(k.topic, k.partition));
            if g.is_forgettable() {
                groups.remove(&k.group);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoadState {
    Loading,
    Loaded,
    /// The replay failed (the error is in the log); the partition's groups are unavailable
    /// until the partition is opened again.
    Failed,
}

/// Changes appended to a coordinator partition's log and not yet applied to memory.
struct PendingWrite {
    /// The log end offset after the append: applied once the high watermark reaches it.
    end_offset: Offset,
    changes: Vec<OffsetChange>,
}

/// One `__consumer_offsets` partition this shard coordinates.
struct CoordinatorPartition {
    topic_id: [u8; 16],
    /// Which load this is: a stale load (the partition was reopened meanwhile) is dropped.
    load_id: u64,
    state: LoadState,
    /// In log order (appends queue here in the same step as they append).
    pending: VecDeque<PendingWrite>,
}

/// The group coordinator state of one shard: the groups of the `__consumer_offsets`
/// partitions it owns, and the group requests of this shard's connections that wait for a
/// coordinator's answer (see [`membership`]).
#[derive(Default)]
pub struct GroupCoordinator {
    /// Every group of this shard's coordinator partitions, by group id.
    pub groups: RefCell<HashMap<String, GroupEntry>>,
    partitions: RefCell<HashMap<i32, CoordinatorPartition>>,
    next_load_id: Cell<u64>,
    expiry_started: Cell<bool>,
    /// (deadline, group id) of every group with a timer ([`GroupEntry::next_deadline_ms`]).
    /// An entry whose group no longer has that `scheduled_ms` is stale and skipped.
    deadlines: RefCell<BTreeSet<(i64, String)>>,
    /// Fired to wake the timer task early: a deadline before `timer_armed_ms` arrived.
    timer_wake: RefCell<Rc<Event>>,
    /// The deadline the timer task sleeps until (`i64::MAX`: none).
    timer_armed_ms: Cell<i64>,
    timer_started: Cell<bool>,
    /// Requests of this shard's connections parked for a group's answer, by token.
    parked: RefCell<HashMap<u64, futures_channel::oneshot::Sender<GroupAnswer>>>,
    next_park_token: Cell<u64>,
    /// The topics consumer groups see, built once per metadata image version.
    topics_view: RefCell<Option<(u64, Rc<consumer::TopicsView>)>>,
    /// Transactional offset commits (TxnOffsetCommit) in the log, waiting for their
    /// producer's marker, by (partition, producer id).
    txn_offsets: RefCell<HashMap<(i32, i64), Vec<OffsetChange>>>,
}

impl GroupCoordinator {
    /// Starts (re)loading partition `p`: its groups are unavailable until [`Self::finish_load`].
    /// Returns the parked requests of the groups it drops, which the caller answers.
    fn begin_load(&self, p: i32, topic_id: [u8; 16]) -> (u64, Vec<Waiter>) {
        let load_id = self.next_load_id.get();
        self.next_load_id.set(load_id + 1);
        self.partitions.borrow_mut().insert(
            p,
            CoordinatorPartition {
                topic_id,
                load_id,
                state: LoadState::Loading,
                pending: VecDeque::new(),
            },
        );
        let mut orphaned = Vec::new();
        self.groups.borrow_mut().retain(|_, g| {
            if g.partition == p {
                orphaned.extend(g.waiting.drain().map(|(_, w)| w));
            }
            g.partition != p
        });
        (load_id, orphaned)
    }

    /// Installs the groups replayed from partition `p`'s log, unless `p` was reopened since.
    fn finish_load(&self, p: i32, load_id: u64, loaded: Option<HashMap<String, GroupEntry>>) {
        let mut parts = self.partitions.borrow_mut();
        let Some(cp) = parts.get_mut(&p).filter(|cp| cp.load_id == load_id) else {
            return;
        };
        match loaded {
            Some(groups) => {
                let mut all = self.groups.borrow_mut();
                all.retain(|_, g| g.partition != p);
                all.extend(groups);
                cp.state = LoadState::Loaded;
            }
            None => cp.state = LoadState::Failed,
        }
    }

    /// The current load of partition `p`, if it is open here.
    fn load_id(&self, p: i32) -> Option<u64> {
        self.partitions.borrow().get(&p).map(|cp| cp.load_id)
    }

    /// Whether partition `p`'s groups can be served here now: NONE or the Kafka error code.
    pub fn ready(&self, shard: &BrokerShard, p: i32) -> i16 {
        let parts = self.partitions.borrow();
        let Some(cp) = parts.get(&p) else {
            return code(ResponseError::NotCoordinator);
        };
        let open = shard
            .partition(OFFSETS_TOPIC, p)
            .is_some_and(|part| part.topic_id == cp.topic_id);
        let leads = shard
            .image()
            .partition(OFFSETS_TOPIC, p)
            .is_some_and(|m| m.leader == shard.config.node_id);
        if !open || !leads {
            return code(ResponseError::NotCoordinator);
        }
        match cp.state {
            LoadState::Loading => code(ResponseError::CoordinatorLoadInProgress),
            LoadState::Loaded => NONE,
            LoadState::Failed => code(ResponseError::CoordinatorNotAvailable),
        }
    }

    /// Queues an appended write of `p` for memory; returns the load it belongs to.
    fn push_pending(&self, p: i32, end_offset: Offset, changes: Vec<OffsetChange>) -> u64 {
        let mut parts = self.partitions.borrow_mut();
        let cp = parts
            .get_mut(&p)
            .expect("writes go only to partitions that are ready");
        assert!(cp.pending.back().is_none_or(|w| w.end_offset < end_offset));
        cp.pending.push_back(PendingWrite {
            end_offset,
            changes,
        });
        cp.load_id
    }

    /// Applies, in log order, every pending write of `p` the high watermark has passed, if `p`
    /// was not reopened since `load_id` (a reopened log has its own watermark and queue).
    fn apply_committed(&self, p: i32, load_id: u64, high_watermark: Offset) {
        let mut parts = self.partitions.borrow_mut();
        let Some(cp) = parts.get_mut(&p).filter(|cp| cp.load_id == load_id) else {
            return;
        };
        let mut groups = self.groups.borrow_mut();
        while cp
            .pending
            .front()
            .is_some_and(|w| w.end_offset <= high_watermark)
        {
            let Some(w) = cp.pending.pop_front() else {
                break;
            };
            for change in w.changes {
                apply_change(&mut groups, p, change);
            }
        }
    }

    /// Whether a write touching `group` is appended to `p`'s log but not yet applied.
    fn has_pending(&self, p: i32, group: &str) -> bool {
        self.partitions.borrow().get(&p).is_some_and(|cp| {
            cp.pending
                .iter()
                .any(|w| w.changes.iter().any(|c| c.key().group == group))
        })
    }

    /// The offsets of `group` that writes of `p` appended and did not yet apply.
    fn pending_keys(&self, p: i32, group: &str) -> Vec<(String, i32)> {
        self.partitions
            .borrow()
            .get(&p)
            .map_or_else(Vec::new, |cp| {
                cp.pending
                    .iter()
                    .flat_map(|w| w.changes.iter().map(OffsetChange::key))
                    .filter(|k| k.group == group)
                    .map(|k| (k.topic.clone(), k.partition))
                    .collect()
            })
    }

    fn loaded_partitions(&self) -> Vec<i32> {
        self.partitions
            .borrow()
            .iter()
            .filter(|(_, cp)| cp.state == LoadState::Loaded)
            .map(|(p, _)| *p)
            .collect()
    }

    /// Forgets partition `p`'s idle groups ([`GroupEntry::is_idle`]) that have no write in
    /// flight; returns how many.
    /// Returns how many, and the tombstones of their membership records.
    fn forget_idle(&self, p: i32) -> (usize, Vec<(Bytes, Option<Bytes>)>) {
        let mut groups = self.groups.borrow_mut();
        let before = groups.len();
        let mut tombstones = Vec::new();
        groups.retain(|name, g| {
            let keep = g.partition != p || !g.is_idle() || self.has_pending(p, name);
            if !keep {
                tombstones.extend(forget_records(g));
            }
            keep
        });
        (before - groups.len(), tombstones)
    }

    /// Tombstones for every offset of partition `p`'s groups that have no active members, no
    /// write in flight, and whose latest commit is older than `retention_ms`.
    fn expired(&self, p: i32, now_ms: i64, retention_ms: i64) -> Vec<OffsetChange> {
        let groups = self.groups.borrow();
        let mut out = Vec::new();
        for (name, g) in groups.iter().filter(|(_, g)| g.partition == p) {
            let old = g
                .latest_commit_ms()
                .is_some_and(|t| t.saturating_add(retention_ms) < now_ms);
            if !old || g.has_active_members() || self.has_pending(p, name) {
                continue;
            }
            out.extend(g.offsets.keys().map(|(topic, partition)| {
                OffsetChange::Delete(OffsetKey {
                    group: name.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                })
            }));
        }
        out
    }
}

// ---- placement and routing ---------------------------------------------------------------

/// Creates `__consumer_offsets` if it does not exist: `offsets.topic.num.partitions`
/// partitions, replication factor 1, compacted, `offsets.topic.segment.bytes` segments.
pub async fn ensure_offsets_topic(shard: &Rc<BrokerShard>) -> Result<(), OpError> {
    controller::ensure_internal_topic(
        shard,
        OFFSETS_TOPIC,
        shard.config.offsets_topic_num_partitions,
        shard.config.offsets_topic_segment_bytes,
    )
    .await
}

/// The `__consumer_offsets` partition of `group` given the image: the topic's partition count
/// once it exists, else `offsets.topic.num.partitions`.
pub fn group_partition(shard: &BrokerShard, group: &str) -> i32 {
    let count = shard
        .image()
        .topic(OFFSETS_TOPIC)
        .map_or(shard.config.offsets_topic_num_partitions, |t| {
            t.partitions.len() as i32
        });
    partition_for(group, count.max(1))
}

/// Where `group` is coordinated on this broker: its `__consumer_offsets` partition and the
/// shard that owns it; NOT_COORDINATOR when this broker does not lead that partition or the
/// topic does not exist yet (clients then ask FindCoordinator, which creates it).
pub fn locate(shard: &BrokerShard, group: &str) -> Result<(i32, usize), i16> {
    let image = shard.image();
    let p = group_partition(shard, group);
    match image.partition(OFFSETS_TOPIC, p) {
        Some(m) if m.leader == shard.config.node_id => Ok((p, m.shard as usize)),
        _ => Err(code(ResponseError::NotCoordinator)),
    }
}

/// Runs `work` on the shard coordinating `group`, with the group's partition: inline when that
/// is this shard, else over the mesh. Errors are Kafka codes for the whole group.
pub async fn on_coordinator<R, F, Fut>(
    api: ApiKey,
    shard: &Rc<BrokerShard>,
    group: &str,
    work: F,
) -> Result<R, i16>
where
    R: Send + 'static,
    F: FnOnce(Rc<BrokerShard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, i16>> + 'static,
{
    let (p, target) = locate(shard, group)?;
    on_shard(api, shard, target, p, work).await
}

/// Runs `work` on shard `target` with coordinator partition `p` (group or transaction
/// coordinators): inline when that is this shard, else over the mesh;
/// COORDINATOR_NOT_AVAILABLE if the mesh call fails. A trip over the mesh is timed as
/// `api`'s hop stage (the round trip less the work).
pub async fn on_shard<R, F, Fut>(
    api: ApiKey,
    shard: &Rc<BrokerShard>,
    target: usize,
    p: i32,
    work: F,
) -> Result<R, i16>
where
    R: Send + 'static,
    F: FnOnce(Rc<BrokerShard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, i16>> + 'static,
{
    if target == shard.id {
        return work(shard.clone(), p).await;
    }
    let sent = std::time::Instant::now();
    let call = shard.mesh.call(target, move |s| async move {
        let started = std::time::Instant::now();
        let r = work(s, p).await;
        (r, started.elapsed())
    });
    match call.await {
        Ok((r, worked)) => {
            let hop = sent.elapsed().saturating_sub(worked);
            shard
                .counters
                .record(api as i16, crate::ops::metrics::Stage::Hop, hop);
            r
        }
        Err(e) => {
            warn!(target, error = %e, "cross-shard coordinator call failed");
            Err(code(ResponseError::CoordinatorNotAvailable))
        }
    }
}

// ---- writes --------------------------------------------------------------------------------

/// Appends `changes` to partition `p`'s log and queues them for memory. Synchronous, so a
/// caller that decided `changes` from memory appends them before any other task runs.
fn append(
    shard: &BrokerShard,
    p: i32,
    changes: Vec<OffsetChange>,
    now: i64,
) -> Result<(Rc<Partition>, u64, Offset), i16> {
    let ready = shard.groups.ready(shard, p);
    if ready != NONE {
        return Err(ready);
    }
    let encoded: Vec<(Bytes, Option<Bytes>)> = changes.iter().map(OffsetChange::encode).collect();
    let (part, end_offset) = append_records(shard, p, &encoded, now)?;
    let load_id = shard.groups.push_pending(p, end_offset, changes);
    Ok((part, load_id, end_offset))
}

/// Appends records (key, value; `None` = tombstone) to partition `p`'s log, in batches of
/// about [`WRITE_BATCH_BYTES_TARGET`]; returns the log end offset after them.
fn append_records(
    shard: &BrokerShard,
    p: i32,
    records: &[(Bytes, Option<Bytes>)],
    now: i64,
) -> Result<(Rc<Partition>, Offset), i16> {
    let Some(part) = shard.partition(OFFSETS_TOPIC, p) else {
        return Err(code(ResponseError::NotCoordinator));
    };
    let mut buf = bytes::BytesMut::new();
    let mut start = 0;
    while start < records.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < records.len() && (end == start || bytes < WRITE_BATCH_BYTES_TARGET) {
            let (k, v) = &records[end];
            bytes += k.len() + v.as_ref().map_or(0, Bytes::len) + 32;
            end += 1;
        }
        match records::encode_records_batch(&records[start..end], now) {
            Ok(b) => buf.extend_from_slice(&b),
            Err(e) => {
                error!(partition = p, error = %e, "encoding coordinator records failed");
                return Err(code(ResponseError::UnknownServerError));
            }
        }
        start = end;
    }
    let info = part
        .log
        .append(buf, LeaderEpoch(part.leader_epoch.get()), now)
        .map_err(|e| {
            warn!(partition = p, error = %e, "coordinator append refused");
            coordinator_write_code(&e)
        })?;
    Ok((part, Offset(info.last_offset.0 + 1)))
}

/// Appends a group's membership records (see [`GroupEntry::persisted`]) to partition `p`'s
/// log; they are committed with the partition's next group commit. Answers do not wait for
/// them: membership is the coordinator's memory, and the records only let a reload resume it.
/// If the coordinator stops before they are durable, the reload restores the previous
/// membership and its members are told to rejoin (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or
/// FENCED_MEMBER_EPOCH), as Kafka clients do on their own; no committed offset depends on it.
pub(crate) fn persist(
    shard: &Rc<BrokerShard>,
    p: i32,
    group: &str,
    records: Vec<(Bytes, Option<Bytes>)>,
    classic_generation: Option<i32>,
) {
    if records.is_empty() || shard.groups.ready(shard, p) != NONE {
        return;
    }
    match append_records(shard, p, &records, shard.clock.now_ms()) {
        Ok((part, end_offset)) => {
            let owner = shard.clone();
            let group = group.to_string();
            let load_id = shard.groups.load_id(p);
            glommio::spawn_local(async move {
                if let Err(e) = part.log.commit(end_offset).await {
                    warn!(partition = p, group, error = %e, "membership records not committed");
                    if let Some(generation) = classic_generation {
                        membership::with_group(&owner, p, &group, false, |g, now| {
                            if let Some(c) = g.classic.as_mut() {
                                c.metadata_write_failed(generation, now);
                            }
                        });
                    }
                }
                owner.notify_data(&part);
                if let Some(load_id) = load_id {
                    owner
                        .groups
                        .apply_committed(p, load_id, part.log.offsets().high_watermark);
                }
            })
            .detach();
        }
        Err(e) => warn!(
            partition = p,
            group,
            error = e,
            "membership records not written"
        ),
    }
}

/// The records that bring `g.persisted` to what the group's memberships hold now (changed
/// keys, and tombstones for keys gone), and `g.persisted` updated to match. `classic_change`
/// is what the classic group reported since the last call.
pub(crate) fn membership_records(
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
            .filter(|k| consumer_records::record_group(k).is_some() && !now.contains_key(*k))
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
            .filter(|k| consumer_records::record_group(k).is_some())
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
pub(crate) fn forget_records(g: &mut GroupEntry) -> Vec<(Bytes, Option<Bytes>)> {
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

/// Appends `changes` to partition `p`'s log, waits for the log commit, then applies them (with
/// every earlier write of `p`, in log order) to memory. The part after the append runs in its
/// own task: if the caller's future is dropped, the write still completes and is applied.
async fn write(shard: &Rc<BrokerShard>, p: i32, changes: Vec<OffsetChange>) -> Result<(), i16> {
    if changes.is_empty() {
        return Ok(());
    }
    let (part, load_id, end_offset) = append(shard, p, changes, shard.clock.now_ms())?;
    let owner = shard.clone();
    let done = glommio::spawn_local(async move {
        let committed = part.log.commit(end_offset).await;
        owner.notify_data(&part);
        owner
            .groups
            .apply_committed(p, load_id, part.log.offsets().high_watermark);
        committed
    })
    .detach();
    match done.await {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => {
            error!(partition = p, error = %e, "coordinator log commit failed");
            Err(coordinator_write_code(&e))
        }
        None => Err(code(ResponseError::UnknownServerError)),
    }
}

// ---- transactional offsets ---------------------------------------------------------------

/// The marker of `producer_id`'s transaction is committed in partition `p` (on this shard):
/// its pending offsets take effect (COMMIT) or are dropped (ABORT), as the replay of the log
/// does.
pub fn transactional_offsets_decided(shard: &BrokerShard, p: i32, producer_id: i64, commit: bool) {
    let pending = shard
        .groups
        .txn_offsets
        .borrow_mut()
        .remove(&(p, producer_id))
        .unwrap_or_default();
    if !commit || pending.is_empty() {
        return;
    }
    let mut groups = shard.groups.groups.borrow_mut();
    for change in pending {
        apply_change(&mut groups, p, change);
    }
}

/// Whether a transaction's offsets of `group` for (topic, partition) wait for their marker in
/// partition `p` (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for them).
fn offset_unstable(shard: &BrokerShard, p: i32, group: &str, topic: &str, partition: i32) -> bool {
    shard
        .groups
        .txn_offsets
        .borrow()
        .iter()
        .filter(|((tp, _), _)| *tp == p)
        .flat_map(|(_, changes)| changes.iter())
        .any(|c| {
            let k = c.key();
            k.group == group && k.topic == topic && k.partition == partition
        })
}

/// A TxnOffsetCommit for one group.
pub struct TxnCommitRequest {
    pub group: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// v3: the consumer's group membership, checked as OffsetCommit checks it (-1 / "": not
    /// checked).
    pub member_id: String,
    pub generation_id: i32,
    pub instance_id: Option<String>,
    /// (topic, partition, offset, leader epoch, metadata).
    pub offsets: Vec<(String, i32, i64, i32, String)>,
}

/// Writes a transaction's offsets for a group: appended to the group's partition as a
/// transactional batch of the producer, committed, then held until the producer's marker
/// (see [`transactional_offsets_decided`]).
pub async fn txn_commit_offsets(
    shard: Rc<BrokerShard>,
    p: i32,
    req: TxnCommitRequest,
) -> Result<(), i16> {
    let ready = shard.groups.ready(&shard, p);
    if ready != NONE {
        return Err(ready);
    }
    if !req.member_id.is_empty() || req.generation_id >= 0 {
        let fenced = membership::with_group(&shard, p, &req.group, false, |g, now| {
            check_member(
                g,
                &req.member_id,
                req.generation_id,
                req.instance_id.as_deref(),
                now,
            )
        })
        .unwrap_or(code(ResponseError::UnknownMemberId));
        if fenced != NONE {
            return Err(fenced);
        }
    }
    let now = shard.clock.now_ms();
    let changes = commit_changes(&req.group, req.offsets, now);
    if changes.is_empty() {
        return Ok(());
    }
    let Some(part) = shard.partition(OFFSETS_TOPIC, p) else {
        return Err(code(ResponseError::NotCoordinator));
    };
    let encoded: Vec<(Bytes, Option<Bytes>)> = changes.iter().map(OffsetChange::encode).collect();
    let batch =
        records::encode_transactional_batch(&encoded, req.producer_id, req.producer_epoch, now)
            .map_err(|_| code(ResponseError::UnknownServerError))?;
    let info = part
        .log
        .append_from_coordinator(batch, LeaderEpoch(part.leader_epoch.get()), now)
        .map_err(|e| match e {
            StorageError::InvalidProducerEpoch(_) => code(ResponseError::ProducerFenced),
            e => coordinator_write_code(&e),
        })?;
    let end = Offset(info.last_offset.0 + 1);
    // Held before the commit completes: a marker cannot come before this request is answered.
    shard
        .groups
        .txn_offsets
        .borrow_mut()
        .entry((p, req.producer_id))
        .or_default()
        .extend(changes);
    let committed = part.log.commit(end).await;
    shard.notify_data(&part);
    committed.map_err(|e| {
        error!(partition = p, error = %e, "transactional offsets not committed");
        coordinator_write_code(&e)
    })
}

// ---- operations, on the coordinator shard ------------------------------------------------

/// An OffsetCommit for one group, already checked for unknown partitions and metadata size.
pub struct CommitRequest {
    pub group: String,
    pub member_id: String,
    pub generation_id: i32,
    pub instance_id: Option<String>,
    /// (topic, partition, offset, leader epoch, metadata).
    pub offsets: Vec<(String, i32, i64, i32, String)>,
}

/// Commits offsets for a group: NONE for all of them, or one error code for all.
pub async fn commit_offsets(shard: Rc<BrokerShard>, p: i32, req: CommitRequest) -> Result<(), i16> {
    let ready = shard.groups.ready(&shard, p);
    if ready != NONE {
        return Err(ready);
    }
    let fenced = membership::with_group(&shard, p, &req.group, false, |g, now| {
        check_member(
            g,
            &req.member_id,
            req.generation_id,
            req.instance_id.as_deref(),
            now,
        )
    })
    .unwrap_or_else(|| check_simple_commit(&req.member_id, req.generation_id));
    if fenced != NONE {
        return Err(fenced);
    }
    let changes = commit_changes(&req.group, req.offsets, shard.clock.now_ms());
    write(&shard, p, changes).await
}

/// The commit records of a group's offsets, (topic, partition, offset, leader epoch,
/// metadata) each, stamped `now`.
fn commit_changes(
    group: &str,
    offsets: Vec<(String, i32, i64, i32, String)>,
    now: i64,
) -> Vec<OffsetChange> {
    offsets
        .into_iter()
        .map(|(topic, partition, offset, leader_epoch, metadata)| {
            OffsetChange::Commit(
                OffsetKey {
                    group: group.to_string(),
                    topic,
                    partition,
                },
                CommittedOffset {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms: now,
                },
            )
        })
        .collect()
}

/// Committed offsets of a topic's partitions: `None` where nothing is committed, with the
/// partition's error code (UNSTABLE_OFFSET_COMMIT while a transaction's offset for it waits
/// for its marker and the fetch requires stable offsets).
pub type FetchedTopic = (String, Vec<(i32, Option<CommittedOffset>, i16)>);

/// The group's committed offsets of `topics` (`None`: every partition it committed).
/// `member` (OffsetFetch v9: member id and epoch) is checked against a consumer group's
/// members as a commit is (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH); an admin's fetch (no member
/// id, a negative epoch) and fetches from groups of other kinds are not checked.
pub async fn fetch_offsets(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
    topics: Option<Vec<(String, Vec<i32>)>>,
    member: Option<(String, i32)>,
    require_stable: bool,
) -> Result<Vec<FetchedTopic>, i16> {
    let ready = shard.groups.ready(&shard, p);
    if ready != NONE {
        return Err(ready);
    }
    if let Some((member_id, epoch)) = member.filter(|(m, e)| !(m.is_empty() && *e < 0)) {
        let fenced = membership::with_group(&shard, p, &group, false, |g, now| {
            match g.consumer.as_mut() {
                Some(c) => {
                    consumer_membership::tick(shard.id, c, now);
                    c.can_commit(&member_id, epoch)
                }
                None => NONE,
            }
        })
        .unwrap_or(NONE);
        if fenced != NONE {
            return Err(fenced);
        }
    }
    let groups = shard.groups.groups.borrow();
    let entry = groups.get(&group);
    let committed = |topic: &str, partition: i32| {
        if require_stable && offset_unstable(&shard, p, &group, topic, partition) {
            return (None, code(ResponseError::UnstableOffsetCommit));
        }
        let o = entry.and_then(|g| g.offsets.get(&(topic.to_string(), partition)).cloned());
        (o, NONE)
    };
    let out = match topics {
        Some(topics) => topics
            .into_iter()
            .map(|(t, parts)| {
                let ps = parts
                    .into_iter()
                    .map(|i| {
                        let (o, e) = committed(&t, i);
                        (i, o, e)
                    })
                    .collect();
                (t, ps)
            })
            .collect(),
        None => {
            let mut by_topic: Vec<FetchedTopic> = Vec::new();
            for ((t, i), _) in entry.iter().flat_map(|g| g.offsets.iter()) {
                if by_topic.last().is_none_or(|(last, _)| last != t) {
                    by_topic.push((t.clone(), Vec::new()));
                }
                let (o, e) = committed(t, *i);
                if let Some((_, ps)) = by_topic.last_mut() {
                    ps.push((*i, o, e));
                }
            }
            by_topic
        }
    };
    Ok(out)
}

/// Deletes the group's committed offsets of these partitions (those without one are left as
/// they are). GROUP_ID_NOT_FOUND for a group this coordinator does not know (or deleted);
/// NON_EMPTY_GROUP for an active group of another protocol type than "consumer". Returns the
/// topics left alone because the active members subscribe to them (Kafka's
/// GROUP_SUBSCRIBED_TO_TOPIC, per partition).
pub async fn delete_offsets(
    shard: Rc<BrokerShard>,
    p: i32,
    group: String,
    partitions: Vec<(String, i32)>,
) -> Result<HashSet<String>, i16> {
    let ready = shard.groups.ready(&shard, p);
    if ready != NONE {
        return Err(ready);
    }
    let (changes, subscribed) = {
        let groups = shard.groups.groups.borrow();
        let Some(g) = groups.get(&group) else {
            return Err(code(ResponseError::GroupIdNotFound));
        };
        if g.classic
            .as_ref()
            .is_some_and(|c| c.state() == GroupState::Dead)
        {
            return Err(code(ResponseError::GroupIdNotFound));
        }
        let subscribed = if g.has_active_members() {
            // Kafka: an active group of another protocol cannot lose offsets at all; a
            // consumer group whose metadata cannot be read is treated as subscribed to nothing.
            let protocol = match &g.consumer {
                Some(c) if !c.is_empty() => Some(CONSUMER_PROTOCOL_TYPE),
                _ => g.classic.as_ref().and_then(|c| c.protocol_type()),
            };
            match protocol {
                Some(CONSUMER_PROTOCOL_TYPE) => g.subscribed_topics().unwrap_or_default(),
                _ => return Err(code(ResponseError::NonEmptyGroup)),
            }
        } else {
            HashSet::new()
        };
        let changes: Vec<OffsetChange> = partitions
            .into_iter()
            .filter(|k| !subscribed.contains(&k.0) && g.offsets.contains_key(k))
            .map(|(topic, partition)| {
                OffsetChange::Delete(OffsetKey {
                    group: group.clone(),
                    topic,
                    partition,
                })
            })
            .collect();
        (changes, subscribed)
    };
    write(&shard, p, changes).await?;
    Ok(subscribed)
}

// ---- loading and expiry ------------------------------------------------------------------

/// What replaying a coordinator partition's log found.
#[derive(Default)]
struct Replayed {
    groups: HashMap<String, GroupEntry>,
    /// The latest classic `GroupMetadata` value per group (`None`: a tombstone).
    classic: HashMap<String, Option<records::GroupMetadataValue>>,
    /// The latest consumer-group records per group, by key (tombstones remove keys).
    consumer: HashMap<String, BTreeMap<Bytes, Bytes>>,
    /// Transactional offset commits without their marker yet, by producer id.
    txn_pending: HashMap<i64, Vec<OffsetChange>>,
    records: u64,
    unreadable_records: u64,
    unreadable_batches: u64,
}

/// Starts loading a just-opened `__consumer_offsets` partition: its groups answer
/// COORDINATOR_LOAD_IN_PROGRESS until its log is replayed. Also starts this shard's expiry task.
pub fn start_load(shard: &Rc<BrokerShard>, part: Rc<Partition>) {
    let p = part.index;
    let (load_id, orphaned) = shard.groups.begin_load(p, part.topic_id);
    membership::deliver(
        shard,
        orphaned
            .into_iter()
            .map(|w| (w, Err(code(ResponseError::NotCoordinator))))
            .collect(),
    );
    let owner = shard.clone();
    glommio::spawn_local(async move {
        let started = Instant::now();
        let loaded = match replay(&part).await {
            Ok(mut r) => {
                if r.unreadable_records > 0 || r.unreadable_batches > 0 {
                    warn!(
                        shard = owner.id,
                        partition = p,
                        records = r.unreadable_records,
                        batches = r.unreadable_batches,
                        "skipped unreadable coordinator records"
                    );
                }
                // An empty partition (most of the 50, most of the time) loads in silence.
                if r.records > 0 {
                    info!(
                        shard = owner.id,
                        partition = p,
                        groups = r.groups.len(),
                        records = r.records,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "coordinator partition loaded"
                    );
                } else {
                    tracing::debug!(shard = owner.id, partition = p, "coordinator partition loaded (empty)");
                }
                let txn_pending = std::mem::take(&mut r.txn_pending);
                let mut txn = owner.groups.txn_offsets.borrow_mut();
                txn.retain(|(tp, _), _| *tp != p);
                txn.extend(txn_pending.into_iter().map(|(pid, c)| ((p, pid), c)));
                drop(txn);
                Some(restore_memberships(&owner, p, r))
            }
            Err(e) => {
                error!(shard = owner.id, partition = p, error = %e, "loading coordinator partition failed; its groups are unavailable");
                None
            }
        };
        let names: Vec<String> = loaded
            .iter()
            .flat_map(|groups| groups.keys().cloned())
            .collect();
        owner.groups.finish_load(p, load_id, loaded);
        // Index the restored groups' deadlines (sessions restarted at load) in the timer.
        for name in names {
            membership::with_group(&owner, p, &name, false, |_, _| ());
        }
    })
    .detach();
    start_expiry(shard);
    membership::start_timer(shard);
}

/// The groups of a replayed partition with their memberships restored from the latest
/// membership records: a classic group loads `Stable` at its generation (sessions restart
/// now) or `Empty` ([`ClassicGroup::from_metadata`]).
fn restore_memberships(shard: &BrokerShard, p: i32, r: Replayed) -> HashMap<String, GroupEntry> {
    let mut groups = r.groups;
    let config = membership::group_config(&shard.config);
    let now = membership::clock_ms();
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
    let consumer_config = consumer_membership::consumer_group_config(&shard.config);
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

/// Reads partition `part`'s committed log from its start and replays it.
async fn replay(part: &Partition) -> Result<Replayed, StorageError> {
    let p = part.index;
    let mut out = Replayed::default();
    let offsets = part.log.offsets();
    let end = offsets.high_watermark;
    let mut offset = offsets.log_start_offset;
    while offset < end {
        let read = part.log.read(offset, LOAD_READ_BYTES_MAX, end).await?;
        let (mut records, mut unreadable) = (0u64, 0u64);
        let groups = &mut out.groups;
        let classic = &mut out.classic;
        let consumer = &mut out.consumer;
        let txn_pending = &mut out.txn_pending;
        let next =
            records::walk_batches_with(&read.records, &mut out.unreadable_batches, |kind, k, v| {
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
                records += 1;
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
                if let Some(group) = k.as_ref().and_then(consumer_records::record_group) {
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
        out.records += records;
        out.unreadable_records += unreadable;
        match next {
            Some(n) if n > offset.0 => offset = Offset(n),
            _ => break,
        }
        glommio::executor().yield_if_needed().await;
    }
    Ok(out)
}

fn start_expiry(shard: &Rc<BrokerShard>) {
    if shard.groups.expiry_started.replace(true) {
        return;
    }
    glommio::spawn_local(expiry(shard.clone())).detach();
}

/// Every `offsets.retention.check.interval.ms` until shutdown: expires old offsets.
async fn expiry(shard: Rc<BrokerShard>) {
    let interval = Duration::from_millis(shard.config.offsets_retention_check_interval_ms);
    loop {
        if !shard.sleep_unless_shutdown(interval).await {
            return;
        }
        expire_offsets(&shard, shard.clock.now_ms()).await;
    }
}

/// Deletes, with tombstones, the offsets of groups without active members whose latest
/// commit is older than `offsets.retention.minutes`.
async fn expire_offsets(shard: &Rc<BrokerShard>, now_ms: i64) {
    let retention_ms = shard
        .config
        .offsets_retention_minutes
        .saturating_mul(60_000);
    for p in shard.groups.loaded_partitions() {
        if shard.groups.ready(shard, p) != NONE {
            continue;
        }
        let (idle, tombstones) = shard.groups.forget_idle(p);
        persist(shard, p, "(forgotten groups)", tombstones, None);
        if idle > 0 {
            tracing::debug!(
                shard = shard.id,
                partition = p,
                groups = idle,
                "forgot empty groups"
            );
        }
        // Decided and appended in one step (no await between): no commit slips in between.
        let changes = shard.groups.expired(p, now_ms, retention_ms);
        if changes.is_empty() {
            continue;
        }
        let count = changes.len();
        match write(shard, p, changes).await {
            Ok(()) => info!(
                shard = shard.id,
                partition = p,
                offsets = count,
                "expired committed offsets"
            ),
            Err(e) => warn!(
                shard = shard.id,
                partition = p,
                error = e,
                "expiring offsets failed; retried at the next check"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
