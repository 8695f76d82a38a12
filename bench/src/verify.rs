//! `--verify`: finds lost, duplicated and reordered messages.
//!
//! A message is identified by (producer id, sequence) from its payload header; each producer
//! numbers its messages 0, 1, 2, .. across all the partitions it writes to. The producer side
//! calls [`Verifier::ack`] for every acknowledged message, the consumer side
//! [`Verifier::consumed`] for every message it reads, in the order it reads them.
//!
//! Sets of messages are paged bitsets (64 Ki sequences, 8 KiB, per page and producer), so a
//! dense run of a billion sequences costs about 125 MiB per set and each call is a hash lookup
//! and a bit operation. A `Verifier` is plain data: each shard keeps its own and the runner
//! merges them at the end ([`Verifier::merge`]).
//!
//! What counts as an error (see [`Verifier::summary`]):
//! - lost: acknowledged, but a consumer group never read it;
//! - duplicated: a group read the same message more than once (acknowledged or not: a
//!   retried produce whose first attempt was written is a duplicate too);
//! - reordered: within one group and one partition, the first reading of a message from a
//!   producer came after the first reading of a later sequence from that producer. Re-reads
//!   (duplicates) are not also counted as reorderings.
//!
//! Messages read but never acknowledged (acks=0, or in flight when the run stopped) are not
//! errors.

use std::collections::BTreeMap;

use crate::message_set::IntMap;
pub use crate::message_set::{MessageSet, PartitionKey};
use crate::result::VerifySummary;

/// What one consumer group has read.
#[derive(Clone, Debug, Default)]
struct GroupState {
    seen: MessageSet,
    duplicated: u64,
    reordered: u64,
    /// Highest sequence read so far per (topic, partition, producer).
    max_sequence: IntMap<(u32, i32, u32), u64>,
}

/// Acknowledged and consumed messages of a run (or of one shard's part of it).
#[derive(Clone, Debug, Default)]
pub struct Verifier {
    acked: MessageSet,
    groups: BTreeMap<u32, GroupState>,
}

