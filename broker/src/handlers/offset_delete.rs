//! OffsetDelete (key 47), v0: deletes a group's committed offsets of some partitions. The
//! coordinator shard (`group::delete_offsets`) appends a tombstone for each committed one and
//! answers once they are durable; partitions without a commit need nothing. Unknown topic
//! partitions get UNKNOWN_TOPIC_OR_PARTITION here; group-wide errors (NOT_COORDINATOR,
//! COORDINATOR_LOAD_IN_PROGRESS, GROUP_ID_NOT_FOUND, INVALID_GROUP_ID) go in the top-level
//! error code with no topics, as Kafka answers them.
//!
//! Kafka refuses (GROUP_SUBSCRIBED_TO_TOPIC, per partition) to delete offsets of a topic the
//! group's active members subscribe to, as their consumer protocol metadata says; an active
//! group of another protocol type gets NON_EMPTY_GROUP for the whole request.
//!
//! Authorization, as Kafka's, before the coordinator is asked: DELETE on the group, else
//! GROUP_AUTHORIZATION_FAILED for the request; READ on each topic, else
//! TOPIC_AUTHORIZATION_FAILED for its partitions (the others are deleted).

use std::rc::Rc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{ApiKey, OffsetDeleteRequest, OffsetDeleteResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{topic_name, ApiSupport};
use crate::errors::{code, NONE};
use crate::group;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::OffsetDelete, 0, 0);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: OffsetDeleteRequest,
    session: &Session,
) -> OffsetDeleteResponse {
    let authz = Authz::of(shard, session);
    let group_id = req.group_id.0.to_string();
    // Before the group id is checked: Kafka's coordinator checks it after authorization.
    if !authz.group(Operation::Delete, &group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(code(ResponseError::GroupAuthorizationFailed));
    }
    if !keel_coordinator::group::group_metadata_manager::valid_group_id(&group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(code(ResponseError::InvalidGroupId));
    }
    let image = shard.image();
    let mut answers: Vec<(String, Vec<(i32, i16)>)> = Vec::with_capacity(req.topics.len());
    let mut known = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let allowed = authz.topic(Operation::Read, &name);
        let parts = t
            .partitions
            .into_iter()
            .map(|p| {
                let index = p.partition_index;
                if !allowed {
                    (index, code(ResponseError::TopicAuthorizationFailed))
                } else if image.partition(&name, index).is_none() {
                    (index, code(ResponseError::UnknownTopicOrPartition))
                } else {
                    known.push((name.clone(), index));
                    (index, NONE)
                }
            })
            .collect();
        answers.push((name, parts));
    }
    let g = group_id.clone();
    let outcome = group::on_coordinator(ApiKey::OffsetDelete, shard, &group_id, move |s, p| {
        group::delete_offsets(s, p, g, known)
    })
    .await;
    let subscribed = match outcome {
        Ok(subscribed) => subscribed,
        Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
    };
    OffsetDeleteResponse::default().with_topics(
        answers
            .into_iter()
            .map(|(name, parts)| {
                OffsetDeleteResponseTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(index, error)| {
                                let error = if error == NONE && subscribed.contains(&name) {
                                    code(ResponseError::GroupSubscribedToTopic)
                                } else {
                                    error
                                };
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(index)
                                    .with_error_code(error)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}
