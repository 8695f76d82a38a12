//! Partition -> shard placement.
//!
//! `shard = hash(topic_id, partition) mod shard_count`. The hash is FNV-1a over the topic
//! id's 16 bytes and the partition index, so it is stable across restarts and platforms
//! (the metadata image records the result, so it can later be rebalanced).

/// Index of a shard (one per core), `0..shard_count`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ShardId(pub u32);

impl ShardId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The shard that owns partition `partition` of the topic with id `topic_id`.
pub fn shard_for_partition(topic_id: [u8; 16], partition: i32, shard_count: usize) -> ShardId {
    assert!(shard_count > 0, "shard_count must be positive");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in topic_id.iter().chain(partition.to_be_bytes().iter()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Mix the high bits down so small partition numbers spread evenly.
    hash ^= hash >> 33;
    ShardId((hash % shard_count as u64) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_in_range() {
        let id = [7u8; 16];
        for count in 1..8 {
            for p in 0..64 {
                let s = shard_for_partition(id, p, count);
                assert!(s.index() < count);
                assert_eq!(s, shard_for_partition(id, p, count));
            }
        }
    }

    #[test]
    fn spreads_partitions_over_all_shards() {
        let id = *b"0123456789abcdef";
        let mut seen = [0usize; 4];
        for p in 0..64 {
            seen[shard_for_partition(id, p, 4).index()] += 1;
        }
        assert!(seen.iter().all(|&n| n >= 4), "uneven spread: {seen:?}");
    }
}
