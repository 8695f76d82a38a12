//! The replica manager's timed decisions as deadlines, sans I/O: what waits and until when
//! (an acks=all write, an ISR change sent again, a follower partition backing off), as plain
//! state and functions of a millisecond clock. The broker's tasks sleep on glommio timers until
//! the deadlines these give and then ask again; the fault simulation (keel-sim `--timers`)
//! fires the same deadlines on its simulated clock, so that it runs the broker's timing rules
//! rather than a model of them. Names follow Kafka's (`DelayedProduce`,
//! `AlterPartitionManager`, `AbstractFetcherThread`'s partition delays).

use std::collections::BTreeMap;

/// How long a leader waits before it sends again an ISR change whose AlterPartition got no
/// answer (Kafka's `retry.backoff.ms` default).
pub const ISR_CHANGE_RESEND_BACKOFF_MS: i64 = 100;

/// Where an acks=all write stands (Kafka's `DelayedProduce.tryComplete` and its expiry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcksAll {
    /// The high watermark passed the write: acknowledge it.
    Done,
    /// This replica no longer leads (in the epoch it took the write in): NOT_LEADER_OR_FOLLOWER.
    NotLeader,
    /// The committed ISR fell below `min.insync.replicas` after the write:
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND at once (the high watermark does not move while the ISR
    /// is that small, KIP-966, so waiting could only end in a timeout).
    NotEnoughReplicasAfterAppend { isr: usize, min: i32 },
    /// The deadline passed first: REQUEST_TIMED_OUT.
    TimedOut,
    /// Wait until the high watermark moves, the image changes, or `deadline_ms`.
    Wait { deadline_ms: i64 },
}

/// An acks=all write of `[.., upto)` on the leader, at `now_ms`, with the request's deadline.
/// The order matters: a deposed leader answers NOT_LEADER_OR_FOLLOWER even if its high
/// watermark had passed (the new leader may not have the write; the producer retries there),
/// and a high watermark that passed the write wins over a deadline that passed meanwhile.
pub fn acks_all(
    leading: bool,
    committed_isr: usize,
    min_insync_replicas: i32,
    high_watermark: i64,
    upto: i64,
    now_ms: i64,
    deadline_ms: i64,
) -> AcksAll {
    if !leading {
        return AcksAll::NotLeader;
    }
    if (committed_isr as i64) < i64::from(min_insync_replicas) {
        return AcksAll::NotEnoughReplicasAfterAppend {
            isr: committed_isr,
            min: min_insync_replicas,
        };
    }
    if high_watermark >= upto {
        return AcksAll::Done;
    }
    if now_ms >= deadline_ms {
        return AcksAll::TimedOut;
    }
    AcksAll::Wait { deadline_ms }
}

/// A leader's AlterPartition queue (Kafka's `AlterPartitionManager`), for the partitions it
/// leads, by key `K`, with items `V`: at most one request in flight; the changes submitted
/// meanwhile wait and go together in the next one; a change whose request got no answer is
/// sent again [`ISR_CHANGE_RESEND_BACKOFF_MS`] later, if it is still its partition's pending
/// change then. A partition has at most one change here: a newer one replaces an older one,
/// unsent or waiting to be sent again (the image that cleared the older one's pending state
/// made it stale).
#[derive(Debug)]
pub struct IsrChangeQueue<K, V> {
    unsent: BTreeMap<K, V>,
    /// Changes that got no answer, with the time they go again.
    resend: BTreeMap<K, (i64, V)>,
    in_flight: bool,
}

impl<K: Ord, V> Default for IsrChangeQueue<K, V> {
    fn default() -> Self {
        IsrChangeQueue {
            unsent: BTreeMap::new(),
            resend: BTreeMap::new(),
            in_flight: false,
        }
    }
}

impl<K: Ord + Clone, V> IsrChangeQueue<K, V> {
    /// Queues `item` for the next request.
    pub fn submit(&mut self, key: K, item: V) {
        self.resend.remove(&key);
        self.unsent.insert(key, item);
    }

    /// `item`'s request got no answer at `now_ms`: it goes again after the backoff, unless a
    /// newer change of its partition is submitted first.
    pub fn resend_later(&mut self, key: K, item: V, now_ms: i64) {
        if !self.unsent.contains_key(&key) {
            self.resend
                .insert(key, (now_ms + ISR_CHANGE_RESEND_BACKOFF_MS, item));
        }
    }

    /// Whether a request may start at `now_ms`: none is in flight and a change is unsent or
    /// due to go again.
    pub fn may_start(&self, now_ms: i64) -> bool {
        !self.in_flight
            && (!self.unsent.is_empty() || self.resend.values().any(|(at, _)| *at <= now_ms))
    }

    /// Marks a request in flight (its items are taken by [`Self::take_batch`] when it is cut).
    pub fn start(&mut self) {
        self.in_flight = true;
    }

    /// The next request's items at `now_ms`: the changes due to go again that `still_wanted`
    /// (each is still its partition's pending change, in the epochs it was sent at) join the
    /// unsent ones; the first `max` in key order go, the rest wait for the next request.
    pub fn take_batch(
        &mut self,
        now_ms: i64,
        max: usize,
        mut still_wanted: impl FnMut(&V) -> bool,
    ) -> Vec<V> {
        let due: Vec<K> = self
            .resend
            .iter()
            .filter(|(_, (at, _))| *at <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let (_, item) = self.resend.remove(&key).expect("listed");
            if still_wanted(&item) && !self.unsent.contains_key(&key) {
                self.unsent.insert(key, item);
            }
        }
        let mut batch = Vec::with_capacity(self.unsent.len().min(max));
        while batch.len() < max {
            match self.unsent.pop_first() {
                Some((_, item)) => batch.push(item),
                None => break,
            }
        }
        batch
    }

