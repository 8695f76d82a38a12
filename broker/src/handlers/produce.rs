//! Produce (key 0), v3-11 (listed from v0, see [`SUPPORT`]). Record batches stay opaque: the owner shard validates each batch
//! header and CRC, stamps offsets and appends; it decompresses only to recompress into the
//! topic's `compression.type` or to check the keys of a compacted topic (whose unkeyed records
//! are answered INVALID_RECORD with per-record errors, KIP-467). acks=1/-1 answer after
//! the log commit (group commit: fdatasync shared by concurrent requests under
//! flush.policy=group); acks=0 gets no answer at all. A retry from an idempotent producer
//! (a duplicate of one of its last five batches) is answered NONE with the original batch's
//! offsets, as Kafka does; sequence and epoch errors come from the log's producer state. A
//! control batch (a transaction marker) is INVALID_RECORD: only transaction coordinators
//! write markers, straight to the log or through WriteTxnMarkers, never through Produce.
//!
//! On a replicated partition acks=1 answers once the leader's log has the batch under the
//! flush policy; acks=all needs an ISR of at least `min.insync.replicas`
//! (NOT_ENOUGH_REPLICAS) and answers when the high watermark passes the batch, with
//! REQUEST_TIMED_OUT at the request's `timeout_ms` and NOT_ENOUGH_REPLICAS_AFTER_APPEND when
//! the ISR shrank below the minimum meanwhile (see `replication`).

use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, RequestHeader};
use kafka_protocol::ResponseError;
use keel_storage::codec::CODEC_ZSTD;
use keel_storage::LeaderEpoch;

use super::{str_bytes, ApiSupport};
use crate::coordination::parking::join_all;
use crate::coordination::route::{on_owners, Item};
use crate::errors::{code, storage_code, NONE};
use crate::frontend::framing::{decode_body, FrameError};
use crate::ops::metrics::Stage;
use crate::replication::{self, CommitError, Wait};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use keel_auth::acl::Operation;

/// Listed from v0 though v0-v2 (the pre-0.11 message formats) are refused, as Kafka 4.0 does
/// (KAFKA-18659): librdkafka up to 2.x enables gzip, snappy and lz4 only when the broker lists
/// Produce v0, and otherwise sends every batch uncompressed without a word.
pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::Produce, 3, 11).listed_from(0);

/// The answer for one partition.
#[derive(Debug, Clone)]
pub struct PartResult {
    pub error: i16,
    pub message: Option<String>,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    /// The records that made the batch fail (KIP-467), by index in the batch.
    pub record_errors: Vec<keel_storage::RecordError>,
}

fn failed(error: i16) -> PartResult {
    PartResult {
        error,
        message: None,
        record_errors: Vec::new(),
        base_offset: -1,
        log_append_time_ms: -1,
        log_start_offset: -1,
    }
}

/// One partition's records as the request carried them, owned so that storage can stamp
/// offsets in place.
pub type Records = Option<BytesMut>;

/// A topic of the request by name, and each of its partitions' index and records.
pub type TopicRecords = (String, Vec<(i32, Records)>);

/// Produce's entry in the dispatch table: decodes the request body itself, so that each
/// partition's records are handed to storage as a mutable view of the request's own buffer
/// rather than a copy (see [`take_records`]). Returns `None` for acks=0 (no answer is sent).
pub async fn handle_body(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    body: Bytes,
    session: &Session,
) -> Result<Option<ProduceResponse>, FrameError> {
    let version = hdr.request_api_version;
    let mut cursor = body.clone();
    let req: ProduceRequest = decode_body(ApiKey::Produce, version, &mut cursor)?;
    drop(cursor);
    if version < SUPPORT.min {
        // Listed but refused (see SUPPORT): every partition gets UNSUPPORTED_VERSION, nothing
        // is appended, and the connection stays usable.
        return Ok((req.acks != 0).then(|| refuse_old_version(req, version)));
    }
    let timeout_ms = req.timeout_ms;
    let refused = refusals(shard, session, &req);
    if req.acks == 0 && (refused.all.is_some() || !refused.topics.is_empty()) {
        // Kafka closes an acks=0 connection whose produce failed: nothing carries the error.
        return Err(FrameError::Refused(format!(
            "unauthorized acks=0 produce by {}",
            session.principal
        )));
    }
    let (acks, topics) = take_records(req, body);
    Ok(handle(shard, version, acks, timeout_ms, topics, refused).await)
}

