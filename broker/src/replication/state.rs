//! One partition's replication state on the shard that owns its log (a plain state type:
//! `shard.rs` holds it in each `Partition`; the code that works on it is in `leader` and
//! `fetcher`).
//!
//! From the installed metadata image: the replicas, the ISR and the partition epoch. The leader
//! adds what it learns from its followers' fetches (each follower's log end, when it last
//! caught up, the broker epoch it fetches with) and the ISR change it has asked the controller
//! for and that is not committed yet. While such a change is pending the leader counts the
//! union of the old and the new ISR (Kafka's "maximal ISR"): a shrink is not trusted before
//! it is committed, an expansion is honoured at once.
//!
//! Runs on the owner shard only; borrows never live across an `.await`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use keel_shard::Event;

use crate::coordination::parking::DataWaiters;

use keel_storage::replication::timers::IsrChangeQueue;
use keel_storage::replication::{Assignment, ReplicaState};

/// A partition's replication state (see the module docs).
pub struct PartitionReplication {
    /// The leader per the installed image; -1 = none. The owner checks it at every append
    /// and read.
    pub leader: Cell<i32>,
    pub replicas: RefCell<Vec<i32>>,
    /// The committed ISR.
    pub isr: RefCell<Vec<i32>>,
    /// Eligible leader replicas (KIP-966), from the image.
    pub elr: RefCell<Vec<i32>>,
    pub partition_epoch: Cell<i32>,
    /// What this replica knows beyond the image, and its decisions on it: the role it took
    /// up, the leader's followers and epoch start, the ISR change it proposed and the
    /// controller has not committed (storage's `replication::ReplicaState`, which the fault
    /// simulation runs too).
    pub local: RefCell<ReplicaState>,
    /// Leader: followers' fetches waiting for the log end to move. They are woken by every
    /// append (before it is durable here: the followers' writes overlap the leader's), and by
    /// every move of the high watermark.
    pub follower_waiters: DataWaiters,
    /// Fired (and replaced) whenever the high watermark moves, the ISR changes or leadership
    /// changes: acks=all produces and the coordinators' writes wait on it.
    hw_moved: RefCell<Rc<Event>>,
    /// This broker's replica of the partition is listed in the topic's
    /// `leader.replication.throttled.replicas` (or it is `*`): as leader, it serves followers
    /// outside the ISR within `leader.replication.throttled.rate`.
    pub leader_throttled: Cell<bool>,
    /// Listed in `follower.replication.throttled.replicas`: while outside the ISR, it fetches
    /// within `follower.replication.throttled.rate`.
    pub follower_throttled: Cell<bool>,
}

impl PartitionReplication {
    /// The replication state of broker `node`'s replica, before any image.
    pub fn new(node: i32) -> Self {
        PartitionReplication {
            leader: Cell::new(-1),
            replicas: RefCell::new(Vec::new()),
            isr: RefCell::new(Vec::new()),
            elr: RefCell::new(Vec::new()),
            partition_epoch: Cell::new(-1),
            local: RefCell::new(ReplicaState::new(node)),
            follower_waiters: DataWaiters::default(),
            hw_moved: RefCell::new(Event::new()),
            leader_throttled: Cell::new(false),
            follower_throttled: Cell::new(false),
        }
    }
}

/// One shard's share of a replication throttle (Kafka's replication quota:
/// `leader.replication.throttled.rate` or `follower.replication.throttled.rate`, bytes per
/// second per broker, split evenly across its shards): a token bucket. A throttled replica
/// copies only while the bucket is not in debt, and what it copied is taken out afterwards,
/// so one read may overdraw it (by at most a fetch's bytes) and the next ones wait.
#[derive(Debug, Default)]
pub struct ReplicationQuota {
    /// Bytes per second for this shard; None = unlimited.
    rate: Cell<Option<f64>>,
    tokens: Cell<f64>,
    refilled: Cell<Option<std::time::Instant>>,
}

impl ReplicationQuota {
    /// At most this much credit builds up while nothing is copied.
    const BURST_SECS: f64 = 0.1;

    pub fn set_rate(&self, bytes_per_sec: Option<f64>) {
        if self.rate.get() != bytes_per_sec {
            self.rate.set(bytes_per_sec);
            self.tokens.set(0.0);
            self.refilled.set(None);
        }
    }

