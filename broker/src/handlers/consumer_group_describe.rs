//! ConsumerGroupDescribe (key 69), v0-1: KIP-848 groups' epochs, assignor and members, each
//! group answered by its coordinator shard (`group::consumer_membership::describe`), all
//! concurrently. An unknown group, or one that is not a consumer group, gets
//! GROUP_ID_NOT_FOUND. Authorized operations, when asked, are those of READ, DESCRIBE and
//! DELETE the session is allowed (all three without an authorizer). v1 adds `member_type`,
//! always 1 (a consumer-protocol member).
//!
//! Authorization, as Kafka's: a group the session may not DESCRIBE is answered
//! GROUP_AUTHORIZATION_FAILED (group id and error only) and its coordinator is not asked; and
//! (Kafka 4.0, KAFKA-18813) a group whose members' assignments or target assignments name a
//! topic the session may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED the same way.

use std::rc::Rc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, GroupId, RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{str_bytes, topic_name, ApiSupport};
use crate::coordination::parking::join_all;
use crate::errors::NONE;
use crate::group::{self, consumer_membership};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::{Operation, ResourceType};
use keel_coordinator::group::consumer_group::{GroupDescription, TopicAssignment};
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ConsumerGroupDescribe, 0, 1);

/// `member_type` of a member that speaks the consumer protocol (v1; -1 = unknown, 0 = classic).
const MEMBER_TYPE_CONSUMER: i8 = 1;

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: ConsumerGroupDescribeRequest,
    session: &Session,
) -> ConsumerGroupDescribeResponse {
    let authz = Authz::of(shard, session);
    let operations_asked = req.include_authorized_operations;
    let asks = req.group_ids.into_iter().map(|g| {
        let shard = shard.clone();
        let group_id = g.0.to_string();
        let allowed = authz.group(Operation::Describe, &group_id);
        async move {
            let answer = if !allowed {
                Err((
                    ErrorCode::of(ResponseError::GroupAuthorizationFailed),
                    String::new(),
                ))
            } else if keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
                let gid = group_id.clone();
                group::on_coordinator(
                    ApiKey::ConsumerGroupDescribe,
                    &shard,
                    &group_id,
                    move |s, p| async move { Ok(consumer_membership::describe(s, p, gid).await) },
                )
                .await
                .unwrap_or_else(|e| Err((e, String::new())))
            } else {
                Err((ErrorCode::of(ResponseError::InvalidGroupId), String::new()))
            };
            (group_id, allowed, answer)
        }
    });
    let groups = join_all(asks.collect())
        .await
        .into_iter()
        .map(|(group_id, allowed, answer)| {
            let topics_refused = matches!(&answer, Ok(d) if !topics_allowed(&authz, d));
            let answer = if topics_refused {
                Err((
                    ErrorCode::of(ResponseError::TopicAuthorizationFailed),
                    String::new(),
                ))
            } else {
                answer
            };
            let operations = if operations_asked && allowed && !topics_refused {
                authz.operations(ResourceType::Group, &group_id, crate::acl::GROUP_OPERATIONS)
            } else {
                crate::acl::OMITTED
            };
            described(group_id, answer, operations)
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

/// Whether the session may DESCRIBE every topic that a member's assignment or target
/// assignment names (Kafka answers TOPIC_AUTHORIZATION_FAILED for the group otherwise). A topic
/// without a name (deleted) is not checked.
fn topics_allowed(authz: &Authz<'_>, d: &GroupDescription) -> bool {
    d.members
        .iter()
        .flat_map(|m| m.assignment.iter().chain(&m.target_assignment))
        .map(|t| t.topic_name.as_str())
        .filter(|name| !name.is_empty())
        .all(|name| authz.topic(Operation::Describe, name))
}

fn assignment(topics: Vec<TopicAssignment>) -> Assignment {
    Assignment::default().with_topic_partitions(
        topics
            .into_iter()
            .map(|t| {
                TopicPartitions::default()
                    .with_topic_id(uuid::Uuid::from_bytes(t.topic_id))
                    .with_topic_name(topic_name(&t.topic_name))
                    .with_partitions(t.partitions)
            })
            .collect(),
    )
}

fn described(
    group_id: String,
    answer: Result<GroupDescription, (ErrorCode, String)>,
    operations: i32,
) -> DescribedGroup {
    let g = DescribedGroup::default()
        .with_group_id(GroupId(str_bytes(group_id)))
        .with_authorized_operations(operations);
    let d = match answer {
        Ok(d) => d,
        Err((e, message)) => {
            return g
                .with_error_code(e.code())
                .with_error_message((!message.is_empty()).then(|| str_bytes(message)))
        }
    };
    let members = d
        .members
        .into_iter()
        .map(|m| {
            Member::default()
                .with_member_id(str_bytes(m.member_id))
                .with_instance_id(m.instance_id.map(str_bytes))
                .with_rack_id(m.rack_id.map(str_bytes))
                .with_member_epoch(m.member_epoch)
                .with_client_id(str_bytes(m.client_id))
                .with_client_host(str_bytes(m.client_host))
                .with_subscribed_topic_names(
                    m.subscribed_topic_names
                        .iter()
                        .map(|n| topic_name(n))
                        .collect(),
                )
                .with_subscribed_topic_regex(m.subscribed_topic_regex.map(str_bytes))
                .with_assignment(assignment(m.assignment))
                .with_target_assignment(assignment(m.target_assignment))
                .with_member_type(MEMBER_TYPE_CONSUMER)
        })
        .collect();
    g.with_error_code(NONE)
        .with_group_state(str_bytes(d.state.as_str()))
        .with_group_epoch(d.group_epoch)
        .with_assignment_epoch(d.assignment_epoch)
        .with_assignor_name(str_bytes(d.assignor_name))
        .with_members(members)
}
