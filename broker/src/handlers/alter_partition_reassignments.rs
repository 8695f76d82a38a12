//! AlterPartitionReassignments (key 45), v0-1 (KIP-455): starts, replaces or cancels (null
//! replicas) each partition's reassignment through the controller (`controller::reassignment`).
//! Answered once the change is committed and installed on this broker. v1's
//! `allow_replication_factor_change` false refuses a change of replication factor.

use std::rc::Rc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, RequestHeader,
};

use super::{str_bytes, ApiSupport};
use crate::controller;
use crate::controller::reassignment::{alter_reassignments, ReassignRequest};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::AlterPartitionReassignments, 0, 1);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: AlterPartitionReassignmentsRequest,
    session: &Session,
) -> AlterPartitionReassignmentsResponse {
    let asked: Vec<ReassignRequest> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| ReassignRequest {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                target: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    if !Authz::of(shard, session).cluster(Operation::Alter) {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(kafka_protocol::ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes(format!(
                "{} may not ALTER the cluster",
                session.principal
            ))));
    }
    let n = asked.len();
    let allow_rf_change = hdr.request_api_version < 1 || req.allow_replication_factor_change;
    let results = match controller::call(shard, move |s| {
        alter_reassignments(s, asked, allow_rf_change)
    })
    .await
    {
        Ok(r) => r,
        Err(e) => vec![Err(e); n],
    };
    let mut results = results.into_iter();
    let mut resp = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_rf_change);
    for t in &req.topics {
        let mut topic = ReassignableTopicResponse::default().with_name(t.name.clone());
        for p in &t.partitions {
            let mut part =
                ReassignablePartitionResponse::default().with_partition_index(p.partition_index);
            if let Some(Err(e)) = results.next() {
                part.error_code = e.code.code();
                part.error_message = Some(str_bytes(e.message));
            }
            topic.partitions.push(part);
        }
        resp.responses.push(topic);
    }
    resp
}
