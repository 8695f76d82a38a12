//! The replication protocol's decisions for one partition, sans I/O: the rules the broker's
//! leader and follower code (`broker/src/replication`) apply, as plain functions of what the
//! replica knows, so that the fault simulation (keel-sim) runs the same rules over a simulated
//! network instead of a model of them. Names follow Kafka's (`Partition`, `Replica`,
//! `AbstractFetcherThread`). [`fetch`] is the fetch protocol's glue on top of them: what a
//! follower asks, the leader's checks and read, what the follower does with the answer;
//! [`replica`] is one replica's state machine over both (its role, its followers, its
//! pending ISR change, its high watermark); [`timers`] holds its timed decisions as deadlines
//! (acks=all waits, the AlterPartition queue's resends, follower back-offs).

pub mod fetch;
pub mod replica;
pub mod timers;

pub use replica::{Assignment, PendingIsr, ReplicaState, Role};

use keel_vocab::error::ResponseError;
use keel_vocab::ErrorCode;

/// What a leader knows of one follower, from its fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower's log end offset: the offset of its latest fetch (under
    /// `flush.policy=group` a follower fetches only past what it has synced).
    pub log_end_offset: i64,
    /// When the follower last had every record the leader had (Kafka's
    /// `lastCaughtUpTimeMs`), wall-clock ms.
    pub last_caught_up_ms: i64,
    /// When it last fetched, and the leader's log end at that moment.
    pub last_fetch_ms: i64,
    pub last_fetch_leader_log_end: i64,
    /// The broker epoch it fetched with (KIP-903: an expansion names it).
    pub broker_epoch: i64,
    /// The follower's log start offset, from its fetch (-1 until it fetched).
    pub log_start_offset: i64,
}

impl FollowerProgress {
    /// A follower not heard from yet (fetching with `broker_epoch`).
    pub fn unknown(broker_epoch: i64) -> FollowerProgress {
        FollowerProgress {
            log_end_offset: -1,
            last_caught_up_ms: -1,
            last_fetch_ms: -1,
            last_fetch_leader_log_end: -1,
            broker_epoch,
            log_start_offset: -1,
        }
    }

    /// Records a fetch at `fetch_offset` (the follower's log end) at `now_ms`, while the
    /// leader's log ends at `leader_log_end` (Kafka's `Replica.updateFetchStateOrThrow`).
    pub fn record_fetch(
        &mut self,
        fetch_offset: i64,
        follower_log_start: i64,
        leader_log_end: i64,
        broker_epoch: i64,
        now_ms: i64,
    ) {
        if fetch_offset >= leader_log_end {
            self.last_caught_up_ms = self.last_caught_up_ms.max(now_ms);
        } else if self.last_fetch_ms >= 0 && fetch_offset >= self.last_fetch_leader_log_end {
            self.last_caught_up_ms = self.last_caught_up_ms.max(self.last_fetch_ms);
        }
        self.log_end_offset = fetch_offset;
        self.last_fetch_ms = now_ms;
        self.last_fetch_leader_log_end = leader_log_end;
        self.broker_epoch = broker_epoch;
        if follower_log_start >= 0 {
            self.log_start_offset = follower_log_start;
        }
    }
}

/// A new leader's view of its followers: each gets a full lag window from `now_ms` (Kafka
/// resets `lastCaughtUpTimeMs` when leadership changes) and no known log end.
pub fn new_leader_followers(
    replicas: &[i32],
    leader: i32,
    now_ms: i64,
) -> std::collections::BTreeMap<i32, FollowerProgress> {
    replicas
        .iter()
        .filter(|r| **r != leader)
        .map(|r| {
            let mut p = FollowerProgress::unknown(-1);
            p.last_caught_up_ms = now_ms;
            (*r, p)
        })
        .collect()
}

/// Kafka's `endOffsetForEpoch` on `log`: the latest epoch (on a leader, its current one,
/// `leading_epoch`) ends at the log end; an unknown one is (-1, -1).
pub fn end_offset_for_epoch(
    log: &crate::Log,
    epoch: crate::LeaderEpoch,
    leading_epoch: Option<i32>,
) -> (i32, i64) {
    if log.latest_epoch() == Some(epoch) || leading_epoch == Some(epoch.0) {
        return (epoch.0, log.offsets().log_end_offset.0);
    }
    match log.end_offset_for_epoch(epoch) {
        Some((e, end)) => (e.0, end.0),
        None => (-1, -1),
    }
}

