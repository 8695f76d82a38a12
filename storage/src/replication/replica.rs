//! One replica's replication state machine for a partition, sans I/O (Kafka's `Partition`:
//! `leaderEpochStartOffsetOpt`, `remoteReplicasMap`, the pending `PartitionState`): what a
//! replica knows beyond its installed image, and the decisions it takes on it: taking up the
//! role an image names, recording a follower's fetch, the periodic ISR check, proposing an ISR
//! change and what each AlterPartition answer does to it, when an image ends it, and where the
//! high watermark may move. The broker keeps one per partition
//! (`broker/src/replication/state.rs`), the fault simulation one per replica, so the
//! simulation checks the broker's own replica manager; time is an argument (`now_ms`).

use std::collections::BTreeMap;

use super::fetch::{record_follower_fetch, FetchAsk, LeaderView};
use super::{
    after_isr_change, high_watermark_candidate, maximal_isr, new_leader_followers, out_of_sync,
    FollowerProgress, IsrChangeAnswer, PendingIsrChange,
};

/// The partition as the replica's installed metadata image has it.
#[derive(Clone, Copy, Debug)]
pub struct Assignment<'a> {
    /// The leader; -1 for none.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: &'a [i32],
    /// The committed ISR.
    pub isr: &'a [i32],
    pub partition_epoch: i32,
}

impl Assignment<'_> {
    /// More than one replica: the high watermark follows the ISR, not the local disk.
    pub fn is_replicated(&self) -> bool {
        self.replicas.len() > 1
    }
}

/// An ISR change a leader proposed (AlterPartition) and the controller has not committed:
/// the epochs it was sent at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingIsr {
    pub isr: Vec<i32>,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// See the module docs. `node` is this replica's broker id.
#[derive(Clone, Debug)]
pub struct ReplicaState {
    pub node: i32,
    /// The (leader, leader epoch) whose role this replica last took up; `None` before the
    /// first (and after a restart).
    pub applied_role: Option<(i32, i32)>,
    /// Leader: the log end when its epoch began; the high watermark reaching it is when
    /// ListOffsets may answer (KIP-207), and a follower joins the ISR only with it.
    pub epoch_start_offset: i64,
    /// Leader: its followers' progress, by broker id.
    pub followers: BTreeMap<i32, FollowerProgress>,
    /// Leader: the ISR change it proposed that is not committed yet (no other is proposed
    /// meanwhile).
    pub pending: Option<PendingIsr>,
}

/// What a replica does to take up the role its image names ([`ReplicaState::role_to_take_up`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Lead at this epoch: record the epoch durably first (`Log::become_leader`), then
    /// [`ReplicaState::took_up_leadership`].
    Lead { epoch: i32 },
    /// Follow this leader (-1: none) at this epoch: [`ReplicaState::took_up_following`].
    Follow { leader: i32, epoch: i32 },
}

impl ReplicaState {
    pub fn new(node: i32) -> ReplicaState {
        ReplicaState {
            node,
            applied_role: None,
            epoch_start_offset: 0,
            followers: BTreeMap::new(),
            pending: None,
        }
    }

    /// Whether the image names this replica leader, taken up or not.
    pub fn leads_per_image(&self, a: &Assignment<'_>) -> bool {
        a.leader == self.node
    }

    /// Whether this replica leads and has taken up that leadership: only then does it serve
    /// as leader (append, answer ListOffsets, move the high watermark, judge its followers).
    /// Between installing an image that names it and taking the role up (an await on the
    /// epoch checkpoint's fdatasync) an append would carry the previous epoch, and a new
    /// leader knows no follower yet (found by CI, kept as the broker's power_loss test
    /// `a_new_leader_serves_nothing_until_it_has_taken_up_its_epoch`).
    pub fn is_leader(&self, a: &Assignment<'_>) -> bool {
        self.leads_per_image(a) && self.applied_role == Some((self.node, a.leader_epoch))
    }

    /// The role the image names, if this replica has not taken it up yet.
    pub fn role_to_take_up(&self, a: &Assignment<'_>) -> Option<Role> {
        if self.applied_role == Some((a.leader, a.leader_epoch)) {
            return None;
        }
        Some(if self.leads_per_image(a) {
            Role::Lead {
                epoch: a.leader_epoch,
            }
        } else {
            Role::Follow {
                leader: a.leader,
                epoch: a.leader_epoch,
            }
        })
    }

