//! The replica fetch protocol's glue for one partition, between the replication rules and the
//! transport: what a follower asks (Fetch v15's per-partition fields), how the leader checks
//! and reads its answer (Kafka's `Partition.fetchRecords`), and what the follower does with the
//! answer (Kafka's `AbstractFetcherThread.processFetchRequest`: truncate where the logs
//! diverged, start over past the leader's log start, append with the leader's offsets and
//! epochs, take the leader's high watermark and log start).
//!
//! The broker carries these over Kafka's Fetch (`broker/src/replication`: the fetcher
//! encodes a [`FetchAsk`] and decodes a [`FetchAnswer`], the Fetch handler the other way
//! round); the fault simulation (keel-sim) carries them over its simulated network. That is the
//! transport seam: both run this code, so the simulation checks Keel's own glue.

use bytes::Bytes;

use std::collections::BTreeMap;

use super::{
    diverging_epoch, end_offset_for_epoch, may_join_isr, truncation_point, FollowerProgress,
};
use crate::{LeaderEpoch, Log, Offset, StorageError, TruncateOutcome};

/// A follower's fetch of one partition: the replica fields of Fetch v15's `FetchPartition`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchAsk {
    /// The follower's log end, which it made durable before asking (under
    /// `flush.policy=group` a follower reports only what it has synced).
    pub fetch_offset: i64,
    /// The epoch of the follower's last batch (-1: none).
    pub last_fetched_epoch: i32,
    /// The follower's log start offset.
    pub log_start_offset: i64,
}

impl FetchAsk {
    /// What the follower holding `log` asks: from its log end, with its latest epoch. The
    /// caller makes the log end durable first (`Log::make_durable`) and leaves out a log whose
    /// sync failed.
    pub fn of(log: &Log) -> FetchAsk {
        let o = log.offsets();
        FetchAsk {
            fetch_offset: o.log_end_offset.0,
            last_fetched_epoch: log.latest_epoch().map_or(-1, |e| e.0),
            log_start_offset: o.log_start_offset.0,
        }
    }
}

/// The leader's answer for one partition, as replication reads Fetch's `PartitionData`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchAnswer {
    /// Whole batches from the fetch offset (possibly none) and the leader's offsets.
    Records {
        records: Bytes,
        high_watermark: i64,
        last_stable_offset: i64,
        log_start_offset: i64,
    },
    /// The follower's log diverged (Fetch v12+'s `diverging_epoch`): the leader's epoch
    /// `epoch` ends at `end_offset` there ((-1, -1): it knows no such epoch).
    Diverging { epoch: i32, end_offset: i64 },
    /// OFFSET_OUT_OF_RANGE: the fetch offset is outside the leader's log.
    OutOfRange {
        log_start_offset: i64,
        high_watermark: i64,
    },
    /// Any other error (not the leader, fenced, a storage error there): the follower backs
    /// off and asks again.
    Refused(String),
}

/// Leader (Kafka's `Partition.fetchRecords`, before the read): a follower whose last fetched
/// epoch does not end here at or after its fetch offset is told where its log diverged; a
/// fetch offset outside this log is out of range. `None`: serve it (record the follower's
/// progress, then [`read_for_follower`]). `leading_epoch` is this replica's epoch while it
/// leads.
pub fn check_fetch(log: &Log, leading_epoch: Option<i32>, ask: &FetchAsk) -> Option<FetchAnswer> {
    if ask.last_fetched_epoch >= 0 {
        let end = end_offset_for_epoch(log, LeaderEpoch(ask.last_fetched_epoch), leading_epoch);
        if let Some((epoch, end_offset)) =
            diverging_epoch(ask.last_fetched_epoch, ask.fetch_offset, end)
        {
            return Some(FetchAnswer::Diverging { epoch, end_offset });
        }
    }
    let o = log.offsets();
    if ask.fetch_offset < o.log_start_offset.0 || ask.fetch_offset > o.log_end_offset.0 {
        return Some(FetchAnswer::OutOfRange {
            log_start_offset: o.log_start_offset.0,
            high_watermark: o.high_watermark.0,
        });
    }
    None
}

/// The leader's view of its partition when a follower's fetch arrives.
#[derive(Clone, Copy, Debug)]
pub struct LeaderView<'a> {
    /// The committed ISR.
    pub isr: &'a [i32],
    /// An ISR change is proposed and not committed yet (no other is proposed meanwhile).
    pub change_pending: bool,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    /// The log end when this leader's epoch began.
    pub epoch_start_offset: i64,
}

/// Leader (Kafka's `Partition.updateFollowerFetchState` and `maybeExpandIsr`): records the
/// fetch [`check_fetch`] let through from `replica`, fetching with `broker_epoch`, at `now_ms`;
/// the ISR to propose when that follower is outside the ISR, no change is pending and it has
/// caught up ([`may_join_isr`]). The caller then moves the high watermark and reads.
pub fn record_follower_fetch(
    followers: &mut BTreeMap<i32, FollowerProgress>,
    replica: i32,
    broker_epoch: i64,
    ask: &FetchAsk,
    now_ms: i64,
    view: LeaderView<'_>,
) -> Option<Vec<i32>> {
    followers
        .entry(replica)
        .or_insert(FollowerProgress::unknown(broker_epoch))
        .record_fetch(
            ask.fetch_offset,
            ask.log_start_offset,
            view.log_end_offset,
            broker_epoch,
            now_ms,
        );
    let joins = !view.isr.contains(&replica)
        && !view.change_pending
        && may_join_isr(
            ask.fetch_offset,
            view.high_watermark,
            view.epoch_start_offset,
        );
    joins.then(|| {
        let mut isr = view.isr.to_vec();
        isr.push(replica);
        isr
    })
}