/// Leader, serving a follower's fetch at `fetch_offset` whose last fetched epoch is
/// `last_fetched_epoch` (Kafka's `Partition.fetchRecords`): that epoch must end here, at
/// `end_for_epoch` (this log's [`crate::Log::end_offset_for_epoch`] answer, `(-1, -1)` if
/// unknown), at or after the fetch offset; otherwise the follower is told where its log
/// diverged: that (epoch, end offset).
pub fn diverging_epoch(
    last_fetched_epoch: i32,
    fetch_offset: i64,
    end_for_epoch: (i32, i64),
) -> Option<(i32, i64)> {
    if last_fetched_epoch < 0 {
        return None;
    }
    let (epoch, end) = end_for_epoch;
    (epoch < last_fetched_epoch || end < fetch_offset).then_some(end_for_epoch)
}

/// Leader: whether a follower outside the ISR that fetched at `fetch_offset` may join it
/// (Kafka's `isFollowerInSync` at expansion): it has everything below the high watermark and
/// everything this leader's epoch started with.
pub fn may_join_isr(fetch_offset: i64, high_watermark: i64, epoch_start_offset: i64) -> bool {
    fetch_offset >= high_watermark && fetch_offset >= epoch_start_offset
}

/// Leader: ISR members other than `leader` that have not caught up within `lag_ms` of
/// `now_ms` (Kafka's `maybeShrinkIsr`); `last_caught_up` is `None` for one never heard from.
pub fn out_of_sync(
    isr: &[i32],
    leader: i32,
    now_ms: i64,
    lag_ms: i64,
    last_caught_up: impl Fn(i32) -> Option<i64>,
) -> Vec<i32> {
    isr.iter()
        .copied()
        .filter(|r| *r != leader)
        .filter(|r| last_caught_up(*r).is_none_or(|t| now_ms - t > lag_ms))
        .collect()
}

/// Leader: the committed ISR together with a pending change (Kafka's maximal ISR): a shrink is
/// not trusted before the controller commits it (its leavers still count), an expansion counts
/// at once.
pub fn maximal_isr(committed: &[i32], pending: Option<&[i32]>) -> Vec<i32> {
    let mut isr = committed.to_vec();
    for r in pending.unwrap_or_default() {
        if !isr.contains(r) {
            isr.push(*r);
        }
    }
    isr
}

/// What a leader heard back about an ISR change it sent the controller (AlterPartition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsrChangeAnswer {
    /// Committed; the partition epoch it was committed with (the sent one when the ISR
    /// already was the proposed one, so nothing changed).
    Committed { partition_epoch: i32 },
    /// Refused by the controller with this Kafka error code.
    Refused { code: i16 },
    /// No answer: the request or its answer was lost, timed out, or the controller could not
    /// be reached. The change may have been committed all the same.
    NoAnswer,
}

const fn code(e: ResponseError) -> i16 {
    ErrorCode::of(e).code()
}

/// What happens to a leader's pending ISR change after an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingIsrChange {
    /// It ends now: the ISR stays the committed one.
    End,
    /// It stays pending (counted in the maximal ISR) until an image with a newer partition
    /// epoch ends it: the controller holds a newer state of the partition, which may be this
    /// change itself.
    Keep,
    /// It stays pending and is sent again (Kafka's AlterPartitionManager retries).
    Resend,
}

