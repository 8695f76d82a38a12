//! OffsetCommit (key 8), v2-9: a group's consumed positions. The request is checked here
//! (group id, unknown partitions, metadata size) and the rest goes to the group's coordinator
//! shard (`group::commit_offsets`), which fences the member, appends the commit to
//! `__consumer_offsets` and answers once it is durable. A group this broker does not
//! coordinate gets NOT_COORDINATOR for every partition.
//!
//! v0-1 are not offered (kafka-protocol decodes v2+ only, and Kafka 4 dropped them too);
//! `retention_time_ms` of v2-4 is ignored: offsets expire by `offsets.retention.minutes`.

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{ApiKey, OffsetCommitRequest, OffsetCommitResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::{topic_name, ApiSupport};
use crate::errors::{code, NONE};
use crate::group::{self, CommitRequest, RECORD_STRING_BYTES_MAX};
use crate::server::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport {
    key: ApiKey::OffsetCommit,
    min: 2,
    max: 9,
};

/// Marks a partition whose answer is the coordinator's.
const PENDING: i16 = i16::MIN;

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group_id = req.group_id.0.to_string();
    let group_ok = group::valid_group_id(&group_id);
    let image = shard.image();
    let metadata_max = shard
        .config
        .offset_metadata_max_bytes
        .min(RECORD_STRING_BYTES_MAX);
    let mut answers: Vec<(String, Vec<(i32, i16)>)> = Vec::with_capacity(req.topics.len());
    let mut offsets = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let metadata = p
                .committed_metadata
                .map(|m| m.to_string())
                .unwrap_or_default();
            let error = if !group_ok {
                code(ResponseError::InvalidGroupId)
            } else if image.partition(&name, p.partition_index).is_none() {
                code(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > metadata_max {
                code(ResponseError::OffsetMetadataTooLarge)
            } else {
                offsets.push((
                    name.clone(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    metadata,
                ));
                PENDING
            };
            parts.push((p.partition_index, error));
        }
        answers.push((name, parts));
    }
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
        match group::on_coordinator(shard, &group_id, move |s, p| {
            group::commit_offsets(s, p, commit)
        })
        .await
        {
            Ok(()) => NONE,
            Err(e) => e,
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
