//! The follower's side of replication: one fetcher task per (this shard, leader broker, leader
//! shard), one connection, one Fetch v15+ for every partition of that pair (Kafka's
//! `ReplicaFetcherThread`, per shard pair instead of per broker).
//!
//! Each round, for each partition: the fetch offset is the local log end, which is durable
//! under the flush policy before it is sent (under `flush.policy=group` a follower reports
//! only what it has synced); the last fetched epoch is the local latest epoch. An answer with
//! `diverging_epoch` truncates the local log to where it agrees with the leader (Kafka's
//! `getOffsetTruncationState`), records are appended with the leader's offsets and epochs
//! (`Log::append_as_follower`, which refuses overlaps, bad CRCs and epochs above the
//! leader's: logged, nothing appended, the partition backs off; offset gaps, from a compacted
//! leader, are taken once `Log::prepare_for_gaps` has made the log's recovery accept them),
//! and the high watermark
//! becomes the leader's, capped at the local log end; its moves wake the consumers' fetches
//! waiting on this follower (KIP-392).
//!
//! A fetcher ends when it has no partitions left. It runs on the shard that owns its
//! partitions; nothing it holds is shared with other shards.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse};
use kafka_protocol::ResponseError;
use keel_client::aio::{Identity, PipelinedConn};
use keel_client::core::ClientVersions;
use keel_client::ClientError;
use keel_storage::replication::fetch::{self as glue, Applied, FetchAnswer, FetchAsk, NotApplied};
use keel_storage::replication::timers::FetchBackoff;
use keel_storage::LeaderEpoch;
use keel_vocab::ErrorCode;
use tracing::{debug, info, warn};

use super::state::{FetcherKey, FetcherState};
use super::throttle;
use crate::metadata::MetadataImage;
use crate::shard::{BrokerShard, Partition};

const IDENTITY: Identity = Identity {
    client_id: "keel-replica-fetcher",
    software_name: "keel",
    software_version: env!("CARGO_PKG_VERSION"),
    versions: ClientVersions(&[(ApiKey::Fetch, 15, 16)]),
};

/// The leader shard and address a follower of `part` fetches from.
fn target(image: &MetadataImage, part: &Partition, leader: i32) -> Option<(FetcherKey, String)> {
    let b = image.cluster.brokers.get(&leader)?;
    let shards = b.shard_count.max(0) as usize;
    let leader_shard = if shards > 0 {
        keel_shard::shard_for_partition(part.topic_id, part.index, shards).0
    } else {
        0
    };
    let host = b
        .inter_broker_host
        .clone()
        .unwrap_or_else(|| b.host.clone());
    let port = b.inter_broker_port.unwrap_or(b.port);
    // A port per shard steers the connection to the owning shard; without one the leader's
    // kernel picks a shard and the request takes one mesh hop there.
    let port = b
        .inter_broker_shard_ports
        .get(leader_shard as usize)
        .copied()
        .unwrap_or(port);
    Some((
        FetcherKey {
            leader,
            leader_shard,
        },
        format!("{host}:{port}"),
    ))
}

/// Makes `part` (this broker follows it) fetched by the fetcher of its leader's shard.
pub fn assign(shard: &Rc<BrokerShard>, image: &MetadataImage, part: &Rc<Partition>) {
    let leader = part.replication.leader.get();
    let Some((key, addr)) = target(image, part, leader) else {
        warn!(topic = %part.topic, partition = part.index, leader, "the leader is not a registered broker; not fetching");
        unassign(shard, part);
        return;
    };
    let id = (part.topic.clone(), part.index);
    let fetchers = &shard.replica_fetchers;
    let previous = fetchers.by_partition.borrow().get(&id).copied();
    if previous.is_some_and(|k| k != key) {
        unassign(shard, part);
    }
    fetchers.by_partition.borrow_mut().insert(id.clone(), key);
    let existing = fetchers.by_key.borrow().get(&key).cloned();
    let state = existing.unwrap_or_else(|| {
        let s = Rc::new(FetcherState::default());
        fetchers.by_key.borrow_mut().insert(key, s.clone());
        s
    });
    let start = state.partitions.borrow().is_empty() && !state.running.get();
    *state.addr.borrow_mut() = addr.clone();
    state.partitions.borrow_mut().insert(id);
    state.wake();
    if start {
        // The task may run at once: it finds its partition already there.
        state.running.set(true);
        info!(shard = shard.id, leader = key.leader, leader_shard = key.leader_shard, %addr, "replica fetcher started");
        glommio::spawn_local(run(shard.clone(), key, state)).detach();
    }
}

