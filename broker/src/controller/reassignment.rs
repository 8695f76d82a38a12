//! Partition reassignment (KIP-455: AlterPartitionReassignments, ListPartitionReassignments)
//! and broker unregistration, the broker's side, on shard 0. The decisions are the pure
//! functions of `keel_raft::partition_change` (`reassign`, `unregister_records`), made on this
//! broker's image and proposed with the partitions' epochs as preconditions: a proposal that a
//! concurrent change made stale is rejected whole when applied, and computed again on the
//! newer image (at most `ATTEMPTS` times).
//!
//! What a reassignment does once committed happens elsewhere: added replicas open their logs
//! and fetch as followers (`replication::apply_image`), the leader adds them to the ISR when
//! they catch up, the controller completes the reassignment with that ISR change
//! (`partition_change::alter_partition`), and replicas no longer assigned close and delete
//! their logs (`BrokerShard::install_image`).

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::ResponseError;
use keel_raft::image::codes;
use keel_raft::partition_change::{reassign, unregister_records};
use keel_raft::Record;
use keel_vocab::ErrorCode;

use super::{propose, OpError};
use crate::shard::BrokerShard;

/// How often a proposal rejected as stale is computed again on the newer image.
const ATTEMPTS: usize = 3;

/// One partition's requested reassignment: the target replicas, or None to cancel.
pub struct ReassignRequest {
    pub topic: String,
    pub partition: i32,
    pub target: Option<Vec<i32>>,
}

/// Starts, replaces or cancels each partition's reassignment; a result per request, in order.
/// With `allow_replication_factor_change` false (AlterPartitionReassignments v1), a target
/// whose size differs from the current replication factor is refused
/// (INVALID_REPLICATION_FACTOR). The valid ones are committed together.
pub async fn alter_reassignments(
    shard: Rc<BrokerShard>,
    requests: Vec<ReassignRequest>,
    allow_replication_factor_change: bool,
) -> Vec<Result<(), OpError>> {
    let mut results: Vec<Result<(), OpError>> = Vec::new();
    for attempt in 0..ATTEMPTS {
        let image = shard.image();
        let mut records: Vec<Record> = Vec::new();
        results = requests
            .iter()
            .map(|r| {
                if !allow_replication_factor_change {
                    check_replication_factor(&image.cluster, r)?;
                }
                match reassign(&image.cluster, &r.topic, r.partition, r.target.as_deref()) {
                    Ok(record) => {
                        records.extend(record);
                        Ok(())
                    }
                    Err((code, message)) => Err(OpError {
                        code: ErrorCode::from_code(code),
                        message,
                    }),
                }
            })
            .collect();
        if records.is_empty() {
            return results;
        }
        match propose(&shard, records).await {
            Ok(()) => return results,
            Err(e) if attempt + 1 < ATTEMPTS && is_stale(&e) => continue,
            Err(e) => {
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(e.clone());
                }
                return results;
            }
        }
    }
    results
}

fn check_replication_factor(
    image: &keel_raft::ClusterImage,
    r: &ReassignRequest,
) -> Result<(), OpError> {
    let (Some(target), Some(p)) = (
        r.target.as_ref(),
        image
            .topic(&r.topic)
            .and_then(|t| t.partitions.get(usize::try_from(r.partition).ok()?)),
    ) else {
        return Ok(());
    };
    let current = p.replicas_before_reassignment().len();
    if target.len() != current {
        return Err(OpError::new(
            ResponseError::InvalidReplicationFactor,
            format!(
                "the reassignment changes the replication factor from {current} to {}, and the request does not allow it",
                target.len()
            ),
        ));
    }
    Ok(())
}

/// Whether a rejected proposal was decided on a stale image (worth computing again).
fn is_stale(e: &OpError) -> bool {
    [codes::FENCED_LEADER_EPOCH, codes::INVALID_UPDATE_VERSION].contains(&e.code.code())
}

/// A partition's reassignment in progress: (partition, replicas, adding, removing).
pub type Ongoing = (i32, Vec<i32>, Vec<i32>, Vec<i32>);

/// Every partition with a reassignment in progress, by topic, from this broker's image.
/// `wanted` limits it to those topics and partitions (None: all).
pub fn list_reassignments(
    shard: &BrokerShard,
    wanted: Option<&BTreeMap<String, Vec<i32>>>,
) -> BTreeMap<String, Vec<Ongoing>> {
    let image = shard.image();
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for (name, topic) in &image.cluster.topics {
        let only = wanted.map(|w| w.get(name));
        if only == Some(None) {
            continue;
        }
        for p in topic.partitions.iter().filter(|p| p.reassigning()) {
            if only
                .flatten()
                .is_some_and(|parts| !parts.contains(&p.partition))
            {
                continue;
            }
            out.entry(name.clone()).or_default().push((
                p.partition,
                p.replicas.clone(),
                p.adding_replicas.clone(),
                p.removing_replicas.clone(),
            ));
        }
    }
    out
}

/// Unregisters `broker_id` (Kafka's UnregisterBroker): fenced first (out of every ISR, its
/// leadership moved), then its registration removed. BROKER_ID_NOT_REGISTERED when unknown.
pub async fn unregister_broker(shard: Rc<BrokerShard>, broker_id: i32) -> Result<(), OpError> {
    for attempt in 0..ATTEMPTS {
        let image = shard.image();
        let records = unregister_records(&image.cluster, broker_id).map_err(|code| OpError {
            code: ErrorCode::from_code(code),
            message: format!("broker {broker_id} is not registered"),
        })?;
        match propose(&shard, records).await {
            Err(e) if attempt + 1 < ATTEMPTS && is_stale(&e) => continue,
            other => return other,
        }
    }
    Ok(())
}