    /// The request in flight was answered (or failed): the next may start.
    pub fn answered(&mut self) {
        self.in_flight = false;
    }

    /// The earliest time a change waits to go again, if any: when to look at the queue next
    /// though nothing else happens.
    pub fn next_resend(&self) -> Option<i64> {
        self.resend.values().map(|(at, _)| *at).min()
    }

    /// Forgets everything (a replica that stops).
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

/// A follower's partitions that back off after an answer they could not apply (Kafka's
/// `AbstractFetcherThread.delayPartitions`, `replica.fetch.backoff.ms`): left out of fetches
/// until their time.
#[derive(Debug)]
pub struct FetchBackoff<K> {
    until: BTreeMap<K, i64>,
}

impl<K: Ord> Default for FetchBackoff<K> {
    fn default() -> Self {
        FetchBackoff {
            until: BTreeMap::new(),
        }
    }
}

impl<K: Ord> FetchBackoff<K> {
    /// `key` backs off `backoff_ms` from `now_ms`.
    pub fn delay(&mut self, key: K, now_ms: i64, backoff_ms: i64) {
        self.until.insert(key, now_ms + backoff_ms);
    }

    /// Forgets the delays that ended by `now_ms`.
    pub fn expire(&mut self, now_ms: i64) {
        self.until.retain(|_, until| *until > now_ms);
    }

    /// Whether `key` backs off at `now_ms`.
    pub fn delayed(&self, key: &K, now_ms: i64) -> bool {
        self.until.get(key).is_some_and(|until| *until > now_ms)
    }

    /// When the earliest delay ends.
    pub fn next_end(&self) -> Option<i64> {
        self.until.values().copied().min()
    }

    pub fn clear(&mut self) {
        self.until.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_all_answers_in_kafkas_order() {
        // A deposed leader refuses even a write its high watermark passed.
        assert_eq!(acks_all(false, 3, 2, 10, 5, 0, 100), AcksAll::NotLeader);
        // An ISR below the minimum refuses at once, passed or not.
        assert_eq!(
            acks_all(true, 1, 2, 10, 5, 0, 100),
            AcksAll::NotEnoughReplicasAfterAppend { isr: 1, min: 2 }
        );
        // Passed: done, even after the deadline.
        assert_eq!(acks_all(true, 2, 2, 5, 5, 200, 100), AcksAll::Done);
        assert_eq!(acks_all(true, 2, 2, 4, 5, 100, 100), AcksAll::TimedOut);
        assert_eq!(
            acks_all(true, 2, 2, 4, 5, 99, 100),
            AcksAll::Wait { deadline_ms: 100 }
        );
    }

    #[test]
    fn one_request_in_flight_and_the_rest_go_together_next() {
        let mut q: IsrChangeQueue<i32, &str> = IsrChangeQueue::default();
        assert!(!q.may_start(0));
        q.submit(2, "b");
        q.submit(1, "a");
        assert!(q.may_start(0));
        q.start();
        assert_eq!(q.take_batch(0, 10, |_| true), vec!["a", "b"]);
        // Submitted while one is in flight: waits for its answer.
        q.submit(3, "c");
        q.submit(3, "c-newer");
        assert!(!q.may_start(0));
        q.answered();
        assert!(q.may_start(0));
        q.start();
        assert_eq!(q.take_batch(0, 1, |_| true), vec!["c-newer"]);
        q.answered();
        assert!(!q.may_start(0));
    }

    #[test]
    fn an_unanswered_change_goes_again_after_the_backoff_if_still_wanted() {
        let mut q: IsrChangeQueue<i32, &str> = IsrChangeQueue::default();
        q.resend_later(1, "a", 1_000);
        q.resend_later(2, "b", 1_000);
        assert_eq!(q.next_resend(), Some(1_000 + ISR_CHANGE_RESEND_BACKOFF_MS));
        assert!(!q.may_start(1_099));
        assert!(q.may_start(1_100));
        q.start();
        // "b" is no longer its partition's pending change (an image ended it): dropped.
        assert_eq!(q.take_batch(1_100, 10, |v| *v != "b"), vec!["a"]);
        assert_eq!(q.next_resend(), None);
        q.answered();
        // A newer change replaces one waiting to go again, and one waiting does not replace
        // an unsent newer one.
        q.resend_later(1, "a", 2_000);
        q.submit(1, "a-newer");
        q.resend_later(1, "a-newer-unanswered", 2_000);
        assert_eq!(q.next_resend(), None);
        q.start();
        assert_eq!(q.take_batch(2_000, 10, |_| true), vec!["a-newer"]);
    }

    #[test]
    fn a_partition_backs_off_until_its_time() {
        let mut b: FetchBackoff<i32> = FetchBackoff::default();
        b.delay(1, 100, 50);
        assert!(b.delayed(&1, 149));
        assert!(!b.delayed(&1, 150));
        assert!(!b.delayed(&2, 100));
        assert_eq!(b.next_end(), Some(150));
        b.expire(150);
        assert_eq!(b.next_end(), None);
    }
}
