//! The transaction coordinator of one `__transaction_state` partition: Kafka's
//! `TransactionCoordinator`, `TransactionStateManager` and `TransactionMetadata` logic as a pure
//! state machine (transactions V1 semantics: the epoch is bumped by InitProducerId and by the
//! coordinator's fencing aborts, not by every commit as in KIP-890's transactions V2).
//!
//! One [`TransactionCoordinator`] per partition, not per shard: a partition is loaded, led and
//! given up as a unit, with its own coordinator epoch (its leader epoch), exactly Kafka's
//! `TxnMetadataCacheEntry`. The shard that owns the partition's log holds it (in a map by
//! partition, beside its group coordinators) and only that shard touches it. It holds no
//! sockets, no timers and no clock: time comes in as `now_ms` on every call (a call stamped
//! earlier than the last one is taken as happening at the last one), and the shard calls
//! [`TransactionCoordinator::tick`] at [`TransactionCoordinator::next_deadline_ms`].
//!
//! # Writes
//! Every change of a transactional id is a `TransactionLogValue` record ([`super::transaction_log`])
//! appended to the partition; it takes effect in memory only once the write is committed, so
//! memory is always a replay of the log's committed prefix (plus in-flight writes). An
//! operation that changes state returns [`Reply::AfterWrite`] (or a [`TxnAction::Write`] from
//! [`TransactionCoordinator::tick`] / [`TransactionCoordinator::markers_written`]): the shard
//! appends the record and, once it is committed or has failed, calls
//! [`TransactionCoordinator::write_completed`], which applies or drops the change (Kafka's
//! pending state) and yields the parked request's answer and any follow-up actions. At most one
//! write per transactional id is in flight; while it is, requests for the id get
//! CONCURRENT_TRANSACTIONS (InitProducerId, AddPartitionsToTxn, EndTxn), as in Kafka.
//!
//! A write the coordinator started on its own (a timeout abort, an expiry, a completion after
//! markers) that fails is retried by `tick` after [`WRITE_RETRY_BACKOFF_MS`].
//!
//! # States and transitions (Kafka's `TransactionState`, ids as in the log)
//! ```text
//! (none) --InitProducerId--> Empty(epoch 0) --AddPartitions/AddOffsets--> Ongoing
//! Empty | CompleteCommit | CompleteAbort --InitProducerId--> Empty (epoch + 1, or a new
//!         producer id at epoch 0 once the epoch is exhausted)
//! Empty | CompleteCommit | CompleteAbort --AddPartitions--> Ongoing (start timestamp = now)
//! Ongoing --AddPartitions--> Ongoing (partitions grow; nothing written if none is new)
//! Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
//! Ongoing --EndTxn(abort)--> PrepareAbort --markers written--> CompleteAbort
//! Ongoing --timeout, or InitProducerId (fencing)--> PrepareAbort with epoch + 1
//! Empty | CompleteCommit | CompleteAbort --idle for transactional.id.expiration.ms--> removed
//!         (a tombstone; Kafka's pending `Dead`)
//! ```
//! `Dead` and `PrepareEpochFence` are never a current state: Kafka passes through
//! `PrepareEpochFence` within one call on its way to `PrepareAbort`, and `Dead` is the pending
//! state of a tombstone write (Keel's [`TransactionMetadata::pending_state`] shows it).
//!
//! # Errors (Kafka's, and when)
//! - InitProducerId: INVALID_REQUEST (empty id), INVALID_TRANSACTION_TIMEOUT (a timeout not
//!   in 1..=`transaction.max.timeout.ms`), CONCURRENT_TRANSACTIONS (a write in flight, `Prepare*`,
//!   and, after its fencing abort is written, `Ongoing`), PRODUCER_FENCED (the expected producer
//!   id is neither the current one nor, with an exhausted epoch, the previous one; or the
//!   expected epoch is neither the current nor the last one).
//! - AddPartitionsToTxn / AddOffsetsToTxn: INVALID_PRODUCER_ID_MAPPING (unknown id or another
//!   producer id), PRODUCER_FENCED (another epoch), CONCURRENT_TRANSACTIONS (a write in flight,
//!   `Prepare*`). The verification form (v4, [`TransactionCoordinator::verify_partitions`]):
//!   INVALID_TXN_STATE for a partition not in the transaction.
//! - EndTxn: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS (a write in
//!   flight; the same decision again in `Prepare*`), INVALID_TXN_STATE (`Empty`; the other
//!   decision in `Prepare*` or `Complete*`), ErrorCode::NONE for a retry in `Complete*` with the same
//!   decision.
//! - Anything before the load finished: COORDINATOR_LOAD_IN_PROGRESS.
//!
//! Clients too old to know PRODUCER_FENCED get INVALID_PRODUCER_EPOCH: see
//! [`producer_fenced_compat`].
//!
//! # Loading
//! [`TransactionCoordinator::replay`] every record of the partition from its start (latest per
//! key wins, a tombstone removes), then [`TransactionCoordinator::finish_load`]: a transaction
//! found in `PrepareCommit` or `PrepareAbort` (the previous coordinator died between the
//! decision and its markers) yields [`TxnAction::WriteMarkers`], so the new coordinator
//! completes it with the decision already taken: it never hangs and never flips.
//!
//! # Invariants (checked after every call in debug builds, by `check_invariants`)
//! - the current state is never `Dead` or `PrepareEpochFence`; `Empty` and `Complete*` hold no
//!   partitions; the producer id is >= 0 and the epoch >= 0, except for an id whose first
//!   InitProducerId write is in flight (epoch -1, as Kafka creates it);
//! - a pending write moves to a state whose valid previous states include the current one;
//! - an id is in the timer index exactly when it has a deadline (no write in flight, and
//!   `Ongoing`, idle, or owing a completion after its markers), under that deadline.
//!
//! Where this differs from Kafka, and why:
//! - InitProducerId needing a new producer id returns [`Reply::NeedProducerId`]: ids come from an
//!   asynchronous metadata-log call, so the shard takes one and calls again;
//! - a failed write leaves memory as it was, including a fencing abort's bumped epoch (Kafka
//!   keeps the bumped epoch in memory and flags `hasFailedEpochFence`); the retry bumps to the
//!   same epoch, so the epochs handed out are the same; and the entry created by a first
//!   InitProducerId whose write failed is dropped (Kafka keeps it at epoch -1);
//! - an exhausted epoch with a mismatched expected epoch answers as any mismatch does
//!   (PRODUCER_FENCED, or the retry answer) where Kafka throws;
//! - loaded `Empty` and `Complete*` records lose any partitions they name (Kafka carries them
//!   into the next transaction, but never writes such records), and records with a negative
//!   producer id or epoch, or in `PrepareEpochFence`, are skipped as unreadable; `Dead` reads
//!   as a tombstone;
//! - timeouts and expiry run at their exact deadlines, not on Kafka's cleanup intervals.

