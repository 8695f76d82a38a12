//! Group coordination on a shard: the broker's half of Kafka's group coordinator.
//!
//! The coordinator itself is sans-I/O, in `keel-coordinator` ([`keel_coordinator::group`]: the
//! groups' memberships and offsets, their records, the replay of a partition at load). Group
//! `g` is coordinated by partition `keel_coordinator::partition_for(g, partitions)` of
//! `__consumer_offsets`, on the broker that leads it, on the shard that owns its log there.
//! That shard alone holds the state of its groups ([`GroupCoordinator`], a field of the shard):
//! handlers on other shards reach it with a mesh call ([`on_coordinator`]). This module owns the
//! logs, the tasks and the timers around it:
//!
//! Durability: every change (commit, deletion, expiry) is appended to `p`'s log as Kafka's own
//! coordinator records and committed (fsync'ed under flush.policy=group) before the answer and
//! before memory changes. Memory is applied in log order: each append queues its changes, and
//! whoever sees the high watermark move applies the queue up to it, so memory always equals a
//! replay of the log's committed prefix. When `p`'s log is opened on a shard, the log is
//! replayed from its start into memory (latest record per key wins, a tombstone deletes);
//! until that finishes, requests for `p`'s groups get COORDINATOR_LOAD_IN_PROGRESS. The topic
//! is compacted, so the log keeps the latest record per key.
//!
//! Expiry: a task on each coordinator shard deletes (with tombstones) the offsets of groups
//! without active members whose latest commit is older than `offsets.retention.minutes`.
//!
//! Membership: a group's classic membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) is a
//! [`ClassicGroup`] in its [`GroupEntry`], created by the group's first JoinGroup and driven by
//! [`membership`] (waiting requests, timers, DescribeGroups, ListGroups, DeleteGroups); a
//! KIP-848 membership (ConsumerGroupHeartbeat) is a [`ConsumerGroup`] driven by
//! [`consumer_membership`]. Memberships are persisted as Kafka does, as records of the group's
//! partition (classic: `GroupMetadata`, written when a generation completes or the group
//! empties): after every call into a group the records that changed are appended in the same
//! step ([`persist`]) and committed with the next group commit; answers do not wait for them (a
//! change lost in a crash only makes members rejoin). A reload restores each group from its
//! latest records (sessions restart at load), so members keep their generation, assignments and
//! commits across a coordinator restart.
//!
//! All state is shard-local (`RefCell`); no borrow is held across an `.await`.

pub mod consumer_membership;
pub mod lag;
pub mod membership;
pub mod shard_state;

use std::collections::HashSet;
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;
use keel_coordinator::group::classic_group::GroupState;
use keel_coordinator::group::group_coordinator_shard::{restore_memberships, Replayed};
pub use keel_coordinator::group::group_metadata_manager::CONSUMER_PROTOCOL_TYPE;
use keel_coordinator::group::group_metadata_manager::{forget_records, membership_records};
use keel_coordinator::group::offset_metadata_manager::{
    apply_change, check_member, check_simple_commit, commit_changes,
};
use keel_coordinator::group::records::{self, OffsetChange};
pub use keel_coordinator::group::{CommittedOffset, GroupEntry};
pub use keel_coordinator::{partition_for, OFFSETS_TOPIC};
use keel_storage::{LeaderEpoch, Offset, StorageError};
use tracing::{error, info, warn};

use crate::controller::{self, OpError};
use crate::coordination::coordinators;
use crate::errors::coordinator_write_error;
use crate::replication;
use crate::shard::{BrokerShard, Partition};
use keel_vocab::ErrorCode;
pub use shard_state::{GroupAnswer, GroupCoordinator};

/// Bytes one log read asks for while a coordinator partition loads.
const LOAD_READ_BYTES_MAX: usize = 1 << 20;
/// A write's records are split into batches of about this many bytes (one append, so they
/// are validated and committed together).
const WRITE_BATCH_BYTES_TARGET: usize = 256 * 1024;

// ---- placement and routing ---------------------------------------------------------------

