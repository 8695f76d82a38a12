//! Fetch (key 1), v4-16. Reads whole batches from the owner shards up to the high
//! watermark, or with isolation_level=1 (read_committed) up to the last stable offset along
//! with the aborted transactions of the batches read (Kafka's `collectAbortedTxns`), honouring
//! max_bytes, per-partition max bytes (always at least one batch for the first partition with
//! data, KIP-74) and long poll (min_bytes, max_wait_ms: waits on the owners' "data committed"
//! events, which follow every move of the high watermark and of the last stable offset — both
//! move only when an append, data or marker, is committed — never a busy poll). Every answer
//! carries the partition's real last stable offset.
//!
//! KIP-392 (`replication::selector`): a consumer's fetch from v11 may be served by a follower
//! in the ISR, up to its own high watermark (or last stable offset), and long-polls on its
//! high watermark; with `replica.selector.class` rack-aware, a leader answers a fetch naming
//! the client's `rack_id` with `preferred_read_replica` (no records) when a follower in that
//! rack should serve it, and a follower out of the ISR answers with the leader's id. Either
//! answer returns at once, as Kafka does.
//!
//! Topics are named from v4 to v12 and by topic id from v13 (an unknown id gets
//! UNKNOWN_TOPIC_ID). A fetch with a replica id (`replica_state` from v15) is a follower's:
//! it is honoured only at v15+, from an assigned replica with its current broker epoch, and
//! served by [`crate::replication`] (reads up to the log end, `diverging_epoch`, the
//! follower's progress); a consumer's fetch never changes replication state.
//!
//! Fetch sessions (KIP-227): Keel does not cache sessions yet. A request for a new session
//! gets session id 0, which tells the client "no session: send full fetches" — a valid
//! Kafka answer. A request naming a session id gets FETCH_SESSION_ID_NOT_FOUND, so the
//! client starts over.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProducerId, RequestHeader,
};
use kafka_protocol::ResponseError;
use keel_storage::{end_offset_of, Offset, StorageError};

use super::ApiSupport;
use crate::config::ReplicaSelector;
use crate::coordination::parking::DataWaiter;
use crate::coordination::route::{on_owners_serving, Item, Serving};
use crate::errors::{code, storage_code, NONE};
pub use crate::replication::read::{failed, ClientMetadata, FetchPart, PartData, ReplicaFetch};
use crate::replication::selector::{self, FollowerRead};
use crate::replication::throttle;
use crate::security::{Authz, Session};
use crate::shard::{BrokerShard, Partition};
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::Fetch, 4, 16);

/// Longest long-poll Keel honours, whatever max_wait_ms says.
const MAX_WAIT_MS_CAP: u64 = 60_000;

/// Fetch's isolation_level 1: only records below the last stable offset.
const READ_COMMITTED: i8 = 1;

/// Kafka's leader-epoch fencing: an older epoch is fenced, a newer one is unknown here.
pub fn check_epoch(requested: i32, current: i32) -> i16 {
    if requested < 0 || requested == current {
        NONE
    } else if requested < current {
        code(ResponseError::FencedLeaderEpoch)
    } else {
        code(ResponseError::UnknownLeaderEpoch)
    }
}

