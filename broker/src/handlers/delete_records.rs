//! DeleteRecords (key 21), v0-2: moves each partition's log start offset up to the requested
//! offset (-1 = the high watermark). The owner shard persists the new log start offset before
//! it moves it in memory, then deletes the segments wholly below it; fetches below it get
//! OFFSET_OUT_OF_RANGE from then on, also after a restart. The answer's `low_watermark` is the
//! new log start offset. An offset above the high watermark is OFFSET_OUT_OF_RANGE and moves
//! nothing; one at or below the current log start offset moves nothing and succeeds.
//!
//! On a replicated partition the leader moves its own log start offset, and its followers
//! move theirs when their next fetch brings the new one; the answer waits, as Kafka's
//! DelayedDeleteRecords does, until the low watermark (the lowest log start offset over the
//! leader and its live followers) reaches the requested offset, and carries that low
//! watermark. The work runs in its own task: if `timeout_ms` passes first, or the request is dropped (client
//! gone), it still completes, so no move is left half done. A request that timed out is
//! answered REQUEST_TIMED_OUT for every partition; as in Kafka, its moves may still happen.
//! `timeout_ms` <= 0 waits for the local work.

use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, RequestHeader,
};
use kafka_protocol::ResponseError;
use keel_storage::{Offset, StorageError};
use tracing::{debug, info, warn};

use super::ApiSupport;
use crate::coordination::route::{on_owners, Item};
use crate::errors::{code, storage_code, NONE};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DeleteRecords, 0, 2);

/// The answer for one partition.
#[derive(Debug, Clone, Copy)]
struct Moved {
    error: i16,
    /// The log start offset after the request; -1 on error.
    low_watermark: i64,
}

fn failed(error: i16) -> Moved {
    Moved {
        error,
        low_watermark: -1,
    }
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DeleteRecordsRequest,
    session: &Session,
) -> DeleteRecordsResponse {
    let authz = Authz::of(shard, session);
    let mut shape = Vec::with_capacity(req.topics.len());
    let mut refused_topics = Vec::new();
    let mut items = Vec::new();
    for t in req.topics {
        let name = t.name.0.to_string();
        // Kafka: DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
        if !authz.topic(Operation::Delete, &name) {
            refused_topics.push((
                name,
                t.partitions
                    .iter()
                    .map(|p| p.partition_index)
                    .collect::<Vec<_>>(),
            ));
            continue;
        }
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            parts.push(p.partition_index);
            items.push(Item {
                topic: name.clone(),
                partition: p.partition_index,
                payload: (p.offset, req.timeout_ms),
            });
        }
        shape.push((name, parts));
    }
    let count = items.len();
    let work = {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            on_owners(
                Some(ApiKey::DeleteRecords),
                &shard,
                items,
                failed,
                delete_on_owner,
            )
            .await
        })
        .detach()
    };
    let results = if req.timeout_ms > 0 {
        let timeout = Duration::from_millis(req.timeout_ms as u64);
        futures_lite::future::or(work, async {
            glommio::timer::sleep(timeout).await;
            None
        })
        .await
    } else {
        work.await
    };
    let results =
        results.unwrap_or_else(|| vec![failed(code(ResponseError::RequestTimedOut)); count]);
    let mut results = results.into_iter();
    let mut resp = DeleteRecordsResponse::default();
    for (name, parts) in shape {
        let mut t = DeleteRecordsTopicResult::default().with_name(super::topic_name(&name));
        for index in parts {
            let m = results
                .next()
                .unwrap_or_else(|| failed(code(ResponseError::UnknownServerError)));
            t.partitions.push(
                DeleteRecordsPartitionResult::default()
                    .with_partition_index(index)
                    .with_low_watermark(m.low_watermark)
                    .with_error_code(m.error),
            );
        }
        resp.topics.push(t);
    }
    for (name, parts) in refused_topics {
        resp.topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(super::topic_name(&name))
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|index| {
                            DeleteRecordsPartitionResult::default()
                                .with_partition_index(index)
                                .with_low_watermark(-1)
                                .with_error_code(code(ResponseError::TopicAuthorizationFailed))
                        })
                        .collect(),
                ),
        );
    }
    resp
}

/// On the owner shard: moves each partition's log start offset, one partition at a time.
async fn delete_on_owner(shard: Rc<BrokerShard>, items: Vec<Item<(i64, i32)>>) -> Vec<Moved> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Some(part) = shard
            .partition(&item.topic, item.partition)
            .filter(|p| p.is_leader())
        else {
            out.push(failed(code(ResponseError::NotLeaderOrFollower)));
            continue;
        };
        let (offset, timeout_ms) = item.payload;
        let start_before = part.log.offsets().log_start_offset;
        let size_before_bytes = part.log.size_bytes();
        match part.log.delete_records(Offset(offset)).await {
            Ok(start) => {
                // Followers move theirs from their next fetches; wait for the low watermark
                // (bounded: the request's timeout, at most a minute).
                let wait = Duration::from_millis(timeout_ms.clamp(0, 60_000) as u64);
                let low_watermark = if part.replication.is_replicated() {
                    crate::replication::leader::wait_for_low_watermark(&shard, &part, start, wait)
                        .await
                } else {
                    start.0
                };
                if start != start_before {
                    info!(
                        shard = shard.id,
                        topic = %item.topic,
                        partition = item.partition,
                        requested = offset,
                        log_start_offset_before = start_before.0,
                        log_start_offset = start.0,
                        freed_bytes = size_before_bytes.saturating_sub(part.log.size_bytes()),
                        "delete records: log start offset moved"
                    );
                }
                out.push(if low_watermark >= start.0 {
                    Moved {
                        error: NONE,
                        low_watermark,
                    }
                } else {
                    failed(code(ResponseError::RequestTimedOut))
                });
            }
            Err(e @ StorageError::OffsetOutOfRange { .. }) => {
                debug!(
                    shard = shard.id,
                    topic = %item.topic,
                    partition = item.partition,
                    requested = offset,
                    error = %e,
                    "delete records rejected"
                );
                out.push(failed(storage_code(&e)));
            }
            Err(e) => {
                warn!(
                    shard = shard.id,
                    topic = %item.topic,
                    partition = item.partition,
                    requested = offset,
                    error = %e,
                    "delete records failed"
                );
                out.push(failed(storage_code(&e)));
            }
        }
    }
    out
}
