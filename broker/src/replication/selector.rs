//! KIP-392, fetching from the closest replica: which replica a partition's leader names to a
//! consumer (Kafka's `ReplicaManager.findPreferredReadReplica` with its
//! `RackAwareReplicaSelector`), and how a follower answers a consumer that came to it.
//!
//! On the leader, for a consumer's Fetch v11+ that names a rack, with
//! `replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`: the
//! candidates are the leader and the followers in the committed ISR that are live, serve the
//! client's listener and whose last fetch covers the fetch offset (their log start at or
//! below it, their log end at or above it). The leader stays the choice when it is in the
//! client's rack or no candidate is; otherwise the most caught-up candidate in that rack
//! (highest log end, then the latest caught up, then the highest broker id: Kafka's
//! `ReplicaView.comparator`). A choice other than the leader is answered with
//! `preferred_read_replica` and no records.
//!
//! On a follower (any consumer Fetch v11+, whatever the selector, as Kafka's `fetchOnlyLeader`
//! is false for them): a member of the ISR in its installed image serves the fetch from its
//! own log, up to its high watermark (read_committed: its last stable offset). One that is not
//! in the ISR names the leader as `preferred_read_replica` instead, so the client goes back to
//! the leader at once. Kafka's follower serves regardless (only the leader's choice excludes
//! replicas out of the ISR, KAFKA-14372), and a consumer stays on a lagging follower until its
//! lease expires (5 minutes); Keel sends it back, with the answer librdkafka and the Java
//! client both follow.
//!
//! Runs on the shard that owns the partition; reads its replication state and that shard's
//! copy of the metadata image; borrows end before any `.await`.

use crate::config::ReplicaSelector;
use crate::metadata::MetadataImage;
use crate::replication::read::ClientMetadata;
use crate::shard::{BrokerShard, Partition};

/// A follower the leader may name: what Kafka's `ReplicaView` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub broker_id: i32,
    pub rack: Option<&'a str>,
    /// Its log end offset, from its latest fetch.
    pub log_end_offset: i64,
    /// When it last had every record the leader had (wall-clock ms).
    pub last_caught_up_ms: i64,
}

/// Kafka's `RackAwareReplicaSelector` over the leader (in `leader_rack`) and the followers
/// that passed the leader's checks: the follower to name, or `None` for the leader.
pub fn rack_aware_choice(
    client_rack: &str,
    leader_rack: Option<&str>,
    followers: &[Candidate<'_>],
) -> Option<i32> {
    if client_rack.is_empty() || leader_rack == Some(client_rack) {
        return None;
    }
    followers
        .iter()
        .filter(|c| c.rack == Some(client_rack))
        // Kafka's comparator: log end, then the shorter time since caught up, then the id.
        .max_by_key(|c| (c.log_end_offset, c.last_caught_up_ms, c.broker_id))
        .map(|c| c.broker_id)
}

/// The rack of broker `id` as a client on `listener` sees it: `None` when the broker is not
/// live or does not serve that listener (Kafka's `Node.noNode()`, which matches no rack);
/// `Some(None)` when it has no rack.
fn rack_on<'a>(image: &'a MetadataImage, id: i32, listener: &str) -> Option<Option<&'a str>> {
    let b = image.brokers.get(&id)?;
    b.endpoint(listener)?;
    Some(b.rack.as_deref())
}

/// On the leader of `part`: the replica a consumer's fetch at `fetch_offset` should be
/// answered with instead of records, if the selector names one other than the leader.
pub fn preferred_read_replica(
    shard: &BrokerShard,
    part: &Partition,
    fetch_offset: i64,
    client: &ClientMetadata,
) -> Option<i32> {
    if shard.config.replica_selector != ReplicaSelector::RackAware
        || client.rack_id.is_empty()
        || !part.is_leader()
    {
        return None;
    }
    let image = shard.image();
    let leader_rack = rack_on(&image, part.node_id, &client.listener).flatten();
    let isr = part.replication.isr.borrow();
    let local = part.replication.local.borrow();
    let followers = &local.followers;
    let candidates: Vec<Candidate<'_>> = isr
        .iter()
        .filter(|r| **r != part.node_id)
        .filter_map(|r| {
            let p = followers.get(r)?;
            // Kafka's filter: the follower's fetch state covers the offset.
            if p.log_end_offset < fetch_offset || p.log_start_offset > fetch_offset {
                return None;
            }
            Some(Candidate {
                broker_id: *r,
                rack: rack_on(&image, *r, &client.listener)?,
                log_end_offset: p.log_end_offset,
                last_caught_up_ms: p.last_caught_up_ms,
            })
        })
        .collect();
    rack_aware_choice(&client.rack_id, leader_rack, &candidates)
}

/// How a follower answers a consumer's Fetch v11+ for `part` (which it does not lead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowerRead {
    /// In the ISR: it serves the fetch from its own log.
    Serve,
    /// Out of the ISR: the client reads from the leader (`preferred_read_replica`).
    Leader(i32),
    /// Out of the ISR with no live leader: NOT_LEADER_OR_FOLLOWER, the client refreshes its
    /// metadata.
    Refuse,
}

pub fn follower_read(shard: &BrokerShard, part: &Partition) -> FollowerRead {
    if part.replication.isr.borrow().contains(&part.node_id) {
        return FollowerRead::Serve;
    }
    let leader = part.replication.leader.get();
    if leader >= 0 && leader != part.node_id && shard.image().brokers.contains_key(&leader) {
        FollowerRead::Leader(leader)
    } else {
        FollowerRead::Refuse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(broker_id: i32, rack: &'static str, leo: i64, caught_up: i64) -> Candidate<'static> {
        Candidate {
            broker_id,
            rack: Some(rack),
            log_end_offset: leo,
            last_caught_up_ms: caught_up,
        }
    }

    #[test]
    fn no_rack_or_the_leaders_rack_keeps_the_leader() {
        let followers = [c(2, "b", 10, 0)];
        assert_eq!(rack_aware_choice("", Some("a"), &followers), None);
        assert_eq!(rack_aware_choice("b", Some("b"), &followers), None);
        // Nobody in the client's rack.
        assert_eq!(rack_aware_choice("c", Some("a"), &followers), None);
        // A follower without a rack matches no rack.
        let rackless = [Candidate {
            rack: None,
            ..c(3, "", 10, 0)
        }];
        assert_eq!(rack_aware_choice("b", Some("a"), &rackless), None);
    }

    #[test]
    fn the_most_caught_up_follower_in_the_clients_rack_is_named() {
        let followers = [c(2, "b", 10, 500), c(3, "b", 12, 100), c(4, "c", 20, 900)];
        assert_eq!(rack_aware_choice("b", Some("a"), &followers), Some(3));
        // Equal log ends: the one caught up most recently, then the highest id (Kafka's
        // comparator, taken at its maximum).
        let tied = [c(2, "b", 10, 500), c(3, "b", 10, 100)];
        assert_eq!(rack_aware_choice("b", Some("a"), &tied), Some(2));
        let same = [c(5, "b", 10, 100), c(3, "b", 10, 100)];
        assert_eq!(rack_aware_choice("b", None, &same), Some(5));
    }
}
