//! Partition replication, Kafka's ISR model on Keel's shards.
//!
//! Followers pull: on each broker, one fetcher task per (local shard, leader broker, leader
//! shard) fetches, in one Fetch v15+ (`fetcher`), every partition that pair shares, appends the
//! leader's batches unchanged and reports what it holds by fetching further. The leader
//! (`leader`) keeps each follower's log end from those fetches, moves the high watermark to
//! the lowest log end in the ISR (its own durable end included) while the ISR has at least
//! `min.insync.replicas` members, and asks the controller to shrink or expand the ISR.
//! Everything of one partition happens on the shard that owns its log, on every broker.
//!
//! Who moves what: the installed metadata image sets the leader, replicas, ISR and epochs
//! ([`apply_image`], after each image is installed); the leader's fetch handler moves its
//! followers' progress and the high watermark; a follower's fetcher moves its log (append,
//! truncation) and its high watermark (the leader's, capped at its own log end).
//!
//! Consumers may read from followers (KIP-392, `selector`): a leader names a replica in the
//! client's rack, a follower in the ISR serves up to its high watermark.
//!
//! A partition with one replica keeps the single-replica path: its high watermark is its
//! durable end, exactly as before replication.

pub mod fetcher;
pub mod leader;
pub mod offline;
pub mod read;
pub mod selector;
pub mod state;
pub mod throttle;

use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError;
use keel_storage::replication::Role;
use keel_storage::{LeaderEpoch, Offset, StorageError};
use keel_vocab::ErrorCode;
use tracing::{info, warn};

use crate::shard::{BrokerShard, Partition};

/// Why a write was not committed.
#[derive(Debug)]
pub enum CommitError {
    /// The local log failed (see `errors::storage_error`).
    Storage(StorageError),
    /// Replication's answer: NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT or
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    Replication(ErrorCode, String),
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Storage(e) => write!(f, "{e}"),
            CommitError::Replication(code, message) => write!(f, "{code:?}: {message}"),
        }
    }
}

impl CommitError {
    /// Kafka's error for this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            CommitError::Storage(e) => crate::errors::storage_error(e),
            CommitError::Replication(code, _) => *code,
        }
    }
}

/// How long a write waits for its commit.
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    /// acks=1: the leader's own log under the flush policy.
    Leader,
    /// acks=all: the high watermark past the write, within `timeout`.
    Isr { timeout: Duration },
}

/// Commits `[.., upto)` of `part` as `wait` asks. A partition with one replica commits
/// locally and its high watermark follows; a replicated one makes the write durable here, moves
/// the high watermark if the ISR allows, and (acks=all) waits for it to pass `upto`. Dropping
/// the future loses nothing: the write stays in the log and commits with the next one.
pub async fn commit(
    shard: &Rc<BrokerShard>,
    part: &Rc<Partition>,
    upto: Offset,
    wait: Wait,
) -> Result<(), CommitError> {
    if !part.replication.is_replicated() {
        return part.log.commit(upto).await.map_err(CommitError::Storage);
    }
    part.log
        .make_durable(upto)
        .await
        .map_err(CommitError::Storage)?;
    leader::maybe_advance_high_watermark(shard, part);
    match wait {
        Wait::Leader => Ok(()),
        Wait::Isr { timeout } => leader::wait_for_high_watermark(shard, part, upto, timeout).await,
    }
}

/// How long a coordinator's write (group or transaction record, transaction marker) waits
/// for the ISR: Kafka's `offsets.commit.timeout.ms` default.
pub const COORDINATOR_COMMIT_TIMEOUT: Duration = Duration::from_millis(5_000);

/// The longest a request waits for this broker to take up a leadership its installed image
/// already names (see [`wait_for_take_up`]).
const TAKE_UP_WAIT_MAX: Duration = Duration::from_secs(5);

