//! Where a coordinator key lives and how work gets there, for the group and the transaction
//! coordinators alike: a group id or transactional id maps to a partition of its internal topic
//! ([`partition_of`]), which this broker serves if it leads it, on the shard that owns it
//! ([`locate`]); [`on_shard`] runs the work there, inline or over the mesh.

use std::future::Future;
use std::rc::Rc;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;
use keel_vocab::ErrorCode;
use tracing::warn;

use crate::shard::BrokerShard;

/// The partition of internal topic `topic` that coordinates `key`: by the topic's partition
/// count once it exists, else by `configured_partitions` (the count it will be created with).
pub fn partition_of(
    shard: &BrokerShard,
    topic: &str,
    key: &str,
    configured_partitions: i32,
) -> i32 {
    let count = shard
        .image()
        .topic(topic)
        .map_or(configured_partitions, |t| t.partitions.len() as i32);
    keel_coordinator::partition_for(key, count.max(1))
}

/// Where `key` is coordinated on this broker: its partition of `topic` and the shard that owns
/// it. NOT_COORDINATOR when this broker does not lead that partition; `missing` while the
/// topic does not exist yet.
pub fn locate(
    shard: &BrokerShard,
    topic: &str,
    key: &str,
    configured_partitions: i32,
    missing: ErrorCode,
) -> Result<(i32, usize), ErrorCode> {
    let image = shard.image();
    if image.topic(topic).is_none() {
        return Err(missing);
    }
    let p = partition_of(shard, topic, key, configured_partitions);
    match image.partition(topic, p) {
        Some(m) if m.leader == shard.config.node_id => Ok((p, m.shard as usize)),
        _ => Err(ErrorCode::of(ResponseError::NotCoordinator)),
    }
}

/// Runs `work` with partition `p` on shard `target`: inline when that is this shard, else over
/// the mesh (its hop is counted under `api`). Errors are Kafka codes for the whole request.
pub async fn on_shard<R, F, Fut>(
    api: ApiKey,
    shard: &Rc<BrokerShard>,
    target: usize,
    p: i32,
    work: F,
) -> Result<R, ErrorCode>
where
    R: Send + 'static,
    F: FnOnce(Rc<BrokerShard>, i32) -> Fut + Send + 'static,
    Fut: Future<Output = Result<R, ErrorCode>> + 'static,
{
    if target == shard.id {
        return work(shard.clone(), p).await;
    }
    let sent = std::time::Instant::now();
    let call = shard.mesh.call(target, move |s| async move {
        let started = std::time::Instant::now();
        let r = work(s, p).await;
        (r, started.elapsed())
    });
    match call.await {
        Ok((r, worked)) => {
            let hop = sent.elapsed().saturating_sub(worked);
            shard
                .counters
                .record(api as i16, crate::ops::metrics::Stage::Hop, hop);
            r
        }
        Err(e) => {
            warn!(target, error = %e, "cross-shard coordinator call failed");
            Err(ErrorCode::of(ResponseError::CoordinatorNotAvailable))
        }
    }
}