/// On the owner shard: reads each item's partition. `client` is set for a consumer's Fetch
/// v11+ naming a rack while the selector is rack-aware (a leader may then name a follower).
async fn read_on_owner(
    shard: Rc<BrokerShard>,
    items: Vec<Item<FetchPart>>,
    client: Option<Arc<ClientMetadata>>,
) -> Vec<PartData> {
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
            // An offline replica answers so whoever leads (Kafka's `HostedPartition.Offline`).
            out.push(failed(code(ResponseError::KafkaStorageError)));
            continue;
        }
        crate::replication::wait_for_take_up(&part).await;
        let epoch_error = check_epoch(item.payload.current_leader_epoch, part.leader_epoch.get());
        if epoch_error != NONE {
            out.push(failed(epoch_error));
            continue;
        }
        let as_follower = !part.is_leader();
        if as_follower {
            // The owner's state is the truth, whatever the routing shard's image said (a
            // leadership change installed meanwhile). Only a consumer's v11+ fetch may be
            // served by a follower (Kafka's `fetchOnlyLeader`).
            let answer = if item.payload.follower_read {
                selector::follower_read(&shard, &part)
            } else {
                FollowerRead::Refuse
            };
            match answer {
                FollowerRead::Serve => {}
                FollowerRead::Leader(leader) => {
                    bump(&shard.counters.fetch_follower_redirects, 1);
                    out.push(PartData::read_elsewhere(leader, &part.log.offsets()));
                    continue;
                }
                FollowerRead::Refuse => {
                    out.push(failed(code(ResponseError::NotLeaderOrFollower)));
                    continue;
                }
            }
        }
        if item.payload.partition_max_bytes < 0 {
            // Kafka's log read refuses a negative size (as an unknown server error); say
            // what is wrong instead, and read nothing.
            out.push(failed(code(ResponseError::InvalidRequest)));
            continue;
        }
        if let Some(replica) = item.payload.replica {
            let data =
                crate::replication::leader::serve_fetch(&shard, &part, replica, &item.payload)
                    .await;
            let c = &shard.counters;
            c.replica_served_bytes
                .set(c.replica_served_bytes.get() + data.records.len() as u64);
            out.push(data);
            continue;
        }
        if let Some(client) = client.as_deref().filter(|_| !as_follower) {
            let fetch_offset = item.payload.fetch_offset;
            if let Some(id) = selector::preferred_read_replica(&shard, &part, fetch_offset, client)
            {
                bump(&shard.counters.fetch_preferred_read_replica, 1);
                out.push(PartData::read_elsewhere(id, &part.log.offsets()));
                continue;
            }
        }
        let data = read_for_consumer(&item, &part).await;
        let bytes = data.records.len() as u64;
        bump(&shard.counters.fetch_bytes, bytes);
        if as_follower {
            bump(&shard.counters.fetch_follower_bytes, bytes);
        }
        out.push(data);
    }
    out
}

fn bump(counter: &std::cell::Cell<u64>, by: u64) {
    counter.set(counter.get() + by);
}

/// A consumer's read of `part` from its local log (leader or follower): up to the high
/// watermark, or the last stable offset with the aborted transactions for read_committed.
async fn read_for_consumer(item: &Item<FetchPart>, part: &Partition) -> PartData {
    let offsets = part.log.offsets();
    let max = usize::try_from(item.payload.partition_max_bytes.max(0)).unwrap_or(0);
    let read_committed = item.payload.read_committed;
    let upto = if read_committed {
        offsets.last_stable_offset
    } else {
        offsets.high_watermark
    };
    let fetch_offset = Offset(item.payload.fetch_offset);
    match part.log.read(fetch_offset, max, upto).await {
        Ok(r) => PartData {
            error: NONE,
            high_watermark: r.high_watermark.0,
            last_stable_offset: r.last_stable_offset.0,
            log_start_offset: r.log_start_offset.0,
            aborted: read_committed.then(|| {
                end_offset_of(&r.records).map_or_else(Vec::new, |end| {
                    part.log
                        .aborted_transactions(fetch_offset, Offset(end))
                        .into_iter()
                        .map(|(pid, first)| (pid, first.0))
                        .collect()
                })
            }),
            records: r.records,
            diverging: None,
            preferred_read_replica: -1,
        },
        Err(e) => {
            if !matches!(e, StorageError::OffsetOutOfRange { .. }) {
                tracing::warn!(topic = %item.topic, partition = item.partition, error = %e, "fetch read failed");
            }
            PartData::empty(storage_code(&e), &offsets)
        }
    }
}

/// How far a waiting fetch may read: what it waits to move past its offset.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visible {
    HighWatermark,
    /// read_committed.
    LastStable,
    /// A follower reads everything appended.
    LogEnd,
}

