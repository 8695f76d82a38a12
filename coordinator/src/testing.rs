//! What the coordinators' tests share: a seeded generator for their random walks, and topic
//! ids and partition sets for the consumer groups' and assignors' tests.

use std::collections::BTreeSet;

use keel_vocab::{TopicId, TopicIdPartition};

use crate::group::assignor::TopicsView;

pub(crate) type PartitionSet = BTreeSet<TopicIdPartition>;

/// xorshift64*: a small, seeded generator, so a failing case replays from its seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(crate) fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

pub(crate) fn topic_id(name: &str, incarnation: u8) -> TopicId {
    let mut id = [0u8; 16];
    for (i, b) in name.bytes().take(15).enumerate() {
        id[i] = b;
    }
    id[15] = incarnation;
    id
}

pub(crate) fn view(topics: &[(&str, i32)]) -> TopicsView {
    topics
        .iter()
        .map(|&(name, partitions)| (name.to_owned(), (topic_id(name, 0), partitions)))
        .collect()
}

pub(crate) fn tp(topic: &str, partition: i32) -> TopicIdPartition {
    TopicIdPartition {
        topic_id: topic_id(topic, 0),
        partition,
    }
}

pub(crate) fn set(topic: &str, partitions: &[i32]) -> PartitionSet {
    partitions.iter().map(|&p| tp(topic, p)).collect()
}
