//! OffsetForLeaderEpoch (key 23), v0-4 (v0-1 carry no current leader epoch, so nothing is fenced): the end offset of a leader epoch, answered from the
//! partition's leader-epoch checkpoint. Clients send it after a restart bumps the epoch,
//! to check their position did not diverge.

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
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::OffsetForLeaderEpoch, 0, 4);

/// (error, epoch, end offset)
type Answer = (i16, i32, i64);

fn failed(error: i16) -> Answer {
    (error, -1, -1)
}

async fn lookup_on_owner(shard: Rc<BrokerShard>, items: Vec<Item<(i32, i32)>>) -> Vec<Answer> {
    items
        .into_iter()
        .map(|item| {
            let Some(part) = shard.partition(&item.topic, item.partition) else {
                return failed(code(ResponseError::NotLeaderOrFollower));
            };
            let (current, requested) = item.payload;
            let epoch = part.leader_epoch.get();
            let err = check_epoch(current, epoch);
            if err != NONE {
                return failed(err);
            }
            if requested < 0 {
                return (NONE, -1, -1);
            }
            if requested >= epoch {
                // The current epoch (a restart starts one) ends at the log end.
                return (NONE, epoch, part.log.offsets().log_end_offset.0);
            }
            match part.log.end_offset_for_epoch(LeaderEpoch(requested)) {
                Some((e, off)) => (NONE, e.0, off.0),
                None => (NONE, -1, -1),
            }
        })
        .collect()
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut shape = Vec::new();
    let mut items = Vec::new();
    for t in req.topics {
        let name = t.topic.0.to_string();
        let mut parts = Vec::new();
        for p in t.partitions {
            parts.push(p.partition);
            items.push(Item {
                topic: name.clone(),
                partition: p.partition,
                payload: (p.current_leader_epoch, p.leader_epoch),
            });
        }
        shape.push((name, parts));
    }
    let mut results = on_owners(
        Some(ApiKey::OffsetForLeaderEpoch),
        shard,
        items,
        failed,
        lookup_on_owner,
    )
    .await
    .into_iter();
    let mut resp = OffsetForLeaderEpochResponse::default();
    for (name, parts) in shape {
        let mut t = OffsetForLeaderTopicResult::default().with_topic(super::topic_name(&name));
        for index in parts {
            let (error, epoch, end) = results
                .next()
                .unwrap_or_else(|| failed(code(ResponseError::UnknownServerError)));
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
