//! What the group and the transaction coordinators share on a shard, the bookkeeping half of
//! Kafka's `CoordinatorRuntime`: each coordinator partition's load ([`PartitionLoad`]: which
//! log it was loaded from, whether the load is done, whether it may serve), the writes appended
//! to its log and not yet applied to memory ([`PendingWrites`], write-then-apply), and the index
//! of deadlines its timer serves ([`TimerIndex`]).
//!
//! Sans-I/O like the rest of the crate: the broker opens the logs, appends, learns the high
//! watermark and runs the timer task; these types decide what that means for memory.

use std::collections::{BTreeSet, VecDeque};

use keel_vocab::error::ResponseError;
use keel_vocab::{ErrorCode, TopicId};

/// Where a coordinator partition's load stands (Kafka's `CoordinatorState`, without the
/// states that only matter across replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadState {
    /// Its log is being replayed: requests get COORDINATOR_LOAD_IN_PROGRESS.
    Loading,
    Loaded,
    /// The replay failed (the error is logged): its state is unavailable until the partition is
    /// opened again.
    Failed,
}

/// One load of a coordinator partition on a shard. A partition opened again gets a new load
/// (a new `load_id`); what the old one started (a replay, a write's apply) is then dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLoad {
    /// The topic id of the log it loads from: a topic deleted and created again is another log.
    pub topic_id: TopicId,
    pub load_id: u64,
    pub state: LoadState,
}

impl PartitionLoad {
    /// A load that starts now.
    pub fn new(topic_id: TopicId, load_id: u64) -> PartitionLoad {
        PartitionLoad {
            topic_id,
            load_id,
            state: LoadState::Loading,
        }
    }

    /// Whether the partition may serve now: NONE; NOT_COORDINATOR when the log open on this
    /// shard is not the one loaded (`open_topic_id`) or this broker does not lead the partition
    /// (`leads`); else COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE by its state.
    pub fn ready(&self, open_topic_id: Option<TopicId>, leads: bool) -> ErrorCode {
        if open_topic_id != Some(self.topic_id) || !leads {
            return ErrorCode::of(ResponseError::NotCoordinator);
        }
        match self.state {
            LoadState::Loading => ErrorCode::of(ResponseError::CoordinatorLoadInProgress),
            LoadState::Loaded => ErrorCode::NONE,
            LoadState::Failed => ErrorCode::of(ResponseError::CoordinatorNotAvailable),
        }
    }
}

/// Changes appended to a partition's log and not yet applied to memory, in log order (Kafka's
/// deferred events of the runtime). Memory changes only once the high watermark passes a
/// write's end, so memory always equals a replay of the log's committed prefix.
#[derive(Debug)]
pub struct PendingWrites<C> {
    /// (log end offset after the append, the changes it holds), ascending.
    queue: VecDeque<(i64, Vec<C>)>,
}

impl<C> Default for PendingWrites<C> {
    fn default() -> Self {
        PendingWrites {
            queue: VecDeque::new(),
        }
    }
}

impl<C> PendingWrites<C> {
    /// Queues a write just appended, whose records end before `end_offset`. Appends are
    /// queued in the step that appends them, so ends only grow.
    pub fn push(&mut self, end_offset: i64, changes: Vec<C>) {
        assert!(
            self.queue.back().is_none_or(|(end, _)| *end < end_offset),
            "writes are queued in log order"
        );
        self.queue.push_back((end_offset, changes));
    }

    /// The changes of every queued write the high watermark has passed, in log order; they
    /// leave the queue.
    pub fn take_committed(&mut self, high_watermark: i64) -> Vec<C> {
        let mut out = Vec::new();
        while self
            .queue
            .front()
            .is_some_and(|(end, _)| *end <= high_watermark)
        {
            if let Some((_, changes)) = self.queue.pop_front() {
                out.extend(changes);
            }
        }
        out
    }

    /// Every change appended and not yet applied, oldest first.
    pub fn changes(&self) -> impl Iterator<Item = &C> {
        self.queue.iter().flat_map(|(_, changes)| changes)
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// The deadlines a coordinator's timer serves: (deadline, key) for each key with one (a group
/// id, a transactional id). The owner keeps each key's current deadline and removes the old
/// entry when it changes; [`TimerIndex::take_due`] hands out what is due, earliest first.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TimerIndex {
    entries: BTreeSet<(i64, String)>,
}

impl TimerIndex {
    pub fn insert(&mut self, deadline_ms: i64, key: &str) {
        self.entries.insert((deadline_ms, key.to_owned()));
    }

    pub fn remove(&mut self, deadline_ms: i64, key: &str) {
        self.entries.remove(&(deadline_ms, key.to_owned()));
    }

    pub fn contains(&self, deadline_ms: i64, key: &str) -> bool {
        self.entries.contains(&(deadline_ms, key.to_owned()))
    }

    /// Takes every entry due at `now_ms` (deadline <= now), earliest first.
    pub fn take_due(&mut self, now_ms: i64) -> Vec<(i64, String)> {
        let later = match now_ms.checked_add(1) {
            Some(after) => self.entries.split_off(&(after, String::new())),
            None => BTreeSet::new(),
        };
        std::mem::replace(&mut self.entries, later)
            .into_iter()
            .collect()
    }

    /// The earliest deadline, if any.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.entries.first().map(|(deadline_ms, _)| *deadline_ms)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
#[path = "runtime_tests.rs"]
mod tests;
