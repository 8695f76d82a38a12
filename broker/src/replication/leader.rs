//! The leader's side of replication, on the shard that owns the partition: followers' fetches
//! (their progress, divergence, reads up to the log end), the high watermark, the ISR checks
//! that become AlterPartition requests, and acks=all waits.
//!
//! The high watermark is the lowest log end in the maximal ISR (committed ∪ pending), the
//! leader's durable end included, and moves only while that set has at least
//! `min.insync.replicas` members (KIP-966). A fetch is honoured only from an assigned replica
//! with its current broker epoch (checked by the Fetch handler); nothing else moves a
//! follower's progress, so a stranger cannot keep a dead replica in the ISR.

pub mod alter_partition;

use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use keel_storage::{LeaderEpoch, Offset, StorageError};
use keel_vocab::ErrorCode;
use tracing::{debug, info, warn};

use super::read::{failed, FetchPart, PartData, ReplicaFetch};
use super::throttle;
use super::CommitError;
use crate::errors::{code, storage_code, NONE};
use crate::shard::{BrokerShard, Partition};
use keel_storage::replication as rules;
use keel_storage::replication::fetch::{self as glue, FetchAnswer, FetchAsk};
use keel_storage::replication::timers::{self, AcksAll};

/// Serves one follower's fetch of `part` (this broker leads it): checks divergence, records
/// the follower's progress, moves the high watermark, and reads from the fetch offset up to
/// the log end.
pub async fn serve_fetch(
    shard: &Rc<BrokerShard>,
    part: &Rc<Partition>,
    replica: ReplicaFetch,
    fetch: &FetchPart,
) -> PartData {
    if !part
        .replication
        .replicas
        .borrow()
        .contains(&replica.broker_id)
    {
        debug!(topic = %part.topic, partition = part.index, broker = replica.broker_id, "replica fetch from a broker that is not a replica");
        return failed(code(ResponseError::NotLeaderOrFollower));
    }
    let ask = FetchAsk {
        fetch_offset: fetch.fetch_offset,
        last_fetched_epoch: fetch.last_fetched_epoch,
        log_start_offset: fetch.log_start_offset,
    };
    let leading = part.is_leader().then(|| part.leader_epoch.get());
    if let Some(early) = glue::check_fetch(&part.log, leading, &ask) {
        return part_data(early, &part.log.offsets());
    }
    record_progress(shard, part, replica, &ask);
    maybe_advance_high_watermark(shard, part);
    if !throttle::leader_may_serve(shard, part, replica.broker_id) {
        // This shard's share of leader.replication.throttled.rate is spent: nothing this
        // round for a throttled follower outside the ISR.
        return PartData::empty(NONE, &part.log.offsets());
    }
    let max = usize::try_from(fetch.partition_max_bytes.max(0)).unwrap_or(0);
    match glue::read_for_follower(&part.log, &ask, max).await {
        Ok(answer) => {
            if let FetchAnswer::Records { records, .. } = &answer {
                throttle::leader_served(shard, part, replica.broker_id, records.len());
            }
            part_data(answer, &part.log.offsets())
        }
        Err(e) => {
            if !matches!(e, StorageError::OffsetOutOfRange { .. }) {
                warn!(topic = %part.topic, partition = part.index, error = %e, "replica fetch read failed");
            }
            PartData::empty(storage_code(&e), &part.log.offsets())
        }
    }
}

/// The Fetch handler's form of the leader's answer (`offsets`: the partition's now).
fn part_data(answer: FetchAnswer, offsets: &keel_storage::LogOffsets) -> PartData {
    match answer {
        FetchAnswer::Records {
            records,
            high_watermark,
            last_stable_offset,
            log_start_offset,
        } => PartData {
            error: NONE,
            high_watermark,
            last_stable_offset,
            log_start_offset,
            records,
            aborted: None,
            diverging: None,
            preferred_read_replica: -1,
        },
        FetchAnswer::Diverging { epoch, end_offset } => {
            let mut d = PartData::empty(NONE, offsets);
            d.diverging = Some((epoch, end_offset));
            d
        }
        FetchAnswer::OutOfRange { .. } => {
            PartData::empty(code(ResponseError::OffsetOutOfRange), offsets)
        }
        // Not one of the leader's own answers (a follower makes it of an error code).
        FetchAnswer::Refused(_) => {
            PartData::empty(code(ResponseError::UnknownServerError), offsets)
        }
    }
}

/// Kafka's `endOffsetForEpoch`: the latest epoch (on a leader, its current one) ends at the
/// log end; an unknown one is (-1, -1).
pub fn end_offset_for_epoch(part: &Partition, epoch: LeaderEpoch) -> (i32, i64) {
    let leading = part.is_leader().then(|| part.leader_epoch.get());
    rules::end_offset_for_epoch(&part.log, epoch, leading)
}

