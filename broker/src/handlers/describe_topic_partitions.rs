//! DescribeTopicPartitions (key 75), v0 (KIP-966): each partition's leader, epoch, replicas,
//! ISR, eligible leader replicas (ELR), last known ELR and offline replicas, from the installed
//! image, in pages: topics by name (all topics when none is named), partitions in order from
//! the request's cursor, at most `response_partition_limit` (2000 when 0 or less, as Kafka
//! caps it), and the cursor of the next page when more remain. An unknown topic gets
//! UNKNOWN_TOPIC_OR_PARTITION.

use std::rc::Rc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
    RequestHeader,
};
use kafka_protocol::ResponseError;

use super::{topic_name, ApiSupport};
use crate::errors::{code, NONE};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::{Operation, ResourceType};

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeTopicPartitions, 0, 0);

/// Kafka's `max.request.partition.size.limit` default: the most partitions in one answer.
const PARTITIONS_PER_ANSWER_MAX: i32 = 2000;

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DescribeTopicPartitionsRequest,
    session: &Session,
) -> DescribeTopicPartitionsResponse {
    let authz = Authz::of(shard, session);
    let image = shard.image();
    let limit = if req.response_partition_limit <= 0 {
        PARTITIONS_PER_ANSWER_MAX
    } else {
        req.response_partition_limit.min(PARTITIONS_PER_ANSWER_MAX)
    } as usize;
    // Kafka: all topics = those the session may DESCRIBE; a named one it may not is
    // TOPIC_AUTHORIZATION_FAILED.
    let mut names: Vec<String> = if req.topics.is_empty() {
        image
            .topics
            .keys()
            .filter(|n| authz.topic(Operation::Describe, n))
            .cloned()
            .collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.sort();
    names.dedup();
    let (cursor_topic, cursor_partition) = match &req.cursor {
        Some(c) => (c.topic_name.0.to_string(), c.partition_index.max(0)),
        None => (String::new(), 0),
    };
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    let mut resp = DescribeTopicPartitionsResponse::default();
    let mut left = limit;
    for name in names.into_iter().filter(|n| *n >= cursor_topic) {
        if !authz.topic(Operation::Describe, &name) {
            resp.topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(code(ResponseError::TopicAuthorizationFailed))
                    .with_name(Some(topic_name(&name))),
            );
            continue;
        }
        let Some(t) = image.topic(&name) else {
            resp.topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(code(ResponseError::UnknownTopicOrPartition))
                    .with_name(Some(topic_name(&name))),
            );
            continue;
        };
        let first = if name == cursor_topic {
            cursor_partition
        } else {
            0
        };
        let info = image.cluster.topic(&name);
        let mut topic = DescribeTopicPartitionsResponseTopic::default()
            .with_error_code(NONE)
            .with_name(Some(topic_name(&name)))
            .with_topic_id(t.uuid())
            .with_is_internal(
                name == keel_coordinator::OFFSETS_TOPIC
                    || name == keel_coordinator::TRANSACTION_STATE_TOPIC,
            )
            .with_topic_authorized_operations(authz.operations(
                ResourceType::Topic,
                &name,
                crate::acl::TOPIC_OPERATIONS,
            ));
        for p in t.partitions.iter().filter(|p| p.index >= first) {
            if left == 0 {
                resp.next_cursor = Some(
                    Cursor::default()
                        .with_topic_name(topic_name(&name))
                        .with_partition_index(p.index),
                );
                resp.topics.push(topic);
                return resp;
            }
            left -= 1;
            let last_known_elr = info
                .and_then(|i| i.partitions.get(p.index as usize))
                .map(|i| i.last_known_elr.clone())
                .unwrap_or_default();
            let offline: Vec<i32> = image.offline_replicas(t, p);
            topic.partitions.push(
                DescribeTopicPartitionsResponsePartition::default()
                    .with_error_code(if p.leader < 0 {
                        code(ResponseError::LeaderNotAvailable)
                    } else {
                        NONE
                    })
                    .with_partition_index(p.index)
                    .with_leader_id(BrokerId(p.leader))
                    .with_leader_epoch(p.leader_epoch)
                    .with_replica_nodes(ids(&p.replicas))
                    .with_isr_nodes(ids(&p.isr))
                    .with_eligible_leader_replicas(Some(ids(&p.elr)))
                    .with_last_known_elr(Some(ids(&last_known_elr)))
                    .with_offline_replicas(ids(&offline)),
            );
        }
        resp.topics.push(topic);
    }
    resp
}