/// What a Produce may not write, as Kafka authorizes it: every partition when the session may
/// not WRITE its transactional id, else the topics it may not WRITE. Auto-creation also needs
/// CREATE on the cluster or the topic.
struct Refusals {
    all: Option<i16>,
    topics: std::collections::HashSet<String>,
    may_create: std::collections::HashSet<String>,
}

fn refusals(shard: &BrokerShard, session: &Session, req: &ProduceRequest) -> Refusals {
    let authz = Authz::of(shard, session);
    let mut r = Refusals {
        all: None,
        topics: Default::default(),
        may_create: Default::default(),
    };
    if !authz.enforced() {
        r.may_create = req.topic_data.iter().map(|t| t.name.to_string()).collect();
        return r;
    }
    if let Some(id) = &req.transactional_id {
        if !authz.transactional_id(Operation::Write, id) {
            r.all = Some(code(ResponseError::TransactionalIdAuthorizationFailed));
            return r;
        }
    }
    let may_create_any = authz.cluster(Operation::Create);
    for t in &req.topic_data {
        let name = t.name.as_str();
        if !authz.topic(Operation::Write, name) {
            r.topics.insert(name.to_string());
        } else if may_create_any || authz.topic(Operation::Create, name) {
            r.may_create.insert(name.to_string());
        }
    }
    r
}

/// Takes the records out of a decoded request: the topics by name, each partition's index and
/// records. `body` is the buffer the request was decoded from; once the request's own views
/// of it are dropped it is unique (the connection reads every frame into its own buffer and
/// the dispatch keeps no view of it), and each partition's records become a disjoint mutable
/// view of it, no byte copied. Should it still be shared, the records are copied.
pub fn take_records(mut req: ProduceRequest, body: Bytes) -> (i16, Vec<TopicRecords>) {
    let base = body.as_ptr() as usize;
    let mut ranges: Vec<(usize, usize, usize)> = Vec::new(); // (slot, start, len)
    let mut topics: Vec<TopicRecords> = Vec::with_capacity(req.topic_data.len());
    let mut strays: Vec<(usize, Bytes)> = Vec::new();
    let mut slot = 0usize;
    for topic in &mut req.topic_data {
        let mut parts = Vec::with_capacity(topic.partition_data.len());
        for p in &mut topic.partition_data {
            if let Some(r) = p.records.take() {
                let start = (r.as_ptr() as usize).wrapping_sub(base);
                if !r.is_empty() && start <= body.len() && r.len() <= body.len() - start {
                    ranges.push((slot, start, r.len()));
                } else if !r.is_empty() {
                    strays.push((slot, r));
                }
            }
            parts.push((p.index, None));
            slot += 1;
        }
        topics.push((topic.name.0.to_string(), parts));
    }
    let acks = req.acks;
    drop(req);
    let mut records: Vec<Records> = (0..slot).map(|_| None).collect();
    for (slot, r) in strays {
        records[slot] = Some(BytesMut::from(&r[..]));
    }
    ranges.sort_unstable_by_key(|&(_, start, _)| start);
    match body.try_into_mut() {
        Ok(mut buf) => {
            let mut at = 0usize;
            for (slot, start, len) in ranges {
                if start < at {
                    // Overlapping views cannot come from one decode; copy rather than alias.
                    records[slot] = Some(BytesMut::from(&buf[start - at..][..len]));
                    continue;
                }
                buf.advance(start - at);
                records[slot] = Some(buf.split_to(len));
                at = start + len;
            }
        }
        Err(body) => {
            tracing::debug!("produce request buffer is shared; copying its records");
            for (slot, start, len) in ranges {
                records[slot] = Some(BytesMut::from(&body[start..start + len]));
            }
        }
    }
    let mut records = records.into_iter();
    for (_, parts) in &mut topics {
        for (_, r) in parts {
            *r = records.next().flatten();
        }
    }
    (acks, topics)
}