/// Stops fetching `part` (this broker leads it now, or it has no leader).
pub fn unassign(shard: &Rc<BrokerShard>, part: &Partition) {
    let id = (part.topic.clone(), part.index);
    let fetchers = &shard.replica_fetchers;
    let Some(key) = fetchers.by_partition.borrow_mut().remove(&id) else {
        return;
    };
    if let Some(s) = fetchers.by_key.borrow().get(&key) {
        s.partitions.borrow_mut().remove(&id);
        s.wake();
    }
}

/// Forgets the fetches of partitions this shard no longer holds (a reassignment moved them
/// away), so their fetchers do not keep waiting for them.
pub fn prune(shard: &Rc<BrokerShard>) {
    let gone: Vec<(String, i32)> = shard
        .replica_fetchers
        .by_partition
        .borrow()
        .keys()
        .filter(|(t, i)| shard.partition(t, *i).is_none())
        .cloned()
        .collect();
    let fetchers = &shard.replica_fetchers;
    for id in gone {
        if let Some(key) = fetchers.by_partition.borrow_mut().remove(&id) {
            if let Some(s) = fetchers.by_key.borrow().get(&key) {
                s.partitions.borrow_mut().remove(&id);
                s.wake();
            }
        }
    }
}

/// Per partition, until when it backs off after an answer it could not apply (storage's
/// `replication::timers::FetchBackoff`, on the shard's monotonic clock).
type Backoff = FetchBackoff<(String, i32)>;