/// A request for a partition this broker leads by its installed image but has not taken up
/// yet (`apply_image` is recording the epoch: an fdatasync) waits for the take-up, bounded, as
/// Kafka's requests wait on the partition lock `makeLeader` holds; then the caller checks
/// `Partition::is_leader` as usual (still not taken up after the bound: NOT_LEADER_OR_FOLLOWER).
/// Without the wait a client that read the new leader from Metadata got a spurious
/// NOT_LEADER_OR_FOLLOWER for the few milliseconds of every take-up.
pub async fn wait_for_take_up(part: &Partition) {
    let deadline = Instant::now() + TAKE_UP_WAIT_MAX;
    while part.leads_per_image() && !part.is_leader() {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        // `apply_image` fires the high-watermark event once the role is taken up.
        let event = part.replication.hw_event();
        if part.is_leader() {
            return;
        }
        event
            .wait_timeout((deadline - now).min(Duration::from_millis(50)))
            .await;
    }
}

/// Waits until a new leader's high watermark reaches its epoch start (KIP-207): what its
/// followers had not fetched from the old leader is then committed here too. A coordinator
/// loads its state only from committed records, so its load waits for this; `false` when this
/// broker stopped leading `part` meanwhile. Bounded by the leadership: every image and every
/// high-watermark move wakes it, and it re-checks at least every 100 ms.
pub async fn wait_for_epoch_start(part: &Partition) -> bool {
    loop {
        if !part.is_leader() {
            return false;
        }
        let event = part.replication.hw_event();
        if part.log.offsets().high_watermark.0 >= part.replication.local.borrow().epoch_start_offset
        {
            return true;
        }
        event.wait_timeout(Duration::from_millis(100)).await;
    }
}

/// A coordinator's write: acks=all, as Kafka's coordinators append.
pub async fn commit_coordinator(
    shard: &Rc<BrokerShard>,
    part: &Rc<Partition>,
    upto: Offset,
) -> Result<(), CommitError> {
    commit(
        shard,
        part,
        upto,
        Wait::Isr {
            timeout: COORDINATOR_COMMIT_TIMEOUT,
        },
    )
    .await
}

/// Kafka's coordinators' answer for a write that did not commit: a lost leadership means
/// "find the coordinator again" (NOT_COORDINATOR), a short or slow ISR "try again"
/// (COORDINATOR_NOT_AVAILABLE); a storage failure maps as `storage` says.
pub fn coordinator_commit_error(
    e: &CommitError,
    storage: fn(&StorageError) -> ErrorCode,
) -> ErrorCode {
    match e {
        CommitError::Storage(s) => storage(s),
        CommitError::Replication(code, _)
            if *code == ErrorCode::of(ResponseError::NotLeaderOrFollower) =>
        {
            ErrorCode::of(ResponseError::NotCoordinator)
        }
        CommitError::Replication(..) => ErrorCode::of(ResponseError::CoordinatorNotAvailable),
    }
}