use kafka_protocol::messages::ApiKey;
use keel_vocab::error::ResponseError;
use keel_vocab::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::runtime::TimerIndex;

use super::transaction_log::{
    self, TransactionLogValue, TxnLogRecord, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
    TRANSACTIONAL_ID_BYTES_MAX,
};
use keel_vocab::TopicPartition;

pub use super::transaction_metadata::{Markers, TxnConfig};
use super::transaction_metadata::{Origin, Pending, TransactionMetadata};
pub use super::transaction_state::TxnState;

/// Kafka error codes this module answers with (see `kafka_protocol::ResponseError`; a test
/// checks the numbers).
const COORDINATOR_LOAD_IN_PROGRESS: ErrorCode =
    ErrorCode::of(ResponseError::CoordinatorLoadInProgress);
const INVALID_REQUEST: ErrorCode = ErrorCode::of(ResponseError::InvalidRequest);
const INVALID_PRODUCER_EPOCH: ErrorCode = ErrorCode::of(ResponseError::InvalidProducerEpoch);
const INVALID_TXN_STATE: ErrorCode = ErrorCode::of(ResponseError::InvalidTxnState);
const INVALID_PRODUCER_ID_MAPPING: ErrorCode =
    ErrorCode::of(ResponseError::InvalidProducerIdMapping);
const INVALID_TRANSACTION_TIMEOUT: ErrorCode =
    ErrorCode::of(ResponseError::InvalidTransactionTimeout);
const CONCURRENT_TRANSACTIONS: ErrorCode = ErrorCode::of(ResponseError::ConcurrentTransactions);
const PRODUCER_FENCED: ErrorCode = ErrorCode::of(ResponseError::ProducerFenced);
const TRANSACTIONAL_ID_NOT_FOUND: ErrorCode = ErrorCode::of(ResponseError::TransactionalIdNotFound);

/// Epochs from here on are exhausted (Kafka's `Short.MaxValue - 1`): InitProducerId moves to a
/// new producer id instead, so a fencing abort can always bump the epoch once more.
pub const PRODUCER_EPOCH_EXHAUSTED: i16 = i16::MAX - 1;
/// How long a failed write the coordinator started on its own waits before `tick` retries it.
pub const WRITE_RETRY_BACKOFF_MS: i64 = 1_000;

/// The API keys whose old versions answer INVALID_PRODUCER_EPOCH for PRODUCER_FENCED.
const INIT_PRODUCER_ID_KEY: i16 = ApiKey::InitProducerId as i16;
const ADD_PARTITIONS_TO_TXN_KEY: i16 = ApiKey::AddPartitionsToTxn as i16;
const ADD_OFFSETS_TO_TXN_KEY: i16 = ApiKey::AddOffsetsToTxn as i16;
const END_TXN_KEY: i16 = ApiKey::EndTxn as i16;

/// Whether `epoch` is exhausted: InitProducerId moves the id to a new producer id.
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= PRODUCER_EPOCH_EXHAUSTED
}

