//! ConsumerGroupHeartbeat (key 68), v0-1: KIP-848's consumer group protocol
//! (`group.protocol=consumer`). Members join with epoch 0, heartbeat with their epoch and the
//! partitions they own, and leave with -1 (or -2, a static member's temporary leave); the
//! coordinator answers each at once with the member's epoch and, when it changed, its
//! assignment (`group::consumer_membership::heartbeat`). v0 lets the coordinator choose the
//! member id of a joining member; v1 members send their own (a UUID) and v1 adds nothing else
//! on the wire here.
//!
//! Authorization, as Kafka's, before the coordinator is asked: READ on the group, else
//! GROUP_AUTHORIZATION_FAILED; and (Kafka 4.0, KAFKA-18813) DESCRIBE on every topic of
//! `subscribed_topic_names`, else TOPIC_AUTHORIZATION_FAILED.

use std::rc::Rc;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as OwnedTopic;
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment, TopicPartitions as AssignedTopic,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, ApiSupport};
use crate::errors::code;
use crate::group::{self, consumer_membership};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;
use keel_coordinator::group::consumer_group::HeartbeatRequest;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ConsumerGroupHeartbeat, 0, 1);

fn error(error: i16, message: String) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(error)
        .with_error_message((!message.is_empty()).then(|| str_bytes(message)))
}

fn owned(topics: Vec<OwnedTopic>) -> Vec<([u8; 16], Vec<i32>)> {
    topics
        .into_iter()
        .map(|t| (*t.topic_id.as_bytes(), t.partitions))
        .collect()
}

/// `client_host` is the client's address as Kafka shows it ("/127.0.0.1").
pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: ConsumerGroupHeartbeatRequest,
    session: &Session,
) -> ConsumerGroupHeartbeatResponse {
    let client_host: &str = &session.client_host;
    let authz = Authz::of(shard, session);
    let group_id = req.group_id.0.to_string();
    if !authz.group(Operation::Read, &group_id) {
        return error(code(ResponseError::GroupAuthorizationFailed), String::new());
    }
    let mut subscribed = req.subscribed_topic_names.iter().flatten();
    if !subscribed.all(|t| authz.topic(Operation::Describe, t)) {
        return error(code(ResponseError::TopicAuthorizationFailed), String::new());
    }
    if !keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
        return error(
            code(ResponseError::InvalidGroupId),
            "The group id is empty or too long.".into(),
        );
    }
    let request = HeartbeatRequest {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.map(|s| s.to_string()),
        rack_id: req.rack_id.map(|s| s.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: req.subscribed_topic_regex.map(|s| s.to_string()),
        server_assignor: req.server_assignor.map(|s| s.to_string()),
        owned_partitions: req.topic_partitions.map(owned),
        client_id: hdr
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
        client_host: client_host.to_string(),
    };
    let g = group_id.clone();
    let answer = group::on_coordinator(
        ApiKey::ConsumerGroupHeartbeat,
        shard,
        &group_id,
        move |s, p| async move { Ok(consumer_membership::heartbeat(s, p, g, request).await) },
    )
    .await;
    let r = match answer {
        Ok(Ok(r)) => r,
        Ok(Err((e, message))) => return error(e.code(), message),
        Err(e) => return error(e.code(), String::new()),
    };
    if !r.error_code.is_none() {
        return error(r.error_code.code(), r.error_message.unwrap_or_default());
    }
    let assignment = r.assignment.map(|topics| {
        Assignment::default().with_topic_partitions(
            topics
                .into_iter()
                .map(|(id, partitions)| {
                    AssignedTopic::default()
                        .with_topic_id(uuid::Uuid::from_bytes(id))
                        .with_partitions(partitions)
                })
                .collect(),
        )
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_member_id(r.member_id.map(str_bytes))
        .with_member_epoch(r.member_epoch)
        .with_heartbeat_interval_ms(r.heartbeat_interval_ms)
        .with_assignment(assignment)
}
