//! The state a shard holds for the `__consumer_offsets` partitions it coordinates
//! ([`GroupCoordinator`], a field of the shard): their groups, their loads, the writes not yet
//! applied, the timer index and the requests parked for a group's answer. The operations that
//! need the shard's logs and tasks are in [`super`] and [`super::membership`].

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use keel_coordinator::group::classic_group::Completed;
use keel_coordinator::group::consumer_group;
use keel_coordinator::group::group_metadata_manager::forget_records;
use keel_coordinator::group::offset_metadata_manager::apply_change;
use keel_coordinator::group::records::OffsetChange;
use keel_coordinator::group::{GroupEntry, Waiter};
use keel_coordinator::runtime::{LoadState, PartitionLoad, PendingWrites, TimerIndex};
use keel_shard::Event;
use keel_storage::Offset;

use keel_vocab::ErrorCode;

/// What a parked request receives: the group's answer, or an error for the whole request.
pub type GroupAnswer = Result<Completed, ErrorCode>;

/// One `__consumer_offsets` partition this shard coordinates: its load, and the writes appended
/// to its log and not yet applied (in log order; appends queue here in the same step as they
/// append).
pub(super) struct CoordinatorPartition {
    pub(super) load: PartitionLoad,
    pub(super) pending: PendingWrites<OffsetChange>,
}

/// The group coordinator state of one shard: the groups of the `__consumer_offsets`
/// partitions it owns, and the group requests of this shard's connections that wait for a
/// coordinator's answer (see [`membership`]).
#[derive(Default)]
pub struct GroupCoordinator {
    /// Every group of this shard's coordinator partitions, by group id.
    pub groups: RefCell<HashMap<String, GroupEntry>>,
    pub(super) partitions: RefCell<HashMap<i32, CoordinatorPartition>>,
    pub(super) next_load_id: Cell<u64>,
    pub(super) expiry_started: Cell<bool>,
    /// (deadline, group id) of every group with a timer ([`GroupEntry::next_deadline_ms`]).
    /// An entry whose group no longer has that `scheduled_ms` is stale and skipped.
    pub(super) deadlines: RefCell<TimerIndex>,
    /// Fired to wake the timer task early: a deadline before `timer_armed_ms` arrived.
    pub(super) timer_wake: RefCell<Rc<Event>>,
    /// The deadline the timer task sleeps until (`i64::MAX`: none).
    pub(super) timer_armed_ms: Cell<i64>,
    pub(super) timer_started: Cell<bool>,
    /// Requests of this shard's connections parked for a group's answer, by token.
    pub(super) parked: RefCell<HashMap<u64, futures_channel::oneshot::Sender<GroupAnswer>>>,
    pub(super) next_park_token: Cell<u64>,
    /// The topics consumer groups see, built once per metadata image version.
    pub(super) topics_view: RefCell<Option<(u64, Rc<consumer_group::TopicsView>)>>,
    /// Transactional offset commits (TxnOffsetCommit) in the log, waiting for their
    /// producer's marker, by (partition, producer id).
    pub(super) txn_offsets: RefCell<HashMap<(i32, i64), Vec<OffsetChange>>>,
}

impl GroupCoordinator {
    /// Starts (re)loading partition `p`: its groups are unavailable until [`Self::finish_load`].
    /// Returns the parked requests of the groups it drops, which the caller answers.
    pub(super) fn begin_load(&self, p: i32, topic_id: [u8; 16]) -> (u64, Vec<Waiter>) {
        let load_id = self.next_load_id.get();
        self.next_load_id.set(load_id + 1);
        self.partitions.borrow_mut().insert(
            p,
            CoordinatorPartition {
                load: PartitionLoad::new(topic_id, load_id),
                pending: PendingWrites::default(),
            },
        );
        let orphaned = self.drop_groups(p);
        (load_id, orphaned)
    }

    /// Removes the groups of partition `p`; returns the requests that were waiting on them.
    fn drop_groups(&self, p: i32) -> Vec<Waiter> {
        let mut orphaned = Vec::new();
        self.groups.borrow_mut().retain(|_, g| {
            if g.partition == p {
                orphaned.extend(g.waiting.drain().map(|(_, w)| w));
            }
            g.partition != p
        });
        orphaned
    }

    /// Forgets partition `p` (this broker no longer leads it): its load, pending writes, groups
    /// and pending transactional offsets; returns the waiters of its groups (to answer
    /// NOT_COORDINATOR). A write whose commit is still awaited applies nothing afterwards
    /// (`apply_committed` finds no load).
    pub(super) fn unload(&self, p: i32) -> Vec<Waiter> {
        self.partitions.borrow_mut().remove(&p);
        let orphaned = self.drop_groups(p);
        self.txn_offsets.borrow_mut().retain(|(tp, _), _| *tp != p);
        orphaned
    }

