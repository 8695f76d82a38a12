//! The transaction coordinator on its shard: loads `__transaction_state` partitions into
//! [`TransactionCoordinator`]s, runs requests against them, appends the records they ask for,
//! writes transaction markers, and ticks their timeouts.
//!
//! Each `__transaction_state` partition this broker leads is loaded on the shard that owns its
//! log ([`start_load`]): its records are replayed from the log start, and until that finishes
//! its transactional ids get COORDINATOR_LOAD_IN_PROGRESS. The coordinator epoch is the
//! partition's leader epoch. Handlers on other shards reach the owner with a mesh call
//! ([`on_coordinator`]).
//!
//! A request that changes state waits for its record: [`run`] appends it, waits for the log
//! commit (fsync under flush.policy=group), then lets the state machine apply it and answer.
//! What the state machine asks for next ([`TxnAction`]: its own records, markers) runs in tasks
//! of its own ([`spawn_actions`]), so a client that goes away does not stop a transaction half
//! way.
//!
//! Markers: a commit or abort control batch for the producer goes to every partition of the
//! transaction and is committed there before the transaction is marked complete. A partition
//! this broker leads takes it on the shard that owns it; for a `__consumer_offsets` partition
//! the group coordinator is told too (the transaction's offsets take effect or go). The
//! partitions led by another broker get theirs in one WriteTxnMarkers request per broker
//! ([`super::markers_client`]), all destinations at once. A marker that fails is retried every
//! [`MARKER_RETRY_MS`] while this shard still coordinates the transaction at the same epoch, and
//! the transaction stays `Prepare*` until all are written, so it never completes half-written;
//! TRANSACTION_COORDINATOR_FENCED stops the retries (a newer coordinator owns the transaction
//! and writes them). A partition that no longer exists is skipped, as Kafka does.
//!
//! All state is shard-local (`RefCell`); no borrow is held across an `.await`.

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;
use keel_shard::Event;
use keel_storage::{LeaderEpoch, Offset, StorageError};
use tracing::{debug, error, info, warn};

use super::markers_client::Marker;
use super::shard_state::TxnPartition;
pub use super::shard_state::TxnShard;
use crate::controller::{self, OpError};
use crate::coordination::coordinators;
use crate::group;
use crate::shard::{BrokerShard, Partition};
use keel_coordinator::runtime::{LoadState, PartitionLoad};
use keel_coordinator::txn::transaction_coordinator::{
    Answer, InitProducerIdResult, Markers, ProducerIdAndEpoch, Reply, TransactionCoordinator,
    TxnAction, TxnConfig, Write,
};
use keel_coordinator::TRANSACTION_STATE_TOPIC;
use keel_vocab::records::end_txn_marker_batch;
use keel_vocab::ErrorCode;
use keel_vocab::TopicPartition;

/// Bytes one log read asks for while a partition loads.
const LOAD_READ_BYTES_MAX: usize = 1 << 20;
/// How long markers that could not be written wait before the next try.
pub const MARKER_RETRY_MS: u64 = 500;
/// The timer wakes at least this often.
const TIMER_IDLE_MS: i64 = 1_000;

/// The coordinator settings from the broker's.
pub fn txn_config(shard: &BrokerShard) -> TxnConfig {
    TxnConfig {
        transaction_timeout_ms_max: shard.config.transaction_max_timeout_ms,
        transactional_id_expiration_ms: shard.config.transactional_id_expiration_ms,
    }
}

/// Creates `__transaction_state` (compacted) if it does not exist yet, with
/// `transaction.state.log.replication.factor` replicas (as many as there are live brokers when
/// fewer) and `transaction.state.log.min.isr` (capped at that).
pub async fn ensure_topic(shard: &Rc<BrokerShard>) -> Result<(), OpError> {
    controller::ensure_internal_topic(
        shard,
        TRANSACTION_STATE_TOPIC,
        shard.config.transaction_state_log_num_partitions,
        shard.config.transaction_state_log_segment_bytes,
        shard.config.transaction_state_log_replication_factor,
        Some(shard.config.transaction_state_log_min_isr),
    )
    .await
}

/// The `__transaction_state` partition of `transactional_id`.
pub fn txn_partition(shard: &BrokerShard, transactional_id: &str) -> i32 {
    coordinators::partition_of(
        shard,
        TRANSACTION_STATE_TOPIC,
        transactional_id,
        shard.config.transaction_state_log_num_partitions,
    )
}