    fn refill(&self, now: std::time::Instant) {
        let Some(rate) = self.rate.get() else { return };
        let last = self.refilled.get().unwrap_or(now);
        let credit = rate * now.saturating_duration_since(last).as_secs_f64();
        self.tokens
            .set((self.tokens.get() + credit).min(rate * Self::BURST_SECS));
        self.refilled.set(Some(now));
    }

    /// Whether a throttled replica may copy now.
    pub fn allows(&self, now: std::time::Instant) -> bool {
        if self.rate.get().is_none() {
            return true;
        }
        self.refill(now);
        self.tokens.get() > 0.0
    }

    /// Takes `bytes` a throttled replica copied out of the bucket.
    pub fn record(&self, bytes: usize, now: std::time::Instant) {
        if self.rate.get().is_some() {
            self.refill(now);
            self.tokens.set(self.tokens.get() - bytes as f64);
        }
    }

    /// How long until the bucket is out of debt (zero when it is).
    pub fn wait_hint(&self) -> std::time::Duration {
        match self.rate.get() {
            Some(rate) if rate > 0.0 && self.tokens.get() <= 0.0 => {
                std::time::Duration::from_secs_f64((-self.tokens.get() + 1.0) / rate)
            }
            Some(_) if self.tokens.get() <= 0.0 => std::time::Duration::from_secs(1),
            _ => std::time::Duration::ZERO,
        }
    }
}

/// A shard's replication throttles.
#[derive(Debug, Default)]
pub struct ReplicationQuotas {
    pub leader: ReplicationQuota,
    pub follower: ReplicationQuota,
}

impl PartitionReplication {
    /// More than one replica: the high watermark follows the ISR, not the local disk.
    pub fn is_replicated(&self) -> bool {
        self.replicas.borrow().len() > 1
    }

