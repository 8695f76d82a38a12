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

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use crate::result::VerifySummary;

/// (topic index, partition).
pub type PartitionKey = (u32, i32);

/// log2 of the sequences covered by one bitset page.
const PAGE_BITS_LOG2: u32 = 16;
const PAGE_WORDS: usize = 1 << (PAGE_BITS_LOG2 - 6);

/// A multiply-rotate hasher for small integer keys (the std SipHash would dominate the cost).
#[derive(Default, Clone, Copy)]
struct IntHasher {
    hash: u64,
}

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_i32(&mut self, n: i32) {
        self.write_u64(u64::from(n as u32));
    }

    fn write_u64(&mut self, n: u64) {
        self.hash = (self.hash.rotate_left(5) ^ n).wrapping_mul(0x517C_C1B7_2722_0A95);
    }
}

type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// A set of (producer id, sequence), as bitset pages keyed by (producer, sequence >> 16).
#[derive(Clone, Debug, Default)]
pub struct MessageSet {
    pages: IntMap<(u32, u64), Box<[u64]>>,
    len: u64,
}

impl MessageSet {
    /// Adds a message; true when it was not there yet.
    #[inline]
    pub fn insert(&mut self, producer_id: u32, sequence: u64) -> bool {
        let page = self
            .pages
            .entry((producer_id, sequence >> PAGE_BITS_LOG2))
            .or_insert_with(new_page);
        let (word, bit) = word_and_bit(sequence);
        let fresh = page[word] & bit == 0;
        page[word] |= bit;
        self.len += u64::from(fresh);
        fresh
    }

    pub fn contains(&self, producer_id: u32, sequence: u64) -> bool {
        let (word, bit) = word_and_bit(sequence);
        self.pages
            .get(&(producer_id, sequence >> PAGE_BITS_LOG2))
            .is_some_and(|page| page[word] & bit != 0)
    }

    /// Number of distinct messages.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds every message of `other`; returns how many were already in `self`.
    pub fn union_with(&mut self, other: &MessageSet) -> u64 {
        let mut overlap = 0;
        for (key, theirs) in &other.pages {
            let ours = self.pages.entry(*key).or_insert_with(new_page);
            for (a, b) in ours.iter_mut().zip(theirs.iter()) {
                overlap += u64::from((*a & *b).count_ones());
                self.len += u64::from((*b & !*a).count_ones());
                *a |= *b;
            }
        }
        overlap
    }

    /// Every (producer id, sequence) in the set, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.pages.iter().flat_map(|(&(producer, page), words)| {
            words.iter().enumerate().flat_map(move |(w, &word)| {
                let base = (page << PAGE_BITS_LOG2) + w as u64 * 64;
                (0..64)
                    .filter(move |bit| word & (1 << bit) != 0)
                    .map(move |bit| (producer, base + bit))
            })
        })
    }

    /// Number of messages in both sets.
    pub fn intersection_len(&self, other: &MessageSet) -> u64 {
        let (small, large) = if self.pages.len() <= other.pages.len() {
            (self, other)
        } else {
            (other, self)
        };
        small
            .pages
            .iter()
            .filter_map(|(key, a)| large.pages.get(key).map(|b| (a, b)))
            .map(|(a, b)| {
                a.iter()
                    .zip(b.iter())
                    .map(|(x, y)| u64::from((x & y).count_ones()))
                    .sum::<u64>()
            })
            .sum()
    }
}

fn new_page() -> Box<[u64]> {
    vec![0u64; PAGE_WORDS].into_boxed_slice()
}

#[inline]
fn word_and_bit(sequence: u64) -> (usize, u64) {
    let in_page = (sequence & ((1 << PAGE_BITS_LOG2) - 1)) as usize;
    (in_page / 64, 1u64 << (in_page % 64))
}

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