/// The error code to answer `api_key` at `version` with: clients from before KIP-588 know
/// INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED (InitProducerId before v4, AddPartitionsToTxn,
/// AddOffsetsToTxn and EndTxn before v2), as Kafka's `KafkaApis` maps it.
pub fn producer_fenced_compat(api_key: i16, version: i16, error: ErrorCode) -> ErrorCode {
    let first_version_fenced = match api_key {
        INIT_PRODUCER_ID_KEY => 4,
        ADD_PARTITIONS_TO_TXN_KEY | ADD_OFFSETS_TO_TXN_KEY | END_TXN_KEY => 2,
        _ => return error,
    };
    if error == PRODUCER_FENCED && version < first_version_fenced {
        INVALID_PRODUCER_EPOCH
    } else {
        error
    }
}

/// A producer id and epoch, as InitProducerId v3+ sends the ones it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// The answer to InitProducerId.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitProducerIdResult {
    pub error: ErrorCode,
    /// -1 on error.
    pub producer_id: i64,
    /// -1 on error.
    pub producer_epoch: i16,
}

impl InitProducerIdResult {
    fn error(error: ErrorCode) -> InitProducerIdResult {
        InitProducerIdResult {
            error,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
        }
    }
}

/// A record to append to the partition's log. Once it is committed or has failed, the shard
/// calls [`TransactionCoordinator::write_completed`] with `transactional_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub transactional_id: String,
    pub key: Bytes,
    /// `None`: a tombstone (the id expired).
    pub value: Option<Bytes>,
}

/// What the coordinator asks the shard to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnAction {
    Write(Write),
    WriteMarkers(Markers),
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply<T> {
    /// Answered now; nothing is written.
    Now(T),
    /// Append the write; the answer comes out of `write_completed` for this id.
    AfterWrite(Write),
    /// InitProducerId only: take a new producer id and call again with it.
    NeedProducerId,
}

/// The answer to the request parked on a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    InitProducerId(InitProducerIdResult),
    /// AddPartitionsToTxn, AddOffsetsToTxn, EndTxn.
    Error(ErrorCode),
}

/// What a completed write yields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The answer of the request that caused the write; `None` for the coordinator's own
    /// writes (timeouts, expiry, completions).
    pub answer: Option<Answer>,
    pub actions: Vec<TxnAction>,
}

/// DescribeTransactions' view of one id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnDescription {
    pub state: TxnState,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    /// -1 when no transaction is open.
    pub transaction_start_time_ms: i64,
    /// (topic, partitions), by topic.
    pub topics: Vec<(String, Vec<i32>)>,
}

/// ListTransactions' view of one id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnListing {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: TxnState,
}

/// The transaction coordinator of one `__transaction_state` partition.
#[derive(Debug)]
pub struct TransactionCoordinator {
    partition: i32,
    /// The partition's leader epoch when this coordinator loaded it: stamped on markers, so
    /// partition leaders refuse a deposed coordinator's.
    coordinator_epoch: i32,
    config: TxnConfig,
    txns: BTreeMap<String, TransactionMetadata>,
    /// The timer index: (deadline, id) for every id with a deadline.
    deadlines: TimerIndex,
    /// The latest time seen.
    now_ms: i64,
    loaded: bool,
    /// Records skipped at load because they could not be read.
    unreadable_records: u64,
}

impl TransactionCoordinator {
    /// A coordinator for `partition` about to replay its log.
    pub fn new(
        partition: i32,
        coordinator_epoch: i32,
        config: TxnConfig,
    ) -> TransactionCoordinator {
        TransactionCoordinator {
            partition,
            coordinator_epoch,
            config,
            txns: BTreeMap::new(),
            deadlines: TimerIndex::default(),
            now_ms: i64::MIN,
            loaded: false,
            unreadable_records: 0,
        }
    }