/// The partition and the shard that coordinate `transactional_id` on this broker, or
/// NOT_COORDINATOR (COORDINATOR_NOT_AVAILABLE before the topic exists).
fn locate(shard: &BrokerShard, transactional_id: &str) -> Result<(i32, usize), ErrorCode> {
    coordinators::locate(
        shard,
        TRANSACTION_STATE_TOPIC,
        transactional_id,
        shard.config.transaction_state_log_num_partitions,
        ErrorCode::of(ResponseError::CoordinatorNotAvailable),
    )
}

/// Runs `work` on the shard coordinating `transactional_id`, with its partition.
pub async fn on_coordinator<R, F, Fut>(
    api: ApiKey,
    shard: &Rc<BrokerShard>,
    transactional_id: &str,
    work: F,
) -> Result<R, ErrorCode>
where
    R: Send + 'static,
    F: FnOnce(Rc<BrokerShard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, ErrorCode>> + 'static,
{
    let (p, target) = locate(shard, transactional_id)?;
    coordinators::on_shard(api, shard, target, p, work).await
}

/// Runs `f` on partition `p`'s coordinator if it is loaded and this broker still leads `p`.
fn with_coordinator<R>(
    shard: &BrokerShard,
    p: i32,
    f: impl FnOnce(&mut TransactionCoordinator, i64) -> R,
) -> Result<R, ErrorCode> {
    let leads = shard
        .image()
        .partition(TRANSACTION_STATE_TOPIC, p)
        .is_some_and(|m| m.leader == shard.config.node_id);
    let open = shard
        .partition(TRANSACTION_STATE_TOPIC, p)
        .map(|part| part.topic_id);
    let mut parts = shard.txns.partitions.borrow_mut();
    let Some(tp) = parts.get_mut(&p) else {
        return Err(ErrorCode::of(ResponseError::NotCoordinator));
    };
    let ready = tp.load.ready(open, leads);
    if !ready.is_none() {
        return Err(ready);
    }
    let r = f(&mut tp.coordinator, shard.clock.now_ms());
    if let Some(next) = tp.coordinator.next_deadline_ms() {
        if next <= shard.clock.now_ms() + TIMER_IDLE_MS {
            shard.txns.timer_wake.borrow().fire();
        }
    }
    Ok(r)
}

/// A request's answer: now, or after the write it started.
pub enum Op<T> {
    Now(T),
    After(Write),
}

/// Runs one request against partition `p`'s coordinator: `f` decides, and a decision that
/// needs a record is written and committed before its answer (from `write_completed`).
pub async fn run(
    shard: &Rc<BrokerShard>,
    p: i32,
    f: impl FnOnce(&mut TransactionCoordinator, i64) -> Op<Answer>,
) -> Result<Answer, ErrorCode> {
    let write = match with_coordinator(shard, p, f)? {
        Op::Now(answer) => return Ok(answer),
        Op::After(w) => w,
    };
    let id = write.transactional_id.clone();
    let result = append(shard, p, &write).await;
    let completion = with_coordinator(shard, p, |c, now| c.write_completed(&id, result, now))?;
    spawn_actions(shard, p, completion.actions);
    completion
        .answer
        .ok_or(ErrorCode::of(ResponseError::UnknownServerError))
}

/// InitProducerId for a transactional id: takes a new producer id from the controller when
/// the coordinator asks for one.
pub async fn init_producer_id(
    shard: Rc<BrokerShard>,
    p: i32,
    transactional_id: String,
    timeout_ms: i32,
    expected: Option<ProducerIdAndEpoch>,
) -> Result<InitProducerIdResult, ErrorCode> {
    let mut new_id = None;
    loop {
        let id = transactional_id.clone();
        let mut need_id = false;
        let answer = run(&shard, p, |c, now| {
            match c.init_producer_id(&id, timeout_ms, expected, now, new_id) {
                Reply::Now(r) => Op::Now(Answer::InitProducerId(r)),
                Reply::AfterWrite(w) => Op::After(w),
                Reply::NeedProducerId => {
                    need_id = true;
                    Op::Now(Answer::Error(ErrorCode::NONE))
                }
            }
        })
        .await?;
        if need_id {
            if new_id.is_some() {
                return Err(ErrorCode::of(ResponseError::UnknownServerError));
            }
            let id = controller::call(&shard, controller::allocate_producer_id)
                .await
                .and_then(|r| r)
                .map_err(|e| {
                    warn!(error = %e.message, "no producer id for a transactional producer");
                    e.code
                })?;
            new_id = Some(id);
            continue;
        }
        return match answer {
            Answer::InitProducerId(r) => Ok(r),
            Answer::Error(e) => Err(e),
        };
    }
}

/// An answer that is an error code (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn).
pub fn error_of(answer: Result<Answer, ErrorCode>) -> ErrorCode {
    match answer {
        Ok(Answer::Error(e)) => e,
        Ok(Answer::InitProducerId(r)) => r.error,
        Err(e) => e,
    }
}

/// `Reply<ErrorCode>` as an [`Op`].
pub fn op(reply: Reply<ErrorCode>) -> Op<Answer> {
    match reply {
        Reply::Now(e) => Op::Now(Answer::Error(e)),
        Reply::AfterWrite(w) => Op::After(w),
        Reply::NeedProducerId => Op::Now(Answer::Error(ErrorCode::of(
            ResponseError::UnknownServerError,
        ))),
    }
}

/// Appends one record of the coordinator to partition `p` and waits for its commit.
async fn append(shard: &Rc<BrokerShard>, p: i32, write: &Write) -> Result<(), ErrorCode> {
    let Some(part) = shard
        .partition(TRANSACTION_STATE_TOPIC, p)
        .filter(|part| part.is_leader())
    else {
        return Err(ErrorCode::of(ResponseError::NotCoordinator));
    };
    let now = shard.clock.now_ms();
    let batch = keel_coordinator::group::records::encode_records_batch(
        &[(write.key.clone(), write.value.clone())],
        now,
    );
    let info = part
        .log
        .append(batch, LeaderEpoch(part.leader_epoch.get()), now)
        .map_err(|e| write_code(&e))?;
    let end = Offset(info.last_offset.0 + 1);
    let committed = crate::replication::commit_coordinator(shard, &part, end).await;
    shard.notify_data(&part);
    committed.map_err(|e| {
        error!(partition = p, error = %e, "transaction record not committed");
        crate::replication::coordinator_commit_error(&e, write_code)
    })
}

/// Kafka's mapping of a failed `__transaction_state` write (appendTransactionToLog).
fn write_code(e: &StorageError) -> ErrorCode {
    ErrorCode::of(match e {
        StorageError::MessageTooLarge { .. }
        | StorageError::InvalidRecord(_)
        | StorageError::InvalidRecords { .. } => ResponseError::UnknownServerError,
        _ => ResponseError::NotCoordinator,
    })
}

/// Carries out the coordinator's own work in tasks of their own.
pub fn spawn_actions(shard: &Rc<BrokerShard>, p: i32, actions: Vec<TxnAction>) {
    for action in actions {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            match action {
                TxnAction::Write(w) => {
                    let id = w.transactional_id.clone();
                    let result = append(&shard, p, &w).await;
                    if let Ok(c) =
                        with_coordinator(&shard, p, |c, now| c.write_completed(&id, result, now))
                    {
                        spawn_actions(&shard, p, c.actions);
                    }
                }
                TxnAction::WriteMarkers(m) => write_markers(shard, p, m).await,
            }
        })
        .detach();
    }
}

