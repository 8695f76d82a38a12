//! OffsetCommit (key 8), v0-9: a group's consumed positions. The request is checked here
//! (group id, unknown partitions, metadata size) and the rest goes to the group's coordinator
//! shard (`group::commit_offsets`), which fences the member, appends the commit to
//! `__consumer_offsets` and answers once it is durable. A group this broker does not
//! coordinate gets NOT_COORDINATOR for every partition.
//!
//! Authorization, as Kafka's: READ on the group, else GROUP_AUTHORIZATION_FAILED for every
//! partition; then READ on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions (the
//! others are committed). Both are checked before the coordinator is asked.
//!
//! v0-1 are offered as Kafka 3.9 did (Sarama commits with v1 at every protocol version): v0
//! has no generation or member, so it commits as a client outside any group (allowed while
//! the group has no members); v1's `commit_timestamp` and v2-4's `retention_time_ms` are
//! ignored: offsets expire by `offsets.retention.minutes` from the commit's arrival.

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{ApiKey, OffsetCommitRequest, OffsetCommitResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{topic_name, ApiSupport};
use crate::errors::{code, NONE};
use crate::group::{self, CommitRequest};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;
use keel_coordinator::group::group_metadata_manager::RECORD_STRING_BYTES_MAX;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::OffsetCommit, 0, 9);

/// Marks a partition whose answer is the coordinator's.
pub const PENDING: i16 = i16::MIN;

/// A topic's partitions and their answers.
pub type TopicAnswers = (String, Vec<(i32, i16)>);
/// (topic, partition, offset, leader epoch, metadata).
pub type OffsetToCommit = (String, i32, i64, i32, String);

/// One partition's offset to commit, as OffsetCommit and TxnOffsetCommit carry it.
pub struct PartitionCommit {
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// The checks both commit APIs make before the coordinator: READ on the topic (`may_read`), a
/// valid group id, a known partition, metadata within `offset.metadata.max.bytes`. Returns each
/// partition's answer ([`PENDING`]: the coordinator's) by topic, and the offsets to commit as
/// (topic, partition, offset, leader epoch, metadata).
pub fn check_partitions(
    shard: &BrokerShard,
    group_id: &str,
    topics: impl Iterator<Item = (String, Vec<PartitionCommit>)>,
    may_read: impl Fn(&str) -> bool,
) -> (Vec<TopicAnswers>, Vec<OffsetToCommit>) {
    let group_ok = keel_coordinator::group::group_metadata_manager::valid_group_id(group_id);
    let image = shard.image();
    let metadata_max = shard
        .config
        .offset_metadata_max_bytes
        .min(RECORD_STRING_BYTES_MAX);
    let mut answers = Vec::new();
    let mut offsets = Vec::new();
    for (name, partitions) in topics {
        // Refused before the topic is looked up, so a refused session learns nothing of it; and
        // before the group id, which Kafka's coordinator checks only for authorized topics.
        let allowed = may_read(&name);
        let mut parts = Vec::with_capacity(partitions.len());
        for p in partitions {
            let metadata = p.metadata.unwrap_or_default();
            let error = if !allowed {
                code(ResponseError::TopicAuthorizationFailed)
            } else if !group_ok {
                code(ResponseError::InvalidGroupId)
            } else if image.partition(&name, p.partition).is_none() {
                code(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > metadata_max {
                code(ResponseError::OffsetMetadataTooLarge)
            } else {
                offsets.push((
                    name.clone(),
                    p.partition,
                    p.offset,
                    p.leader_epoch,
                    metadata,
                ));
                PENDING
            };
            parts.push((p.partition, error));
        }
        answers.push((name, parts));
    }
    (answers, offsets)
}

/// Every partition answered `error` (a refused group or transactional id): nothing to commit.
pub fn refused(
    topics: impl Iterator<Item = (String, Vec<PartitionCommit>)>,
    error: ResponseError,
) -> (Vec<TopicAnswers>, Vec<OffsetToCommit>) {
    let answers = topics
        .map(|(name, partitions)| {
            let parts = partitions
                .iter()
                .map(|p| (p.partition, code(error)))
                .collect();
            (name, parts)
        })
        .collect();
    (answers, Vec::new())
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: OffsetCommitRequest,
    session: &Session,
) -> OffsetCommitResponse {
    let authz = Authz::of(shard, session);
    let group_id = req.group_id.0.to_string();
    let topics = req.topics.into_iter().map(|t| {
        let parts = t.partitions.into_iter().map(|p| PartitionCommit {
            partition: p.partition_index,
            offset: p.committed_offset,
            leader_epoch: p.committed_leader_epoch,
            metadata: p.committed_metadata.map(|m| m.to_string()),
        });
        (t.name.0.to_string(), parts.collect())
    });
    let (answers, offsets) = if authz.group(Operation::Read, &group_id) {
        check_partitions(shard, &group_id, topics, |t| {
            authz.topic(Operation::Read, t)
        })
    } else {
        refused(topics, ResponseError::GroupAuthorizationFailed)
    };
    let outcome = if offsets.is_empty() {
        NONE
    } else {
        let commit = CommitRequest {
            group: group_id.clone(),
            member_id: req.member_id.to_string(),
            generation_id: req.generation_id_or_member_epoch,
            instance_id: req.group_instance_id.map(|i| i.to_string()),
            offsets,
        };
        match group::on_coordinator(ApiKey::OffsetCommit, shard, &group_id, move |s, p| {
            group::commit_offsets(s, p, commit)
        })
        .await
        {
            Ok(()) => NONE,
            Err(e) => e.code(),
        }
    };
    OffsetCommitResponse::default().with_topics(
        answers
            .into_iter()
            .map(|(name, parts)| {
                OffsetCommitResponseTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(index, error)| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(index)
                                    .with_error_code(if error == PENDING { outcome } else { error })
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}