/// Records a follower's fetch (its log end and log start); starts an ISR expansion when it has
/// caught up.
fn record_progress(
    shard: &Rc<BrokerShard>,
    part: &Rc<Partition>,
    replica: ReplicaFetch,
    ask: &FetchAsk,
) {
    let offsets = part.log.offsets();
    let expand = part.with_assignment(|a| {
        part.replication.local.borrow_mut().record_fetch(
            a,
            replica.broker_id,
            replica.broker_epoch,
            ask,
            offsets.log_end_offset.0,
            offsets.high_watermark.0,
            shard.clock.now_ms(),
        )
    });
    if let Some(isr) = expand {
        propose_isr(shard, part, isr, "expand");
    }
}

/// Moves the high watermark of a replicated partition this broker leads to the lowest log
/// end in the maximal ISR, if the committed ISR is large enough; wakes fetches and acks=all
/// waits when it moved.
pub fn maybe_advance_high_watermark(shard: &Rc<BrokerShard>, part: &Rc<Partition>) {
    // Kafka's Partition.maybeIncrementLeaderHW: nothing moves while the committed ISR is
    // below min.insync.replicas (KIP-966), so a pending expansion cannot let consumers read
    // what only the leader and a joining follower hold (were it never committed and the leader
    // lost, an eligible leader replica without those records could be elected). Above the
    // minimum the high watermark is the lowest log end over the maximal ISR, committed and
    // pending members both (a pending shrink's leaver still counts). Only on a replicated
    // partition whose leadership this broker has taken up.
    let candidate = part.with_assignment(|a| {
        part.replication.local.borrow().high_watermark_candidate(
            a,
            part.min_insync_replicas.get(),
            part.log.durable_end().0,
        )
    });
    let Some(candidate) = candidate else {
        return;
    };
    let before = part.log.offsets().high_watermark;
    let after = part.log.advance_high_watermark(Offset(candidate));
    if after > before {
        part.replication.fire_hw_moved();
        shard.notify_data(part);
    }
}

/// acks=all: waits until the high watermark passes `upto`, leadership is lost, the committed
/// ISR falls below `min.insync.replicas`, or `timeout` passes.
///
/// A committed ISR below the minimum answers NOT_ENOUGH_REPLICAS_AFTER_APPEND at once, passed
/// or not: the record is in the leader's log, but the high watermark does not move while the
/// ISR is that small (KIP-966), so waiting could only end in REQUEST_TIMED_OUT. This is what
/// a client of Kafka before KIP-966 saw when the ISR shrank under its write (Kafka's
/// DelayedProduce); the image that installs the smaller ISR wakes the wait. The decision is
/// storage's `replication::timers::acks_all` (which the fault simulation runs too) on the
/// shard's monotonic clock; this loop only sleeps until the high watermark moves or the
/// deadline it gives.
pub async fn wait_for_high_watermark(
    shard: &BrokerShard,
    part: &Rc<Partition>,
    upto: Offset,
    timeout: Duration,
) -> Result<(), CommitError> {
    let timeout_ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
    let deadline_ms = shard.clock.monotonic_ms().saturating_add(timeout_ms);
    loop {
        // Taken before the checks, so that a move between them and the wait wakes it.
        let event = part.replication.hw_event();
        let now_ms = shard.clock.monotonic_ms();
        let isr = part.replication.isr.borrow().len();
        let min = part.min_insync_replicas.get();
        let hw = part.log.offsets().high_watermark.0;
        match timers::acks_all(part.is_leader(), isr, min, hw, upto.0, now_ms, deadline_ms) {
            AcksAll::Done => return Ok(()),
            AcksAll::NotLeader => return Err(super::not_leader(part)),
            AcksAll::NotEnoughReplicasAfterAppend { isr, min } => {
                return Err(CommitError::Replication(
                    ErrorCode::of(ResponseError::NotEnoughReplicasAfterAppend),
                    format!("the in-sync replica set shrank to {isr}, below min.insync.replicas {min}, after the write"),
                ))
            }
            AcksAll::TimedOut => {
                return Err(CommitError::Replication(
                    ErrorCode::of(ResponseError::RequestTimedOut),
                    format!(
                        "the in-sync replicas did not reach offset {} within {} ms",
                        upto.0,
                        timeout.as_millis()
                    ),
                ))
            }
            AcksAll::Wait { deadline_ms } => {
                let left = u64::try_from(deadline_ms - now_ms).unwrap_or(0);
                event.wait_timeout(Duration::from_millis(left)).await;
            }
        }
    }
}

/// Kafka's `lowWatermarkIfLeader`: the lowest log start offset over the leader and its
/// followers on live brokers (a follower that has not fetched yet counts as 0).
pub fn low_watermark(shard: &BrokerShard, part: &Partition) -> i64 {
    let image = shard.image();
    let mut low = part.log.offsets().log_start_offset.0;
    for (id, p) in part.replication.local.borrow().followers.iter() {
        let live = image.brokers.contains_key(id);
        if live {
            low = low.min(p.log_start_offset.max(0));
        }
    }
    low
}

