//! DescribeProducers (key 61), v0: the active idempotent and transactional producers of
//! partitions (producer id, epoch, last sequence, last timestamp, coordinator epoch, and the
//! first offset of the open transaction, -1 if none), read from each partition's producer
//! state on its owner shard. Partitions this broker does not lead get NOT_LEADER_OR_FOLLOWER;
//! unknown ones UNKNOWN_TOPIC_OR_PARTITION. A topic the session may not READ gets
//! TOPIC_AUTHORIZATION_FAILED for its partitions, and its owners are not asked (Kafka's rule).

use std::rc::Rc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    ApiKey, DescribeProducersRequest, DescribeProducersResponse, ProducerId, RequestHeader,
};
use kafka_protocol::ResponseError;
use keel_storage::ProducerInfo;

use super::{topic_name, ApiSupport};
use crate::coordination::route::{on_owners, Item};
use crate::errors::NONE;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;
use keel_vocab::ErrorCode;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeProducers, 0, 0);

type Answer = Result<Vec<ProducerInfo>, ErrorCode>;

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DescribeProducersRequest,
    session: &Session,
) -> DescribeProducersResponse {
    let authz = Authz::of(shard, session);
    // (topic, partitions, may READ it)
    let wanted: Vec<(String, Vec<i32>, bool)> = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let allowed = authz.topic(Operation::Read, &name);
            (name, t.partition_indexes, allowed)
        })
        .collect();
    let items: Vec<Item<()>> = wanted
        .iter()
        .filter(|(_, _, allowed)| *allowed)
        .flat_map(|(t, ps, _)| {
            ps.iter().map(|&p| Item {
                topic: t.clone(),
                partition: p,
                payload: (),
            })
        })
        .collect();
    let answers: Vec<Answer> = on_owners(
        Some(ApiKey::DescribeProducers),
        shard,
        items,
        |e| Err(ErrorCode::from_code(e)),
        |s, items| async move {
            items
                .into_iter()
                .map(|i| match s.partition(&i.topic, i.partition) {
                    Some(part) => Ok(part.log.producers()),
                    None => Err(ErrorCode::of(ResponseError::NotLeaderOrFollower)),
                })
                .collect()
        },
    )
    .await;
    let mut answers = answers.into_iter();
    let topics = wanted
        .into_iter()
        .map(|(t, ps, allowed)| {
            let partitions = ps
                .into_iter()
                .map(|p| {
                    let r = PartitionResponse::default().with_partition_index(p);
                    let answer = if allowed {
                        answers
                            .next()
                            .unwrap_or(Err(ErrorCode::of(ResponseError::UnknownServerError)))
                    } else {
                        Err(ErrorCode::of(ResponseError::TopicAuthorizationFailed))
                    };
                    match answer {
                        Err(e) => r.with_error_code(e.code()),
                        Ok(producers) => r.with_error_code(NONE).with_active_producers(
                            producers
                                .into_iter()
                                .map(|p| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(p.producer_id))
                                        .with_producer_epoch(i32::from(p.producer_epoch))
                                        .with_last_sequence(p.last_sequence)
                                        .with_last_timestamp(p.last_timestamp_ms)
                                        .with_coordinator_epoch(p.coordinator_epoch)
                                        .with_current_txn_start_offset(p.current_txn_start_offset)
                                })
                                .collect(),
                        ),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(topic_name(&t))
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
