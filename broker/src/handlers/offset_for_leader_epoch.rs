//! OffsetForLeaderEpoch (key 23), v0-4 (v0-1 carry no current leader epoch, so nothing is
//! fenced): the end offset of a leader epoch, answered by the leader from its leader-epoch
//! cache as Kafka's `endOffsetForEpoch` answers (the current epoch ends at the log end; an
//! unknown one is -1, -1). Clients send it after a leader change to check their position did
//! not diverge; a follower may, as a fallback to Fetch's `diverging_epoch`. A replica id
//! (v3+) that is not one of the partition's replicas gets NOT_LEADER_OR_FOLLOWER.

use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, RequestHeader,
};
use kafka_protocol::ResponseError;
use keel_storage::LeaderEpoch;

use super::fetch::check_epoch;
use super::ApiSupport;
use crate::coordination::route::{on_owners, Item};
use crate::errors::{code, NONE};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::OffsetForLeaderEpoch, 0, 4);

/// (error, epoch, end offset)
type Answer = (i16, i32, i64);

fn failed(error: i16) -> Answer {
    (error, -1, -1)
}

/// What one partition is asked: (current leader epoch, requested epoch, replica id).
type Ask = (i32, i32, i32);

async fn lookup_on_owner(shard: Rc<BrokerShard>, items: Vec<Item<Ask>>) -> Vec<Answer> {
    items
        .into_iter()
        .map(|item| {
            let Some(part) = shard.partition(&item.topic, item.partition) else {
                return failed(code(ResponseError::NotLeaderOrFollower));
            };
            let (current, requested, replica_id) = item.payload;
            let epoch = part.leader_epoch.get();
            let err = check_epoch(current, epoch);
            if err != NONE {
                return failed(err);
            }
            // Only this broker's followers may ask as replicas (a stranger learns nothing it
            // could act on, and changes nothing).
            let stranger =
                replica_id >= 0 && !part.replication.replicas.borrow().contains(&replica_id);
            if !part.is_leader() || stranger {
                return failed(code(ResponseError::NotLeaderOrFollower));
            }
            if requested < 0 {
                return (NONE, -1, -1);
            }
            // Kafka's endOffsetForEpoch: the current epoch ends at the log end; an epoch
            // above it is unknown (-1, -1).
            let (e, end) =
                crate::replication::leader::end_offset_for_epoch(&part, LeaderEpoch(requested));
            (NONE, e, end)
        })
        .collect()
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: OffsetForLeaderEpochRequest,
    session: &Session,
) -> OffsetForLeaderEpochResponse {
    let listener: &str = &session.listener;
    // replica_id exists from v3; a consumer sends -1.
    let replica_id = if hdr.request_api_version >= 3 {
        req.replica_id.0
    } else {
        -1
    };
    // A replica's question is honoured only on the inter-broker listener (Kafka asks a follower
    // for the cluster permission): elsewhere every partition gets TOPIC_AUTHORIZATION_FAILED.
    let authz = Authz::of(shard, session);
    let refused = replica_id >= 0
        && (listener != shard.config.inter_broker_listener_name
            || !authz.cluster(Operation::ClusterAction));
    let mut shape = Vec::new();
    let mut items = Vec::new();
    for t in req.topics {
        let name = t.topic.0.to_string();
        // A consumer asks about a topic it may DESCRIBE (Kafka).
        let allowed = replica_id >= 0 || authz.topic(Operation::Describe, &name);
        let mut parts = Vec::new();
        for p in t.partitions {
            parts.push(p.partition);
            if !allowed {
                continue;
            }
            items.push(Item {
                topic: name.clone(),
                partition: p.partition,
                payload: (p.current_leader_epoch, p.leader_epoch, replica_id),
            });
        }
        shape.push((name, parts, allowed));
    }
    let answers = if refused {
        vec![failed(code(ResponseError::TopicAuthorizationFailed)); items.len()]
    } else {
        on_owners(
            Some(ApiKey::OffsetForLeaderEpoch),
            shard,
            items,
            failed,
            lookup_on_owner,
        )
        .await
    };
    let mut results = answers.into_iter();
    let mut resp = OffsetForLeaderEpochResponse::default();
    for (name, parts, allowed) in shape {
        let mut t = OffsetForLeaderTopicResult::default().with_topic(super::topic_name(&name));
        for index in parts {
            let (error, epoch, end) = if allowed {
                results
                    .next()
                    .unwrap_or_else(|| failed(code(ResponseError::UnknownServerError)))
            } else {
                failed(code(ResponseError::TopicAuthorizationFailed))
            };
            t.partitions.push(
                EpochEndOffset::default()
                    .with_partition(index)
                    .with_error_code(error)
                    .with_leader_epoch(epoch)
                    .with_end_offset(end),
            );
        }
        resp.topics.push(t);
    }
    resp
}