/// On the owner: registers `waiter` with each partition; true when a partition already has
/// data past its fetch offset (below the high watermark, the last stable offset for a
/// read_committed fetch, the log end for a follower) or moved away, so the caller should
/// re-read now. Returns at once: a waiting fetch holds no mesh slot on the owner.
/// `follower_read`: a consumer's v11+ fetch, which a follower in the ISR keeps serving (it
/// waits on the follower's high watermark, which its replica fetcher moves).
/// `replica`: the follower of a replica fetch, whose throttled partitions (see
/// `replication::throttle`) count as ready only once the leader's quota allows them; until then
/// the answer says how long the quota needs (`Readiness::Later`).
fn wait_on_owner(
    shard: &BrokerShard,
    parts: &[(String, i32, i64)],
    waiter: DataWaiter,
    visible: Visible,
    follower_read: bool,
    replica: Option<i32>,
) -> Readiness {
    let mut quota_wait: Option<Duration> = None;
    for (topic, index, offset) in parts {
        let Some(p) = shard.partition(topic, *index) else {
            return Readiness::Now;
        };
        let offsets = p.log.offsets();
        let visible_end = match visible {
            Visible::HighWatermark => offsets.high_watermark,
            Visible::LastStable => offsets.last_stable_offset,
            Visible::LogEnd => offsets.log_end_offset,
        };
        let still_served = p.is_leader()
            || (follower_read && selector::follower_read(shard, &p) == FollowerRead::Serve);
        if !still_served {
            return Readiness::Now;
        }
        if visible_end.0 > *offset {
            match replica {
                Some(r) if !throttle::leader_may_serve(shard, &p, r) => {
                    let hint = shard.replication_quotas.leader.wait_hint();
                    quota_wait = Some(quota_wait.map_or(hint, |w| w.min(hint)));
                }
                _ => return Readiness::Now,
            }
        }
        if visible == Visible::LogEnd {
            p.replication.follower_waiters.register(waiter);
        } else {
            p.waiters.register(waiter);
        }
    }
    Readiness::Later(quota_wait)
}

/// Whether a waiting fetch should read again now, or later: at the latest after the given
/// time, when a replication throttle holds back data that is there.
enum Readiness {
    Now,
    Later(Option<Duration>),
}

/// Waits until any owner reports new data, a throttled partition's quota refills, the
/// deadline passes or shutdown begins. `replica`: the follower of a replica fetch.
async fn wait_any(
    shard: &Rc<BrokerShard>,
    parts: Vec<(String, i32, i64)>,
    deadline: Instant,
    visible: Visible,
    follower_read: bool,
    replica: Option<i32>,
) {
    let image = shard.image();
    let mut by_shard: BTreeMap<usize, Vec<(String, i32, i64)>> = BTreeMap::new();
    for p in parts {
        if let Some(meta) = image.partition(&p.0, p.1) {
            by_shard.entry(meta.shard as usize).or_default().push(p);
        }
    }
    let (token, woken) = shard.add_fetch_wait();
    let waiter = (shard.id, token);
    let mut data_now = false;
    let mut quota_wait: Option<Duration> = None;
    for (target, parts) in by_shard {
        let ready = if target == shard.id {
            wait_on_owner(shard, &parts, waiter, visible, follower_read, replica)
        } else {
            // Unreachable owner (shutting down): re-read now.
            shard
                .mesh
                .call(target, move |s| async move {
                    wait_on_owner(&s, &parts, waiter, visible, follower_read, replica)
                })
                .await
                .unwrap_or(Readiness::Now)
        };
        match ready {
            Readiness::Now => {
                data_now = true;
                break;
            }
            Readiness::Later(Some(w)) => {
                quota_wait = Some(quota_wait.map_or(w, |q| q.min(w)));
            }
            Readiness::Later(None) => {}
        }
    }
    if !data_now {
        let mut timeout = deadline.saturating_duration_since(Instant::now());
        if let Some(w) = quota_wait {
            timeout = timeout.min(w.max(Duration::from_millis(1)));
        }
        futures_lite::future::or(
            async {
                woken.wait_timeout(timeout).await;
            },
            async {
                shard.shutdown.wait().await;
            },
        )
        .await;
    }
    shard.remove_fetch_wait(token);
}

