//! WriteTxnMarkers (key 27), v0-1 (the same fields): Kafka's inter-broker API by which a transaction coordinator
//! has the leaders of a transaction's partitions append its COMMIT or ABORT marker. Each
//! marker goes to its partition's owner shard (routed as Produce is), is appended as a
//! transactional control batch by `txn::coordinator::append_marker` (the one place markers are
//! written: the log fences the producer epoch and the coordinator epoch, and indexes an
//! abort) and committed before the answer; the append wakes the fetches waiting on the
//! partition, since its last stable offset moves. The markers of one request run
//! concurrently. v0 is not served: kafka-protocol 0.18 decodes v1 only (Kafka 4.0 removed
//! v0, KIP-896).
//!
//! Authorization, as Kafka's (3.8+, KAFKA-16513): ALTER or CLUSTER_ACTION on the cluster, else
//! CLUSTER_AUTHORIZATION_FAILED for every partition of every marker, nothing written.

use std::rc::Rc;

use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::ResponseError;

use super::ApiSupport;
use crate::coordination::parking::join_all;
use crate::coordination::route::{on_owners, Item};
use crate::errors::{code, NONE};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use crate::txn::coordinator::append_marker;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::WriteTxnMarkers, 0, 1);

/// One marker for one partition.
#[derive(Clone, Copy, Debug)]
struct Marker {
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
}

/// The partitions of one marker, by topic, in request order: what the answer lists.
type MarkerShape = (i64, Vec<(String, Vec<i32>)>);

fn failed(error: i16) -> i16 {
    error
}

/// On the owner shard: appends and commits every marker, concurrently; one error code each.
async fn write_on_owner(shard: Rc<BrokerShard>, items: Vec<Item<Marker>>) -> Vec<i16> {
    let writes = items.into_iter().map(|item| {
        let shard = shard.clone();
        async move {
            let m = item.payload;
            let written = append_marker(
                &shard,
                &item.topic,
                item.partition,
                m.producer_id,
                m.producer_epoch,
                m.commit,
                m.coordinator_epoch,
            )
            .await;
            match written {
                Ok(()) => NONE,
                Err(e) => {
                    tracing::debug!(topic = %item.topic, partition = item.partition, producer_id = m.producer_id, error = %e, "transaction marker refused");
                    e.code()
                }
            }
        }
    });
    join_all(writes.collect()).await
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: WriteTxnMarkersRequest,
    session: &Session,
) -> WriteTxnMarkersResponse {
    let authz = Authz::of(shard, session);
    let allowed = authz.cluster(Operation::Alter) || authz.cluster(Operation::ClusterAction);
    let mut shape: Vec<MarkerShape> = Vec::with_capacity(req.markers.len());
    let mut items = Vec::new();
    for m in &req.markers {
        let marker = Marker {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
        };
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in &m.topics {
            let name = t.name.0.to_string();
            // Refused: nothing goes to the owners; every partition answers the refusal.
            if allowed {
                for &partition in &t.partition_indexes {
                    items.push(Item {
                        topic: name.clone(),
                        partition,
                        payload: marker,
                    });
                }
            }
            topics.push((name, t.partition_indexes.clone()));
        }
        shape.push((marker.producer_id, topics));
    }
    let mut results = on_owners(
        Some(ApiKey::WriteTxnMarkers),
        shard,
        items,
        failed,
        write_on_owner,
    )
    .await
    .into_iter();
    let mut resp = WriteTxnMarkersResponse::default();
    for (producer_id, topics) in shape {
        let mut marker = WritableTxnMarkerResult::default()
            .with_producer_id(kafka_protocol::messages::ProducerId(producer_id));
        for (name, partitions) in topics {
            let mut t = WritableTxnMarkerTopicResult::default().with_name(super::topic_name(&name));
            for partition_index in partitions {
                let error = if allowed {
                    results
                        .next()
                        .unwrap_or_else(|| code(ResponseError::UnknownServerError))
                } else {
                    code(ResponseError::ClusterAuthorizationFailed)
                };
                t.partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(partition_index)
                        .with_error_code(error),
                );
            }
            marker.topics.push(t);
        }
        resp.markers.push(marker);
    }
    resp
}