/// Whether partition `p`'s groups can be served on this shard now: ErrorCode::NONE, NOT_COORDINATOR (not
/// open here, or this broker does not lead it), COORDINATOR_LOAD_IN_PROGRESS or
/// COORDINATOR_NOT_AVAILABLE (its load failed).
pub fn ready(shard: &BrokerShard, p: i32) -> ErrorCode {
    let open = shard.partition(OFFSETS_TOPIC, p).map(|part| part.topic_id);
    let leads = shard
        .image()
        .partition(OFFSETS_TOPIC, p)
        .is_some_and(|m| m.leader == shard.config.node_id);
    shard.groups.ready(p, open, leads)
}

/// Creates `__consumer_offsets` if it does not exist: `offsets.topic.num.partitions`
/// partitions, `offsets.topic.replication.factor` replicas (as many as there are live brokers
/// when fewer), compacted, `offsets.topic.segment.bytes` segments.
pub async fn ensure_offsets_topic(shard: &Rc<BrokerShard>) -> Result<(), OpError> {
    controller::ensure_internal_topic(
        shard,
        OFFSETS_TOPIC,
        shard.config.offsets_topic_num_partitions,
        shard.config.offsets_topic_segment_bytes,
        shard.config.offsets_topic_replication_factor,
        None,
    )
    .await
}

/// The `__consumer_offsets` partition of `group` given the image: the topic's partition count
/// once it exists, else `offsets.topic.num.partitions`.
pub fn group_partition(shard: &BrokerShard, group: &str) -> i32 {
    coordinators::partition_of(
        shard,
        OFFSETS_TOPIC,
        group,
        shard.config.offsets_topic_num_partitions,
    )
}

/// Where `group` is coordinated on this broker: its `__consumer_offsets` partition and the
/// shard that owns it; NOT_COORDINATOR when this broker does not lead that partition or the
/// topic does not exist yet (clients then ask FindCoordinator, which creates it).
pub fn locate(shard: &BrokerShard, group: &str) -> Result<(i32, usize), ErrorCode> {
    coordinators::locate(
        shard,
        OFFSETS_TOPIC,
        group,
        shard.config.offsets_topic_num_partitions,
        ErrorCode::of(ResponseError::NotCoordinator),
    )
}