impl Verifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// The broker acknowledged message (`producer_id`, `sequence`) written to `topic_partition`.
    /// Acknowledging the same message twice counts it once.
    #[inline]
    pub fn ack(&mut self, topic_partition: PartitionKey, producer_id: u32, sequence: u64) {
        let _ = topic_partition;
        self.acked.insert(producer_id, sequence);
    }

    /// Consumer `group` read message (`producer_id`, `sequence`) from `topic_partition`; call
    /// in the order the messages were read.
    #[inline]
    pub fn consumed(
        &mut self,
        group: u32,
        topic_partition: PartitionKey,
        producer_id: u32,
        sequence: u64,
    ) {
        let state = self.groups.entry(group).or_default();
        if !state.seen.insert(producer_id, sequence) {
            state.duplicated += 1;
            return;
        }
        let (topic, partition) = topic_partition;
        let max = state
            .max_sequence
            .entry((topic, partition, producer_id))
            .or_insert(sequence);
        if sequence < *max {
            state.reordered += 1;
        } else {
            *max = sequence;
        }
    }

    /// Adds what `other` saw. A message both sides saw consumed by the same group counts as a
    /// duplicate. Reordering is judged within each side: give one partition's consumption of
    /// one group to one verifier.
    pub fn merge(&mut self, other: &Verifier) {
        self.acked.union_with(&other.acked);
        for (group, theirs) in &other.groups {
            let ours = self.groups.entry(*group).or_default();
            ours.duplicated += theirs.duplicated + ours.seen.union_with(&theirs.seen);
            ours.reordered += theirs.reordered;
            for (key, &sequence) in &theirs.max_sequence {
                let max = ours.max_sequence.entry(*key).or_insert(sequence);
                *max = (*max).max(sequence);
            }
        }
    }

    /// Distinct acknowledged messages.
    pub fn acked(&self) -> u64 {
        self.acked.len()
    }

    /// The verdict for a run with consumer groups `0..groups` (a group that read nothing lost
    /// every acknowledged message).
    pub fn summary(&self, groups: u32) -> VerifySummary {
        let acked = self.acked.len();
        let mut consumed = if groups == 0 { 0 } else { acked };
        let mut lost = 0;
        let mut duplicated = 0;
        let mut reordered = 0;
        for group in 0..groups {
            let seen_acked = self
                .groups
                .get(&group)
                .map_or(0, |state| state.seen.intersection_len(&self.acked));
            consumed = consumed.min(seen_acked);
            lost += acked - seen_acked;
        }
        for state in self.groups.values() {
            duplicated += state.duplicated;
            reordered += state.reordered;
        }
        VerifySummary {
            acked,
            consumed,
            lost,
            duplicated,
            reordered,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP0: PartitionKey = (0, 0);
    const TP1: PartitionKey = (0, 1);

    /// `producers` producers each send `per_producer` messages round-robin over `partitions`
    /// partitions; all are acked and returns them as (partition, producer, sequence).
    fn produce(
        v: &mut Verifier,
        producers: u32,
        per_producer: u64,
        partitions: i32,
    ) -> Vec<(PartitionKey, u32, u64)> {
        let mut sent = Vec::new();
        for producer in 0..producers {
            for sequence in 0..per_producer {
                let tp = (0, (sequence % partitions as u64) as i32);
                v.ack(tp, producer, sequence);
                sent.push((tp, producer, sequence));
            }
        }
        sent
    }

    #[test]
    fn clean_run_of_a_million_messages() {
        let mut v = Verifier::new();
        let sent = produce(&mut v, 4, 250_000, 8);
        for group in 0..2 {
            for &(tp, producer, sequence) in &sent {
                v.consumed(group, tp, producer, sequence);
            }
        }
        assert_eq!(
            v.summary(2),
            VerifySummary {
                acked: 1_000_000,
                consumed: 1_000_000,
                lost: 0,
                duplicated: 0,
                reordered: 0,
                ..Default::default()
            }
        );
    }

    #[test]
    fn counts_lost_per_group() {
        let mut v = Verifier::new();
        let sent = produce(&mut v, 2, 100, 2);
        for &(tp, producer, sequence) in &sent {
            v.consumed(0, tp, producer, sequence);
            if sequence % 10 != 0 {
                v.consumed(1, tp, producer, sequence);
            }
        }
        let s = v.summary(2);
        assert_eq!(s.acked, 200);
        assert_eq!(s.consumed, 180);
        assert_eq!(s.lost, 20);
        assert_eq!((s.duplicated, s.reordered), (0, 0));
        // A third group that read nothing lost everything.
        let s = v.summary(3);
        assert_eq!((s.consumed, s.lost), (0, 220));
    }

    #[test]
    fn counts_duplicates() {
        let mut v = Verifier::new();
        let sent = produce(&mut v, 1, 10, 1);
        for &(tp, producer, sequence) in &sent {
            v.consumed(0, tp, producer, sequence);
        }
        // A consumer restart re-reads 5..10 (not counted as reordering) ..
        for &(tp, producer, sequence) in &sent[5..] {
            v.consumed(0, tp, producer, sequence);
        }
        // .. and one message is read a third time.
        v.consumed(0, TP0, 0, 7);
        let s = v.summary(1);
        assert_eq!(s.duplicated, 6);
        assert_eq!(s.reordered, 0);
        assert_eq!((s.consumed, s.lost), (10, 0));
    }

    #[test]
    fn counts_reordering_per_partition_and_producer() {
        let mut v = Verifier::new();
        for sequence in 0..6 {
            v.ack(TP0, 0, sequence);
        }
        // Partition 0 gets 0, 2, 1: one reordering.
        v.consumed(0, TP0, 0, 0);
        v.consumed(0, TP0, 0, 2);
        v.consumed(0, TP0, 0, 1);
        // Partition 1 gets 5 then 3: its own order, independent of partition 0's.
        v.consumed(0, TP1, 0, 5);
        v.consumed(0, TP1, 0, 3);
        // Another producer's sequence on the same partition is not compared with producer 0's.
        v.consumed(0, TP0, 1, 0);
        v.consumed(0, TP0, 0, 4);
        // The same order in another group is that group's reordering.
        v.consumed(1, TP0, 0, 2);
        v.consumed(1, TP0, 0, 1);
        let s = v.summary(1);
        assert_eq!(s.reordered, 3);
        assert_eq!(s.duplicated, 0);
        assert_eq!(s.lost, 0);
    }

    #[test]
    fn unacked_consumed_messages_are_not_errors() {
        let mut v = Verifier::new();
        v.ack(TP0, 0, 0);
        v.consumed(0, TP0, 0, 0);
        v.consumed(0, TP0, 0, 1); // in flight at the end, or acks=0
        v.consumed(0, TP0, 7, 0);
        let s = v.summary(1);
        assert_eq!(
            s,
            VerifySummary {
                acked: 1,
                consumed: 1,
                lost: 0,
                duplicated: 0,
                reordered: 0,
                ..Default::default()
            }
        );
    }

    #[test]
    fn merge_combines_shards() {
        let mut producer_side = Verifier::new();
        let sent = produce(&mut producer_side, 3, 1000, 4);
        // Two consumer shards each own two partitions.
        let mut shard_a = Verifier::new();
        let mut shard_b = Verifier::new();
        for &(tp, producer, sequence) in &sent {
            let shard = if tp.1 < 2 { &mut shard_a } else { &mut shard_b };
            shard.consumed(0, tp, producer, sequence);
        }
        // Shard b also re-reads one of shard a's messages (a rebalance).
        shard_b.consumed(0, sent[0].0, sent[0].1, sent[0].2);
        shard_a.consumed(0, TP0, 0, 0);
        let mut all = Verifier::new();
        all.merge(&producer_side);
        all.merge(&shard_a);
        all.merge(&shard_b);
        let s = all.summary(1);
        assert_eq!(s.acked, 3000);
        assert_eq!(s.consumed, 3000);
        assert_eq!(s.lost, 0);
        assert_eq!(s.duplicated, 2);
        assert_eq!(s.reordered, 0);
    }

    #[test]
    fn message_set_handles_sparse_and_large_sequences() {
        let mut set = MessageSet::default();
        assert!(set.insert(1, u64::MAX));
        assert!(set.insert(1, 0));
        assert!(set.insert(2, 1 << 40));
        assert!(!set.insert(1, u64::MAX));
        assert_eq!(set.len(), 3);
        assert!(set.contains(2, 1 << 40));
        assert!(!set.contains(2, (1 << 40) + 1));
        let mut other = MessageSet::default();
        other.insert(1, 0);
        other.insert(3, 3);
        assert_eq!(set.intersection_len(&other), 1);
        assert_eq!(set.union_with(&other), 1);
        assert_eq!(set.len(), 4);
        let mut all: Vec<(u32, u64)> = set.iter().collect();
        all.sort();
        assert_eq!(all, vec![(1, 0), (1, u64::MAX), (2, 1 << 40), (3, 3)]);
    }
}
