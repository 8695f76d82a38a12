//! ListOffsets (key 2), v0-9: earliest (-2), latest (-1: the high watermark, or with
//! isolation_level=1, v2+, the last stable offset), max timestamp (-3), earliest local (-4: the
//! log start offset) and latest tiered (-5: none, no tiered storage), or the first offset
//! whose timestamp is >= the given one (through the time index); read_committed, a record
//! found by time at or past the last stable offset is not found (as Kafka).
//!
//! v0 (Kafka 3.9 still took it; Sarama sends it at its default protocol version) answers a
//! list of "old style" offsets, at most `max_num_offsets` of them. Kafka lists segment base
//! offsets before the one found; Keel lists only the offset found (what every client asks
//! for: `max_num_offsets` 1 with -1 or -2), or none when nothing is found by time.

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse, RequestHeader};
use kafka_protocol::ResponseError;

use super::fetch::check_epoch;
use super::ApiSupport;
use crate::coordination::route::{on_owners, Item};
use crate::errors::{code, storage_code, NONE};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::ListOffsets, 0, 9);

pub const LATEST: i64 = -1;
/// isolation_level 1 (read_committed): "latest" is the last stable offset.
const READ_COMMITTED: i8 = 1;
pub const EARLIEST: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
/// KIP-405 (v8+): the first offset on local disk. Keel keeps every segment locally, so it is the
/// log start offset, as Kafka answers without remote storage.
pub const EARLIEST_LOCAL: i64 = -4;
/// KIP-1005 (v9+): the last offset copied to remote storage. Keel has no tiered storage, so
/// none (-1), as Kafka answers when remote storage is off.
pub const LATEST_TIERED: i64 = -5;

#[derive(Debug, Clone, Copy)]
pub struct Found {
    pub error: i16,
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: i32,
}

fn failed(error: i16) -> Found {
    Found {
        error,
        offset: -1,
        timestamp: -1,
        leader_epoch: -1,
    }
}

/// What one partition is asked: (timestamp, current leader epoch, read_committed).
type Ask = (i64, i32, bool);

async fn lookup_on_owner(shard: Rc<BrokerShard>, items: Vec<Item<Ask>>) -> Vec<Found> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Some(part) = shard.partition(&item.topic, item.partition) else {
            let offline = shard.offline_reason(&item.topic, item.partition).is_some();
            out.push(failed(code(if offline {
                ResponseError::KafkaStorageError
            } else {
                ResponseError::NotLeaderOrFollower
            })));
            continue;
        };
        if part.log.poisoned().is_some() {
            out.push(failed(code(ResponseError::KafkaStorageError)));
            continue;
        }
        let (timestamp, current_epoch, read_committed) = item.payload;
        crate::replication::wait_for_take_up(&part).await;
        let epoch = part.leader_epoch.get();
        let epoch_error = check_epoch(current_epoch, epoch);
        if epoch_error != NONE {
            out.push(failed(epoch_error));
            continue;
        }
        if !part.is_leader() {
            out.push(failed(code(ResponseError::NotLeaderOrFollower)));
            continue;
        }
        let offsets = part.log.offsets();
        // KIP-207: a new leader whose high watermark has not reached the start of its epoch
        // does not know the latest committed offset yet.
        let lagging = part
            .replication
            .local
            .borrow()
            .latest_offset(offsets.high_watermark.0)
            .is_none();
        let not_available = || failed(code(ResponseError::OffsetNotAvailable));
        if lagging && timestamp == LATEST {
            out.push(not_available());
            continue;
        }
        let found = match timestamp {
            LATEST if read_committed => Ok(Some((offsets.last_stable_offset.0, -1))),
            LATEST => Ok(Some((offsets.high_watermark.0, -1))),
            EARLIEST | EARLIEST_LOCAL => Ok(Some((offsets.log_start_offset.0, -1))),
            LATEST_TIERED => Ok(None),
            MAX_TIMESTAMP => part
                .log
                .max_timestamp()
                .await
                .map(|o| o.map(|(off, ts)| (off.0, ts))),
            ts if ts >= 0 => part
                .log
                .offset_for_timestamp(ts)
                .await
                .map(|o| o.map(|(off, ts)| (off.0, ts))),
            _ => {
                out.push(failed(code(ResponseError::InvalidRequest)));
                continue;
            }
        };
        // Kafka: a read_committed lookup by time finds nothing at or past the LSO.
        let by_time = timestamp >= 0 || timestamp == MAX_TIMESTAMP;
        // Kafka: a lookup by time finds nothing at or past the last fetchable offset (the LSO
        // for read_committed, else the high watermark); a lagging new leader says so instead.
        let found = if by_time {
            let fetchable = if read_committed {
                offsets.last_stable_offset.0
            } else {
                offsets.high_watermark.0
            };
            found.map(|o| o.filter(|&(offset, _)| offset < fetchable))
        } else {
            found
        };
        if lagging && by_time && matches!(found, Ok(None)) {
            out.push(not_available());
            continue;
        }
        out.push(match found {
            Ok(Some((offset, ts))) => Found {
                error: NONE,
                offset,
                timestamp: ts,
                leader_epoch: epoch,
            },
            Ok(None) => Found {
                error: NONE,
                offset: -1,
                timestamp: -1,
                leader_epoch: epoch,
            },
            Err(e) => failed(storage_code(&e)),
        });
    }
    out
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: ListOffsetsRequest,
    session: &Session,
) -> ListOffsetsResponse {
    let authz = Authz::of(shard, session);
    // isolation_level exists from v2.
    let read_committed = hdr.request_api_version >= 2 && req.isolation_level == READ_COMMITTED;
    let version = hdr.request_api_version;
    let mut shape = Vec::new();
    let mut items = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        // Kafka: DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
        let allowed = authz.topic(Operation::Describe, &name);
        let mut parts = Vec::new();
        for p in t.partitions {
            parts.push((p.partition_index, p.max_num_offsets));
            if !allowed {
                continue;
            }
            items.push(Item {
                topic: name.clone(),
                partition: p.partition_index,
                payload: (p.timestamp, p.current_leader_epoch, read_committed),
            });
        }
        shape.push((name, parts, allowed));
    }
    let mut results = on_owners(
        Some(ApiKey::ListOffsets),
        shard,
        items,
        failed,
        lookup_on_owner,
    )
    .await
    .into_iter();
    let mut resp = ListOffsetsResponse::default();
    for (name, parts, allowed) in shape {
        let mut t = ListOffsetsTopicResponse::default().with_name(super::topic_name(&name));
        for (index, max_num_offsets) in parts {
            let f = if allowed {
                results
                    .next()
                    .unwrap_or_else(|| failed(code(ResponseError::UnknownServerError)))
            } else {
                failed(code(ResponseError::TopicAuthorizationFailed))
            };
            let answer = ListOffsetsPartitionResponse::default()
                .with_partition_index(index)
                .with_error_code(f.error);
            t.partitions.push(if version == 0 {
                // v0 has only the list; offset and timestamp stay at their -1 defaults.
                let found = f.error == NONE && f.offset >= 0 && max_num_offsets > 0;
                answer.with_old_style_offsets(if found { vec![f.offset] } else { Vec::new() })
            } else {
                answer
                    .with_offset(f.offset)
                    .with_timestamp(f.timestamp)
                    // leader_epoch exists from v4.
                    .with_leader_epoch(if version >= 4 { f.leader_epoch } else { -1 })
            });
        }
        resp.topics.push(t);
    }
    resp
}