    /// A coordinator loaded from `records` (each record's key and value, in log order), and the
    /// markers owed by transactions found prepared.
    pub fn load<K, V>(
        partition: i32,
        coordinator_epoch: i32,
        config: TxnConfig,
        records: impl IntoIterator<Item = (Option<K>, Option<V>)>,
        now_ms: i64,
    ) -> (TransactionCoordinator, Vec<TxnAction>)
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let mut c = TransactionCoordinator::new(partition, coordinator_epoch, config);
        for (key, value) in records {
            c.replay(
                key.as_ref().map(<K as AsRef<[u8]>>::as_ref),
                value.as_ref().map(<V as AsRef<[u8]>>::as_ref),
            );
        }
        let actions = c.finish_load(now_ms);
        (c, actions)
    }

    /// Applies one record of the partition's log, in log order, while loading.
    pub fn replay(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        debug_assert!(!self.loaded, "replay after the load");
        match transaction_log::decode_record(key, value) {
            TxnLogRecord::Value {
                transactional_id,
                mut value,
            } => {
                let readable = value.producer_id >= 0
                    && value.producer_epoch >= 0
                    && value.state != TxnState::PrepareEpochFence;
                if !readable {
                    self.unreadable_records += 1;
                } else if value.state == TxnState::Dead {
                    self.txns.remove(&transactional_id);
                } else {
                    if value.state.expiration_allowed() {
                        value.partitions.clear();
                    }
                    self.txns
                        .insert(transactional_id, TransactionMetadata::new(value));
                }
            }
            TxnLogRecord::Tombstone { transactional_id } => {
                self.txns.remove(&transactional_id);
            }
            TxnLogRecord::Unreadable => self.unreadable_records += 1,
        }
    }

    /// Ends the load: from here on requests are served. Returns the markers owed by every
    /// transaction found in `PrepareCommit` or `PrepareAbort`.
    pub fn finish_load(&mut self, now_ms: i64) -> Vec<TxnAction> {
        self.advance(now_ms);
        self.loaded = true;
        let ids: Vec<String> = self.txns.keys().cloned().collect();
        let mut actions = Vec::new();
        for id in ids {
            self.reschedule(&id);
            let meta = &self.txns[&id];
            if meta.state().is_prepare() {
                let markers = meta.markers(&id, self.coordinator_epoch);
                actions.push(TxnAction::WriteMarkers(markers));
            }
        }
        self.debug_check();
        actions
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// Records the load skipped because they could not be read (the loader logs them).
    pub fn unreadable_records(&self) -> u64 {
        self.unreadable_records
    }

    pub fn get(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.txns.get(transactional_id)
    }

    pub fn len(&self) -> usize {
        self.txns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }

    /// InitProducerId for a transactional id: a producer id and a bumped epoch. `expected` is
    /// the producer id and epoch the producer has (v3+; `None` when it sends -1/-1). When a new
    /// producer id is needed (an id seen for the first time, or an exhausted epoch) and
    /// `new_producer_id` is `None`, answers [`Reply::NeedProducerId`]; a new id passed and not
    /// needed is left unused.
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        now_ms: i64,
        new_producer_id: Option<i64>,
    ) -> Reply<InitProducerIdResult> {
        let now_ms = self.advance(now_ms);
        let reply = self.init_producer_id_inner(
            transactional_id,
            transaction_timeout_ms,
            expected,
            now_ms,
            new_producer_id,
        );
        self.debug_check();
        match reply {
            Ok(reply) => reply,
            Err(error) => Reply::Now(InitProducerIdResult::error(error)),
        }
    }

    fn init_producer_id_inner(
        &mut self,
        id: &str,
        transaction_timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        now_ms: i64,
        mut new_producer_id: Option<i64>,
    ) -> Result<Reply<InitProducerIdResult>, ErrorCode> {
        self.check_request(id)?;
        if transaction_timeout_ms <= 0
            || transaction_timeout_ms > self.config.transaction_timeout_ms_max
        {
            return Err(INVALID_TRANSACTION_TIMEOUT);
        }
        if !self.txns.contains_key(id) {
            let Some(producer_id) = new_producer_id.take().filter(|&p| p >= 0) else {
                return Ok(Reply::NeedProducerId);
            };
            // As Kafka: the id exists from here at epoch -1, and its first write bumps it to 0.
            let created = TransactionLogValue {
                producer_id,
                previous_producer_id: NO_PRODUCER_ID,
                next_producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
                next_producer_epoch: NO_PRODUCER_EPOCH,
                transaction_timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                last_update_timestamp_ms: now_ms,
                start_timestamp_ms: -1,
                client_transaction_version: 0,
            };
            self.txns
                .insert(id.to_owned(), TransactionMetadata::new(created));
        }
        let meta = &self.txns[id];
        let v = &meta.committed;
        if meta.pending.is_some() {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        // Kafka's `isValidProducerId`: a just-created id takes any (a producer recovering from
        // UNKNOWN_PRODUCER_ID); else the current producer id, or the previous one with an
        // exhausted epoch (a retry of the rotation that answered it).
        if let Some(e) = expected {
            let valid = v.producer_epoch == NO_PRODUCER_EPOCH
                || e.producer_id == v.producer_id
                || (e.producer_id == v.previous_producer_id
                    && is_epoch_exhausted(e.producer_epoch));
            if !valid {
                return Err(PRODUCER_FENCED);
            }
        }
        let (target, last_producer_epoch, origin) = match v.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(CONCURRENT_TRANSACTIONS)
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let rotate = is_epoch_exhausted(v.producer_epoch)
                    && expected.is_none_or(|e| e.producer_epoch == v.producer_epoch);
                let (producer_id, producer_epoch, last_epoch) = if rotate {
                    let Some(producer_id) = new_producer_id.filter(|&p| p >= 0) else {
                        return Ok(Reply::NeedProducerId);
                    };
                    let last_epoch = match expected {
                        Some(_) => v.producer_epoch,
                        None => NO_PRODUCER_EPOCH,
                    };
                    (producer_id, 0, last_epoch)
                } else {
                    let (epoch, last_epoch) = init_epochs(
                        v.producer_epoch,
                        meta.last_producer_epoch,
                        expected.map(|e| e.producer_epoch),
                    )?;
                    (v.producer_id, epoch, last_epoch)
                };
                let target = TransactionLogValue {
                    producer_id,
                    previous_producer_id: v.producer_id,
                    producer_epoch,
                    transaction_timeout_ms,
                    state: TxnState::Empty,
                    partitions: BTreeSet::new(),
                    last_update_timestamp_ms: now_ms,
                    start_timestamp_ms: -1,
                    ..v.clone()
                };
                (target, last_epoch, Origin::InitProducerId)
            }
            // Abort the open transaction first, fencing its producer; the producer is told to
            // retry, and its retry bumps the epoch once more (or rotates the producer id).
            TxnState::Ongoing => (fence(v, now_ms), NO_PRODUCER_EPOCH, Origin::InitFence),
            TxnState::Dead | TxnState::PrepareEpochFence => return Err(INVALID_TXN_STATE),
        };
        Ok(Reply::AfterWrite(self.begin_write(
            id,
            Some((target, last_producer_epoch)),
            origin,
        )))
    }

    /// AddPartitionsToTxn (v0-3, and v4 from a producer): adds `partitions` to the producer's
    /// transaction, opening one if none is.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        now_ms: i64,
    ) -> Reply<ErrorCode> {
        let now_ms = self.advance(now_ms);
        let reply = self.add_partitions_inner(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            now_ms,
        );
        self.debug_check();
        reply.unwrap_or_else(Reply::Now)
    }

    fn add_partitions_inner(
        &mut self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        now_ms: i64,
    ) -> Result<Reply<ErrorCode>, ErrorCode> {
        let meta = self.producer_metadata(id, producer_id, producer_epoch)?;
        if meta.pending.is_some() {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        let v = &meta.committed;
        let start_timestamp_ms = match v.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(CONCURRENT_TRANSACTIONS)
            }
            TxnState::Ongoing if partitions.iter().all(|p| v.partitions.contains(p)) => {
                return Ok(Reply::Now(ErrorCode::NONE));
            }
            TxnState::Ongoing => v.start_timestamp_ms,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => now_ms,
            TxnState::Dead | TxnState::PrepareEpochFence => return Err(INVALID_TXN_STATE),
        };
        let mut all = v.partitions.clone();
        all.extend(partitions.iter().cloned());
        let target = TransactionLogValue {
            previous_producer_id: v.producer_id,
            state: TxnState::Ongoing,
            partitions: all,
            last_update_timestamp_ms: now_ms,
            start_timestamp_ms,
            ..v.clone()
        };
        let last_producer_epoch = meta.last_producer_epoch;
        Ok(Reply::AfterWrite(self.begin_write(
            id,
            Some((target, last_producer_epoch)),
            Origin::AddPartitions,
        )))
    }

    /// AddOffsetsToTxn: adds the group's `__consumer_offsets` partition (the shard computes it,
    /// `group::partition_for`) to the transaction, as Kafka does.
    pub fn add_offsets(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets_partition: i32,
        now_ms: i64,
    ) -> Reply<ErrorCode> {
        let partition = TopicPartition::new(crate::OFFSETS_TOPIC, offsets_partition);
        self.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            &[partition],
            now_ms,
        )
    }

    /// AddPartitionsToTxn v4 with `verify_only` (a partition leader checking a transactional
    /// produce, KIP-890): ErrorCode::NONE for each partition in the transaction, INVALID_TXN_STATE for the
    /// rest; nothing changes.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, ErrorCode)>, ErrorCode> {
        let meta = self.producer_metadata(transactional_id, producer_id, producer_epoch)?;
        if meta.state().is_prepare() {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        Ok(partitions
            .iter()
            .map(|p| {
                let error = if meta.partitions().contains(p) {
                    ErrorCode::NONE
                } else {
                    INVALID_TXN_STATE
                };
                (p.clone(), error)
            })
            .collect())
    }

    /// EndTxn: commits or aborts the producer's transaction. Once the decision is written the
    /// answer is ErrorCode::NONE and the markers go out; the transaction completes when they are written.
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Reply<ErrorCode> {
        let now_ms = self.advance(now_ms);
        let reply = self.end_txn_inner(
            transactional_id,
            producer_id,
            producer_epoch,
            commit,
            now_ms,
        );
        self.debug_check();
        reply.unwrap_or_else(Reply::Now)
    }

    fn end_txn_inner(
        &mut self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<Reply<ErrorCode>, ErrorCode> {
        let meta = self.producer_metadata(id, producer_id, producer_epoch)?;
        if meta.pending.is_some() {
            return Err(CONCURRENT_TRANSACTIONS);
        }
        let v = &meta.committed;
        let same = |state_commits: bool, answer: ErrorCode| {
            if state_commits == commit {
                Err(answer)
            } else {
                Err(INVALID_TXN_STATE)
            }
        };
        match v.state {
            TxnState::Ongoing => {}
            TxnState::CompleteCommit => return same(true, ErrorCode::NONE),
            TxnState::CompleteAbort => return same(false, ErrorCode::NONE),
            TxnState::PrepareCommit => return same(true, CONCURRENT_TRANSACTIONS),
            TxnState::PrepareAbort => return same(false, CONCURRENT_TRANSACTIONS),
            TxnState::Empty | TxnState::Dead | TxnState::PrepareEpochFence => {
                return Err(INVALID_TXN_STATE)
            }
        }
        let target = TransactionLogValue {
            previous_producer_id: v.producer_id,
            state: if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            },
            last_update_timestamp_ms: now_ms,
            ..v.clone()
        };
        let last_producer_epoch = meta.last_producer_epoch;
        Ok(Reply::AfterWrite(self.begin_write(
            id,
            Some((target, last_producer_epoch)),
            Origin::EndTxn,
        )))
    }

    /// Every marker of the id's prepared transaction is written: returns the write that
    /// completes it (`CompleteCommit` / `CompleteAbort`), or `None` when the id owes no
    /// markers (a repeated or stale call).
    pub fn markers_written(&mut self, transactional_id: &str, now_ms: i64) -> Option<Write> {
        let now_ms = self.advance(now_ms);
        let meta = self.txns.get_mut(transactional_id)?;
        if !meta.state().is_prepare() || meta.pending.is_some() || meta.markers_written {
            return None;
        }
        meta.markers_written = true;
        let write = self.begin_complete(transactional_id, now_ms);
        self.debug_check();
        Some(write)
    }

    /// The write started for `transactional_id` is committed (`Ok`) or failed (`Err` with the
    /// Kafka error code to answer, mapped from the storage error as Kafka's
    /// `appendTransactionToLog` does: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...). A
    /// committed write takes effect; a failed one leaves the id as it was. Returns the answer
    /// of the request parked on the write, if any, and what to do next.
    pub fn write_completed(
        &mut self,
        transactional_id: &str,
        result: Result<(), ErrorCode>,
        now_ms: i64,
    ) -> Completion {
        let now_ms = self.advance(now_ms);
        let Some(meta) = self.txns.get_mut(transactional_id) else {
            return Completion::default();
        };
        let Some(pending) = meta.pending.take() else {
            return Completion::default();
        };
        let origin = pending.origin;
        let mut completion = Completion::default();
        match result {
            Ok(()) => {
                let Some((value, last_producer_epoch)) = pending.target else {
                    // The tombstone is committed: the id is gone.
                    self.unschedule(transactional_id);
                    self.txns.remove(transactional_id);
                    self.debug_check();
                    return completion;
                };
                meta.committed = value;
                meta.last_producer_epoch = last_producer_epoch;
                meta.markers_written = false;
                meta.retry_not_before_ms = i64::MIN;
                let v = &meta.committed;
                completion.answer = match origin {
                    Origin::InitProducerId => Some(Answer::InitProducerId(InitProducerIdResult {
                        error: ErrorCode::NONE,
                        producer_id: v.producer_id,
                        producer_epoch: v.producer_epoch,
                    })),
                    Origin::InitFence => Some(Answer::InitProducerId(InitProducerIdResult::error(
                        CONCURRENT_TRANSACTIONS,
                    ))),
                    Origin::AddPartitions | Origin::EndTxn => Some(Answer::Error(ErrorCode::NONE)),
                    Origin::Timeout | Origin::Complete | Origin::Expire => None,
                };
                if matches!(origin, Origin::InitFence | Origin::EndTxn | Origin::Timeout) {
                    let markers = meta.markers(transactional_id, self.coordinator_epoch);
                    completion.actions.push(TxnAction::WriteMarkers(markers));
                }
            }
            Err(error) => {
                if meta.committed.producer_epoch == NO_PRODUCER_EPOCH {
                    // The first write of a new id: nothing of it is in the log.
                    self.unschedule(transactional_id);
                    self.txns.remove(transactional_id);
                    self.debug_check();
                    return Completion {
                        answer: Some(Answer::InitProducerId(InitProducerIdResult::error(error))),
                        actions: Vec::new(),
                    };
                }
                if origin.is_own() {
                    meta.retry_not_before_ms = now_ms.saturating_add(WRITE_RETRY_BACKOFF_MS);
                }
                completion.answer = match origin {
                    Origin::InitProducerId | Origin::InitFence => {
                        Some(Answer::InitProducerId(InitProducerIdResult::error(error)))
                    }
                    Origin::AddPartitions | Origin::EndTxn => Some(Answer::Error(error)),
                    Origin::Timeout | Origin::Complete | Origin::Expire => None,
                };
            }
        }
        self.reschedule(transactional_id);
        self.debug_check();
        completion
    }

    /// Acts on every deadline due at `now_ms`: aborts the transactions open longer than their
    /// timeout (fencing their producers with epoch + 1), removes ids idle for
    /// `transactional.id.expiration.ms` (tombstones), and retries failed completions. Returns
    /// the writes to append.
    pub fn tick(&mut self, now_ms: i64) -> Vec<TxnAction> {
        let now_ms = self.advance(now_ms);
        if !self.loaded {
            return Vec::new();
        }
        let due = self.deadlines.take_due(now_ms);
        let mut actions = Vec::new();
        for (_, id) in due {
            let meta = self.txns.get_mut(&id).expect("scheduled ids exist");
            meta.scheduled_ms = None;
            let write = match meta.state() {
                TxnState::Ongoing => {
                    let target = fence(&meta.committed, now_ms);
                    let target = Some((target, NO_PRODUCER_EPOCH));
                    Some(self.begin_write(&id, target, Origin::Timeout))
                }
                TxnState::PrepareCommit | TxnState::PrepareAbort if meta.markers_written => {
                    Some(self.begin_complete(&id, now_ms))
                }
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                    Some(self.begin_write(&id, None, Origin::Expire))
                }
                _ => None,
            };
            actions.extend(write.map(TxnAction::Write));
            self.reschedule(&id);
        }
        self.debug_check();
        actions
    }

    /// When `tick` next has something to do.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.deadlines.next_deadline_ms()
    }

    /// DescribeTransactions for one id: its current (committed) state.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnDescription, ErrorCode> {
        self.check_request(transactional_id)?;
        let meta = self
            .txns
            .get(transactional_id)
            .ok_or(TRANSACTIONAL_ID_NOT_FOUND)?;
        let v = &meta.committed;
        Ok(TxnDescription {
            state: v.state,
            producer_id: v.producer_id,
            producer_epoch: v.producer_epoch,
            transaction_timeout_ms: v.transaction_timeout_ms,
            transaction_start_time_ms: v.start_timestamp_ms,
            topics: transaction_log::group_by_topic(&v.partitions)
                .into_iter()
                .map(|(topic, partitions)| (topic.to_owned(), partitions))
                .collect(),
        })
    }

    /// ListTransactions: the ids in one of `states` (all when empty) with one of
    /// `producer_ids` (all when empty), by id.
    pub fn list(
        &self,
        states: &[TxnState],
        producer_ids: &[i64],
    ) -> Result<Vec<TxnListing>, ErrorCode> {
        if !self.loaded {
            return Err(COORDINATOR_LOAD_IN_PROGRESS);
        }
        Ok(self
            .txns
            .iter()
            .filter(|(_, m)| m.state() != TxnState::Dead)
            .filter(|(_, m)| states.is_empty() || states.contains(&m.state()))
            .filter(|(_, m)| producer_ids.is_empty() || producer_ids.contains(&m.producer_id()))
            .map(|(id, m)| TxnListing {
                transactional_id: id.clone(),
                producer_id: m.producer_id(),
                state: m.state(),
            })
            .collect())
    }

    /// The time of this call: never earlier than the last one seen.
    fn advance(&mut self, now_ms: i64) -> i64 {
        self.now_ms = self.now_ms.max(now_ms);
        self.now_ms
    }

    /// The checks every request makes first.
    fn check_request(&self, transactional_id: &str) -> Result<(), ErrorCode> {
        if !self.loaded {
            return Err(COORDINATOR_LOAD_IN_PROGRESS);
        }
        if transactional_id.is_empty() || transactional_id.len() > TRANSACTIONAL_ID_BYTES_MAX {
            return Err(INVALID_REQUEST);
        }
        Ok(())
    }

    /// The id's metadata, if the producer is its current one (Kafka's checks of
    /// AddPartitionsToTxn and EndTxn).
    fn producer_metadata(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&TransactionMetadata, ErrorCode> {
        self.check_request(id)?;
        let meta = self.txns.get(id).ok_or(INVALID_PRODUCER_ID_MAPPING)?;
        if meta.producer_id() != producer_id {
            return Err(INVALID_PRODUCER_ID_MAPPING);
        }
        if meta.producer_epoch() != producer_epoch {
            return Err(PRODUCER_FENCED);
        }
        Ok(meta)
    }

    /// Starts the write that completes the id's prepared transaction.
    fn begin_complete(&mut self, id: &str, now_ms: i64) -> Write {
        let meta = &self.txns[id];
        let v = &meta.committed;
        let target = TransactionLogValue {
            previous_producer_id: v.producer_id,
            state: if v.state == TxnState::PrepareCommit {
                TxnState::CompleteCommit
            } else {
                TxnState::CompleteAbort
            },
            partitions: BTreeSet::new(),
            last_update_timestamp_ms: now_ms,
            ..v.clone()
        };
        let last_producer_epoch = meta.last_producer_epoch;
        self.begin_write(id, Some((target, last_producer_epoch)), Origin::Complete)
    }

    /// Marks the id's write in flight (Kafka's `prepareTransitionTo`) and encodes its record.
    fn begin_write(
        &mut self,
        id: &str,
        target: Option<(TransactionLogValue, i16)>,
        origin: Origin,
    ) -> Write {
        self.unschedule(id);
        let meta = self.txns.get_mut(id).expect("writes are for known ids");
        assert!(meta.pending.is_none(), "{id}: a write is already in flight");
        let to = target.as_ref().map_or(TxnState::Dead, |t| t.0.state);
        assert!(
            to.valid_previous().contains(&meta.state()),
            "{id}: {:?} -> {to:?}",
            meta.state()
        );
        if let Some((value, _)) = &target {
            assert!(
                value.producer_id >= 0 && value.producer_epoch >= 0,
                "{id}: writing producer {} epoch {}",
                value.producer_id,
                value.producer_epoch
            );
        }
        let write = Write {
            transactional_id: id.to_owned(),
            key: transaction_log::encode_key(id),
            value: target
                .as_ref()
                .map(|(value, _)| transaction_log::encode_value(value)),
        };
        meta.pending = Some(Pending { target, origin });
        write
    }

    /// Puts the id under its current deadline in the timer index (or takes it out).
    fn reschedule(&mut self, id: &str) {
        self.unschedule(id);
        let config = &self.config;
        let Some(meta) = self.txns.get_mut(id) else {
            return;
        };
        if let Some(deadline_ms) = meta.deadline_ms(config) {
            meta.scheduled_ms = Some(deadline_ms);
            self.deadlines.insert(deadline_ms, id);
        }
    }

    fn unschedule(&mut self, id: &str) {
        if let Some(meta) = self.txns.get_mut(id) {
            if let Some(deadline_ms) = meta.scheduled_ms.take() {
                self.deadlines.remove(deadline_ms, id);
            }
        }
    }

    fn debug_check(&self) {
        debug_assert_eq!(
            self.check_invariants(),
            Ok(()),
            "txn partition {}",
            self.partition
        );
    }

    /// The module's invariants; `Err` names the first one broken.
    fn check_invariants(&self) -> Result<(), String> {
        let mut scheduled = 0;
        for (id, meta) in &self.txns {
            let v = &meta.committed;
            if matches!(v.state, TxnState::Dead | TxnState::PrepareEpochFence) {
                return Err(format!("{id} is {:?}", v.state));
            }
            if v.state.expiration_allowed() && !v.partitions.is_empty() {
                return Err(format!("{id} has partitions in {:?}", v.state));
            }
            let first_write = meta
                .pending
                .as_ref()
                .is_some_and(|p| p.origin == Origin::InitProducerId);
            if v.producer_id < 0 || (v.producer_epoch < 0 && !first_write) {
                return Err(format!(
                    "{id}: producer {} epoch {}",
                    v.producer_id, v.producer_epoch
                ));
            }
            if meta.markers_written && !v.state.is_prepare() {
                return Err(format!("{id}: markers written in {:?}", v.state));
            }
            if let Some(to) = meta.pending_state() {
                if !to.valid_previous().contains(&v.state) {
                    return Err(format!("{id}: pending {:?} -> {to:?}", v.state));
                }
            }
            let want = if self.loaded {
                meta.deadline_ms(&self.config)
            } else {
                None
            };
            if meta.scheduled_ms != want {
                return Err(format!(
                    "{id}: scheduled at {:?}, due at {want:?}",
                    meta.scheduled_ms
                ));
            }
            if let Some(deadline_ms) = meta.scheduled_ms {
                scheduled += 1;
                if !self.deadlines.contains(deadline_ms, id) {
                    return Err(format!("{id} is not in the timer index"));
                }
            }
        }
        if scheduled != self.deadlines.len() {
            return Err(format!(
                "{} timer entries for {scheduled} scheduled ids",
                self.deadlines.len()
            ));
        }
        Ok(())
    }
}