async fn handle(
    shard: &Rc<BrokerShard>,
    version: i16,
    acks: i16,
    timeout_ms: i32,
    topics: Vec<TopicRecords>,
    refused: Refusals,
) -> Option<ProduceResponse> {
    if shard.config.auto_create_topics_enable && refused.all.is_none() {
        let names: Vec<String> = topics
            .iter()
            .map(|(name, _)| name.clone())
            .filter(|name| refused.may_create.contains(name))
            .collect();
        super::metadata::auto_create(shard, &names).await;
    }
    let mut shape: Vec<(String, Vec<i32>)> = Vec::with_capacity(topics.len());
    let mut items = Vec::new();
    // Refused partitions get their error here and never reach an owner shard.
    let mut refused_slots: Vec<Option<i16>> = Vec::new();
    for (name, partitions) in topics {
        let denied = refused.all.or_else(|| {
            refused
                .topics
                .contains(&name)
                .then(|| code(ResponseError::TopicAuthorizationFailed))
        });
        let mut parts = Vec::with_capacity(partitions.len());
        for (index, records) in partitions {
            parts.push(index);
            refused_slots.push(denied);
            if denied.is_none() {
                items.push(Item {
                    topic: name.clone(),
                    partition: index,
                    payload: records,
                });
            }
        }
        shape.push((name, parts));
    }
    let results: Vec<PartResult> = if !matches!(acks, -1..=1) {
        items
            .iter()
            .map(|_| failed(code(ResponseError::InvalidRequiredAcks)))
            .collect()
    } else {
        on_owners(
            Some(ApiKey::Produce),
            shard,
            items,
            failed,
            move |s, items| append_on_owner(s, items, acks, timeout_ms, version),
        )
        .await
    };
    if acks == 0 {
        return None;
    }
    let mut allowed = results.into_iter();
    let mut results = refused_slots
        .into_iter()
        .map(|denied| match denied {
            Some(error) => failed(error),
            None => allowed
                .next()
                .unwrap_or_else(|| failed(code(ResponseError::UnknownServerError))),
        })
        .collect::<Vec<_>>()
        .into_iter();
    let mut resp = ProduceResponse::default();
    for (name, parts) in shape {
        let mut t = TopicProduceResponse::default().with_name(super::topic_name(&name));
        for index in parts {
            let r = results
                .next()
                .unwrap_or_else(|| failed(code(ResponseError::UnknownServerError)));
            t.partition_responses.push(
                PartitionProduceResponse::default()
                    .with_index(index)
                    .with_error_code(r.error)
                    .with_base_offset(r.base_offset)
                    .with_log_append_time_ms(r.log_append_time_ms)
                    // log_start_offset exists from v5, error_message and record_errors from v8.
                    .with_log_start_offset(if version >= 5 { r.log_start_offset } else { -1 })
                    .with_record_errors(if version >= 8 {
                        record_errors(r.record_errors)
                    } else {
                        Vec::new()
                    })
                    .with_error_message(if version >= 8 {
                        r.message.map(str_bytes)
                    } else {
                        None
                    }),
            );
        }
        resp.responses.push(t);
    }
    Some(resp)
}

/// The answer to a Produce v0-2: UNSUPPORTED_VERSION for every partition.
fn refuse_old_version(req: ProduceRequest, version: i16) -> ProduceResponse {
    let mut resp = ProduceResponse::default();
    for topic in req.topic_data {
        let mut t = TopicProduceResponse::default().with_name(topic.name);
        for p in topic.partition_data {
            t.partition_responses.push(
                PartitionProduceResponse::default()
                    .with_index(p.index)
                    .with_error_code(code(ResponseError::UnsupportedVersion))
                    .with_base_offset(-1),
            );
        }
        resp.responses.push(t);
    }
    tracing::debug!(
        version,
        "Produce below v3 refused: the pre-0.11 message formats are not supported"
    );
    resp
}

fn record_errors(errors: Vec<keel_storage::RecordError>) -> Vec<BatchIndexAndErrorMessage> {
    errors
        .into_iter()
        .map(|e| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(e.batch_index)
                .with_batch_index_error_message(Some(str_bytes(e.message)))
        })
        .collect()
}