    /// Leadership taken up (its epoch recorded, or refused by a full disk: the role is
    /// taken up all the same and nothing appends until writes go through again), with the
    /// log ending at `log_end`: its epoch starts there, every follower gets a full lag window
    /// from `now_ms` (Kafka resets `lastCaughtUpTimeMs`), no change of another epoch is pending.
    pub fn took_up_leadership(&mut self, a: &Assignment<'_>, log_end: i64, now_ms: i64) {
        self.epoch_start_offset = log_end;
        self.followers = new_leader_followers(a.replicas, self.node, now_ms);
        self.pending = None;
        self.applied_role = Some((self.node, a.leader_epoch));
    }

    /// Following taken up: a follower tracks no followers and proposes nothing.
    pub fn took_up_following(&mut self, a: &Assignment<'_>) {
        self.followers.clear();
        self.pending = None;
        self.applied_role = Some((a.leader, a.leader_epoch));
    }

    /// A newly installed image: one with another partition epoch than the pending change was
    /// sent at ends it (the change is in it, or was overtaken). Whether it ended one.
    pub fn image_installed(&mut self, a: &Assignment<'_>) -> bool {
        let ends = self
            .pending
            .as_ref()
            .is_some_and(|p| p.partition_epoch != a.partition_epoch);
        if ends {
            self.pending = None;
        }
        ends
    }

    /// The committed ISR together with the pending change (Kafka's maximal ISR).
    pub fn maximal_isr(&self, a: &Assignment<'_>) -> Vec<i32> {
        maximal_isr(a.isr, self.pending.as_ref().map(|p| &p.isr[..]))
    }

    /// Leader: records a follower's fetch (storage's fetch glue: `record_follower_fetch`) that
    /// the leader's checks let through; the ISR to propose when that follower caught up.
    #[allow(clippy::too_many_arguments)]
    pub fn record_fetch(
        &mut self,
        a: &Assignment<'_>,
        replica: i32,
        broker_epoch: i64,
        ask: &FetchAsk,
        log_end_offset: i64,
        high_watermark: i64,
        now_ms: i64,
    ) -> Option<Vec<i32>> {
        let view = LeaderView {
            isr: a.isr,
            change_pending: self.pending.is_some(),
            log_end_offset,
            high_watermark,
            epoch_start_offset: self.epoch_start_offset,
        };
        record_follower_fetch(
            &mut self.followers,
            replica,
            broker_epoch,
            ask,
            now_ms,
            view,
        )
    }

    /// Leader, the periodic ISR check (Kafka's `maybeShrinkIsr`): the ISR without the members
    /// that have not caught up within `lag_ms` of `now_ms`, if any are out. Nothing while the
    /// role is not taken up (a new leader knows no follower yet and would drop them all), the
    /// partition has one replica, or a change is pending.
    pub fn isr_to_shrink(&self, a: &Assignment<'_>, now_ms: i64, lag_ms: i64) -> Option<Vec<i32>> {
        if !self.is_leader(a) || !a.is_replicated() || self.pending.is_some() {
            return None;
        }
        let out = out_of_sync(a.isr, self.node, now_ms, lag_ms, |r| {
            self.followers.get(&r).map(|p| p.last_caught_up_ms)
        });
        if out.is_empty() {
            return None;
        }
        Some(a.isr.iter().copied().filter(|r| !out.contains(r)).collect())
    }

    /// Leader: proposes `isr` at the image's epochs; it is pending (counted in the maximal
    /// ISR) until an answer or an image ends it. The members with the broker epochs they
    /// fetched with (KIP-903; -1 for the leader and for one never heard from), as the
    /// AlterPartition request names them, and the change as sent.
    pub fn propose(&mut self, a: &Assignment<'_>, isr: Vec<i32>) -> (Vec<(i32, i64)>, PendingIsr) {
        let members = isr
            .iter()
            .map(|r| {
                let epoch = if *r == self.node {
                    -1
                } else {
                    self.followers.get(r).map_or(-1, |p| p.broker_epoch)
                };
                (*r, epoch)
            })
            .collect();
        let sent = PendingIsr {
            isr,
            leader_epoch: a.leader_epoch,
            partition_epoch: a.partition_epoch,
        };
        self.pending = Some(sent.clone());
        (members, sent)
    }

