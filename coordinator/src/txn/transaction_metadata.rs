//! One transactional id as its coordinator holds it ([`TransactionMetadata`], Kafka's
//! `TransactionMetadata`: the latest committed record, the write in flight, the timers), the
//! coordinator's settings ([`TxnConfig`]) and the markers that end a transaction ([`Markers`]).

use std::collections::BTreeSet;

use keel_vocab::TopicPartition;

use super::transaction_log::{TransactionLogValue, NO_PRODUCER_EPOCH};
use super::transaction_state::TxnState;

/// Settings, from the broker's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest transaction timeout a producer may ask for.
    pub transaction_timeout_ms_max: i32,
    /// `transactional.id.expiration.ms`: how long an id without an open transaction is kept
    /// after its last change.
    pub transactional_id_expiration_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            transaction_timeout_ms_max: 900_000,
            transactional_id_expiration_ms: 604_800_000,
        }
    }
}

/// Transaction markers to write: a commit or abort control record for `producer_id` at
/// `producer_epoch` into each partition, through its leader (WriteTxnMarkers), stamped with
/// `coordinator_epoch`. Once every partition has its marker (or is gone), the shard calls
/// [`TransactionCoordinator::markers_written`]. A partition whose leader answers
/// TRANSACTION_COORDINATOR_FENCED means a newer coordinator took over: stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Markers {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub partitions: Vec<TopicPartition>,
    pub coordinator_epoch: i32,
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
