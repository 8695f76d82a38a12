//! ListPartitionReassignments (key 46), v0 (KIP-455): every partition with a reassignment in
//! progress (or those asked for), with its replicas and the replicas being added and removed,
//! from this broker's metadata image.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
    RequestHeader,
};

use super::ApiSupport;
use crate::controller::reassignment::list_reassignments;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use kafka_protocol::ResponseError;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ListPartitionReassignments, 0, 0);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: ListPartitionReassignmentsRequest,
    session: &Session,
) -> ListPartitionReassignmentsResponse {
    if !Authz::of(shard, session).cluster(Operation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let wanted: Option<BTreeMap<String, Vec<i32>>> = req.topics.as_ref().map(|topics| {
        let mut w: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for t in topics {
            w.entry(t.name.0.to_string())
                .or_default()
                .extend(&t.partition_indexes);
        }
        w
    });
    let ids = |v: Vec<i32>| v.into_iter().map(BrokerId).collect::<Vec<_>>();
    let mut resp = ListPartitionReassignmentsResponse::default();
    for (name, parts) in list_reassignments(shard, wanted.as_ref()) {
        let mut topic = OngoingTopicReassignment::default().with_name(super::topic_name(&name));
        for (partition, replicas, adding, removing) in parts {
            topic.partitions.push(
                OngoingPartitionReassignment::default()
                    .with_partition_index(partition)
                    .with_replicas(ids(replicas))
                    .with_adding_replicas(ids(adding))
                    .with_removing_replicas(ids(removing)),
            );
        }
        resp.topics.push(topic);
    }
    resp
}