/// Writes the transaction's markers to every partition, retrying those that fail, then tells
/// the coordinator and writes its completion record.
async fn write_markers(shard: Rc<BrokerShard>, p: i32, m: Markers) {
    let fenced = ErrorCode::of(ResponseError::TransactionCoordinatorFenced);
    let mut left: Vec<TopicPartition> = m.partitions.clone();
    loop {
        let mut failed = Vec::new();
        let mut errors = Vec::new();
        for (tp, result) in write_marker_round(&shard, left, &m).await {
            match result {
                Ok(()) => {}
                Err(e) if e == fenced => {
                    warn!(
                        transactional_id = %m.transactional_id,
                        topic = %tp.topic,
                        partition = tp.partition,
                        coordinator_epoch = m.coordinator_epoch,
                        "transaction coordinator fenced while writing markers; stopping"
                    );
                    return;
                }
                Err(e) => {
                    debug!(topic = %tp.topic, partition = tp.partition, error = %e, "marker not written; retrying");
                    if !errors.contains(&e) {
                        errors.push(e);
                    }
                    failed.push(tp);
                }
            }
        }
        if failed.is_empty() {
            break;
        }
        // Stop if this shard no longer coordinates the partition (a newer coordinator will
        // write the markers after its load).
        if with_coordinator(&shard, p, |c, _| c.coordinator_epoch()).ok()
            != Some(m.coordinator_epoch)
            || shard.shutdown.is_fired()
        {
            return;
        }
        warn!(
            transactional_id = %m.transactional_id,
            partitions = failed.len(),
            ?errors,
            "transaction markers not written yet; retrying"
        );
        glommio::timer::sleep(Duration::from_millis(MARKER_RETRY_MS)).await;
        left = failed;
    }
    let id = m.transactional_id.clone();
    let Ok(Some(write)) = with_coordinator(&shard, p, |c, now| c.markers_written(&id, now)) else {
        return;
    };
    spawn_actions(&shard, p, vec![TxnAction::Write(write)]);
}