/// Kafka's `Partition.handleAlterPartitionError` and the AlterPartitionManager's retries:
/// whether a pending change ends with `answer` to a request sent at `sent_partition_epoch`.
/// Only a refusal that proves the change was not committed, against the state this leader
/// knows, ends it. A lost answer does not: ending it then would let the high watermark move
/// by the old ISR while the controller holds the new one, whose added member (an expansion)
/// may lack what the high watermark passes and be elected (found by keel-sim
/// `--controller-network --metadata-network`, seed 5573). A stale refusal (the leader or
/// partition epoch moved on, which a resent change's own commit does too) waits for the image.
///
/// The codes are Kafka's, by name (`ResponseError`): this rule once carried them as numbers,
/// two of them wrong (106 and 108 for NEW_LEADER_ELECTED and INVALID_UPDATE_VERSION, which are
/// 108 and 95), so a stale INVALID_UPDATE_VERSION refusal of a resent change ended it (found by
/// keel-sim `--timers --controller-network --metadata-network`, seed 12866).
pub fn after_isr_change(answer: IsrChangeAnswer, sent_partition_epoch: i32) -> PendingIsrChange {
    const NOT_LEADER_OR_FOLLOWER: i16 = code(ResponseError::NotLeaderOrFollower);
    const FENCED_LEADER_EPOCH: i16 = code(ResponseError::FencedLeaderEpoch);
    const NEW_LEADER_ELECTED: i16 = code(ResponseError::NewLeaderElected);
    const INVALID_UPDATE_VERSION: i16 = code(ResponseError::InvalidUpdateVersion);
    match answer {
        IsrChangeAnswer::Committed { partition_epoch }
            if partition_epoch == sent_partition_epoch =>
        {
            PendingIsrChange::End
        }
        IsrChangeAnswer::Committed { .. } => PendingIsrChange::Keep,
        IsrChangeAnswer::Refused {
            code:
                NOT_LEADER_OR_FOLLOWER
                | FENCED_LEADER_EPOCH
                | NEW_LEADER_ELECTED
                | INVALID_UPDATE_VERSION,
        } => PendingIsrChange::Keep,
        IsrChangeAnswer::Refused { .. } => PendingIsrChange::End,
        IsrChangeAnswer::NoAnswer => PendingIsrChange::Resend,
    }
}

/// Leader: where the high watermark may move (Kafka's `Partition.maybeIncrementLeaderHW`):
/// nothing while the committed ISR (`committed_isr_len` members) is below
/// `min_insync_replicas` (KIP-966); else the lowest log end over the maximal ISR (committed
/// and pending members: a pending shrink's leaver still counts), the leader's own being what
/// it made durable. `follower_log_end` is -1 for a member not heard from. `None`: no move.
pub fn high_watermark_candidate(
    committed_isr_len: usize,
    min_insync_replicas: i32,
    maximal_isr: &[i32],
    leader: i32,
    leader_durable_end: i64,
    follower_log_end: impl Fn(i32) -> i64,
) -> Option<i64> {
    if (committed_isr_len as i32) < min_insync_replicas {
        return None;
    }
    let candidate = maximal_isr
        .iter()
        .filter(|r| **r != leader)
        .map(|r| follower_log_end(*r))
        .fold(leader_durable_end, i64::min);
    (candidate >= 0).then_some(candidate)
}