    /// Whether `sent` is still the pending change, led in the epochs it was sent at (an image
    /// may have ended it already and a newer one be pending).
    pub fn still_pending(&self, a: &Assignment<'_>, sent: &PendingIsr) -> bool {
        self.is_leader(a)
            && a.leader_epoch == sent.leader_epoch
            && a.partition_epoch == sent.partition_epoch
            && self.pending.as_ref() == Some(sent)
    }

    /// An AlterPartition answer (or none: [`IsrChangeAnswer::NoAnswer`]) to `sent`, judged by
    /// [`after_isr_change`] while it is still the pending change: `End` ends it here; `Resend`
    /// is for the caller to send it again (after a backoff, checking [`Self::still_pending`]
    /// then); `Keep` waits for the image. `Keep` when it is no longer pending.
    pub fn isr_change_answered(
        &mut self,
        a: &Assignment<'_>,
        sent: &PendingIsr,
        answer: IsrChangeAnswer,
    ) -> PendingIsrChange {
        if !self.still_pending(a, sent) {
            return PendingIsrChange::Keep;
        }
        let after = after_isr_change(answer, sent.partition_epoch);
        if after == PendingIsrChange::End {
            self.pending = None;
        }
        after
    }

    /// Leader (KIP-207): the latest offset ListOffsets answers, the high watermark, once it
    /// has reached this leader's epoch start (what the followers had not fetched from the
    /// previous leader is then committed here too, so the answer is never below one the
    /// previous leader gave); `None` before: OFFSET_NOT_AVAILABLE. Only for a replica that
    /// [`Self::is_leader`]: another answers NOT_LEADER_OR_FOLLOWER.
    pub fn latest_offset(&self, high_watermark: i64) -> Option<i64> {
        (self.epoch_start_offset <= high_watermark).then_some(high_watermark)
    }

    /// Leader: where the high watermark may move ([`high_watermark_candidate`] over the
    /// maximal ISR, with the followers' log ends and the leader's durable end); `None` unless
    /// the partition is replicated and this replica has taken up its leadership.
    pub fn high_watermark_candidate(
        &self,
        a: &Assignment<'_>,
        min_insync_replicas: i32,
        durable_end: i64,
    ) -> Option<i64> {
        if !a.is_replicated() || !self.is_leader(a) {
            return None;
        }
        high_watermark_candidate(
            a.isr.len(),
            min_insync_replicas,
            &self.maximal_isr(a),
            self.node,
            durable_end,
            |r| self.followers.get(&r).map_or(-1, |p| p.log_end_offset),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image<'a>(leader: i32, epoch: i32, isr: &'a [i32], partition_epoch: i32) -> Assignment<'a> {
        Assignment {
            leader,
            leader_epoch: epoch,
            replicas: &[1, 2, 3],
            isr,
            partition_epoch,
        }
    }

    fn ask(fetch_offset: i64) -> FetchAsk {
        FetchAsk {
            fetch_offset,
            last_fetched_epoch: 0,
            log_start_offset: 0,
        }
    }

    #[test]
    fn a_leader_serves_only_once_it_has_taken_up_its_epoch() {
        let mut r = ReplicaState::new(1);
        let a = image(1, 4, &[1, 2, 3], 9);
        assert!(r.leads_per_image(&a) && !r.is_leader(&a));
        assert_eq!(r.role_to_take_up(&a), Some(Role::Lead { epoch: 4 }));
        // Nothing judged or moved before the take-up.
        assert_eq!(r.isr_to_shrink(&a, 1_000_000, 30_000), None);
        assert_eq!(r.high_watermark_candidate(&a, 2, 10), None);
        r.took_up_leadership(&a, 10, 1_000);
        assert!(r.is_leader(&a));
        assert_eq!(r.role_to_take_up(&a), None);
        assert_eq!(r.epoch_start_offset, 10);
        // KIP-207: no latest offset below the epoch's start.
        assert_eq!(r.latest_offset(9), None);
        assert_eq!(r.latest_offset(10), Some(10));
        // Every follower has a full lag window from the take-up, and no known log end.
        assert_eq!(r.isr_to_shrink(&a, 31_000, 30_000), None);
        assert_eq!(r.isr_to_shrink(&a, 31_001, 30_000), Some(vec![1]));
        assert_eq!(r.high_watermark_candidate(&a, 2, 10), None);
        // A newer epoch (another leader elected and this one again): not yet taken up.
        let b = image(1, 5, &[1, 2, 3], 10);
        assert!(!r.is_leader(&b));
        assert_eq!(r.role_to_take_up(&b), Some(Role::Lead { epoch: 5 }));
        // A follower's role.
        let c = image(2, 6, &[1, 2, 3], 11);
        assert_eq!(
            r.role_to_take_up(&c),
            Some(Role::Follow {
                leader: 2,
                epoch: 6
            })
        );
        r.took_up_following(&c);
        assert!(r.followers.is_empty() && !r.is_leader(&c));
        assert_eq!(r.role_to_take_up(&c), None);
    }