/// The replica a fetch comes from, if any: `Err` with the error every partition gets when it
/// claims to be a replica but cannot be honoured (on a listener other than the inter-broker
/// one: TOPIC_AUTHORIZATION_FAILED, as Kafka answers a follower fetch without the cluster
/// permission; before v15 a follower sends no broker epoch; an unknown or fenced broker, or a
/// stale epoch, is no follower of this broker's).
fn replica_of(
    shard: &BrokerShard,
    version: i16,
    req: &FetchRequest,
    listener: &str,
    authz: &Authz<'_>,
) -> Result<Option<ReplicaFetch>, i16> {
    let (broker_id, broker_epoch) = if version >= 15 {
        (
            req.replica_state.replica_id.0,
            req.replica_state.replica_epoch,
        )
    } else {
        (req.replica_id.0, -1)
    };
    if broker_id < 0 {
        return Ok(None);
    }
    if listener != shard.config.inter_broker_listener_name {
        return Err(code(ResponseError::TopicAuthorizationFailed));
    }
    // Kafka: a follower's fetch needs CLUSTER_ACTION; without it no replica state changes.
    if !authz.cluster(Operation::ClusterAction) {
        return Err(code(ResponseError::TopicAuthorizationFailed));
    }
    if version < 15 {
        return Err(code(ResponseError::StaleBrokerEpoch));
    }
    let image = shard.image();
    match image.cluster.brokers.get(&broker_id) {
        Some(b)
            if !b.fenced && b.broker_epoch == broker_epoch && broker_id != shard.config.node_id =>
        {
            Ok(Some(ReplicaFetch {
                broker_id,
                broker_epoch,
            }))
        }
        Some(_) => Err(code(ResponseError::StaleBrokerEpoch)),
        None => Err(code(ResponseError::NotLeaderOrFollower)),
    }
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: FetchRequest,
    session: &Session,
) -> FetchResponse {
    let listener: &str = &session.listener;
    let version = hdr.request_api_version;
    let mut resp = FetchResponse::default().with_session_id(0);
    if req.session_id != 0 {
        return resp.with_error_code(code(ResponseError::FetchSessionIdNotFound));
    }
    if req.session_epoch > 0 {
        return resp.with_error_code(code(ResponseError::InvalidFetchSessionEpoch));
    }
    let authz = Authz::of(shard, session);
    let replica = replica_of(shard, version, &req, listener, &authz);
    let read_committed = req.isolation_level == READ_COMMITTED && !matches!(replica, Ok(Some(_)));
    // Kafka builds `ClientMetadata` for every consumer fetch from v11: a follower may serve it.
    let follower_read = version >= 11 && matches!(replica, Ok(None));
    let serving = if follower_read {
        Serving::AnyReplica
    } else {
        Serving::Leader
    };
    let client = (follower_read
        && shard.config.replica_selector == ReplicaSelector::RackAware
        && !req.rack_id.is_empty())
    .then(|| {
        Arc::new(ClientMetadata {
            rack_id: req.rack_id.to_string(),
            listener: listener.to_string(),
        })
    });
    let image = shard.image();
    // Per topic: its name (empty for an unknown topic id), its id, its partitions, and the
    // error all of them get without being read.
    let mut shape: Vec<(String, uuid::Uuid, Vec<i32>, i16)> = Vec::new();
    let mut items = Vec::new();
    for t in &req.topics {
        let (name, topic_error) = if version >= 13 {
            match image.topic_by_id(t.topic_id.as_bytes()) {
                Some(meta) => (meta.name.clone(), NONE),
                None => (String::new(), code(ResponseError::UnknownTopicId)),
            }
        } else {
            (t.topic.0.to_string(), NONE)
        };
        let topic_error = match (&replica, topic_error) {
            (Err(e), NONE) => *e,
            // A consumer reads a topic it may READ (a replica's CLUSTER_ACTION is checked).
            (Ok(None), NONE) if !authz.topic(Operation::Read, &name) => {
                code(ResponseError::TopicAuthorizationFailed)
            }
            (_, e) => e,
        };
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            parts.push(p.partition);
            if topic_error != NONE {
                continue;
            }
            items.push(Item {
                topic: name.clone(),
                partition: p.partition,
                payload: FetchPart {
                    fetch_offset: p.fetch_offset,
                    // No partition may bring more than the whole response may hold.
                    partition_max_bytes: if req.max_bytes > 0 {
                        p.partition_max_bytes.min(req.max_bytes)
                    } else {
                        p.partition_max_bytes
                    },
                    current_leader_epoch: p.current_leader_epoch,
                    read_committed,
                    last_fetched_epoch: if version >= 12 {
                        p.last_fetched_epoch
                    } else {
                        -1
                    },
                    log_start_offset: if version >= 5 { p.log_start_offset } else { -1 },
                    replica: replica.ok().flatten(),
                    follower_read,
                },
            });
        }
        shape.push((name, t.topic_id, parts, topic_error));
    }
    let visible = match replica {
        Ok(Some(_)) => Visible::LogEnd,
        _ if read_committed => Visible::LastStable,
        _ => Visible::HighWatermark,
    };
    let wait = Duration::from_millis((req.max_wait_ms.max(0) as u64).min(MAX_WAIT_MS_CAP));
    let deadline = Instant::now() + wait;
    let min_bytes = req.min_bytes.max(0) as usize;
    let max_bytes = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    // One read of every asked partition from its owner.
    let read_all = || {
        let batch: Vec<Item<FetchPart>> = items
            .iter()
            .map(|i| Item {
                topic: i.topic.clone(),
                partition: i.partition,
                payload: i.payload,
            })
            .collect();
        let client = client.clone();
        on_owners_serving(
            Some(ApiKey::Fetch),
            shard,
            batch,
            serving,
            failed,
            move |s, items| read_on_owner(s, items, client.clone()),
        )
    };
    let results = loop {
        let results = read_all().await;
        let total: usize = results.iter().map(|r| r.records.len()).sum();
        // Kafka answers at once on an error, a diverging epoch or a preferred read replica.
        let any_error = results
            .iter()
            .any(|r| r.error != NONE || r.diverging.is_some() || r.preferred_read_replica >= 0);
        if total >= min_bytes
            || any_error
            || Instant::now() >= deadline
            || shard.shutdown.is_fired()
        {
            break results;
        }
        let waits = items
            .iter()
            .map(|i| (i.topic.clone(), i.partition, i.payload.fetch_offset))
            .collect();
        let follower = replica.as_ref().ok().and_then(|r| r.map(|r| r.broker_id));
        wait_any(shard, waits, deadline, visible, follower_read, follower).await;
        if Instant::now() >= deadline {
            // One last read so data that arrived with the deadline is not missed.
            break read_all().await;
        }
    };
    // Response-level max_bytes: whole partitions in request order; the first partition with
    // data is always kept (KIP-74), later ones that do not fit come back empty.
    let mut remaining = max_bytes;
    let mut first_data = true;
    let mut results = results.into_iter();
    for (name, topic_id, parts, topic_error) in shape {
        let mut t = FetchableTopicResponse::default();
        if version >= 13 {
            t.topic_id = topic_id;
        } else {
            t.topic = super::topic_name(&name);
        }
        for index in parts {
            let mut r = if topic_error != NONE {
                failed(topic_error)
            } else {
                results
                    .next()
                    .unwrap_or_else(|| failed(code(ResponseError::UnknownServerError)))
            };
            if version < 10
                && keel_storage::codec::any_batch_with_codec(
                    &r.records,
                    keel_storage::codec::CODEC_ZSTD,
                )
            {
                // Kafka: a client older than Fetch v10 cannot read zstd; it is told so rather
                // than shown a gap.
                r.records = Bytes::new();
                r.error = code(ResponseError::UnsupportedCompressionType);
            }
            if !r.records.is_empty() {
                if first_data || r.records.len() <= remaining {
                    remaining = remaining.saturating_sub(r.records.len());
                    first_data = false;
                } else {
                    r.records = Bytes::new();
                }
            }
            let mut data = PartitionData::default()
                .with_partition_index(index)
                .with_error_code(r.error)
                .with_high_watermark(r.high_watermark)
                .with_last_stable_offset(r.last_stable_offset)
                .with_aborted_transactions(r.aborted.map(|list| {
                    list.into_iter()
                        .map(|(pid, first)| {
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(pid))
                                .with_first_offset(first)
                        })
                        .collect()
                }))
                // log_start_offset exists from v5.
                .with_log_start_offset(if version >= 5 { r.log_start_offset } else { -1 })
                .with_records(Some(r.records));
            if version >= 11 {
                data.preferred_read_replica = BrokerId(r.preferred_read_replica);
            }
            if let (Some((epoch, end_offset)), true) = (r.diverging, version >= 12) {
                data.diverging_epoch = EpochEndOffset::default()
                    .with_epoch(epoch)
                    .with_end_offset(end_offset);
            }
            t.partitions.push(data);
        }
        resp.responses.push(t);
    }
    resp
}