    /// Installs the groups replayed from partition `p`'s log, unless `p` was reopened since.
    pub(super) fn finish_load(
        &self,
        p: i32,
        load_id: u64,
        loaded: Option<HashMap<String, GroupEntry>>,
    ) {
        let mut parts = self.partitions.borrow_mut();
        let Some(cp) = parts.get_mut(&p).filter(|cp| cp.load.load_id == load_id) else {
            return;
        };
        match loaded {
            Some(groups) => {
                let mut all = self.groups.borrow_mut();
                all.retain(|_, g| g.partition != p);
                all.extend(groups);
                cp.load.state = LoadState::Loaded;
            }
            None => cp.load.state = LoadState::Failed,
        }
    }

    /// The current load of partition `p`, if it is open here.
    pub(super) fn load_id(&self, p: i32) -> Option<u64> {
        self.partitions.borrow().get(&p).map(|cp| cp.load.load_id)
    }

    /// Whether partition `p`'s groups can be served here now: ErrorCode::NONE or the Kafka error code.
    /// `open_topic_id` is the topic id of `p`'s log open on this shard, `leads` whether this
    /// broker leads `p` ([`super::ready`] reads both from the shard).
    pub fn ready(&self, p: i32, open_topic_id: Option<[u8; 16]>, leads: bool) -> ErrorCode {
        match self.partitions.borrow().get(&p) {
            Some(cp) => cp.load.ready(open_topic_id, leads),
            None => ErrorCode::of(ResponseError::NotCoordinator),
        }
    }

    /// Queues an appended write of `p` for memory; returns the load it belongs to.
    pub(super) fn push_pending(
        &self,
        p: i32,
        end_offset: Offset,
        changes: Vec<OffsetChange>,
    ) -> u64 {
        let mut parts = self.partitions.borrow_mut();
        let cp = parts
            .get_mut(&p)
            .expect("writes go only to partitions that are ready");
        cp.pending.push(end_offset.0, changes);
        cp.load.load_id
    }

    /// Applies, in log order, every pending write of `p` the high watermark has passed, if `p`
    /// was not reopened since `load_id` (a reopened log has its own watermark and queue).
    pub(super) fn apply_committed(&self, p: i32, load_id: u64, high_watermark: Offset) {
        let mut parts = self.partitions.borrow_mut();
        let Some(cp) = parts.get_mut(&p).filter(|cp| cp.load.load_id == load_id) else {
            return;
        };
        let mut groups = self.groups.borrow_mut();
        for change in cp.pending.take_committed(high_watermark.0) {
            apply_change(&mut groups, p, change);
        }
    }

    /// Whether a write touching `group` is appended to `p`'s log but not yet applied.
    pub(super) fn has_pending(&self, p: i32, group: &str) -> bool {
        self.partitions
            .borrow()
            .get(&p)
            .is_some_and(|cp| cp.pending.changes().any(|c| c.key().group == group))
    }

    /// The offsets of `group` that writes of `p` appended and did not yet apply.
    pub(super) fn pending_keys(&self, p: i32, group: &str) -> Vec<(String, i32)> {
        self.partitions
            .borrow()
            .get(&p)
            .map_or_else(Vec::new, |cp| {
                cp.pending
                    .changes()
                    .map(OffsetChange::key)
                    .filter(|k| k.group == group)
                    .map(|k| (k.topic.clone(), k.partition))
                    .collect()
            })
    }

    pub(super) fn loaded_partitions(&self) -> Vec<i32> {
        self.partitions
            .borrow()
            .iter()
            .filter(|(_, cp)| cp.load.state == LoadState::Loaded)
            .map(|(p, _)| *p)
            .collect()
    }

    /// Forgets partition `p`'s idle groups ([`GroupEntry::is_idle`]) that have no write in
    /// flight; returns how many.
    /// Returns how many, and the tombstones of their membership records.
    pub(super) fn forget_idle(&self, p: i32) -> (usize, Vec<(Bytes, Option<Bytes>)>) {
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
    pub(super) fn expired(&self, p: i32, now_ms: i64, retention_ms: i64) -> Vec<OffsetChange> {
        let groups = self.groups.borrow();
        let mut out = Vec::new();
        for (name, g) in groups.iter().filter(|(_, g)| g.partition == p) {
            let old = g
                .latest_commit_ms()
                .is_some_and(|t| t.saturating_add(retention_ms) < now_ms);
            if !old || g.has_active_members() || self.has_pending(p, name) {
                continue;
            }
            out.extend(
                g.offsets
                    .keys()
                    .map(|(topic, partition)| OffsetChange::delete(name, topic, *partition)),
            );
        }
        out
    }
}