/// Leader: the answer to a fetch [`check_fetch`] let through, read from the fetch offset up to
/// the log end (a follower takes what is not committed yet), at most `max_bytes` (at least one
/// whole batch).
pub async fn read_for_follower(
    log: &Log,
    ask: &FetchAsk,
    max_bytes: usize,
) -> Result<FetchAnswer, StorageError> {
    let end = log.offsets().log_end_offset;
    let r = log.read(Offset(ask.fetch_offset), max_bytes, end).await?;
    Ok(FetchAnswer::Records {
        records: r.records,
        high_watermark: r.high_watermark.0,
        last_stable_offset: r.last_stable_offset.0,
        log_start_offset: r.log_start_offset.0,
    })
}

/// What the follower did with an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// `bytes` of batches appended (0: none came); `high_watermark_moved`: the local high
    /// watermark moved (consumers reading from this follower, KIP-392, wait on it).
    Appended {
        bytes: usize,
        high_watermark_moved: bool,
    },
    /// The log diverged from the leader's and was cut (from its end `from`).
    Truncated { from: i64, outcome: TruncateOutcome },
    /// The fetch offset was below the leader's log start: the log starts over there.
    StartedOver { at: i64 },
}

/// Why an answer changed nothing; the follower backs off and asks again.
#[derive(Debug)]
pub enum NotApplied {
    /// The leader answered an error.
    Refused(String),
    /// The answer does not fit the log (an overlap, a bad CRC, an epoch above the leader's, a
    /// late or duplicated answer): nothing appended.
    Mismatch(StorageError),
    /// Out of range and neither below the leader's start nor past its high watermark.
    OutOfRange {
        fetch_offset: i64,
        log_start_offset: i64,
        high_watermark: i64,
    },
    /// A local write failed (the truncation, the gaps' checkpoint, the log start): the log
    /// may be offline now.
    Io(StorageError),
}

impl std::fmt::Display for NotApplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotApplied::Refused(why) => write!(f, "leader answered {why}"),
            NotApplied::Mismatch(e) => write!(f, "append refused: {e}"),
            NotApplied::OutOfRange {
                fetch_offset,
                log_start_offset,
                high_watermark,
            } => write!(
                f,
                "offset {fetch_offset} out of range at the leader (start {log_start_offset}, \
                 high watermark {high_watermark})"
            ),
            NotApplied::Io(e) => write!(f, "local write failed: {e}"),
        }
    }
}

/// Follower: applies the leader's answer to `log`, leading in `leader_epoch` (batches above it
/// are refused), at `now_ms`.
pub async fn apply_answer(
    log: &Log,
    leader_epoch: LeaderEpoch,
    now_ms: i64,
    answer: FetchAnswer,
) -> Result<Applied, NotApplied> {
    match answer {
        FetchAnswer::Refused(why) => Err(NotApplied::Refused(why)),
        FetchAnswer::Diverging { epoch, end_offset } => {
            truncate_diverged(log, epoch, end_offset).await
        }
        FetchAnswer::OutOfRange {
            log_start_offset,
            high_watermark,
        } => {
            // Below the leader's start: start over there. Past its end: cut to its high
            // watermark, which every ISR member holds.
            let leo = log.offsets().log_end_offset.0;
            if log_start_offset > leo {
                log.truncate_fully_and_start_at(Offset(log_start_offset))
                    .await
                    .map_err(NotApplied::Io)?;
                return Ok(Applied::StartedOver {
                    at: log_start_offset,
                });
            }
            if high_watermark >= 0 && high_watermark < leo {
                return truncate_diverged(log, -1, high_watermark).await;
            }
            Err(NotApplied::OutOfRange {
                fetch_offset: leo,
                log_start_offset,
                high_watermark,
            })
        }
        FetchAnswer::Records {
            records,
            high_watermark,
            log_start_offset,
            ..
        } => {
            let bytes = records.len();
            if !records.is_empty() {
                // A compacted leader's batches leave offset gaps; the log must take them first.
                log.prepare_for_gaps(&records)
                    .await
                    .map_err(NotApplied::Io)?;
                log.append_as_follower(records, leader_epoch, now_ms)
                    .map_err(NotApplied::Mismatch)?;
            }
            let log_end = log.offsets().log_end_offset.0;
            let mut moved = false;
            if high_watermark >= 0 {
                let before = log.offsets().high_watermark;
                moved = log.advance_high_watermark(Offset(high_watermark.min(log_end))) > before;
            }
            if log_start_offset > log.offsets().log_start_offset.0 {
                log.maybe_increment_log_start_offset(Offset(log_start_offset))
                    .await
                    .map_err(NotApplied::Io)?;
            }
            Ok(Applied::Appended {
                bytes,
                high_watermark_moved: moved,
            })
        }
    }
}

/// Kafka's `getOffsetTruncationState`: cuts the log where it agrees with the leader, given the
/// leader's end of the epoch it said the follower diverged in.
async fn truncate_diverged(
    log: &Log,
    leader_epoch: i32,
    leader_end: i64,
) -> Result<Applied, NotApplied> {
    let o = log.offsets();
    let local = if leader_epoch >= 0 {
        end_offset_for_epoch(log, LeaderEpoch(leader_epoch), None)
    } else {
        (-1, -1)
    };
    let target = truncation_point(
        o.log_end_offset.0,
        o.high_watermark.0,
        leader_epoch,
        leader_end,
        local,
    );
    let outcome = log
        .truncate_to(Offset(target))
        .await
        .map_err(NotApplied::Io)?;
    Ok(Applied::Truncated {
        from: o.log_end_offset.0,
        outcome,
    })
}