async fn run(shard: Rc<BrokerShard>, key: FetcherKey, state: Rc<FetcherState>) {
    let cfg = shard.config.clone();
    let backoff = Duration::from_millis(cfg.replica_fetch_backoff_ms);
    let mut conn: Option<Rc<PipelinedConn>> = None;
    let mut delayed: Backoff = FetchBackoff::default();
    let backoff_ms = cfg.replica_fetch_backoff_ms as i64;
    loop {
        if shard.shutdown.is_fired() {
            break;
        }
        let ids: Vec<(String, i32)> = state.partitions.borrow().iter().cloned().collect();
        if ids.is_empty() {
            let mut by_key = shard.replica_fetchers.by_key.borrow_mut();
            if by_key.get(&key).is_some_and(|s| Rc::ptr_eq(s, &state)) {
                by_key.remove(&key);
            }
            state.running.set(false);
            info!(
                shard = shard.id,
                leader = key.leader,
                leader_shard = key.leader_shard,
                "replica fetcher stopped: no partitions"
            );
            break;
        }
        let now_ms = shard.clock.monotonic_ms();
        delayed.expire(now_ms);
        let mut throttled = false;
        let parts: Vec<Rc<Partition>> = ids
            .iter()
            .filter(|id| !delayed.delayed(*id, now_ms))
            .filter_map(|(t, i)| shard.partition(t, *i))
            .filter(|p| p.replication.leader.get() == key.leader && !p.is_leader())
            // An offline (poisoned) log takes nothing more until the broker restarts; its
            // stale end offset must not be reported as fetched either.
            .filter(|p| p.log.poisoned().is_none())
            .filter(|p| {
                // A throttled replica outside the ISR waits while this shard's share of
                // follower.replication.throttled.rate is spent.
                let may = throttle::follower_may_fetch(&shard, p);
                throttled |= !may;
                may
            })
            .collect();
        if parts.is_empty() {
            let wait = if throttled {
                throttle::follower_wait(&shard)
            } else {
                backoff
            };
            state.wait(&shard, wait).await;
            continue;
        }
        let image = shard.image();
        let my_epoch = match image.cluster.brokers.get(&cfg.node_id) {
            Some(b) if !b.fenced => b.broker_epoch,
            _ => {
                // Not registered (or fenced) yet: a leader would refuse the fetch.
                state.wait(&shard, backoff).await;
                continue;
            }
        };
        let c = match conn.as_ref().filter(|c| !c.is_broken()) {
            Some(c) => c.clone(),
            None => {
                let addr = state.addr.borrow().clone();
                // TLS and the SASL login included, bounded as a request is: a leader that
                // stopped answering mid-handshake must not hold the fetcher.
                let connect = async {
                    Some(
                        PipelinedConn::connect(
                            &addr,
                            IDENTITY,
                            &shard.config.inter_broker_security,
                        )
                        .await,
                    )
                };
                let give_up = async {
                    futures_lite::future::or(
                        glommio::timer::sleep(Duration::from_millis(cfg.replica_socket_timeout_ms)),
                        shard.shutdown.wait(),
                    )
                    .await;
                    None
                };
                let connected = futures_lite::future::or(connect, give_up)
                    .await
                    .unwrap_or_else(|| {
                        Err(ClientError::Closed {
                            addr: addr.clone(),
                            reason: format!(
                                "not connected and secured within replica.socket.timeout.ms \
                                 ({} ms)",
                                cfg.replica_socket_timeout_ms
                            ),
                        })
                    });
                match connected {
                    Ok(c) => {
                        conn = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        // A refused login or certificate is the operator's to fix (this
                        // broker's inter-broker credentials, or the leader's users and CA);
                        // a leader that is down or restarting is routine.
                        if matches!(
                            e,
                            ClientError::Authentication { .. }
                                | ClientError::Sasl { .. }
                                | ClientError::Tls { .. }
                        ) {
                            warn!(shard = shard.id, leader = key.leader, %addr, error = %e, "replica fetcher cannot log in to the leader; backing off");
                        } else {
                            debug!(shard = shard.id, leader = key.leader, %addr, error = %e, "replica fetcher cannot connect; backing off");
                        }
                        conn = None;
                        state.wait(&shard, backoff).await;
                        continue;
                    }
                }
            }
        };
        // Make what is appended durable before reporting it as fetched: a partition whose
        // sync failed is left out (its log is poisoned now, and offline).
        let mut parts = parts;
        let mut durable = Vec::with_capacity(parts.len());
        for p in parts.drain(..) {
            let end = p.log.offsets().log_end_offset;
            match p.log.make_durable(end).await {
                Ok(_) => durable.push(p),
                Err(e) => {
                    warn!(topic = %p.topic, partition = p.index, error = %e, "follower log cannot be made durable; not fetching for it")
                }
            }
        }
        let parts = durable;
        if parts.is_empty() {
            continue;
        }
        let req = build_request(&cfg, my_epoch, &parts);
        let timeout = Duration::from_millis(cfg.replica_socket_timeout_ms);
        let answer = futures_lite::future::or(
            async {
                Some(
                    c.request::<FetchRequest, FetchResponse>(ApiKey::Fetch, &req)
                        .await,
                )
            },
            async {
                futures_lite::future::or(glommio::timer::sleep(timeout), shard.shutdown.wait())
                    .await;
                None
            },
        )
        .await;
        let resp = match answer {
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                debug!(shard = shard.id, leader = key.leader, error = %e, "replica fetch failed; reconnecting");
                conn = None;
                state.wait(&shard, backoff).await;
                continue;
            }
            None => {
                debug!(
                    shard = shard.id,
                    leader = key.leader,
                    "replica fetch timed out; reconnecting"
                );
                conn = None;
                continue;
            }
        };
        if resp.error_code != 0 {
            debug!(
                shard = shard.id,
                leader = key.leader,
                error = resp.error_code,
                "replica fetch refused"
            );
            state.wait(&shard, backoff).await;
            continue;
        }
        for topic in resp.responses {
            for pd in topic.partitions {
                let Some(part) = parts.iter().find(|p| {
                    p.topic_id == *topic.topic_id.as_bytes() && p.index == pd.partition_index
                }) else {
                    continue;
                };
                let bytes = pd.records.as_ref().map_or(0, |r| r.len());
                throttle::follower_fetched(&shard, part, bytes);
                if let Err(why) = handle_partition(&shard, part, pd).await {
                    debug!(topic = %part.topic, partition = part.index, why, "follower partition backs off");
                    delayed.delay(
                        (part.topic.clone(), part.index),
                        shard.clock.monotonic_ms(),
                        backoff_ms,
                    );
                }
            }
        }
    }
}

