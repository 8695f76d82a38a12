//! ConsumerGroupDescribe (key 69), v0-1: KIP-848 groups' epochs, assignor and members, each
//! group answered by its coordinator shard (`group::consumer_membership::describe`), all
//! concurrently. An unknown group, or one that is not a consumer group, gets
//! GROUP_ID_NOT_FOUND. Authorized operations, when asked, are all that apply to a group
//! (there are no ACLs). v1 adds `member_type`, always 1 (a consumer-protocol member).

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
use crate::shard::BrokerShard;
use keel_coordinator::group::consumer_group::{GroupDescription, TopicAssignment};
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ConsumerGroupDescribe, 0, 1);

/// `member_type` of a member that speaks the consumer protocol (v1; -1 = unknown, 0 = classic).
const MEMBER_TYPE_CONSUMER: i8 = 1;

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let operations = crate::acl::reported(req.include_authorized_operations, crate::acl::GROUP);
    let asks = req.group_ids.into_iter().map(|g| {
        let shard = shard.clone();
        let group_id = g.0.to_string();
        async move {
            let answer =
                if keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
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
            (group_id, answer)
        }
    });
    let groups = join_all(asks.collect())
        .await
        .into_iter()
        .map(|(group_id, answer)| described(group_id, answer, operations))
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
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