/// Follower, told by its leader that its log diverged in `leader_epoch`, which ends at
/// `leader_end` there (Kafka's `getOffsetTruncationState`): the offset to truncate to, never
/// past the local log end `log_end`. `local_end_for_epoch` is the follower's own
/// [`crate::Log::end_offset_for_epoch`] answer for `leader_epoch` (the largest local epoch at
/// or below it, and where it ends). A negative `leader_end` (the leader knows no such epoch)
/// cuts to the local high watermark, which every ISR member holds; a local epoch below the
/// leader's cuts to where that epoch ends here (the next fetch asks again from there).
///
/// The leader's end of the epoch may lie past the local log end: the follower's epoch ended
/// earlier here (it led a later epoch itself, from a shorter log). Cutting to the local end of
/// the epoch is then right; refusing, as Keel did, left the follower fetching the same
/// divergence forever (found by the fault simulation, replicated seed 1952).
pub fn truncation_point(
    log_end: i64,
    high_watermark: i64,
    leader_epoch: i32,
    leader_end: i64,
    local_end_for_epoch: (i32, i64),
) -> i64 {
    if leader_end < 0 {
        high_watermark.min(log_end)
    } else if leader_epoch < 0 {
        leader_end.min(log_end)
    } else {
        match local_end_for_epoch {
            (e, end) if e == leader_epoch => leader_end.min(end).min(log_end),
            (e, end) if e >= 0 => end.min(log_end),
            _ => leader_end.min(log_end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_isr_change_ends_only_when_it_surely_was_not_committed() {
        use IsrChangeAnswer::*;
        use PendingIsrChange::*;
        // Committed: the image with the new partition epoch ends it; one that changed
        // nothing (the same epoch back) ends here.
        assert_eq!(after_isr_change(Committed { partition_epoch: 8 }, 7), Keep);
        assert_eq!(after_isr_change(Committed { partition_epoch: 7 }, 7), End);
        // Refused against the state the leader knows: INELIGIBLE_REPLICA, INVALID_REQUEST,
        // UNKNOWN_TOPIC_ID (by Kafka's numbers too, as they travel).
        for e in [
            ResponseError::IneligibleReplica,
            ResponseError::InvalidRequest,
            ResponseError::UnknownTopicId,
        ] {
            let code = super::code(e);
            assert_eq!(after_isr_change(Refused { code }, 7), End, "{e:?}");
        }
        assert_eq!(
            (
                super::code(ResponseError::IneligibleReplica),
                super::code(ResponseError::InvalidRequest)
            ),
            (107, 42)
        );
        // Refused as stale (the controller moved on, maybe with this very change when it is
        // a resend): wait for the image.
        for e in [
            ResponseError::NotLeaderOrFollower,
            ResponseError::FencedLeaderEpoch,
            ResponseError::NewLeaderElected,
            ResponseError::InvalidUpdateVersion,
        ] {
            let code = super::code(e);
            assert_eq!(after_isr_change(Refused { code }, 7), Keep, "{e:?}");
        }
        // Kafka's numbers for them: keel-raft's controller refuses a stale partition epoch
        // with 95.
        for code in [6, 74, 108, 95] {
            assert_eq!(after_isr_change(Refused { code }, 7), Keep, "code {code}");
        }
        // No answer: it may have been committed; send it again.
        assert_eq!(after_isr_change(NoAnswer, 7), Resend);
    }

    #[test]
    fn the_high_watermark_is_the_lowest_log_end_over_the_isr_and_waits_for_min_isr() {
        let ends = |r: i32| match r {
            2 => 7,
            3 => 5,
            _ => -1,
        };
        assert_eq!(
            high_watermark_candidate(3, 2, &[1, 2, 3], 1, 9, ends),
            Some(5)
        );
        // Replica 3 outside the ISR does not hold it back.
        assert_eq!(high_watermark_candidate(2, 2, &[1, 2], 1, 9, ends), Some(7));
        // The leader's own durable end bounds it.
        assert_eq!(high_watermark_candidate(2, 2, &[1, 2], 1, 6, ends), Some(6));
        // A member never heard from: no move. Below min.insync.replicas: no move.
        assert_eq!(high_watermark_candidate(2, 2, &[1, 4], 1, 9, ends), None);
        assert_eq!(high_watermark_candidate(1, 2, &[1, 2], 1, 9, ends), None);
    }

    #[test]
    fn a_follower_truncates_to_where_the_epochs_agree() {
        // The leader's epoch 3 ends at 10; the follower's epoch 3 ends at 12: cut at 10.
        assert_eq!(truncation_point(12, 8, 3, 10, (3, 12)), 10);
        // The follower's latest epoch below 3 is 2, ending at 9: cut at 9.
        assert_eq!(truncation_point(12, 8, 3, 10, (2, 9)), 9);
        // The leader knows no epoch: the high watermark.
        assert_eq!(truncation_point(12, 8, -1, -1, (-1, -1)), 8);
        // The leader's epoch 0 ends at 12, the follower's at 5 (it led epoch 1 from there,
        // its log ends at 7): cut at 5, not refuse.
        assert_eq!(truncation_point(7, 0, 0, 12, (0, 5)), 5);
        assert_eq!(diverging_epoch(3, 12, (3, 10)), Some((3, 10)));
        assert_eq!(diverging_epoch(3, 10, (4, 20)), None);
        assert_eq!(diverging_epoch(3, 10, (2, 20)), Some((2, 20)));
        assert_eq!(diverging_epoch(-1, 10, (-1, -1)), None);
    }

    #[test]
    fn followers_catch_up_and_fall_out_of_sync() {
        let mut p = FollowerProgress::unknown(7);
        p.record_fetch(5, 0, 10, 7, 1_000);
        assert_eq!(p.last_caught_up_ms, -1);
        // Past the leader's end at the previous fetch: caught up as of that fetch.
        p.record_fetch(10, 0, 12, 7, 2_000);
        assert_eq!(p.last_caught_up_ms, 1_000);
        p.record_fetch(12, 0, 12, 7, 3_000);
        assert_eq!(p.last_caught_up_ms, 3_000);
        let caught = |r: i32| (r == 2).then_some(3_000);
        assert_eq!(out_of_sync(&[1, 2, 3], 1, 20_000, 30_000, caught), vec![3]);
        assert_eq!(
            out_of_sync(&[1, 2, 3], 1, 40_000, 30_000, caught),
            vec![2, 3]
        );
        assert!(may_join_isr(12, 12, 4) && !may_join_isr(11, 12, 4) && !may_join_isr(3, 2, 4));
    }
}