/// On the owner shard: validate + append each partition's batches, then commit them all
/// concurrently (one group-commit per partition, shared with other requests).
async fn append_on_owner(
    shard: Rc<BrokerShard>,
    items: Vec<Item<Records>>,
    acks: i16,
    timeout_ms: i32,
    version: i16,
) -> Vec<PartResult> {
    let now = shard.clock.now_ms();
    let append_started = std::time::Instant::now();
    let mut results = Vec::with_capacity(items.len());
    let mut commits = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let Some(part) = shard.partition(&item.topic, item.partition) else {
            let r = if shard.offline_reason(&item.topic, item.partition).is_some() {
                // The reason (with server paths) is in the broker's log, not sent to clients.
                let mut r = failed(code(ResponseError::KafkaStorageError));
                r.message = Some("partition offline: its log could not be opened".into());
                r
            } else {
                failed(code(ResponseError::NotLeaderOrFollower))
            };
            results.push(r);
            continue;
        };
        if part.log.poisoned().is_some() {
            // An offline replica answers so whoever leads (Kafka's `HostedPartition.Offline`).
            let mut r = failed(code(ResponseError::KafkaStorageError));
            r.message = Some("partition offline: a write or sync of its log failed".into());
            results.push(r);
            continue;
        }
        crate::replication::wait_for_take_up(&part).await;
        if !part.is_leader() {
            results.push(failed(code(ResponseError::NotLeaderOrFollower)));
            continue;
        }
        if item.topic == keel_coordinator::OFFSETS_TOPIC
            || item.topic == keel_coordinator::TRANSACTION_STATE_TOPIC
        {
            // Only the coordinators write their records there (as Kafka refuses too).
            let mut r = failed(code(ResponseError::InvalidTopicException));
            r.message = Some(format!("cannot append to internal topic {}", item.topic));
            results.push(r);
            continue;
        }
        let Some(records) = item.payload.filter(|r| !r.is_empty()) else {
            let mut r = failed(code(ResponseError::CorruptMessage));
            r.message = Some("the request holds no record batch for this partition".into());
            results.push(r);
            continue;
        };
        if version < 7 && keel_storage::codec::any_batch_with_codec(&records, CODEC_ZSTD) {
            // Kafka: zstd needs Produce v7 (KIP-110), so old clients never see zstd data.
            let mut r = failed(code(ResponseError::UnsupportedCompressionType));
            r.message = Some(format!(
                "zstd batches need Produce v7 or later, not v{version}"
            ));
            results.push(r);
            continue;
        }
        if keel_storage::contains_control_batch(&records) {
            // Kafka's LogValidator refuses them from clients the same way.
            let mut r = failed(code(ResponseError::InvalidRecord));
            r.message = Some("clients are not allowed to write control records".into());
            results.push(r);
            continue;
        }
        let isr_size = if part.replication.is_replicated() {
            part.replication.isr.borrow().len() as i32
        } else {
            1
        };
        if acks == -1 && part.min_insync_replicas.get() > isr_size {
            let mut r = failed(code(ResponseError::NotEnoughReplicas));
            r.message = Some(format!(
                "min.insync.replicas is {} but the in-sync replica set has {isr_size} member(s)",
                part.min_insync_replicas.get()
            ));
            results.push(r);
            continue;
        }
        match part
            .log
            .append(records, LeaderEpoch(part.leader_epoch.get()), now)
        {
            Ok(info) => {
                if let Some(r) = info.recompressed {
                    let c = &shard.counters;
                    c.recompressed_bytes_in
                        .set(c.recompressed_bytes_in.get() + r.bytes_in);
                    c.recompressed_bytes_out
                        .set(c.recompressed_bytes_out.get() + r.bytes_out);
                    c.recompress_ns.set(c.recompress_ns.get() + r.nanos);
                }
                if info.duplicate {
                    // A retry of a batch already appended: Kafka answers NONE with the
                    // original offsets. The commit below still waits for the original to be
                    // durable.
                    tracing::debug!(topic = %item.topic, partition = item.partition, base_offset = info.base_offset.0, "duplicate batch from an idempotent producer");
                } else {
                    shard
                        .counters
                        .produce_records
                        .set(shard.counters.produce_records.get() + u64::from(info.record_count));
                    shard
                        .counters
                        .produce_batches
                        .set(shard.counters.produce_batches.get() + 1);
                }
                results.push(PartResult {
                    error: NONE,
                    message: None,
                    base_offset: info.base_offset.0,
                    log_append_time_ms: info.log_append_time_ms,
                    log_start_offset: info.log_start_offset.0,
                    record_errors: Vec::new(),
                });
                let upto = keel_storage::Offset(info.last_offset.0 + 1);
                if part.replication.is_replicated() && !info.duplicate {
                    // Followers fetch it while the leader writes and syncs it.
                    shard.notify_followers(&part);
                }
                commits.push((i, part, upto));
            }
            Err(e) => {
                tracing::debug!(topic = %item.topic, partition = item.partition, error = %e, "produce rejected");
                let mut r = failed(storage_code(&e));
                r.message = Some(e.to_string());
                if let keel_storage::StorageError::InvalidRecords { record_errors, .. } = e {
                    r.record_errors = record_errors;
                }
                results.push(r);
            }
        }
    }
    let c = &shard.counters;
    c.produce_appends
        .set(c.produce_appends.get() + commits.len() as u64);
    let appending = append_started.elapsed();
    c.produce_append_ns
        .set(c.produce_append_ns.get() + appending.as_nanos() as u64);
    c.record(ApiKey::Produce as i16, Stage::Append, appending);
    let commit_started = std::time::Instant::now();
    let wait = if acks == -1 {
        Wait::Isr {
            timeout: Duration::from_millis(timeout_ms.max(0) as u64),
        }
    } else {
        Wait::Leader
    };
    let commit_all = commits.into_iter().map(|(i, part, upto)| {
        let shard = shard.clone();
        async move {
            let r = replication::commit(&shard, &part, upto, wait).await;
            shard.notify_data(&part);
            (i, r)
        }
    });
    if acks == 0 {
        for c in commit_all {
            glommio::spawn_local(async move {
                let (_, r) = c.await;
                if let Err(e) = r {
                    tracing::error!(error = %e, "commit failed (acks=0)");
                }
            })
            .detach();
        }
        return results;
    }
    let committed = join_all(commit_all.collect()).await;
    let c = &shard.counters;
    let committing = commit_started.elapsed();
    c.produce_commit_ns
        .set(c.produce_commit_ns.get() + committing.as_nanos() as u64);
    if !committed.is_empty() {
        c.record(ApiKey::Produce as i16, Stage::Flush, committing);
    }
    for (i, r) in committed {
        if let Err(e) = r {
            match &e {
                CommitError::Storage(_) => tracing::error!(error = %e, "commit failed"),
                CommitError::Replication(..) => {
                    tracing::debug!(error = %e, "produce not committed")
                }
            }
            let mut f = failed(e.code().code());
            f.message = Some(e.to_string());
            results[i] = f;
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::protocol::Encodable;

    /// A v9 Produce body of two topics, two partitions each, with distinct record bytes.
    fn body() -> (Bytes, Vec<Vec<u8>>) {
        let mut req = ProduceRequest::default().with_acks(-1);
        let mut payloads = Vec::new();
        for t in 0..2u8 {
            let mut topic =
                TopicProduceData::default().with_name(super::super::topic_name(&format!("t{t}")));
            for p in 0..2u8 {
                let payload: Vec<u8> = (0..100 + 10 * p).map(|i| i.wrapping_mul(t + 3)).collect();
                payloads.push(payload.clone());
                topic.partition_data.push(
                    PartitionProduceData::default()
                        .with_index(i32::from(p))
                        .with_records(Some(Bytes::from(payload))),
                );
            }
            req.topic_data.push(topic);
        }
        let mut buf = BytesMut::new();
        req.encode(&mut buf, 9).unwrap();
        // As the connection hands a frame over: its own buffer, frozen.
        (BytesMut::from(&buf[..]).freeze(), payloads)
    }

    fn decoded(body: &Bytes) -> ProduceRequest {
        let mut cursor = body.clone();
        decode_body(ApiKey::Produce, 9, &mut cursor).unwrap()
    }

    #[test]
    fn records_are_views_of_the_request_buffer() {
        let (body, payloads) = body();
        let span = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
        let req = decoded(&body);
        let (acks, topics) = take_records(req, body);
        assert_eq!(acks, -1);
        let names: Vec<&str> = topics.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["t0", "t1"]);
        let mut got = Vec::new();
        for (_, parts) in topics {
            for (index, records) in parts {
                let records = records.unwrap();
                // No copy: the records lie inside the request's buffer.
                assert!(
                    span.contains(&(records.as_ptr() as usize)),
                    "partition {index} was copied"
                );
                got.push(records.to_vec());
            }
        }
        assert_eq!(got, payloads);
    }

    #[test]
    fn a_shared_buffer_is_copied_not_aliased() {
        let (body, payloads) = body();
        let held = body.clone();
        let req = decoded(&body);
        let (_, topics) = take_records(req, body);
        let span = held.as_ptr() as usize..held.as_ptr() as usize + held.len();
        let mut got = Vec::new();
        for (_, parts) in topics {
            for (_, records) in parts {
                let records = records.unwrap();
                assert!(!span.contains(&(records.as_ptr() as usize)));
                got.push(records.to_vec());
            }
        }
        assert_eq!(got, payloads);
    }
}
