//! Replication throttles (Kafka's replication quotas, KIP-73), which keep a reassignment's
//! catch-up from taking the disk and network from clients. A broker's
//! `leader.replication.throttled.rate` bounds the bytes it serves, as leader, to followers
//! outside the ISR of the replicas its topics list in `leader.replication.throttled.replicas`;
//! `follower.replication.throttled.rate` bounds what it fetches, as a follower outside the ISR,
//! for the replicas listed in `follower.replication.throttled.replicas`. In-sync replicas are
//! never throttled (as in Kafka). Each shard holds an even share of each rate
//! (`state::ReplicationQuota`): a leader skips a throttled partition in a fetch answer while its
//! share is spent, a follower leaves it out of its next fetch.
//!
//! The rates are the image's dynamic broker configs (this broker's id, else `""`), else the
//! static settings; the lists are topic configs. Both are taken up with each image
//! (`apply`), on the shard that owns the partitions.

use std::time::{Duration, Instant};

use crate::config::{throttled_replicas_include, topic_key};
use crate::metadata::MetadataImage;
use crate::shard::{BrokerShard, Partition};

const LEADER_RATE: &str = "leader.replication.throttled.rate";
const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";

/// Takes up the image's throttle settings: this shard's share of both rates, and which of its
/// partitions' replicas are throttled.
pub fn apply(shard: &BrokerShard, image: &MetadataImage) {
    let node = shard.config.node_id;
    let configs = &image.cluster.broker_configs;
    let rate = |name: &str, static_value: i64| -> Option<f64> {
        let dynamic = configs
            .get(&node.to_string())
            .and_then(|c| c.get(name))
            .or_else(|| configs.get("").and_then(|c| c.get(name)))
            .and_then(|v| v.trim().parse::<i64>().ok());
        let bytes_per_sec = dynamic.unwrap_or(static_value);
        (bytes_per_sec < i64::MAX).then(|| bytes_per_sec.max(0) as f64 / shard.count as f64)
    };
    let quotas = &shard.replication_quotas;
    quotas.leader.set_rate(rate(
        LEADER_RATE,
        shard.config.leader_replication_throttled_rate,
    ));
    quotas.follower.set_rate(rate(
        FOLLOWER_RATE,
        shard.config.follower_replication_throttled_rate,
    ));
    for part in shard.all_partitions() {
        let Some(topic) = image.topic(&part.topic) else {
            continue;
        };
        let listed = |name: &str| {
            topic_key(name).is_some_and(|key| {
                let list = shard.config.topic_value(&topic.configs, key).0;
                throttled_replicas_include(list, part.index, node)
            })
        };
        part.replication
            .leader_throttled
            .set(listed(LEADER_REPLICAS));
        part.replication
            .follower_throttled
            .set(listed(FOLLOWER_REPLICAS));
    }
}

fn in_isr(part: &Partition, broker: i32) -> bool {
    part.replication.isr.borrow().contains(&broker)
}

/// Leader: whether `follower`'s fetch of `part` may be served now.
pub fn leader_may_serve(shard: &BrokerShard, part: &Partition, follower: i32) -> bool {
    !part.replication.leader_throttled.get()
        || in_isr(part, follower)
        || shard.replication_quotas.leader.allows(Instant::now())
}

/// Leader: `bytes` of `part` were served to `follower`.
pub fn leader_served(shard: &BrokerShard, part: &Partition, follower: i32, bytes: usize) {
    if part.replication.leader_throttled.get() && !in_isr(part, follower) {
        shard
            .replication_quotas
            .leader
            .record(bytes, Instant::now());
    }
}

/// Follower: whether this broker's replica of `part` may be fetched in the next request.
pub fn follower_may_fetch(shard: &BrokerShard, part: &Partition) -> bool {
    !part.replication.follower_throttled.get()
        || in_isr(part, shard.config.node_id)
        || shard.replication_quotas.follower.allows(Instant::now())
}

/// Follower: `bytes` of `part` were fetched.
pub fn follower_fetched(shard: &BrokerShard, part: &Partition, bytes: usize) {
    if part.replication.follower_throttled.get() && !in_isr(part, shard.config.node_id) {
        shard
            .replication_quotas
            .follower
            .record(bytes, Instant::now());
    }
}

/// Follower: how long until throttled partitions may be fetched again.
pub fn follower_wait(shard: &BrokerShard) -> Duration {
    shard
        .replication_quotas
        .follower
        .wait_hint()
        .clamp(Duration::from_millis(1), Duration::from_secs(1))
}
