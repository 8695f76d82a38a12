//! TxnOffsetCommit (key 28), v0-3: a transactional producer commits a consumer group's offsets
//! as part of its transaction (`send_offsets_to_transaction`). The group's coordinator appends
//! them to the group's `__consumer_offsets` partition as a transactional batch of the producer
//! and holds them until the producer's marker there: COMMIT makes them the group's committed
//! offsets, ABORT drops them (`group::txn_commit_offsets`). v3 carries the consumer's group
//! membership, checked as OffsetCommit checks it (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
//! FENCED_INSTANCE_ID); a batch from an older epoch of the producer gets PRODUCER_FENCED.
//!
//! Authorization, as Kafka's, before the coordinator is asked: WRITE on the transactional id
//! (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition), then READ on the group
//! (GROUP_AUTHORIZATION_FAILED for every partition), then READ on each topic
//! (TOPIC_AUTHORIZATION_FAILED for its partitions; the others are committed).

use std::rc::Rc;

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

use super::offset_commit::{check_partitions, refused, PartitionCommit, PENDING};
use super::{topic_name, ApiSupport};
use crate::errors::NONE;
use crate::group::{self, TxnCommitRequest};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::TxnOffsetCommit, 0, 3);

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: TxnOffsetCommitRequest,
    session: &Session,
) -> TxnOffsetCommitResponse {
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
    let (answers, offsets) = if !authz.transactional_id(Operation::Write, &req.transactional_id.0) {
        refused(topics, ResponseError::TransactionalIdAuthorizationFailed)
    } else if !authz.group(Operation::Read, &group_id) {
        refused(topics, ResponseError::GroupAuthorizationFailed)
    } else {
        check_partitions(shard, &group_id, topics, |t| {
            authz.topic(Operation::Read, t)
        })
    };
    let outcome = if offsets.is_empty() {
        NONE
    } else {
        let v3 = hdr.request_api_version >= 3;
        let commit = TxnCommitRequest {
            group: group_id.clone(),
            producer_id: req.producer_id.0,
            producer_epoch: req.producer_epoch,
            member_id: if v3 {
                req.member_id.to_string()
            } else {
                String::new()
            },
            generation_id: if v3 { req.generation_id } else { -1 },
            instance_id: req.group_instance_id.filter(|_| v3).map(|i| i.to_string()),
            offsets,
        };
        match group::on_coordinator(ApiKey::TxnOffsetCommit, shard, &group_id, move |s, p| {
            group::txn_commit_offsets(s, p, commit)
        })
        .await
        {
            Ok(()) => NONE,
            Err(e) => e.code(),
        }
    };
    TxnOffsetCommitResponse::default().with_topics(
        answers
            .into_iter()
            .map(|(name, parts)| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(index, error)| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(index)
                                    .with_error_code(if error == PENDING { outcome } else { error })
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}
