//! One transactional id's state: [`TxnState`] (Kafka's `TransactionState`, with the
//! transitions it allows) and [`TransactionMetadata`] (Kafka's `TransactionMetadata`: the
//! latest committed record, the write in flight, the timers).

use std::collections::BTreeSet;

use keel_vocab::TopicPartition;

use super::transaction_coordinator::{Markers, TxnConfig};
use super::transaction_log::{TransactionLogValue, NO_PRODUCER_EPOCH};

/// A transaction's state: Kafka's `TransactionState`, with its ids and names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    /// No transaction open (after InitProducerId).
    Empty,
    /// Partitions added; the producer writes.
    Ongoing,
    /// EndTxn(commit) is durable; commit markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fencing InitProducerId is durable; abort markers are being
    /// written.
    PrepareAbort,
    /// Every partition has its commit marker.
    CompleteCommit,
    /// Every partition has its abort marker.
    CompleteAbort,
    /// Expiring: only ever a pending state here.
    Dead,
    /// Fencing a producer: passed through within one call here.
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// The id in `TransactionLogValue.transaction_status`.
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The name DescribeTransactions and ListTransactions use.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// A ListTransactions state filter; `None` for a name Kafka does not know (answered in the
    /// response's `unknown_state_filters`).
    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Kafka's `validPreviousStates` (transactions V1: `PrepareAbort` only from `Ongoing`).
    pub(super) fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether an id in this state expires when idle (no transaction open).
    pub fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    pub(super) fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// Why a write is in flight: what its completion answers and does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// An epoch bump or a new id: answers the producer id and epoch.
    InitProducerId,
    /// The abort of an open transaction fencing its producer: answers CONCURRENT_TRANSACTIONS
    /// (the producer retries) and writes abort markers.
    InitFence,
    AddPartitions,
    /// Answers NONE and writes markers.
    EndTxn,
    /// A timed-out transaction's abort: writes abort markers.
    Timeout,
    /// The end of a transaction once its markers are written.
    Complete,
    /// A tombstone of an idle id.
    Expire,
}

impl Origin {
    /// Whether the coordinator started the write itself, so it retries a failure.
    pub(super) fn is_own(self) -> bool {
        matches!(self, Origin::Timeout | Origin::Complete | Origin::Expire)
    }
}

/// A write in flight: the state it moves to (`None`: the id is removed).
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) target: Option<(TransactionLogValue, i16)>,
    pub(super) origin: Origin,
}

/// What the coordinator knows of one transactional id.
#[derive(Clone, Debug)]
pub struct TransactionMetadata {
    /// The latest record committed for the id (or, while its first write is in flight, the
    /// entry InitProducerId created at epoch -1).
    pub(super) committed: TransactionLogValue,
    /// The epoch before the last InitProducerId bump, so its retry gets the same answer; -1
    /// when the bump fenced another producer. Memory only, as in Kafka.
    pub(super) last_producer_epoch: i16,
    pub(super) pending: Option<Pending>,
    /// In `Prepare*`: every marker is written, the completion is owed (its write failed).
    pub(super) markers_written: bool,
    /// A failed write of the coordinator's own is not retried before this.
    pub(super) retry_not_before_ms: i64,
    /// The deadline under which the timer index holds this id.
    pub(super) scheduled_ms: Option<i64>,
}

impl TransactionMetadata {
    pub(super) fn new(committed: TransactionLogValue) -> TransactionMetadata {
        TransactionMetadata {
            committed,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            pending: None,
            markers_written: false,
            retry_not_before_ms: i64::MIN,
            scheduled_ms: None,
        }
    }

    pub fn state(&self) -> TxnState {
        self.committed.state
    }

    /// The state a write in flight moves to (`Dead` for a tombstone).
    pub fn pending_state(&self) -> Option<TxnState> {
        let pending = self.pending.as_ref()?;
        Some(
            pending
                .target
                .as_ref()
                .map_or(TxnState::Dead, |t| t.0.state),
        )
    }

    pub fn producer_id(&self) -> i64 {
        self.committed.producer_id
    }

    pub fn previous_producer_id(&self) -> i64 {
        self.committed.previous_producer_id
    }

    pub fn producer_epoch(&self) -> i16 {
        self.committed.producer_epoch
    }

    pub fn last_producer_epoch(&self) -> i16 {
        self.last_producer_epoch
    }

    pub fn transaction_timeout_ms(&self) -> i32 {
        self.committed.transaction_timeout_ms
    }

    pub fn partitions(&self) -> &BTreeSet<TopicPartition> {
        &self.committed.partitions
    }

    pub fn start_timestamp_ms(&self) -> i64 {
        self.committed.start_timestamp_ms
    }

    pub fn last_update_timestamp_ms(&self) -> i64 {
        self.committed.last_update_timestamp_ms
    }

    /// The moment `tick` must act on this id, if any.
    pub(super) fn deadline_ms(&self, config: &TxnConfig) -> Option<i64> {
        if self.pending.is_some() {
            return None;
        }
        let v = &self.committed;
        let deadline_ms = match v.state {
            // Kafka aborts once `start + timeout < now`.
            TxnState::Ongoing => v
                .start_timestamp_ms
                .saturating_add(i64::from(v.transaction_timeout_ms))
                .saturating_add(1),
            TxnState::PrepareCommit | TxnState::PrepareAbort if self.markers_written => i64::MIN,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => v
                .last_update_timestamp_ms
                .saturating_add(config.transactional_id_expiration_ms),
            _ => return None,
        };
        Some(deadline_ms.max(self.retry_not_before_ms))
    }

    /// The markers that end the transaction the id is preparing.
    pub(super) fn markers(&self, transactional_id: &str, coordinator_epoch: i32) -> Markers {
        let v = &self.committed;
        debug_assert!(v.state.is_prepare(), "{transactional_id} in {:?}", v.state);
        Markers {
            transactional_id: transactional_id.to_owned(),
            producer_id: v.producer_id,
            producer_epoch: v.producer_epoch,
            commit: v.state == TxnState::PrepareCommit,
            partitions: v.partitions.iter().cloned().collect(),
            coordinator_epoch,
        }
    }
}