/// DeleteRecords on a replicated partition: waits (polling, bounded by `wait`) until the low
/// watermark reaches `target`; returns the low watermark then.
pub async fn wait_for_low_watermark(
    shard: &Rc<BrokerShard>,
    part: &Rc<Partition>,
    target: Offset,
    wait: Duration,
) -> i64 {
    let deadline = Instant::now() + wait;
    loop {
        let low = low_watermark(shard, part);
        if low >= target.0 || Instant::now() >= deadline || !part.is_leader() {
            return low;
        }
        // The followers learn the new log start from their next fetch answers.
        shard.notify_data(part);
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
}

/// The leader's periodic ISR check (Kafka's `maybeShrinkIsr`): an ISR member that has not
/// caught up within `replica.lag.time.max.ms` is dropped.
pub async fn check_isr(shard: &Rc<BrokerShard>) {
    let now_ms = shard.clock.now_ms();
    let lag_ms = shard.config.replica_lag_time_max_ms as i64;
    for part in shard.all_partitions() {
        // Only once this broker took up the leadership (`apply_image` gave every follower a
        // full lag window): between installing an image and taking up its roles, a new
        // leader knows no follower yet and would drop them all; not while a change is pending.
        let Some(new_isr) = part.with_assignment(|a| {
            part.replication
                .local
                .borrow()
                .isr_to_shrink(a, now_ms, lag_ms)
        }) else {
            continue;
        };
        let isr = part.replication.isr.borrow().clone();
        info!(topic = %part.topic, partition = part.index, ?isr, ?new_isr, lag_ms, "shrinking the ISR: followers out of sync");
        shard
            .counters
            .isr_shrinks
            .set(shard.counters.isr_shrinks.get() + 1);
        propose_isr(shard, &part, new_isr, "shrink");
    }
}

/// Proposes `new_isr` for `part` through the controller (an item of this shard's next
/// AlterPartition request, see `alter_partition`), marking it pending until an image commits
/// it or the controller refuses.
fn propose_isr(
    shard: &Rc<BrokerShard>,
    part: &Rc<Partition>,
    new_isr: Vec<i32>,
    why: &'static str,
) {
    if why == "expand" {
        shard
            .counters
            .isr_expands
            .set(shard.counters.isr_expands.get() + 1);
        info!(topic = %part.topic, partition = part.index, isr = ?new_isr, "expanding the ISR: a follower caught up");
    }
    let (members, sent) =
        part.with_assignment(|a| part.replication.local.borrow_mut().propose(a, new_isr));
    let change = crate::controller::IsrChange {
        topic_id: part.topic_id,
        partition: part.index,
        leader_epoch: sent.leader_epoch,
        partition_epoch: sent.partition_epoch,
        new_isr: members,
    };
    alter_partition::submit(
        shard,
        alter_partition::AlterPartitionItem {
            part: part.clone(),
            change,
            why,
        },
    );
}

/// `change` as the pending ISR change it was sent as.
fn as_sent(change: &crate::controller::IsrChange) -> rules::PendingIsr {
    rules::PendingIsr {
        isr: change.new_isr.iter().map(|(r, _)| *r).collect(),
        leader_epoch: change.leader_epoch,
        partition_epoch: change.partition_epoch,
    }
}

/// Whether `change` is still the pending ISR change of `part`, led in the epochs it was sent
/// at.
pub(super) fn still_pending(part: &Partition, change: &crate::controller::IsrChange) -> bool {
    let sent = as_sent(change);
    part.with_assignment(|a| part.replication.local.borrow().still_pending(a, &sent))
}

/// One partition's answer to an AlterPartition request, judged by storage's
/// `replication::after_isr_change` (Kafka's `handleAlterPartitionError` and the
/// AlterPartitionManager's retries) through `ReplicaState::isr_change_answered`: the pending
/// change ends only on a refusal that proves it was not committed; a commit at a new
/// partition epoch, or a stale refusal, leaves it to the image that carries the controller's
/// newer state; no answer sends it again. Only while it is still this change: an image may
/// have ended it already and a newer one be pending.
pub fn isr_change_done(
    shard: &Rc<BrokerShard>,
    part: &Rc<Partition>,
    change: &crate::controller::IsrChange,
    why: &'static str,
    answer: rules::IsrChangeAnswer,
    detail: &str,
) {
    match answer {
        rules::IsrChangeAnswer::Committed { .. } => {
            debug!(topic = %part.topic, partition = part.index, why, detail, "ISR change committed");
        }
        rules::IsrChangeAnswer::Refused { .. } | rules::IsrChangeAnswer::NoAnswer => {
            warn!(topic = %part.topic, partition = part.index, why, detail, "ISR change not committed");
            shard
                .counters
                .failed_isr_updates
                .set(shard.counters.failed_isr_updates.get() + 1);
        }
    }
    let sent = as_sent(change);
    let after = part.with_assignment(|a| {
        part.replication
            .local
            .borrow_mut()
            .isr_change_answered(a, &sent, answer)
    });
    if after == rules::PendingIsrChange::Resend {
        alter_partition::resend_later(
            shard,
            alter_partition::AlterPartitionItem {
                part: part.clone(),
                change: change.clone(),
                why,
            },
        );
    }
    maybe_advance_high_watermark(shard, part);
}