fn build_request(
    cfg: &crate::config::BrokerConfig,
    broker_epoch: i64,
    parts: &[Rc<Partition>],
) -> FetchRequest {
    let mut topics: BTreeMap<[u8; 16], Vec<FetchPartition>> = BTreeMap::new();
    for p in parts {
        let ask = FetchAsk::of(&p.log);
        topics.entry(p.topic_id).or_default().push(
            FetchPartition::default()
                .with_partition(p.index)
                .with_current_leader_epoch(p.leader_epoch.get())
                .with_fetch_offset(ask.fetch_offset)
                .with_last_fetched_epoch(ask.last_fetched_epoch)
                .with_log_start_offset(ask.log_start_offset)
                .with_partition_max_bytes(cfg.replica_fetch_max_bytes),
        );
    }
    FetchRequest::default()
        .with_replica_state(
            ReplicaState::default()
                .with_replica_id(BrokerId(cfg.node_id))
                .with_replica_epoch(broker_epoch),
        )
        .with_max_wait_ms(cfg.replica_fetch_wait_max_ms)
        .with_min_bytes(cfg.replica_fetch_min_bytes)
        .with_max_bytes(cfg.replica_fetch_response_max_bytes)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(id, partitions)| {
                    FetchTopic::default()
                        .with_topic_id(uuid::Uuid::from_bytes(id))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

/// The replication glue's form of one partition's answer (Fetch's `PartitionData`).
fn fetch_answer(pd: kafka_protocol::messages::fetch_response::PartitionData) -> FetchAnswer {
    let error = ErrorCode::from_code(pd.error_code);
    if error == ErrorCode::of(ResponseError::OffsetOutOfRange) {
        return FetchAnswer::OutOfRange {
            log_start_offset: pd.log_start_offset,
            high_watermark: pd.high_watermark,
        };
    }
    if !error.is_none() {
        return FetchAnswer::Refused(format!("{error:?}"));
    }
    if pd.diverging_epoch.epoch >= 0 || pd.diverging_epoch.end_offset >= 0 {
        return FetchAnswer::Diverging {
            epoch: pd.diverging_epoch.epoch,
            end_offset: pd.diverging_epoch.end_offset,
        };
    }
    FetchAnswer::Records {
        records: pd.records.unwrap_or_default(),
        high_watermark: pd.high_watermark,
        last_stable_offset: pd.last_stable_offset,
        log_start_offset: pd.log_start_offset,
    }
}

/// Applies one partition's answer (storage's replication glue, which the fault simulation
/// runs too); `Err` says why the partition backs off.
async fn handle_partition(
    shard: &Rc<BrokerShard>,
    part: &Rc<Partition>,
    pd: kafka_protocol::messages::fetch_response::PartitionData,
) -> Result<(), String> {
    let epoch = LeaderEpoch(part.leader_epoch.get());
    let now_ms = shard.clock.now_ms();
    match glue::apply_answer(&part.log, epoch, now_ms, fetch_answer(pd)).await {
        Ok(Applied::Appended {
            bytes,
            high_watermark_moved,
        }) => {
            let c = &shard.counters;
            c.replica_fetch_bytes
                .set(c.replica_fetch_bytes.get() + bytes as u64);
            if high_watermark_moved {
                // Consumers reading from this follower (KIP-392) wait on its high watermark.
                shard.notify_data(part);
            }
            Ok(())
        }
        Ok(Applied::Truncated { from, outcome }) => {
            let below_hw = outcome.below_high_watermark;
            let c = &shard.counters;
            c.replica_truncations.set(c.replica_truncations.get() + 1);
            if below_hw {
                c.replica_truncations_below_hw
                    .set(c.replica_truncations_below_hw.get() + 1);
            }
            warn!(topic = %part.topic, partition = part.index, from, to = outcome.log_end_offset.0, below_high_watermark = below_hw, "follower log diverged from the leader's: truncated");
            Ok(())
        }
        Ok(Applied::StartedOver { at }) => {
            info!(topic = %part.topic, partition = part.index, offset = at, "follower log behind the leader's log start: started over there");
            Ok(())
        }
        Err(why) => {
            if matches!(why, NotApplied::Mismatch(_) | NotApplied::Io(_)) {
                warn!(topic = %part.topic, partition = part.index, error = %why, "leader's answer not applied");
            }
            Err(why.to_string())
        }
    }
}

impl FetcherState {
    /// Sleeps up to `timeout`, or until the fetcher's partitions change or shutdown begins.
    async fn wait(&self, shard: &BrokerShard, timeout: Duration) {
        let event = self.changed.borrow().clone();
        futures_lite::future::or(
            async {
                event.wait_timeout(timeout).await;
            },
            shard.shutdown.wait(),
        )
        .await;
    }
}