    /// Runs `f` on the partition as the installed image has it (`leader_epoch` is the
    /// partition's, kept beside this state).
    pub fn with_assignment<R>(&self, leader_epoch: i32, f: impl FnOnce(&Assignment<'_>) -> R) -> R {
        let replicas = self.replicas.borrow();
        let isr = self.isr.borrow();
        f(&Assignment {
            leader: self.leader.get(),
            leader_epoch,
            replicas: &replicas,
            isr: &isr,
            partition_epoch: self.partition_epoch.get(),
        })
    }

    /// The committed ISR together with a pending change (Kafka's maximal ISR).
    pub fn maximal_isr(&self) -> Vec<i32> {
        self.with_assignment(-1, |a| self.local.borrow().maximal_isr(a))
    }

    /// Takes the assignment of an installed image. A pending ISR change ends once the image
    /// carries another partition epoch than it was sent at (committed, or overtaken by
    /// another change); a new ISR wakes what waits for the high watermark.
    pub fn set_from_image(
        &self,
        leader: i32,
        leader_epoch: i32,
        replicas: &[i32],
        isr: &[i32],
        elr: &[i32],
        partition_epoch: i32,
    ) {
        self.leader.set(leader);
        *self.replicas.borrow_mut() = replicas.to_vec();
        let isr_changed = *self.isr.borrow() != isr;
        *self.isr.borrow_mut() = isr.to_vec();
        *self.elr.borrow_mut() = elr.to_vec();
        self.partition_epoch.set(partition_epoch);
        self.with_assignment(leader_epoch, |a| self.local.borrow_mut().image_installed(a));
        if isr_changed {
            // acks=all waits check the ISR against min.insync.replicas.
            self.fire_hw_moved();
        }
    }

    /// The event the next high-watermark move fires.
    pub fn hw_event(&self) -> Rc<Event> {
        self.hw_moved.borrow().clone()
    }

    /// Wakes everything waiting for the high watermark (it moved, or leadership changed).
    pub fn fire_hw_moved(&self) {
        let old = std::mem::replace(&mut *self.hw_moved.borrow_mut(), Event::new());
        old.fire();
    }
}

/// One ISR change a leader proposes (one partition's item of an AlterPartition request).
#[derive(Clone, Debug)]
pub struct IsrChange {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// The new ISR: each member and the broker epoch it fetched with (-1 for the leader).
    pub new_isr: Vec<(i32, i64)>,
}

/// One partition's change waiting in a shard's AlterPartition queue, or in flight (Kafka's
/// `AlterPartitionItem`); `P` is the partition handle (the shard's `Rc<Partition>`: generic
/// so that this module, which the shard holds, names neither the shard nor the controller).
pub struct AlterPartitionItem<P> {
    pub part: P,
    pub change: IsrChange,
    /// "shrink" or "expand", for the log.
    pub why: &'static str,
}

/// A partition by (topic id, index).
pub type PartitionKey = ([u8; 16], i32);

/// A shard's AlterPartition queue (`replication::leader::alter_partition` works it): storage's
/// `replication::timers::IsrChangeQueue` (at most one request in flight, changes submitted
/// meanwhile go in the next one, unanswered ones go again after the backoff), which the fault
/// simulation runs too.
pub struct AlterPartitionManager<P> {
    pub queue: RefCell<IsrChangeQueue<PartitionKey, AlterPartitionItem<P>>>,
}

impl<P> Default for AlterPartitionManager<P> {
    fn default() -> Self {
        AlterPartitionManager {
            queue: RefCell::new(IsrChangeQueue::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(r: &PartitionReplication, isr: Vec<i32>) {
        r.with_assignment(3, |a| {
            let mut local = r.local.borrow_mut();
            local.took_up_leadership(a, 0, 0);
            local.propose(a, isr);
        });
    }

    #[test]
    fn maximal_isr_is_the_union_of_committed_and_pending() {
        let r = PartitionReplication::new(1);
        r.set_from_image(1, 3, &[1, 2, 3], &[1, 2], &[], 4);
        assert_eq!(r.maximal_isr(), vec![1, 2]);
        pending(&r, vec![1, 3]);
        assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
        pending(&r, vec![1]);
        assert_eq!(r.maximal_isr(), vec![1, 2]);
    }

    #[test]
    fn a_new_isr_wakes_the_waits_and_a_new_partition_epoch_ends_the_pending_change() {
        let r = PartitionReplication::new(1);
        r.set_from_image(1, 3, &[1, 2, 3], &[1, 2, 3], &[], 4);
        pending(&r, vec![1, 2]);
        let waiting = r.hw_event();
        // The same ISR at the same partition epoch: nothing wakes, the change stays pending.
        r.set_from_image(1, 3, &[1, 2, 3], &[1, 2, 3], &[], 4);
        assert!(!waiting.is_fired());
        assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
        // The shrink committed: the waits wake and check the ISR against the minimum.
        r.set_from_image(1, 3, &[1, 2, 3], &[1, 2], &[], 5);
        assert!(waiting.is_fired());
        assert_eq!(r.local.borrow().pending, None);
        assert_eq!(r.maximal_isr(), vec![1, 2]);
    }

    #[test]
    fn hw_event_fires_once_and_is_replaced() {
        let r = PartitionReplication::new(1);
        let first = r.hw_event();
        assert!(!first.is_fired());
        r.fire_hw_moved();
        assert!(first.is_fired());
        assert!(!r.hw_event().is_fired());
    }
}

/// A follower's fetcher: the leader broker and the leader's shard it fetches from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FetcherKey {
    pub leader: i32,
    pub leader_shard: u32,
}

/// One fetcher's partitions (by topic and index) and where it connects.
#[derive(Default)]
pub struct FetcherState {
    pub partitions: RefCell<std::collections::BTreeSet<(String, i32)>>,
    pub addr: RefCell<String>,
    /// Whether its task runs (it ends when its partitions are gone).
    pub running: Cell<bool>,
    /// Fired (and replaced) when its partitions change.
    pub changed: RefCell<Rc<Event>>,
}

impl FetcherState {
    pub fn wake(&self) {
        let old = std::mem::replace(&mut *self.changed.borrow_mut(), Event::new());
        old.fire();
    }
}

/// A shard's replica fetchers.
#[derive(Default)]
pub struct ReplicaFetchers {
    pub by_key: RefCell<std::collections::HashMap<FetcherKey, Rc<FetcherState>>>,
    pub by_partition: RefCell<std::collections::HashMap<(String, i32), FetcherKey>>,
}