/// Runs `work` on the shard coordinating `group`, with the group's partition: inline when that
/// is this shard, else over the mesh. Errors are Kafka codes for the whole group.
pub async fn on_coordinator<R, F, Fut>(
    api: ApiKey,
    shard: &Rc<BrokerShard>,
    group: &str,
    work: F,
) -> Result<R, ErrorCode>
where
    R: Send + 'static,
    F: FnOnce(Rc<BrokerShard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, ErrorCode>> + 'static,
{
    let (p, target) = locate(shard, group)?;
    coordinators::on_shard(api, shard, target, p, work).await
}

// ---- writes --------------------------------------------------------------------------------

/// Appends `changes` to partition `p`'s log and queues them for memory. Synchronous, so a
/// caller that decided `changes` from memory appends them before any other task runs.
fn append(
    shard: &BrokerShard,
    p: i32,
    changes: Vec<OffsetChange>,
    now: i64,
) -> Result<(Rc<Partition>, u64, Offset), ErrorCode> {
    let ready = ready(shard, p);
    if ready != ErrorCode::NONE {
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
) -> Result<(Rc<Partition>, Offset), ErrorCode> {
    let Some(part) = shard
        .partition(OFFSETS_TOPIC, p)
        .filter(|part| part.is_leader())
    else {
        return Err(ErrorCode::of(ResponseError::NotCoordinator));
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
        buf.extend_from_slice(&records::encode_records_batch(&records[start..end], now));
        start = end;
    }
    let info = part
        .log
        .append(buf, LeaderEpoch(part.leader_epoch.get()), now)
        .map_err(|e| {
            warn!(partition = p, error = %e, "coordinator append refused");
            coordinator_write_error(&e)
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
    if records.is_empty() || ready(shard, p) != ErrorCode::NONE {
        return;
    }
    match append_records(shard, p, &records, shard.clock.now_ms()) {
        Ok((part, end_offset)) => {
            let owner = shard.clone();
            let group = group.to_string();
            let load_id = shard.groups.load_id(p);
            glommio::spawn_local(async move {
                if let Err(e) = replication::commit_coordinator(&owner, &part, end_offset).await {
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
            error = %e,
            "membership records not written"
        ),
    }
}

/// Appends `changes` to partition `p`'s log, waits for the log commit, then applies them (with
/// every earlier write of `p`, in log order) to memory. The part after the append runs in its
/// own task: if the caller's future is dropped, the write still completes and is applied.
async fn write(
    shard: &Rc<BrokerShard>,
    p: i32,
    changes: Vec<OffsetChange>,
) -> Result<(), ErrorCode> {
    if changes.is_empty() {
        return Ok(());
    }
    let (part, load_id, end_offset) = append(shard, p, changes, shard.clock.now_ms())?;
    let owner = shard.clone();
    let done = glommio::spawn_local(async move {
        let committed = replication::commit_coordinator(&owner, &part, end_offset).await;
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
            Err(replication::coordinator_commit_error(
                &e,
                coordinator_write_error,
            ))
        }
        None => Err(ErrorCode::of(ResponseError::UnknownServerError)),
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
) -> Result<(), ErrorCode> {
    let ready = ready(&shard, p);
    if ready != ErrorCode::NONE {
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
        .unwrap_or(ErrorCode::of(ResponseError::UnknownMemberId));
        if fenced != ErrorCode::NONE {
            return Err(fenced);
        }
    }
    let now = shard.clock.now_ms();
    let changes = commit_changes(&req.group, req.offsets, now);
    if changes.is_empty() {
        return Ok(());
    }
    let Some(part) = shard
        .partition(OFFSETS_TOPIC, p)
        .filter(|part| part.is_leader())
    else {
        return Err(ErrorCode::of(ResponseError::NotCoordinator));
    };
    let encoded: Vec<(Bytes, Option<Bytes>)> = changes.iter().map(OffsetChange::encode).collect();
    let batch =
        records::encode_transactional_batch(&encoded, req.producer_id, req.producer_epoch, now);
    let info = part
        .log
        .append_from_coordinator(batch, LeaderEpoch(part.leader_epoch.get()), now)
        .map_err(|e| match e {
            StorageError::InvalidProducerEpoch(_) => ErrorCode::of(ResponseError::ProducerFenced),
            e => coordinator_write_error(&e),
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
    let committed = replication::commit_coordinator(&shard, &part, end).await;
    shard.notify_data(&part);
    committed.map_err(|e| {
        error!(partition = p, error = %e, "transactional offsets not committed");
        replication::coordinator_commit_error(&e, coordinator_write_error)
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

/// Commits offsets for a group: ErrorCode::NONE for all of them, or one error code for all.
pub async fn commit_offsets(
    shard: Rc<BrokerShard>,
    p: i32,
    req: CommitRequest,
) -> Result<(), ErrorCode> {
    let ready = ready(&shard, p);
    if ready != ErrorCode::NONE {
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
    if fenced != ErrorCode::NONE {
        return Err(fenced);
    }
    let changes = commit_changes(&req.group, req.offsets, shard.clock.now_ms());
    write(&shard, p, changes).await
}

/// Committed offsets of a topic's partitions: `None` where nothing is committed, with the
/// partition's error code (UNSTABLE_OFFSET_COMMIT while a transaction's offset for it waits
/// for its marker and the fetch requires stable offsets).
pub type FetchedTopic = (String, Vec<(i32, Option<CommittedOffset>, ErrorCode)>);

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
) -> Result<Vec<FetchedTopic>, ErrorCode> {
    let ready = ready(&shard, p);
    if ready != ErrorCode::NONE {
        return Err(ready);
    }
    if let Some((member_id, epoch)) = member.filter(|(m, e)| !(m.is_empty() && *e < 0)) {
        let fenced = membership::with_group(&shard, p, &group, false, |g, now| {
            match g.consumer.as_mut() {
                Some(c) => {
                    membership::consumer_tick(shard.id, c, now);
                    c.can_commit(&member_id, epoch)
                }
                None => ErrorCode::NONE,
            }
        })
        .unwrap_or(ErrorCode::NONE);
        if fenced != ErrorCode::NONE {
            return Err(fenced);
        }
    }
    let groups = shard.groups.groups.borrow();
    let entry = groups.get(&group);
    let committed = |topic: &str, partition: i32| {
        if require_stable && offset_unstable(&shard, p, &group, topic, partition) {
            return (None, ErrorCode::of(ResponseError::UnstableOffsetCommit));
        }
        let o = entry.and_then(|g| g.offsets.get(&(topic.to_string(), partition)).cloned());
        (o, ErrorCode::NONE)
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
) -> Result<HashSet<String>, ErrorCode> {
    let ready = ready(&shard, p);
    if ready != ErrorCode::NONE {
        return Err(ready);
    }
    let (changes, subscribed) = {
        let groups = shard.groups.groups.borrow();
        let Some(g) = groups.get(&group) else {
            return Err(ErrorCode::of(ResponseError::GroupIdNotFound));
        };
        if g.classic
            .as_ref()
            .is_some_and(|c| c.state() == GroupState::Dead)
        {
            return Err(ErrorCode::of(ResponseError::GroupIdNotFound));
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
                _ => return Err(ErrorCode::of(ResponseError::NonEmptyGroup)),
            }
        } else {
            HashSet::new()
        };
        let changes: Vec<OffsetChange> = partitions
            .into_iter()
            .filter(|k| !subscribed.contains(&k.0) && g.offsets.contains_key(k))
            .map(|(topic, partition)| OffsetChange::delete(&group, &topic, partition))
            .collect();
        (changes, subscribed)
    };
    write(&shard, p, changes).await?;
    Ok(subscribed)
}

// ---- loading and expiry ------------------------------------------------------------------

/// Starts loading a just-opened `__consumer_offsets` partition: its groups answer
/// COORDINATOR_LOAD_IN_PROGRESS until its log is replayed. Also starts this shard's expiry task.
/// Answers requests waiting on groups this shard no longer holds: NOT_COORDINATOR.
fn not_coordinator(shard: &Rc<BrokerShard>, orphaned: Vec<keel_coordinator::group::Waiter>) {
    membership::deliver(
        shard,
        orphaned
            .into_iter()
            .map(|w| (w, Err(ErrorCode::of(ResponseError::NotCoordinator))))
            .collect(),
    );
}

/// This broker stopped leading `part` (a partition of `__consumer_offsets`): its groups are
/// forgotten here, and requests waiting on them get NOT_COORDINATOR.
pub fn unload(shard: &Rc<BrokerShard>, part: &Partition) {
    let orphaned = shard.groups.unload(part.index);
    let groups = orphaned.len();
    not_coordinator(shard, orphaned);
    info!(
        shard = shard.id,
        partition = part.index,
        waiting = groups,
        "coordinator partition unloaded: no longer its leader"
    );
}

pub fn start_load(shard: &Rc<BrokerShard>, part: Rc<Partition>) {
    let p = part.index;
    let (load_id, orphaned) = shard.groups.begin_load(p, part.topic_id);
    not_coordinator(shard, orphaned);
    let owner = shard.clone();
    glommio::spawn_local(async move {
        let started = Instant::now();
        // A new leader's high watermark may still be below what it holds from the old leader
        // (its followers have not fetched it yet): load once all of it is committed, or the
        // state would miss the last commits of the old coordinator.
        if !crate::replication::wait_for_epoch_start(&part).await {
            return;
        }
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
                Some(restore_memberships(
                    p,
                    r,
                    &membership::group_config(&owner.config),
                    &consumer_membership::consumer_group_config(&owner.config),
                    owner.clock.monotonic_ms(),
                ))
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

/// Reads partition `part`'s committed log from its start and replays it.
async fn replay(part: &Partition) -> Result<Replayed, StorageError> {
    let p = part.index;
    let mut out = Replayed::default();
    let offsets = part.log.offsets();
    let end = offsets.high_watermark;
    let mut offset = offsets.log_start_offset;
    while offset < end {
        let read = part.log.read(offset, LOAD_READ_BYTES_MAX, end).await?;
        match out.replay_batches(p, &read.records) {
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
        if ready(shard, p) != ErrorCode::NONE {
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
                error = %e,
                "expiring offsets failed; retried at the next check"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