/// Takes up each owned partition's role after an image is installed: a new leader records
/// its epoch's start, resets its followers' progress, loads its coordinator (internal topics)
/// and stops fetching; a new follower starts fetching from its leader. Waiting acks=all
/// writes and fetches wake (a former leader answers them NOT_LEADER_OR_FOLLOWER).
pub async fn apply_image(shard: &Rc<BrokerShard>) {
    let image = shard.image();
    fetcher::prune(shard);
    throttle::apply(shard, &image);
    for part in shard.all_partitions() {
        let replicated = part.replication.is_replicated();
        part.log.set_replicated(replicated);
        let was_leader = part
            .replication
            .local
            .borrow()
            .applied_role
            .is_some_and(|(l, _)| l == shard.config.node_id);
        let role = part.with_assignment(|a| part.replication.local.borrow().role_to_take_up(a));
        match role {
            None => {
                // The same role; an ISR change the image committed may let the high watermark
                // move (an expansion back to min.insync.replicas), and on a follower it
                // decides whether consumers waiting on it are still served there (KIP-392).
                leader::maybe_advance_high_watermark(shard, &part);
                if !part.is_leader() {
                    shard.notify_data(&part);
                }
                continue;
            }
            Some(Role::Lead { epoch }) => {
                // A single replica records its epoch with its first append, as before
                // replication: a restart of thousands of them writes no checkpoint each.
                let recorded = if replicated {
                    part.log.become_leader(LeaderEpoch(epoch)).await
                } else {
                    Ok(())
                };
                if let Err(e) = recorded {
                    warn!(topic = %part.topic, partition = part.index, epoch, error = %e, "recording the leader epoch failed");
                }
                let log_end = part.log.offsets().log_end_offset.0;
                // Only now does it serve as leader (`Partition::is_leader`), and only now does
                // the ISR check judge its followers (each has a full lag window from now).
                // The image may have moved on during the await: the role taken up is the one
                // recorded, and the next `apply_image` takes up the newer one.
                let now_ms = shard.clock.now_ms();
                part.replication.with_assignment(epoch, |a| {
                    part.replication
                        .local
                        .borrow_mut()
                        .took_up_leadership(a, log_end, now_ms)
                });
                fetcher::unassign(shard, &part);
                info!(shard = shard.id, topic = %part.topic, partition = part.index, epoch, log_end_offset = log_end, replicated, "leading partition");
                if !was_leader {
                    shard.run_loader(&part);
                }
                leader::maybe_advance_high_watermark(shard, &part);
            }
            Some(Role::Follow { leader, epoch }) => {
                part.with_assignment(|a| part.replication.local.borrow_mut().took_up_following(a));
                if was_leader {
                    // Kafka's onResignation: the coordinator forgets the partition; its
                    // requests get NOT_COORDINATOR and clients look up the new leader.
                    shard.run_unloader(&part);
                }
                if leader >= 0 {
                    fetcher::assign(shard, &image, &part);
                    info!(shard = shard.id, topic = %part.topic, partition = part.index, epoch, leader, "following partition");
                } else {
                    fetcher::unassign(shard, &part);
                }
            }
        }
        part.replication.fire_hw_moved();
        shard.notify_data(&part);
    }
}

/// A shard's periodic replication work: the leader's ISR check, the high watermark
/// checkpoints and the recovery-point checkpoints, every `interval`.
pub async fn run_periodic(shard: Rc<BrokerShard>) {
    let lag_ms = shard.config.replica_lag_time_max_ms;
    let interval = Duration::from_millis((lag_ms / 2).clamp(100, 5_000));
    let checkpoint_every =
        Duration::from_millis(shard.config.replica_high_watermark_checkpoint_interval_ms);
    let recovery_point_every =
        Duration::from_millis(shard.config.log_flush_offset_checkpoint_interval_ms);
    let mut last_checkpoint = Instant::now();
    let mut last_recovery_point = Instant::now();
    while shard.sleep_unless_shutdown(interval).await {
        leader::check_isr(&shard).await;
        if last_recovery_point.elapsed() >= recovery_point_every {
            last_recovery_point = Instant::now();
            for part in shard.all_partitions() {
                if let Err(e) = part.log.checkpoint_recovery_point().await {
                    warn!(topic = %part.topic, partition = part.index, error = %e, "writing recovery-point-offset-checkpoint failed");
                }
            }
        }
        if last_checkpoint.elapsed() >= checkpoint_every {
            last_checkpoint = Instant::now();
            for part in shard.all_partitions() {
                if let Err(e) = part.log.checkpoint_high_watermark().await {
                    warn!(topic = %part.topic, partition = part.index, error = %e, "writing replication-offset-checkpoint failed");
                }
            }
        }
    }
}

/// Kafka's `NOT_LEADER_OR_FOLLOWER` as a commit error.
fn not_leader(part: &Partition) -> CommitError {
    CommitError::Replication(
        ErrorCode::of(ResponseError::NotLeaderOrFollower),
        format!(
            "this broker no longer leads {}-{} (leader {})",
            part.topic,
            part.index,
            part.replication.leader.get()
        ),
    )
}