/// The epoch and last epoch InitProducerId moves to (Kafka's `prepareIncrementProducerEpoch`),
/// or PRODUCER_FENCED. The epoch is bumped unless this is a retry of the last bump.
fn init_epochs(
    epoch: i16,
    last_epoch: i16,
    expected_epoch: Option<i16>,
) -> Result<(i16, i16), ErrorCode> {
    let bumped = || epoch.checked_add(1).ok_or(PRODUCER_FENCED);
    match expected_epoch {
        // A new producer (epoch -1 becomes 0), or one that fences whoever had the id.
        None => Ok((bumped()?, NO_PRODUCER_EPOCH)),
        // The producer goes on after an error, and nobody initialized the id since.
        Some(e) if epoch == NO_PRODUCER_EPOCH || e == epoch => Ok((bumped()?, epoch)),
        // A retry of the bump that answered it: the same answer.
        Some(e) if e == last_epoch => Ok((epoch, last_epoch)),
        Some(_) => Err(PRODUCER_FENCED),
    }
}

/// The abort of `v`'s open transaction that fences its producer (Kafka's
/// `prepareFenceProducerEpoch` then `prepareAbortOrCommit(PrepareAbort)`): epoch + 1, kept at
/// `i16::MAX` if it is there already.
fn fence(v: &TransactionLogValue, now_ms: i64) -> TransactionLogValue {
    TransactionLogValue {
        previous_producer_id: v.producer_id,
        producer_epoch: v.producer_epoch.saturating_add(1),
        state: TxnState::PrepareAbort,
        last_update_timestamp_ms: now_ms,
        ..v.clone()
    }
}

#[cfg(test)]
#[path = "transaction_coordinator_tests.rs"]
mod tests;