type MarkerResults = Vec<(TopicPartition, Result<(), ErrorCode>)>;

/// One try at the markers of `partitions`, all destinations at once: each partition this
/// broker leads on its owner shard, those of each other broker in one request. A partition
/// that no longer exists counts as written.
async fn write_marker_round(
    shard: &Rc<BrokerShard>,
    partitions: Vec<TopicPartition>,
    m: &Markers,
) -> MarkerResults {
    let image = shard.image();
    let marker = Marker {
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        commit: m.commit,
        coordinator_epoch: m.coordinator_epoch,
    };
    let mut remote: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
    let mut writes: Vec<std::pin::Pin<Box<dyn Future<Output = MarkerResults>>>> = Vec::new();
    for tp in partitions {
        match image.partition(&tp.topic, tp.partition) {
            // Deleted since: nothing to mark (Kafka skips it too).
            None => {}
            Some(meta) if meta.leader == shard.config.node_id => {
                let shard = shard.clone();
                writes.push(Box::pin(async move {
                    let r = write_marker(&shard, &tp, marker).await;
                    vec![(tp, r)]
                }));
            }
            Some(meta) => remote.entry(meta.leader).or_default().push(tp),
        }
    }
    for (leader, tps) in remote {
        writes.push(Box::pin(write_remote_markers(
            shard.clone(),
            leader,
            tps,
            marker,
        )));
    }
    crate::coordination::parking::join_all(writes)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The markers of partitions led by broker `leader`, in one WriteTxnMarkers request.
async fn write_remote_markers(
    shard: Rc<BrokerShard>,
    leader: i32,
    tps: Vec<TopicPartition>,
    marker: Marker,
) -> MarkerResults {
    let image = shard.image();
    let Some(broker) = image.brokers.get(&leader) else {
        // Not alive in this broker's view: wait for the partition to move or the broker to
        // come back.
        let e = ErrorCode::of(ResponseError::BrokerNotAvailable);
        return tps.into_iter().map(|tp| (tp, Err(e))).collect();
    };
    let partitions: Vec<(String, i32)> = tps
        .iter()
        .map(|tp| (tp.topic.clone(), tp.partition))
        .collect();
    let answer = shard
        .txns
        .markers
        .write_markers(
            shard.config.node_id,
            (
                broker,
                &shard.config.inter_broker_listener_name,
                &shard.config.inter_broker_security,
            ),
            marker,
            &partitions,
        )
        .await;
    match answer {
        Ok(codes) => tps
            .into_iter()
            .zip(codes)
            .map(|(tp, e)| {
                let e = ErrorCode::from_code(e);
                (tp, if e.is_none() { Ok(()) } else { Err(e) })
            })
            .collect(),
        Err(e) => {
            debug!(broker = leader, partitions = tps.len(), error = %e, "WriteTxnMarkers to another broker failed");
            let e = ErrorCode::from_code(e.code());
            tps.into_iter().map(|tp| (tp, Err(e))).collect()
        }
    }
}

/// One marker for a partition this broker leads: a control batch for the producer, appended
/// and committed on the partition's owner shard.
async fn write_marker(
    shard: &Rc<BrokerShard>,
    tp: &TopicPartition,
    marker: Marker,
) -> Result<(), ErrorCode> {
    let image = shard.image();
    let Some(meta) = image.partition(&tp.topic, tp.partition) else {
        return Ok(());
    };
    if meta.leader != shard.config.node_id {
        return Err(ErrorCode::of(ResponseError::NotLeaderOrFollower));
    }
    let target = meta.shard as usize;
    let (topic, partition) = (tp.topic.clone(), tp.partition);
    let work = move |s: Rc<BrokerShard>| async move {
        append_marker(
            &s,
            &topic,
            partition,
            marker.producer_id,
            marker.producer_epoch,
            marker.commit,
            marker.coordinator_epoch,
        )
        .await
    };
    if target == shard.id {
        return work(shard.clone()).await;
    }
    shard
        .mesh
        .call(target, work)
        .await
        .unwrap_or(Err(ErrorCode::of(ResponseError::CoordinatorNotAvailable)))
}

/// Appends a marker on this shard (the partition's owner) and waits for its commit; in a
/// `__consumer_offsets` partition the producer's transactional offsets then take effect
/// (COMMIT) or go (ABORT).
pub async fn append_marker(
    shard: &Rc<BrokerShard>,
    topic: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Result<(), ErrorCode> {
    let Some(part) = shard
        .partition(topic, partition)
        .filter(|part| part.is_leader())
    else {
        return Err(ErrorCode::of(ResponseError::NotLeaderOrFollower));
    };
    let now = shard.clock.now_ms();
    // Kafka's `EndTransactionMarker` (keel-vocab's codec); the append stamps the leader epoch.
    let marker = end_txn_marker_batch(
        producer_id,
        producer_epoch,
        commit,
        coordinator_epoch,
        now,
        0,
    );
    let batch = marker
        .try_into_mut()
        .unwrap_or_else(|shared| bytes::BytesMut::from(&shared[..]));
    let info = part
        .log
        .append(batch, LeaderEpoch(part.leader_epoch.get()), now)
        .map_err(|e| crate::errors::storage_error(&e))?;
    let end = Offset(info.last_offset.0 + 1);
    let committed = crate::replication::commit_coordinator(shard, &part, end).await;
    shard.notify_data(&part);
    committed.map_err(|e| e.code())?;
    if topic == keel_coordinator::OFFSETS_TOPIC {
        group::transactional_offsets_decided(shard, partition, producer_id, commit);
    }
    Ok(())
}

// ---- loading ---------------------------------------------------------------------------------

/// Starts loading a just-opened `__transaction_state` partition (its leader epoch is the
/// coordinator epoch); starts this shard's timer.
/// This broker stopped leading `part` (a partition of `__transaction_state`): its coordinator
/// is dropped; requests for its transactional ids get NOT_COORDINATOR, and a write or marker
/// round still in flight finds no coordinator to report to.
pub fn unload(shard: &Rc<BrokerShard>, part: &Partition) {
    if shard
        .txns
        .partitions
        .borrow_mut()
        .remove(&part.index)
        .is_some()
    {
        info!(
            shard = shard.id,
            partition = part.index,
            "transaction coordinator partition unloaded: no longer its leader"
        );
    }
}

pub fn start_load(shard: &Rc<BrokerShard>, part: Rc<Partition>) {
    let p = part.index;
    let load_id = shard.txns.next_load_id.get() + 1;
    shard.txns.next_load_id.set(load_id);
    let coordinator_epoch = part.leader_epoch.get();
    shard.txns.partitions.borrow_mut().insert(
        p,
        TxnPartition {
            load: PartitionLoad::new(part.topic_id, load_id),
            coordinator: TransactionCoordinator::new(p, coordinator_epoch, txn_config(shard)),
        },
    );
    let owner = shard.clone();
    glommio::spawn_local(async move {
        let mut coordinator = TransactionCoordinator::new(p, coordinator_epoch, txn_config(&owner));
        // Load what is committed, all of it (see group::start_load).
        if !crate::replication::wait_for_epoch_start(&part).await {
            return;
        }
        let replayed = replay(&part, &mut coordinator).await;
        let actions = {
            let mut parts = owner.txns.partitions.borrow_mut();
            let Some(tp) = parts.get_mut(&p).filter(|tp| tp.load.load_id == load_id) else {
                return;
            };
            match replayed {
                Ok(records) => {
                    let actions = coordinator.finish_load(owner.clock.now_ms());
                    if records > 0 {
                        info!(
                            shard = owner.id,
                            partition = p,
                            records,
                            transactional_ids = coordinator.len(),
                            unreadable = coordinator.unreadable_records(),
                            "transaction coordinator partition loaded"
                        );
                    }
                    tp.coordinator = coordinator;
                    tp.load.state = LoadState::Loaded;
                    actions
                }
                Err(e) => {
                    error!(shard = owner.id, partition = p, error = %e, "loading a transaction coordinator partition failed");
                    tp.load.state = LoadState::Failed;
                    Vec::new()
                }
            }
        };
        spawn_actions(&owner, p, actions);
    })
    .detach();
    start_timer(shard);
}

async fn replay(part: &Partition, c: &mut TransactionCoordinator) -> Result<u64, StorageError> {
    let offsets = part.log.offsets();
    let end = offsets.high_watermark;
    let mut offset = offsets.log_start_offset;
    let mut records = 0u64;
    let mut unreadable_batches = 0u64;
    while offset < end {
        let read = part.log.read(offset, LOAD_READ_BYTES_MAX, end).await?;
        let next = keel_coordinator::group::records::walk_batches(
            &read.records,
            &mut unreadable_batches,
            |k, v| {
                records += 1;
                c.replay(k.as_deref(), v.as_deref());
            },
        );
        match next {
            Some(n) if n > offset.0 => offset = Offset(n),
            _ => break,
        }
        glommio::executor().yield_if_needed().await;
    }
    if unreadable_batches > 0 {
        warn!(
            partition = part.index,
            batches = unreadable_batches,
            "skipped unreadable transaction log batches"
        );
    }
    Ok(records)
}

// ---- the timer -------------------------------------------------------------------------------

fn start_timer(shard: &Rc<BrokerShard>) {
    if shard.txns.timer_started.replace(true) {
        return;
    }
    glommio::spawn_local(timer(shard.clone())).detach();
}

/// Until shutdown: ticks every loaded coordinator of this shard whose deadline is due.
async fn timer(shard: Rc<BrokerShard>) {
    loop {
        let now = shard.clock.now_ms();
        let loaded: Vec<i32> = shard.txns.partitions.borrow().keys().copied().collect();
        let mut next = now + TIMER_IDLE_MS;
        for p in loaded {
            let due = with_coordinator(&shard, p, |c, now| {
                let actions = if c.next_deadline_ms().is_some_and(|d| d <= now) {
                    c.tick(now)
                } else {
                    Vec::new()
                };
                (actions, c.next_deadline_ms())
            });
            if let Ok((actions, deadline)) = due {
                spawn_actions(&shard, p, actions);
                if let Some(d) = deadline {
                    next = next.min(d);
                }
            }
        }
        let wake = Event::new();
        *shard.txns.timer_wake.borrow_mut() = wake.clone();
        let sleep_ms = next
            .saturating_sub(shard.clock.now_ms())
            .clamp(1, TIMER_IDLE_MS);
        let interval = Duration::from_millis(sleep_ms as u64);
        if !shard
            .sleep_or_wake_unless_shutdown(interval, Some(&wake))
            .await
        {
            return;
        }
    }
}

/// DescribeTransactions of one id on its coordinator.
pub async fn describe(
    shard: Rc<BrokerShard>,
    p: i32,
    transactional_id: String,
) -> Result<keel_coordinator::txn::transaction_coordinator::TxnDescription, ErrorCode> {
    with_coordinator(&shard, p, |c, _| c.describe(&transactional_id))?
}

/// ListTransactions on every loaded coordinator of this shard; `duration_ms` >= 0 keeps the
/// transactions open longer than that.
pub fn list_local(
    shard: &BrokerShard,
    states: &[keel_coordinator::txn::transaction_coordinator::TxnState],
    producer_ids: &[i64],
    duration_ms: i64,
) -> (
    ErrorCode,
    Vec<keel_coordinator::txn::transaction_coordinator::TxnListing>,
) {
    let ps: Vec<i32> = shard.txns.partitions.borrow().keys().copied().collect();
    let mut error = ErrorCode::NONE;
    let mut out = Vec::new();
    for p in ps {
        let listed = with_coordinator(shard, p, |c, now| {
            c.list(states, producer_ids).map(|l| {
                l.into_iter()
                    .filter(|t| {
                        duration_ms < 0
                            || c.get(&t.transactional_id).is_some_and(|m| {
                                m.state()
                                == keel_coordinator::txn::transaction_coordinator::TxnState::Ongoing
                                && now - m.start_timestamp_ms() > duration_ms
                            })
                    })
                    .collect::<Vec<_>>()
            })
        });
        match listed {
            Ok(Ok(l)) => out.extend(l),
            Ok(Err(e)) | Err(e) => {
                if e == ErrorCode::of(ResponseError::CoordinatorLoadInProgress) {
                    error = e;
                }
            }
        }
    }
    (error, out)
}
