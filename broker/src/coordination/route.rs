//! Splitting partition-scoped work by owner shard.
//!
//! Items are grouped by the shard that owns their partition (from the metadata image).
//! The local group runs inline, the others travel over the mesh, all concurrently; the
//! answers come back in the items' original order. Items of unknown partitions are answered
//! with UNKNOWN_TOPIC_OR_PARTITION, and those of partitions another broker leads (or none
//! does) with NOT_LEADER_OR_FOLLOWER, without leaving the shard — except, for work a follower
//! may do too ([`Serving::AnyReplica`]: a consumer's Fetch v11+, KIP-392), those this broker
//! holds a replica of.

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;

use std::time::Instant;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

use crate::coordination::parking::join_all;
use crate::errors::code;
use crate::ops::metrics::Stage;
use crate::shard::BrokerShard;

/// One unit of partition work.
pub struct Item<P> {
    pub topic: String,
    pub partition: i32,
    pub payload: P,
}

/// Runs `work` on the owners of the items' partitions. `work` gets the owner shard and its
/// items and must answer one result per item, in order. `fail(code)` builds the answer for
/// an item that could not be routed. Each trip to another shard is timed as `api`'s hop
/// stage (the round trip less the work done on the owner) and counted in
/// `keel_cross_shard_hops_total`; `None` for an observer's reads (a metrics scrape), whose
/// trips are neither timed nor counted, so scraping does not change what it measures.
pub async fn on_owners<P, R, F, Fut>(
    api: Option<ApiKey>,
    shard: &Rc<BrokerShard>,
    items: Vec<Item<P>>,
    fail: fn(i16) -> R,
    work: F,
) -> Vec<R>
where
    P: Send + 'static,
    R: Send + 'static,
    F: Fn(Rc<BrokerShard>, Vec<Item<P>>) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = Vec<R>> + 'static,
{
    on_owners_serving(api, shard, items, Serving::Leader, fail, work).await
}

/// Which brokers' partitions run on their owner shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serving {
    /// Only those this broker leads (per the routing shard's image).
    Leader,
    /// Also those it follows (a consumer's Fetch v11+, which a follower may serve: the owner
    /// decides how a follower answers).
    AnyReplica,
}

/// [`on_owners`] with the partitions it routes to their owners chosen by `serving`.
pub async fn on_owners_serving<P, R, F, Fut>(
    api: Option<ApiKey>,
    shard: &Rc<BrokerShard>,
    items: Vec<Item<P>>,
    serving: Serving,
    fail: fn(i16) -> R,
    work: F,
) -> Vec<R>
where
    P: Send + 'static,
    R: Send + 'static,
    F: Fn(Rc<BrokerShard>, Vec<Item<P>>) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = Vec<R>> + 'static,
{
    let image = shard.image();
    let me = shard.config.node_id;
    let total = items.len();
    let mut results: Vec<Option<R>> = (0..total).map(|_| None).collect();
    let mut groups: BTreeMap<usize, (Vec<usize>, Vec<Item<P>>)> = BTreeMap::new();
    for (i, item) in items.into_iter().enumerate() {
        match image.partition(&item.topic, item.partition) {
            Some(p)
                if p.leader != me
                    && !(serving == Serving::AnyReplica && p.replicas.contains(&me)) =>
            {
                // This broker's replica of it is offline (its log failed): Kafka answers
                // KAFKA_STORAGE_ERROR whoever leads, so a client looks elsewhere.
                let offline_here = image.topic(&item.topic).is_some_and(|t| {
                    image
                        .cluster
                        .brokers
                        .get(&me)
                        .is_some_and(|b| b.is_offline(&t.id, item.partition))
                });
                results[i] = Some(fail(code(if offline_here {
                    ResponseError::KafkaStorageError
                } else {
                    ResponseError::NotLeaderOrFollower
                })))
            }
            Some(p) => {
                let g = groups.entry(p.shard as usize).or_default();
                g.0.push(i);
                g.1.push(item);
            }
            None => results[i] = Some(fail(code(ResponseError::UnknownTopicOrPartition))),
        }
    }
    let mut runs = Vec::with_capacity(groups.len());
    for (target, (positions, items)) in groups {
        let shard = shard.clone();
        let work = work.clone();
        runs.push(async move {
            let n = items.len();
            let answers = if target == shard.id {
                work(shard.clone(), items).await
            } else {
                let sent = Instant::now();
                let run = move |s| async move {
                    let started = Instant::now();
                    let answers = work(s, items).await;
                    (answers, started.elapsed())
                };
                let call = if api.is_some() {
                    shard.mesh.call(target, run).await
                } else {
                    shard.mesh.call_uncounted(target, run).await
                };
                match call {
                    Ok((a, worked)) => {
                        if let Some(api) = api {
                            let hop = sent.elapsed().saturating_sub(worked);
                            shard.counters.record(api as i16, Stage::Hop, hop);
                        }
                        a
                    }
                    Err(e) => {
                        tracing::warn!(target, error = %e, "cross-shard call failed");
                        (0..n)
                            .map(|_| fail(code(ResponseError::NotLeaderOrFollower)))
                            .collect()
                    }
                }
            };
            (positions, answers)
        });
    }
    for (positions, answers) in join_all(runs).await {
        for (pos, answer) in positions.into_iter().zip(answers) {
            results[pos] = Some(answer);
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| fail(code(ResponseError::UnknownServerError))))
        .collect()
}