    #[test]
    fn fetches_move_the_high_watermark_and_expand_the_isr() {
        let mut r = ReplicaState::new(1);
        let a = image(1, 4, &[1, 2], 9);
        r.took_up_leadership(&a, 10, 0);
        // Follower 2 (in the ISR) at 8: the high watermark may reach 8.
        assert_eq!(r.record_fetch(&a, 2, 70, &ask(8), 12, 5, 100), None);
        assert_eq!(r.high_watermark_candidate(&a, 2, 12), Some(8));
        // Follower 3 caught up past the high watermark and the epoch's start: joins.
        let (members, sent) = match r.record_fetch(&a, 3, 71, &ask(12), 12, 8, 200) {
            Some(isr) => r.propose(&a, isr),
            None => panic!("follower 3 caught up"),
        };
        assert_eq!(members, vec![(1, -1), (2, 70), (3, 71)]);
        // Pending: the expansion counts at once; no other change is proposed meanwhile.
        assert_eq!(r.maximal_isr(&a), vec![1, 2, 3]);
        assert_eq!(r.record_fetch(&a, 3, 71, &ask(12), 12, 8, 300), None);
        assert_eq!(r.isr_to_shrink(&a, 1_000_000, 1), None);
        // A lost answer: send again; still pending.
        assert_eq!(
            r.isr_change_answered(&a, &sent, IsrChangeAnswer::NoAnswer),
            PendingIsrChange::Resend
        );
        assert!(r.still_pending(&a, &sent));
        // Committed at partition epoch 10: it stays until the image carries it.
        assert_eq!(
            r.isr_change_answered(
                &a,
                &sent,
                IsrChangeAnswer::Committed {
                    partition_epoch: 10
                }
            ),
            PendingIsrChange::Keep
        );
        assert!(!r.image_installed(&a));
        let b = image(1, 4, &[1, 2, 3], 10);
        assert!(r.image_installed(&b));
        assert_eq!(r.pending, None);
        // A late answer to the ended change does nothing.
        assert_eq!(
            r.isr_change_answered(&b, &sent, IsrChangeAnswer::Refused { code: 107 }),
            PendingIsrChange::Keep
        );
    }

    #[test]
    fn a_refusal_that_proves_the_change_uncommitted_ends_it() {
        let mut r = ReplicaState::new(1);
        let a = image(1, 4, &[1, 2, 3], 9);
        r.took_up_leadership(&a, 0, 0);
        let (_, sent) = r.propose(&a, vec![1, 2]);
        // A shrink is not trusted before it is committed: its leaver still counts.
        assert_eq!(r.maximal_isr(&a), vec![1, 2, 3]);
        // INELIGIBLE_REPLICA: ended.
        assert_eq!(
            r.isr_change_answered(&a, &sent, IsrChangeAnswer::Refused { code: 107 }),
            PendingIsrChange::End
        );
        assert_eq!(r.pending, None);
        // FENCED_LEADER_EPOCH: stale, waits for the image.
        let (_, sent) = r.propose(&a, vec![1, 2]);
        assert_eq!(
            r.isr_change_answered(&a, &sent, IsrChangeAnswer::Refused { code: 74 }),
            PendingIsrChange::Keep
        );
        assert!(r.still_pending(&a, &sent));
        // Deposed before the answer: not its change any more.
        let b = image(2, 5, &[1, 2, 3], 9);
        assert!(!r.still_pending(&b, &sent));
        // Taking up another role drops the change.
        r.took_up_following(&b);
        assert_eq!(r.pending, None);
    }
}
