//! The controller's partition decisions, as pure functions over a [`ClusterImage`]: which
//! records fence, unfence, register or shut down a broker, and which answer an AlterPartition
//! (Kafka's `PartitionChangeBuilder` and `ReplicationControlManager`, KIPs 841, 903 and 966).
//!
//! Runs on the controller leader (the `keel-metadata` thread, `node.rs`); nothing here does
//! I/O, so tests drive it through `ClusterImage::apply` alone.
//!
//! Invariants the records keep (and `ClusterImage::apply` checks again): a leader is always in
//! the ISR; the ISR is not shrunk to empty (the last member stays, as in Kafka, so the
//! partition goes offline with its last known in-sync replica recorded; the one exception is
//! below); ISR and ELR hold
//! replicas only and are disjoint; a leader change bumps the leader epoch; every
//! `PartitionChanged` carries the leader and partition epochs it was computed from
//! (`expected_*`), so a decision made on a stale image is rejected when applied rather than
//! undoing a newer one.
//!
//! Elections (unclean election disabled) pick, in replica order (Kafka's preferred-replica
//! order), the first live ISR member, else the first live ELR member (who then becomes the
//! ISR alone), else nobody: leader -1. With unclean election enabled (the topic's
//! `unclean.leader.election.enable`, or forced by [`Unclean`]) the last resort is any live
//! replica, which then is the ISR alone and the ELR is cleared.
//!
//! KIP-966 as implemented (strict min ISR: the broker does not advance the high watermark
//! while the ISR is below `min.insync.replicas`): when a change leaves the ISR below the
//! topic's `min.insync.replicas`, the ELR becomes (old ISR ∪ old ELR) − new ISR, less the
//! replicas known to have shut down uncleanly, which move to the last known ELR; at or above
//! the minimum both are cleared. Fenced ELR members stay eligible: they are elected when they
//! come back. A broker that registers as a new incarnation without a clean shutdown
//! (`previous_broker_epoch` is not the epoch the image holds) leaves every ISR and ELR, except
//! where it is the ISR's last member and the ELR is empty (no replica is known to hold more;
//! the records it lost unflushed are lost, as in Kafka without ELR). Only then may the ISR be
//! empty: the crashed last member left it for an ELR member, who leads when live. Not implemented:
//! KIP-966's unclean recovery (electing from the last known ELR), and the ELR feature flag
//! (the ELR is always kept).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::image::{codes, ClusterImage, PartitionInfo, TopicInfo};
use crate::records::{Record, TopicId};
use crate::registration::BrokerRegistration;

mod leader_election;
pub use leader_election::*;

/// Topic config (with a cluster default under broker config "") read by elections.
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// Topic config (with a cluster default under broker config "") read by elections.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";

/// Whether an election may pick a replica outside the ISR and ELR (which can lose committed
/// records).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unclean {
    /// Each topic's `unclean.leader.election.enable` (cluster default, else false).
    #[default]
    TopicConfig,
    Enabled,
    Disabled,
}

/// One partition's AlterPartition from its leader (Kafka's AlterPartition v3: ISR members
/// with their broker epochs, KIP-903).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartitionRequest {
    pub topic_id: TopicId,
    pub partition: i32,
    /// The broker asking: it must be the partition's leader.
    pub leader_id: i32,
    pub leader_epoch: i32,
    /// The partition epoch the leader's view is from.
    pub partition_epoch: i32,
    pub new_isr: Vec<IsrMember>,
}

/// A proposed ISR member and the broker epoch the leader saw it fetch with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsrMember {
    pub broker_id: i32,
    pub broker_epoch: i64,
}

/// The answer for one partition: on success the state after the change; on an error the
/// state the controller holds (so the leader can catch up), when the partition exists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartitionResult {
    pub topic_id: TopicId,
    pub partition: i32,
    /// 0 = accepted.
    pub error_code: i16,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// `min.insync.replicas` for `topic`: its override, else the cluster default, else this node's
/// static setting, else 1.
pub fn min_insync_replicas(image: &ClusterImage, topic: &TopicInfo) -> usize {
    config(image, topic, MIN_INSYNC_REPLICAS)
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

/// Whether unclean election is allowed for `topic` under `unclean`.
pub fn unclean_election_enabled(image: &ClusterImage, topic: &TopicInfo, unclean: Unclean) -> bool {
    match unclean {
        Unclean::Enabled => true,
        Unclean::Disabled => false,
        Unclean::TopicConfig => config(image, topic, UNCLEAN_LEADER_ELECTION_ENABLE)
            .is_some_and(|v| v.eq_ignore_ascii_case("true")),
    }
}

/// This node's static settings (its config file and command line) of the configs elections
/// read: the last fallback after a topic's override and the cluster-wide dynamic default, as
/// Kafka's controller falls back to its own static config. Set once at start; unset (tests of
/// this module), the built-in defaults apply.
static STATIC_DEFAULTS: OnceLock<BTreeMap<String, String>> = OnceLock::new();

/// Sets this node's static `min.insync.replicas` and `unclean.leader.election.enable` (and
/// any other config elections read) for every decision this process makes as controller.
/// Only the first call counts.
pub fn set_static_defaults(defaults: BTreeMap<String, String>) {
    let _ = STATIC_DEFAULTS.set(defaults);
}

fn config<'a>(image: &'a ClusterImage, topic: &'a TopicInfo, name: &str) -> Option<&'a str> {
    topic
        .configs
        .get(name)
        .or_else(|| image.broker_configs.get("").and_then(|c| c.get(name)))
        .or_else(|| STATIC_DEFAULTS.get().and_then(|d| d.get(name)))
        .map(String::as_str)
}

/// Records that fence `broker_id` (its session expired, or it shut down): `BrokerFenced`,
/// then for every partition whose ISR holds it: out of the ISR (into the ELR below min ISR;
/// kept when it is the last member), and where it led, a new leader by the election rules.
pub fn fence_records(image: &ClusterImage, broker_id: i32, unclean: Unclean) -> Vec<Record> {
    let mut records = vec![Record::BrokerFenced { broker_id }];
    for_each_partition(image, unclean, &mut records, |topic_id, p, rules| {
        if !p.isr.contains(&broker_id) && p.leader != broker_id {
            return None;
        }
        let live = |id: i32| id != broker_id && can_lead(image, id, topic_id, p.partition);
        let mut t = Target::of(p);
        t.remove_from_isr(broker_id, false, rules);
        if t.leader == broker_id {
            t.leader = -1;
        }
        t.elect(&live, rules);
        Some(t)
    });
    records
}

/// Records for replicas of `broker_id` whose logs went offline (Kafka's offline log
/// directories, KIP-858, per partition): `ReplicasOffline`, then for each such partition the
/// broker leaves the ISR and the ELR, as after an unclean shutdown, since an offline log
/// may have lost its unsynced tail (a last ISR member stays, with no leader, unless another is
/// eligible), and where it led, a new leader by the election rules, never an offline replica.
/// Replicas already recorded offline, or that the image does not know, are left out; None when
/// nothing is left. Fails with STALE_BROKER_EPOCH when `broker_epoch` is not the broker's
/// current one.
pub fn offline_replica_records(
    image: &ClusterImage,
    broker_id: i32,
    broker_epoch: i64,
    replicas: &[(TopicId, i32)],
    unclean: Unclean,
) -> Result<Option<Vec<Record>>, i16> {
    let b = match image.brokers.get(&broker_id) {
        Some(b) if b.broker_epoch == broker_epoch => b,
        _ => return Err(codes::STALE_BROKER_EPOCH),
    };
    let new: Vec<(TopicId, i32)> = replicas
        .iter()
        .copied()
        .filter(|(topic_id, partition)| {
            !b.is_offline(topic_id, *partition)
                && image
                    .topic_by_id(topic_id)
                    .and_then(|t| partition_of(t, *partition))
                    .is_some_and(|p| p.replicas.contains(&broker_id))
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if new.is_empty() {
        return Ok(None);
    }
    let mut records = vec![Record::ReplicasOffline {
        broker_id,
        broker_epoch,
        replicas: new.clone(),
    }];
    for_each_partition(image, unclean, &mut records, |topic_id, p, rules| {
        if !new.contains(&(*topic_id, p.partition)) {
            return None;
        }
        let live = |id: i32| id != broker_id && can_lead(image, id, topic_id, p.partition);
        let mut t = Target::of(p);
        t.remove_from_isr(broker_id, true, rules);
        if t.leader == broker_id {
            t.leader = -1;
        }
        t.elect(&live, rules);
        Some(t)
    });
    Ok(Some(records))
}

/// Records that unfence `broker_id` (it heartbeats again): `BrokerUnfenced`, and leadership
/// of the offline partitions (leader -1) that the election rules now give a leader, which
/// needs this broker in their ISR or ELR (or unclean election).
pub fn unfence_records(image: &ClusterImage, broker_id: i32, unclean: Unclean) -> Vec<Record> {
    let mut records = vec![Record::BrokerUnfenced { broker_id }];
    for_each_partition(image, unclean, &mut records, |topic_id, p, rules| {
        if p.leader != -1 || !p.replicas.contains(&broker_id) {
            return None;
        }
        let online = |id: i32| {
            image
                .brokers
                .get(&id)
                .is_some_and(|b| !b.is_offline(topic_id, p.partition))
        };
        let live =
            |id: i32| (id == broker_id && online(id)) || can_lead(image, id, topic_id, p.partition);
        let mut t = Target::of(p);
        t.elect(&live, rules);
        Some(t)
    });
    records
}

/// Records for a (re)registration, which leaves the broker unfenced: `BrokerRegistered`,
/// `BrokerUnfenced`, and per partition it is a replica of: if this is a new incarnation that
/// did not shut down cleanly (KIP-841/966), it leaves the ISR (unless last) and the ELR; if it
/// led, leadership moves to another live ISR or ELR member when there is one (it comes back
/// a follower), else it leads again with a new leader epoch; and offline partitions it may
/// lead get it as leader.
pub fn registration_records(
    image: &ClusterImage,
    reg: &BrokerRegistration,
    unclean: Unclean,
) -> Vec<Record> {
    let b = reg.broker_id;
    let unclean_restart = image.brokers.get(&b).is_some_and(|old| {
        old.incarnation_id != reg.incarnation_id && reg.previous_broker_epoch != old.broker_epoch
    });
    let mut records = vec![
        Record::BrokerRegistered {
            broker_id: b,
            incarnation_id: reg.incarnation_id,
            host: reg.host.clone(),
            port: reg.port,
            rack: reg.rack.clone(),
            shard_count: reg.shard_count,
            inter_broker_host: reg.inter_broker_host.clone(),
            inter_broker_port: reg.inter_broker_port,
            inter_broker_shard_ports: reg.inter_broker_shard_ports.clone(),
            previous_broker_epoch: reg.previous_broker_epoch,
            listeners: reg.listeners.clone(),
        },
        Record::BrokerUnfenced { broker_id: b },
    ];
    for_each_partition(image, unclean, &mut records, |topic_id, p, rules| {
        if !p.replicas.contains(&b) {
            return None;
        }
        // The registration clears `b`'s offline replicas: its logs were recovered at start.
        let others = |id: i32| id != b && can_lead(image, id, topic_id, p.partition);
        let with_b = |id: i32| id == b || can_lead(image, id, topic_id, p.partition);
        let mut t = Target::of(p);
        if unclean_restart {
            t.remove_from_isr(b, true, rules);
        }
        if t.leader == b {
            // The old incarnation's leadership ends whoever leads next.
            t.leader = -1;
            t.bump = true;
            t.elect(&others, rules);
        }
        t.elect(&with_b, rules);
        Some(t)
    });
    records
}

/// Records for a controlled shutdown (Kafka's BrokerHeartbeat with `wantShutDown`, in one
/// step): leadership moves to other ISR (or ELR) members, the broker leaves the ISRs (into
/// the ELR where that takes the ISR below min ISR; a last member stays), and it is fenced:
/// the same records as [`fence_records`]. What makes the shutdown clean is the next
/// registration naming this `broker_epoch` as `previous_broker_epoch`. Fails with
/// STALE_BROKER_EPOCH when `broker_epoch` is not the broker's current one.
pub fn controlled_shutdown_records(
    image: &ClusterImage,
    broker_id: i32,
    broker_epoch: i64,
    unclean: Unclean,
) -> Result<Vec<Record>, i16> {
    match image.brokers.get(&broker_id) {
        Some(b) if b.broker_epoch == broker_epoch => Ok(fence_records(image, broker_id, unclean)),
        _ => Err(codes::STALE_BROKER_EPOCH),
    }
}

/// One AlterPartition: the record that sets the new ISR (None when it is the ISR already),
/// or the Kafka error code: FENCED_LEADER_EPOCH (stale leader epoch), NOT_LEADER_OR_FOLLOWER
/// (the requester does not lead this epoch), INVALID_UPDATE_VERSION (stale partition epoch),
/// INELIGIBLE_REPLICA (a member that is not a replica, fenced, or not at its current broker
/// epoch, KIP-903), INVALID_REQUEST (an empty ISR, a duplicate, or one without the leader),
/// UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION.
pub fn alter_partition(
    image: &ClusterImage,
    request: &AlterPartitionRequest,
) -> Result<Option<Record>, i16> {
    let topic = image
        .topic_by_id(&request.topic_id)
        .ok_or(codes::UNKNOWN_TOPIC_ID)?;
    let p = partition_of(topic, request.partition).ok_or(codes::UNKNOWN_TOPIC_OR_PARTITION)?;
    if request.leader_epoch < p.leader_epoch {
        return Err(codes::FENCED_LEADER_EPOCH);
    }
    if request.leader_id != p.leader || request.leader_epoch != p.leader_epoch {
        return Err(codes::NOT_LEADER_OR_FOLLOWER);
    }
    if request.partition_epoch != p.partition_epoch {
        return Err(codes::INVALID_UPDATE_VERSION);
    }
    let mut new_isr: Vec<i32> = Vec::with_capacity(request.new_isr.len());
    for m in &request.new_isr {
        if new_isr.contains(&m.broker_id) {
            return Err(codes::INVALID_REQUEST);
        }
        let eligible = p.replicas.contains(&m.broker_id)
            && image.brokers.get(&m.broker_id).is_some_and(|b| {
                !b.fenced
                    && b.broker_epoch == m.broker_epoch
                    && !b.is_offline(&request.topic_id, request.partition)
            });
        if !eligible {
            return Err(codes::INELIGIBLE_REPLICA);
        }
        new_isr.push(m.broker_id);
    }
    if !new_isr.contains(&p.leader) {
        return Err(codes::INVALID_REQUEST);
    }
    if new_isr == p.isr {
        return Ok(None);
    }
    let rules = Rules::of(image, topic, Unclean::Disabled);
    let mut t = Target::of(p);
    t.set_isr(new_isr, &[], &rules);
    // An added replica joining the ISR may complete the partition's reassignment.
    t.try_complete_reassignment(
        &|id| can_lead(image, id, &request.topic_id, request.partition),
        &rules,
    );
    Ok(t.record(topic.topic_id, p))
}

/// One partition's reassignment (Kafka's AlterPartitionReassignments, KIP-455): the record
/// that starts, replaces, completes or cancels it; None when nothing changes (the target is
/// the assignment already, with none in progress). `target` None cancels the reassignment in
/// progress, leaving exactly the replicas it started from. A new target replaces one in
/// progress: it is measured from the original replicas, and replicas the old one was adding
/// that the new one does not want leave. Added replicas catch up as followers; the
/// reassignment completes when all of them are in the ISR (see `alter_partition`), at once when
/// it adds none. Errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (an empty
/// target, a duplicate, a broker that is not registered, or no in-sync replica left),
/// NO_REASSIGNMENT_IN_PROGRESS (cancelling none).
pub fn reassign(
    image: &ClusterImage,
    topic_name: &str,
    partition: i32,
    target: Option<&[i32]>,
) -> Result<Option<Record>, (i16, String)> {
    let unknown = || {
        (
            codes::UNKNOWN_TOPIC_OR_PARTITION,
            format!("{topic_name}-{partition} does not exist"),
        )
    };
    let topic = image.topic(topic_name).ok_or_else(unknown)?;
    let p = partition_of(topic, partition).ok_or_else(unknown)?;
    let invalid = |why: String| (codes::INVALID_REPLICA_ASSIGNMENT, why);
    let rules = Rules::of(image, topic, Unclean::Disabled);
    let live = |id: i32| can_lead(image, id, &topic.topic_id, partition);
    let original = p.replicas_before_reassignment();
    let mut t = Target::of(p);
    match target {
        None => {
            if !p.reassigning() {
                return Err((
                    codes::NO_REASSIGNMENT_IN_PROGRESS,
                    format!("no reassignment is in progress for {topic_name}-{partition}"),
                ));
            }
            t.move_replicas(original, Vec::new(), Vec::new(), &live, &rules)
                .map_err(|why| invalid(format!("cannot cancel: {why}")))?;
        }
        Some(target) => {
            if target.is_empty() {
                return Err(invalid("the replica list is empty".into()));
            }
            for (i, id) in target.iter().enumerate() {
                if target[..i].contains(id) {
                    return Err(invalid(format!("replica {id} is listed twice")));
                }
                if !image.brokers.contains_key(id) {
                    return Err(invalid(format!("broker {id} is not registered")));
                }
            }
            if !p.reassigning() && target == p.replicas.as_slice() {
                return Ok(None);
            }
            let adding: Vec<i32> = target
                .iter()
                .copied()
                .filter(|r| !original.contains(r))
                .collect();
            let removing: Vec<i32> = original
                .iter()
                .copied()
                .filter(|r| !target.contains(r))
                .collect();
            let mut replicas = target.to_vec();
            replicas.extend(&removing);
            t.move_replicas(replicas, adding, removing, &live, &rules)
                .map_err(invalid)?;
        }
    }
    t.try_complete_reassignment(&live, &rules);
    Ok(t.record(topic.topic_id, p))
}

/// Records that remove `broker_id`'s registration (Kafka's UnregisterBroker): it is fenced
/// first (out of the ISRs, leadership moved, as [`fence_records`]), then unregistered.
/// BROKER_ID_NOT_REGISTERED when it is not registered.
pub fn unregister_records(image: &ClusterImage, broker_id: i32) -> Result<Vec<Record>, i16> {
    let b = image
        .brokers
        .get(&broker_id)
        .ok_or(codes::BROKER_ID_NOT_REGISTERED)?;
    let mut records = fence_records(image, broker_id, Unclean::TopicConfig);
    records.push(Record::BrokerUnregistered {
        broker_id,
        broker_epoch: b.broker_epoch,
    });
    Ok(records)
}

/// Bound on one AlterPartition call's partitions (one shard's batch).
pub const ALTER_PARTITION_BATCH_MAX: usize = 10_000;

/// A batch of AlterPartitions (one broker's shard sends them together): a result per request,
/// in order, and the records to commit in one batch. A second request for a partition already
/// in the batch gets INVALID_REQUEST (it was computed from the same stale state).
pub fn alter_partitions(
    image: &ClusterImage,
    requests: &[AlterPartitionRequest],
) -> (Vec<AlterPartitionResult>, Vec<Record>) {
    let mut seen = BTreeSet::new();
    let mut records = Vec::new();
    let results = requests
        .iter()
        .map(|r| {
            let outcome = if seen.insert((r.topic_id, r.partition)) {
                alter_partition(image, r)
            } else {
                Err(codes::INVALID_REQUEST)
            };
            let current = image
                .topic_by_id(&r.topic_id)
                .and_then(|t| partition_of(t, r.partition));
            match (outcome, current) {
                (Ok(change), Some(p)) => {
                    let mut result = result_of(r, 0, p);
                    if let Some(Record::PartitionChanged {
                        isr,
                        leader,
                        leader_epoch,
                        ..
                    }) = &change
                    {
                        result.partition_epoch += 1;
                        if let Some(isr) = isr {
                            result.isr = isr.clone();
                        }
                        result.leader_id = leader.unwrap_or(result.leader_id);
                        result.leader_epoch = leader_epoch.unwrap_or(result.leader_epoch);
                    }
                    records.extend(change);
                    result
                }
                (Err(code), Some(p)) => result_of(r, code, p),
                (outcome, None) => AlterPartitionResult {
                    topic_id: r.topic_id,
                    partition: r.partition,
                    error_code: outcome.err().unwrap_or(codes::UNKNOWN_TOPIC_OR_PARTITION),
                    leader_id: -1,
                    leader_epoch: -1,
                    partition_epoch: -1,
                    isr: Vec::new(),
                },
            }
        })
        .collect();
    (results, records)
}

fn result_of(
    r: &AlterPartitionRequest,
    error_code: i16,
    p: &PartitionInfo,
) -> AlterPartitionResult {
    AlterPartitionResult {
        topic_id: r.topic_id,
        partition: r.partition,
        error_code,
        leader_id: p.leader,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        isr: p.isr.clone(),
    }
}

fn partition_of(topic: &TopicInfo, partition: i32) -> Option<&PartitionInfo> {
    usize::try_from(partition)
        .ok()
        .and_then(|i| topic.partitions.get(i))
}

fn is_live(image: &ClusterImage, id: i32) -> bool {
    image.brokers.get(&id).is_some_and(|b| !b.fenced)
}

/// Whether broker `id` may lead or join the ISR of `partition` of `topic_id`: registered,
/// unfenced, and its replica's log not offline (`ReplicasOffline`).
fn can_lead(image: &ClusterImage, id: i32, topic_id: &TopicId, partition: i32) -> bool {
    image
        .brokers
        .get(&id)
        .is_some_and(|b| !b.fenced && !b.is_offline(topic_id, partition))
}

/// Runs `change` on every partition and appends the record of each partition it changes.
fn for_each_partition(
    image: &ClusterImage,
    unclean: Unclean,
    records: &mut Vec<Record>,
    mut change: impl FnMut(&TopicId, &PartitionInfo, &Rules) -> Option<Target>,
) {
    for topic in image.topics.values() {
        let rules = Rules::of(image, topic, unclean);
        for p in &topic.partitions {
            if let Some(t) = change(&topic.topic_id, p, &rules) {
                records.extend(t.record(topic.topic_id, p));
            }
        }
    }
}

/// One topic's election settings.
struct Rules {
    min_isr: usize,
    unclean: bool,
}

impl Rules {
    fn of(image: &ClusterImage, topic: &TopicInfo, unclean: Unclean) -> Rules {
        Rules {
            min_isr: min_insync_replicas(image, topic),
            unclean: unclean_election_enabled(image, topic, unclean),
        }
    }
}

/// A partition's leadership state being worked out from the image's.
#[derive(Clone, Debug)]
struct Target {
    replicas: Vec<i32>,
    leader: i32,
    isr: Vec<i32>,
    elr: Vec<i32>,
    last_known_elr: Vec<i32>,
    adding: Vec<i32>,
    removing: Vec<i32>,
    /// The replicas before the reassignment in progress, in order; empty when none is.
    original: Vec<i32>,
    /// Bump the leader epoch even if the leader ends up the same (a new incarnation of it).
    bump: bool,
}

impl Target {
    fn of(p: &PartitionInfo) -> Target {
        Target {
            replicas: p.replicas.clone(),
            leader: p.leader,
            isr: p.isr.clone(),
            elr: p.elr.clone(),
            last_known_elr: p.last_known_elr.clone(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
            original: p.original_replicas.clone(),
            bump: false,
        }
    }

    /// Sets the replica list and the reassignment state (KIP-455): the ISR, ELR and last known
    /// ELR keep only replicas; a leader no longer in the ISR gives way to the first live ISR
    /// member in the new replica order (none: offline). Fails when no ISR member would remain.
    fn move_replicas(
        &mut self,
        replicas: Vec<i32>,
        adding: Vec<i32>,
        removing: Vec<i32>,
        live: &dyn Fn(i32) -> bool,
        rules: &Rules,
    ) -> Result<(), String> {
        let isr: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|r| replicas.contains(r))
            .collect();
        if isr.is_empty() {
            return Err(format!(
                "none of the in-sync replicas {:?} would remain among {replicas:?}",
                self.isr
            ));
        }
        if adding.is_empty() && removing.is_empty() {
            self.original.clear();
        } else if self.original.is_empty() {
            self.original = self.replicas.clone();
        }
        self.replicas = replicas;
        self.adding = adding;
        self.removing = removing;
        self.elr.retain(|r| self.replicas.contains(r));
        self.last_known_elr.retain(|r| self.replicas.contains(r));
        self.isr = isr.clone();
        self.set_isr(isr, &[], rules);
        if !self.isr.contains(&self.leader) {
            self.leader = -1;
            self.elect(live, rules);
        }
        Ok(())
    }

    /// Completes the reassignment in progress once every added replica is in the ISR and an
    /// ISR member is among the target replicas (Kafka's `PartitionReassignmentReplicas`):
    /// the replicas become the target, the removed ones leave the ISR and ELR, and a leader
    /// being removed gives way to the first live ISR member of the target.
    fn try_complete_reassignment(&mut self, live: &dyn Fn(i32) -> bool, rules: &Rules) {
        if self.adding.is_empty() && self.removing.is_empty() {
            return;
        }
        if !self.adding.iter().all(|r| self.isr.contains(r)) {
            return;
        }
        let target: Vec<i32> = self
            .replicas
            .iter()
            .copied()
            .filter(|r| !self.removing.contains(r))
            .collect();
        if !self.isr.iter().any(|r| target.contains(r)) {
            return;
        }
        let _ = self.move_replicas(target, Vec::new(), Vec::new(), live, rules);
    }

    /// Takes `id` out of the ISR, and out of the ELR too when it shut down uncleanly. The ISR
    /// is not emptied (Kafka keeps the last member), except by an unclean shutdown when
    /// another replica is eligible (in the ELR): then that one has every committed record and
    /// the crashed one may not.
    fn remove_from_isr(&mut self, id: i32, unclean_shutdown: bool, rules: &Rules) {
        let mut isr = self.isr.clone();
        isr.retain(|r| *r != id);
        let others_eligible = unclean_shutdown && self.elr.iter().any(|r| *r != id);
        if isr.is_empty() && !others_eligible {
            isr = self.isr.clone();
        }
        let lost: &[i32] = if unclean_shutdown { &[id] } else { &[] };
        self.set_isr(isr, lost, rules);
    }

    /// Sets the ISR and the ELR it implies (KIP-966): below min ISR, the ELR gains the members
    /// that left the ISR and loses those that joined it and those in `lost` (an unclean
    /// shutdown; they go to the last known ELR); at or above, both are cleared.
    fn set_isr(&mut self, isr: Vec<i32>, lost: &[i32], rules: &Rules) {
        let old: BTreeSet<i32> = self.isr.iter().chain(&self.elr).copied().collect();
        self.isr = isr;
        if self.isr.len() >= rules.min_isr {
            self.elr.clear();
            self.last_known_elr.clear();
            return;
        }
        let in_isr = |r: &i32| self.isr.contains(r);
        let elr: BTreeSet<i32> = old
            .iter()
            .copied()
            .filter(|r| !in_isr(r) && !lost.contains(r))
            .collect();
        let mut last_known: BTreeSet<i32> = self.last_known_elr.iter().copied().collect();
        last_known.extend(lost.iter().copied().filter(|r| old.contains(r)));
        self.elr = self.in_replica_order(&elr);
        self.last_known_elr = self.in_replica_order(
            &last_known
                .into_iter()
                .filter(|r| !in_isr(r) && !elr.contains(r))
                .collect(),
        );
    }

    fn in_replica_order(&self, set: &BTreeSet<i32>) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| set.contains(r))
            .collect()
    }

    /// Elects a leader if there is none: the first live ISR member in replica order, else the
    /// first live ELR member, else (unclean) any live replica, else none.
    fn elect(&mut self, live: &dyn Fn(i32) -> bool, rules: &Rules) {
        if self.leader != -1 {
            return;
        }
        let first = |among: &[i32]| {
            self.replicas
                .iter()
                .copied()
                .find(|r| among.contains(r) && live(*r))
        };
        if let Some(l) = first(&self.isr) {
            self.leader = l;
        } else if let Some(l) = first(&self.elr) {
            self.leader = l;
            self.set_isr(vec![l], &[], rules);
        } else if rules.unclean {
            if let Some(l) = first(&self.replicas) {
                self.leader = l;
                self.isr = vec![l];
                self.elr.clear();
                self.last_known_elr.clear();
            }
        }
    }

    /// The record that moves `p` here, with `p`'s epochs as preconditions; None when nothing
    /// changes.
    fn record(&self, topic_id: TopicId, p: &PartitionInfo) -> Option<Record> {
        let changed = |new: &Vec<i32>, old: &Vec<i32>| (new != old).then(|| new.clone());
        let replicas = changed(&self.replicas, &p.replicas);
        // A replica removed from the assignment is fenced by a new leader epoch even when
        // the leader stays (Kafka's controller does the same), so its in-flight requests of
        // the old epoch are refused.
        let removed = p.replicas.iter().any(|r| !self.replicas.contains(r));
        let leader_changed = self.leader != p.leader || self.bump || removed;
        let isr = changed(&self.isr, &p.isr);
        let elr = changed(&self.elr, &p.elr);
        let last_known_elr = changed(&self.last_known_elr, &p.last_known_elr);
        let adding_replicas = changed(&self.adding, &p.adding_replicas);
        let removing_replicas = changed(&self.removing, &p.removing_replicas);
        let original_replicas = changed(&self.original, &p.original_replicas);
        if !leader_changed
            && isr.is_none()
            && elr.is_none()
            && last_known_elr.is_none()
            && replicas.is_none()
            && adding_replicas.is_none()
            && removing_replicas.is_none()
            && original_replicas.is_none()
        {
            return None;
        }
        Some(Record::PartitionChanged {
            topic_id,
            partition: p.partition,
            leader: leader_changed.then_some(self.leader),
            leader_epoch: leader_changed.then(|| p.leader_epoch.saturating_add(1)),
            isr,
            replicas,
            expected_leader_epoch: Some(p.leader_epoch),
            expected_partition_epoch: Some(p.partition_epoch),
            elr,
            last_known_elr,
            adding_replicas,
            removing_replicas,
            original_replicas,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::records::RESOURCE_BROKER;
    use crate::ApplyOutcome;

    const TOPIC: TopicId = [5; 16];

    fn registration(
        broker_id: i32,
        incarnation: u8,
        previous_broker_epoch: i64,
    ) -> BrokerRegistration {
        BrokerRegistration {
            broker_id,
            incarnation_id: [incarnation; 16],
            host: format!("b{broker_id}"),
            port: 9092,
            rack: None,
            controller_addr: None,
            shard_count: 2,
            inter_broker_host: None,
            inter_broker_port: None,
            inter_broker_shard_ports: Vec::new(),
            previous_broker_epoch,
            listeners: Vec::new(),
        }
    }

    /// Applies `records` as the next entry and insists they were applied.
    fn apply(image: &Arc<ClusterImage>, records: &[Record]) -> Arc<ClusterImage> {
        let (next, outcome) = image.apply(image.applied_index + 1, records);
        assert_eq!(outcome, ApplyOutcome::Applied, "{records:?}");
        next
    }

    /// Brokers `1..=brokers` registered and live; topic "t" with `partitions` partitions, each
    /// on three replicas starting at broker `1 + p % brokers`, ISR = replicas, the first leads.
    fn cluster(brokers: i32, partitions: i32, min_isr: Option<&str>) -> Arc<ClusterImage> {
        let mut image = Arc::new(ClusterImage::default());
        for b in 1..=brokers {
            let records = registration_records(&image, &registration(b, 1, -1), Unclean::Disabled);
            image = apply(&image, &records);
        }
        let mut records = vec![Record::TopicCreated {
            name: "t".into(),
            topic_id: TOPIC,
        }];
        for p in 0..partitions {
            let replicas: Vec<i32> = (0..3).map(|k| 1 + (p + k) % brokers).collect();
            records.push(Record::PartitionCreated {
                topic_id: TOPIC,
                partition: p,
                isr: replicas.clone(),
                leader: replicas[0],
                replicas,
                leader_epoch: 0,
            });
        }
        if let Some(v) = min_isr {
            records.push(Record::ConfigChanged {
                resource_type: RESOURCE_BROKER,
                resource_name: String::new(),
                name: MIN_INSYNC_REPLICAS.into(),
                value: Some(v.into()),
            });
        }
        apply(&image, &records)
    }

    fn part(image: &ClusterImage, p: usize) -> &PartitionInfo {
        &image.topic("t").unwrap().partitions[p]
    }

    fn fence(image: &Arc<ClusterImage>, b: i32) -> Arc<ClusterImage> {
        apply(image, &fence_records(image, b, Unclean::Disabled))
    }

    fn unfence(image: &Arc<ClusterImage>, b: i32, unclean: Unclean) -> Arc<ClusterImage> {
        apply(image, &unfence_records(image, b, unclean))
    }

    /// (leader, leader_epoch, isr, elr) of partition 0.
    fn state(image: &ClusterImage) -> (i32, i32, Vec<i32>, Vec<i32>) {
        let p = part(image, 0);
        (p.leader, p.leader_epoch, p.isr.clone(), p.elr.clone())
    }

    #[test]
    fn fencing_the_leader_elects_the_next_isr_member() {
        let image = fence(&cluster(3, 1, None), 1);
        assert_eq!(state(&image), (2, 1, vec![2, 3], vec![]));
        assert!(image.brokers[&1].fenced);
    }

    #[test]
    fn fencing_a_follower_shrinks_the_isr_and_keeps_the_leader_and_epoch() {
        let image = fence(&cluster(3, 1, None), 3);
        assert_eq!(state(&image), (1, 0, vec![1, 2], vec![]));
        assert_eq!(part(&image, 0).partition_epoch, 1);
    }

    #[test]
    fn fencing_every_replica_leaves_the_last_isr_member_recorded_offline() {
        let image = fence(&fence(&fence(&cluster(3, 1, None), 1), 2), 3);
        assert_eq!(state(&image), (-1, 3, vec![3], vec![]));
    }

    #[test]
    fn the_last_isr_member_coming_back_leads() {
        let offline = fence(&fence(&fence(&cluster(3, 1, None), 1), 2), 3);
        let image = unfence(&offline, 3, Unclean::Disabled);
        assert_eq!(state(&image), (3, 4, vec![3], vec![]));
    }

    #[test]
    fn a_replica_outside_the_isr_leads_only_by_unclean_election() {
        let offline = fence(&fence(&fence(&cluster(3, 1, None), 1), 2), 3);
        let image = unfence(&offline, 1, Unclean::Disabled);
        assert_eq!(state(&image), (-1, 3, vec![3], vec![]));
        assert!(!image.brokers[&1].fenced);

        let image = unfence(&offline, 1, Unclean::Enabled);
        assert_eq!(state(&image), (1, 4, vec![1], vec![]));

        // The topic's own setting, when not forced.
        let config = Record::ConfigChanged {
            resource_type: crate::records::RESOURCE_TOPIC,
            resource_name: "t".into(),
            name: UNCLEAN_LEADER_ELECTION_ENABLE.into(),
            value: Some("true".into()),
        };
        let offline = apply(&offline, &[config]);
        let image = unfence(&offline, 1, Unclean::TopicConfig);
        assert_eq!(state(&image), (1, 4, vec![1], vec![]));
    }

    #[test]
    fn a_new_incarnation_without_clean_shutdown_leaves_the_isr_and_returns_a_follower() {
        let image = cluster(3, 1, None);
        let records = registration_records(&image, &registration(1, 2, -1), Unclean::Disabled);
        let image = apply(&image, &records);
        assert_eq!(state(&image), (2, 1, vec![2, 3], vec![]));
        assert!(!image.brokers[&1].fenced);
        assert_eq!(image.brokers[&1].incarnation_id, [2; 16]);
    }

    #[test]
    fn a_new_incarnation_after_clean_shutdown_keeps_its_eligibility() {
        // min ISR 2: the leader shrinks the ISR to itself, 2 and 3 go to the ELR, then stop.
        let image = cluster(3, 1, Some("2"));
        let (_, records) = alter_partitions(&image, &[alter(&image, &[1])]);
        let image = fence(&fence(&apply(&image, &records), 2), 3);
        assert_eq!(state(&image), (1, 0, vec![1], vec![2, 3]));
        let epoch_2 = image.brokers[&2].broker_epoch;
        // 2 comes back cleanly: still eligible. 3 uncleanly: out of the ELR, last known.
        let clean = registration(2, 2, epoch_2);
        let image = apply(
            &image,
            &registration_records(&image, &clean, Unclean::Disabled),
        );
        assert_eq!(state(&image), (1, 0, vec![1], vec![2, 3]));
        let unclean = registration(3, 2, -1);
        let image = apply(
            &image,
            &registration_records(&image, &unclean, Unclean::Disabled),
        );
        assert_eq!(state(&image), (1, 0, vec![1], vec![2]));
        assert_eq!(part(&image, 0).last_known_elr, vec![3]);
    }

    #[test]
    fn below_min_isr_the_removed_go_to_the_elr_and_an_elr_member_leads_when_the_isr_is_gone() {
        let image = fence(&cluster(3, 1, Some("2")), 1);
        assert_eq!(state(&image), (2, 1, vec![2, 3], vec![]));
        let image = fence(&image, 2);
        assert_eq!(state(&image), (3, 2, vec![3], vec![2]));
        let image = fence(&image, 3);
        assert_eq!(state(&image), (-1, 3, vec![3], vec![2]));
        // 1 is neither in the ISR nor in the ELR; 2 is in the ELR.
        let image = unfence(&image, 1, Unclean::Disabled);
        assert_eq!(state(&image).0, -1);
        let image = unfence(&image, 2, Unclean::Disabled);
        assert_eq!(state(&image), (2, 4, vec![2], vec![3]));
    }

    #[test]
    fn controlled_shutdown_moves_leadership_and_checks_the_broker_epoch() {
        let image = cluster(3, 1, None);
        let epoch = image.brokers[&1].broker_epoch;
        assert_eq!(
            controlled_shutdown_records(&image, 1, epoch + 1, Unclean::Disabled),
            Err(codes::STALE_BROKER_EPOCH)
        );
        let records = controlled_shutdown_records(&image, 1, epoch, Unclean::Disabled).unwrap();
        let image = apply(&image, &records);
        assert_eq!(state(&image), (2, 1, vec![2, 3], vec![]));
        assert!(image.brokers[&1].fenced);
    }

    fn offline(image: &Arc<ClusterImage>, b: i32, partitions: &[i32]) -> Arc<ClusterImage> {
        let replicas: Vec<(TopicId, i32)> = partitions.iter().map(|p| (TOPIC, *p)).collect();
        let epoch = image.brokers[&b].broker_epoch;
        let records = offline_replica_records(image, b, epoch, &replicas, Unclean::Disabled)
            .unwrap()
            .expect("a change");
        apply(image, &records)
    }

    #[test]
    fn an_offline_leader_gives_way_to_the_next_isr_member_on_that_partition_only() {
        let image = cluster(3, 3, None);
        // Broker 1 leads partition 0 and follows on 1 and 2 (replicas [2,3,1], [3,1,2]).
        let image = offline(&image, 1, &[0]);
        assert_eq!(state(&image), (2, 1, vec![2, 3], vec![]));
        assert!(!image.brokers[&1].fenced);
        assert!(image.brokers[&1].is_offline(&TOPIC, 0));
        assert_eq!(part(&image, 1).isr, vec![2, 3, 1]);
        // An offline follower leaves the ISR; its leader and leader epoch stay.
        let image = offline(&image, 1, &[1]);
        let p1 = part(&image, 1);
        assert_eq!(
            (p1.leader, p1.leader_epoch, p1.isr.clone()),
            (2, 0, vec![2, 3])
        );
        // Reported again: nothing to record.
        let epoch = image.brokers[&1].broker_epoch;
        let again = offline_replica_records(&image, 1, epoch, &[(TOPIC, 0)], Unclean::Disabled);
        assert_eq!(again, Ok(None));
        // A stale broker epoch is refused, as a heartbeat's would be.
        assert_eq!(
            offline_replica_records(&image, 1, epoch - 1, &[(TOPIC, 2)], Unclean::Disabled),
            Err(codes::STALE_BROKER_EPOCH)
        );
        // The record itself checks the epoch when applied.
        let stale = Record::ReplicasOffline {
            broker_id: 1,
            broker_epoch: epoch - 1,
            replicas: vec![(TOPIC, 2)],
        };
        let (_, outcome) = image.apply(image.applied_index + 1, &[stale]);
        assert!(
            matches!(outcome, ApplyOutcome::Rejected { code, .. } if code == codes::STALE_BROKER_EPOCH)
        );
    }

    #[test]
    fn an_offline_replica_is_never_let_back_into_the_isr_or_elected_until_it_registers_again() {
        let image = offline(&cluster(3, 1, None), 3, &[0]);
        assert_eq!(state(&image), (1, 0, vec![1, 2], vec![]));
        // The leader cannot add it back (it may have lost its unsynced tail).
        let (results, records) = alter_partitions(&image, &[alter(&image, &[1, 2, 3])]);
        assert!(records.is_empty());
        assert_eq!(results[0].error_code, codes::INELIGIBLE_REPLICA);
        // With the others fenced, it is not elected, even by unclean election.
        let image = fence(&fence(&image, 1), 2);
        assert_eq!(state(&image).0, -1);
        let image = apply(&image, &fence_records(&image, 3, Unclean::Disabled));
        let image = unfence(&image, 3, Unclean::Enabled);
        assert_eq!(state(&image).0, -1);
        // A new incarnation recovered its log: its offline set is cleared and it may lead
        // (here by unclean election, the only one left).
        let records = registration_records(&image, &registration(3, 2, -1), Unclean::Enabled);
        let image = apply(&image, &records);
        assert!(image.brokers[&3].offline_replicas.is_empty());
        assert_eq!(state(&image).0, 3);
    }

    #[test]
    fn an_offline_last_isr_member_leaves_the_isr_to_an_elr_member_and_is_not_eligible() {
        // min ISR 2: fencing 1 then 2 leaves leader 3 alone in the ISR, 2 in the ELR.
        let image = fence(&fence(&cluster(3, 1, Some("2")), 1), 2);
        assert_eq!(state(&image), (3, 2, vec![3], vec![2]));
        // 3's log goes offline: it leaves the ISR (2 in the ELR holds every committed record)
        // and is not eligible either; nobody live may lead.
        let image = offline(&image, 3, &[0]);
        assert_eq!(state(&image), (-1, 3, vec![], vec![2]));
        assert_eq!(part(&image, 0).last_known_elr, vec![3]);
        // 1 is neither in the ISR nor in the ELR; ELR member 2 comes back and leads.
        let image = unfence(&image, 1, Unclean::Disabled);
        assert_eq!(state(&image).0, -1);
        let image = unfence(&image, 2, Unclean::Disabled);
        assert_eq!(state(&image), (2, 4, vec![2], vec![]));
    }

    fn alter(image: &ClusterImage, isr: &[i32]) -> AlterPartitionRequest {
        let p = part(image, 0);
        AlterPartitionRequest {
            topic_id: TOPIC,
            partition: 0,
            leader_id: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: isr
                .iter()
                .map(|b| IsrMember {
                    broker_id: *b,
                    broker_epoch: image.brokers.get(b).map_or(-1, |i| i.broker_epoch),
                })
                .collect(),
        }
    }

    fn reassigned(image: &Arc<ClusterImage>, target: Option<&[i32]>) -> Arc<ClusterImage> {
        let record = reassign(image, "t", 0, target).unwrap().expect("a change");
        apply(image, &[record])
    }

    /// (replicas, adding, removing) of partition 0.
    fn assignment(image: &ClusterImage) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
        let p = part(image, 0);
        (
            p.replicas.clone(),
            p.adding_replicas.clone(),
            p.removing_replicas.clone(),
        )
    }

    #[test]
    fn a_reassignment_adds_then_completes_when_the_added_join_the_isr() {
        // Five brokers; partition 0 on [1, 2, 3] led by 1. Move it to [4, 2, 5].
        let image = cluster(5, 1, None);
        let image = reassigned(&image, Some(&[4, 2, 5]));
        assert_eq!(
            assignment(&image),
            (vec![4, 2, 5, 1, 3], vec![4, 5], vec![1, 3])
        );
        // Leadership and ISR stay until the added catch up.
        assert_eq!(state(&image), (1, 0, vec![1, 2, 3], vec![]));
        // 4 joins: not complete yet.
        let (r, records) = alter_partitions(&image, &[alter(&image, &[1, 2, 3, 4])]);
        assert_eq!(r[0].error_code, 0);
        let image = apply(&image, &records);
        assert_eq!(assignment(&image).1, vec![4, 5]);
        // 5 joins: the replicas become the target, 1 and 3 leave, 4 (first in the ISR of the
        // target order) leads with a new epoch.
        let (r, records) = alter_partitions(&image, &[alter(&image, &[1, 2, 3, 4, 5])]);
        assert_eq!(r[0].error_code, 0);
        let image = apply(&image, &records);
        assert_eq!(assignment(&image), (vec![4, 2, 5], vec![], vec![]));
        assert_eq!(state(&image), (4, 1, vec![2, 4, 5], vec![]));
    }

    #[test]
    fn shrinking_the_replication_factor_completes_at_once_and_bumps_the_epoch() {
        let image = cluster(3, 1, None);
        let image = reassigned(&image, Some(&[1, 2]));
        assert_eq!(assignment(&image), (vec![1, 2], vec![], vec![]));
        // The leader stays, its epoch goes up (the removed replica is fenced).
        assert_eq!(state(&image), (1, 1, vec![1, 2], vec![]));
        // Removing the leader hands leadership to the target's first ISR member.
        let image = reassigned(&image, Some(&[2]));
        assert_eq!(state(&image), (2, 2, vec![2], vec![]));
    }

    #[test]
    fn cancelling_restores_exactly_the_original_replicas() {
        let image = cluster(5, 1, None);
        let started = reassigned(&image, Some(&[4, 5, 1]));
        // 4 caught up and joined the ISR before the cancel.
        let (_, records) = alter_partitions(&started, &[alter(&started, &[1, 2, 3, 4])]);
        let started = apply(&started, &records);
        let cancelled = reassigned(&started, None);
        assert_eq!(assignment(&cancelled), (vec![1, 2, 3], vec![], vec![]));
        assert_eq!(state(&cancelled).2, vec![1, 2, 3]);
        // Nothing to cancel now.
        let err = reassign(&cancelled, "t", 0, None).unwrap_err();
        assert_eq!(err.0, codes::NO_REASSIGNMENT_IN_PROGRESS);
    }

    #[test]
    fn a_new_reassignment_replaces_the_one_in_progress() {
        let image = cluster(5, 1, None);
        let first = reassigned(&image, Some(&[4, 2, 3]));
        assert_eq!(assignment(&first), (vec![4, 2, 3, 1], vec![4], vec![1]));
        // Measured from the original [1, 2, 3]: 4 is no longer wanted, 5 is.
        let second = reassigned(&first, Some(&[5, 2, 3]));
        assert_eq!(assignment(&second), (vec![5, 2, 3, 1], vec![5], vec![1]));
        // A cancel now still leaves the original replicas.
        let cancelled = reassigned(&second, None);
        assert_eq!(assignment(&cancelled), (vec![1, 2, 3], vec![], vec![]));
    }

    #[test]
    fn invalid_reassignments_change_nothing() {
        let image = cluster(3, 1, None);
        for target in [&[][..], &[1, 1, 2][..], &[1, 2, 9][..], &[-1][..]] {
            let err = reassign(&image, "t", 0, Some(target)).unwrap_err();
            assert_eq!(
                err.0,
                codes::INVALID_REPLICA_ASSIGNMENT,
                "{target:?}: {}",
                err.1
            );
        }
        let err = reassign(&image, "t", 7, Some(&[1])).unwrap_err();
        assert_eq!(err.0, codes::UNKNOWN_TOPIC_OR_PARTITION);
        let err = reassign(&image, "nope", 0, Some(&[1])).unwrap_err();
        assert_eq!(err.0, codes::UNKNOWN_TOPIC_OR_PARTITION);
        // The assignment it has already: nothing to do.
        assert_eq!(reassign(&image, "t", 0, Some(&[1, 2, 3])).unwrap(), None);
    }

    #[test]
    fn unregistering_fences_then_removes_the_broker() {
        let image = cluster(4, 1, None);
        let image = apply(&image, &unregister_records(&image, 1).unwrap());
        assert!(!image.brokers.contains_key(&1));
        assert_eq!(state(&image), (2, 1, vec![2, 3], vec![]));
        assert_eq!(
            unregister_records(&image, 1).unwrap_err(),
            codes::BROKER_ID_NOT_REGISTERED
        );
        // A reassignment may not name it any more.
        let err = reassign(&image, "t", 0, Some(&[1, 2, 3])).unwrap_err();
        assert_eq!(err.0, codes::INVALID_REPLICA_ASSIGNMENT);
    }

    #[test]
    fn alter_partition_rejects_each_stale_or_invalid_request() {
        // Leader 2 at epoch 1, partition epoch 1, ISR [2, 3]; broker 1 fenced.
        let image = fence(&cluster(3, 1, None), 1);
        let ok = alter(&image, &[2]);
        let with = |f: &dyn Fn(&mut AlterPartitionRequest)| {
            let mut r = ok.clone();
            f(&mut r);
            alter_partition(&image, &r)
        };
        assert_eq!(
            with(&|r| r.leader_epoch -= 1),
            Err(codes::FENCED_LEADER_EPOCH)
        );
        assert_eq!(
            with(&|r| r.leader_id = 3),
            Err(codes::NOT_LEADER_OR_FOLLOWER)
        );
        assert_eq!(
            with(&|r| r.leader_epoch += 1),
            Err(codes::NOT_LEADER_OR_FOLLOWER)
        );
        assert_eq!(
            with(&|r| r.partition_epoch -= 1),
            Err(codes::INVALID_UPDATE_VERSION)
        );
        let member = |broker_id, broker_epoch| IsrMember {
            broker_id,
            broker_epoch,
        };
        let fenced_1 = member(1, image.brokers[&1].broker_epoch);
        assert_eq!(
            with(&|r| r.new_isr.push(fenced_1)),
            Err(codes::INELIGIBLE_REPLICA)
        );
        let stale_3 = member(3, image.brokers[&3].broker_epoch - 1);
        assert_eq!(
            with(&|r| r.new_isr.push(stale_3)),
            Err(codes::INELIGIBLE_REPLICA)
        );
        assert_eq!(
            with(&|r| r.new_isr.push(member(4, 1))),
            Err(codes::INELIGIBLE_REPLICA)
        );
        assert_eq!(with(&|r| r.new_isr = vec![]), Err(codes::INVALID_REQUEST));
        let live_3 = member(3, image.brokers[&3].broker_epoch);
        assert_eq!(
            with(&|r| r.new_isr = vec![live_3]),
            Err(codes::INVALID_REQUEST)
        );
        let dup = ok.new_isr[0];
        assert_eq!(with(&|r| r.new_isr.push(dup)), Err(codes::INVALID_REQUEST));
        assert_eq!(
            with(&|r| r.topic_id = [9; 16]),
            Err(codes::UNKNOWN_TOPIC_ID)
        );
        assert_eq!(
            with(&|r| r.partition = 7),
            Err(codes::UNKNOWN_TOPIC_OR_PARTITION)
        );
        assert_eq!(alter_partition(&image, &alter(&image, &[2, 3])), Ok(None));
    }

    #[test]
    fn alter_partition_shrinks_and_expands_with_preconditions() {
        let image = cluster(3, 1, Some("2"));
        let (results, records) = alter_partitions(&image, &[alter(&image, &[1])]);
        assert_eq!(results[0].error_code, 0);
        assert_eq!((results[0].partition_epoch, &results[0].isr), (1, &vec![1]));
        match &records[..] {
            [Record::PartitionChanged {
                isr: Some(isr),
                elr: Some(elr),
                leader: None,
                expected_leader_epoch: Some(0),
                expected_partition_epoch: Some(0),
                ..
            }] => assert_eq!((isr, elr), (&vec![1], &vec![2, 3])),
            other => panic!("unexpected records {other:?}"),
        }
        let shrunk = apply(&image, &records);
        assert_eq!(state(&shrunk), (1, 0, vec![1], vec![2, 3]));
        assert_eq!(part(&shrunk, 0).partition_epoch, 1);
        // The same records again are stale.
        let (_, outcome) = shrunk.apply(shrunk.applied_index + 1, &records);
        assert!(
            matches!(outcome, ApplyOutcome::Rejected { code, .. } if code == codes::INVALID_UPDATE_VERSION)
        );
        // Back to min ISR: the ELR is cleared.
        let (results, records) = alter_partitions(&shrunk, &[alter(&shrunk, &[1, 3])]);
        assert_eq!(results[0].error_code, 0);
        let expanded = apply(&shrunk, &records);
        assert_eq!(state(&expanded), (1, 0, vec![1, 3], vec![]));
        // A batch naming one partition twice: the second is refused, the first commits.
        let twice = [alter(&expanded, &[1]), alter(&expanded, &[1, 2, 3])];
        let (results, records) = alter_partitions(&expanded, &twice);
        assert_eq!(
            results.iter().map(|r| r.error_code).collect::<Vec<_>>(),
            vec![0, codes::INVALID_REQUEST]
        );
        assert_eq!(records.len(), 1);
    }
}

/// A model check of the elections: random fencing, unfencing, clean and unclean restarts,
/// stale decisions and AlterPartitions over a few RF=3 partitions, applied through
/// `ClusterImage::apply`, with each replica's log modelled as the leader epochs of its
/// records (a count alone cannot see a follower's diverged tail). Followers fetch from the
/// leader (truncating to their common prefix first, as Kafka's epoch-based truncation does)
/// and join the ISR only when caught up; the high watermark (commit) is the shortest common
/// prefix of the ISR with the leader, advancing only while the ISR is at min ISR (KIP-966's
/// strict min ISR).
#[cfg(test)]
mod model {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use proptest::prelude::*;
    use proptest::sample::Index;

    use super::*;
    use crate::records::RESOURCE_BROKER;
    use crate::ApplyOutcome;

    const TOPIC: TopicId = [6; 16];
    const PARTITIONS: usize = 3;

    #[derive(Clone, Debug)]
    enum Op {
        Fence(Index),
        Unfence(Index),
        /// Fencing decided on the image before the last step, applied now.
        StaleFence(Index),
        Restart {
            broker: Index,
            clean: bool,
            keep: Index,
        },
        Append {
            partition: usize,
            count: usize,
        },
        Fetch {
            partition: usize,
            broker: Index,
            amount: Index,
        },
        Shrink {
            partition: usize,
            member: Index,
            stale: bool,
        },
        Expand {
            partition: usize,
            broker: Index,
            stale: bool,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let p = || 0..PARTITIONS;
        prop_oneof![
            2 => any::<Index>().prop_map(Op::Fence),
            3 => any::<Index>().prop_map(Op::Unfence),
            1 => any::<Index>().prop_map(Op::StaleFence),
            2 => (any::<Index>(), any::<bool>(), any::<Index>())
                .prop_map(|(broker, clean, keep)| Op::Restart { broker, clean, keep }),
            4 => (p(), 1..3usize).prop_map(|(partition, count)| Op::Append { partition, count }),
            5 => (p(), any::<Index>(), any::<Index>())
                .prop_map(|(partition, broker, amount)| Op::Fetch { partition, broker, amount }),
            2 => (p(), any::<Index>(), any::<bool>())
                .prop_map(|(partition, member, stale)| Op::Shrink { partition, member, stale }),
            3 => (p(), any::<Index>(), any::<bool>())
                .prop_map(|(partition, broker, stale)| Op::Expand { partition, broker, stale }),
        ]
    }

    struct Model {
        image: Arc<ClusterImage>,
        prev: Arc<ClusterImage>,
        brokers: Vec<i32>,
        unclean: Unclean,
        /// Each replica's log: the leader epoch of each record.
        logs: BTreeMap<(usize, i32), Vec<i32>>,
        /// Each partition's committed records (below the high watermark).
        committed: Vec<Vec<i32>>,
        next_incarnation: u8,
    }

    fn common_prefix(a: &[i32], b: &[i32]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    fn registration(broker_id: i32, incarnation: u8, previous: i64) -> BrokerRegistration {
        BrokerRegistration {
            broker_id,
            incarnation_id: [incarnation; 16],
            host: "h".into(),
            port: 9092,
            rack: None,
            controller_addr: None,
            shard_count: 1,
            inter_broker_host: None,
            inter_broker_port: None,
            inter_broker_shard_ports: Vec::new(),
            previous_broker_epoch: previous,
            listeners: Vec::new(),
        }
    }

    impl Model {
        fn new(brokers: i32, min_isr: usize, unclean: Unclean) -> Model {
            let mut records = Vec::new();
            for b in 1..=brokers {
                records.push(Record::BrokerRegistered {
                    broker_id: b,
                    incarnation_id: [0; 16],
                    host: "h".into(),
                    port: 9092,
                    rack: None,
                    shard_count: 1,
                    inter_broker_host: None,
                    inter_broker_port: None,
                    inter_broker_shard_ports: Vec::new(),
                    previous_broker_epoch: -1,
                    listeners: Vec::new(),
                });
                records.push(Record::BrokerUnfenced { broker_id: b });
            }
            records.push(Record::TopicCreated {
                name: "t".into(),
                topic_id: TOPIC,
            });
            for p in 0..PARTITIONS as i32 {
                let replicas: Vec<i32> = (0..3).map(|k| 1 + (p + k) % brokers).collect();
                records.push(Record::PartitionCreated {
                    topic_id: TOPIC,
                    partition: p,
                    isr: replicas.clone(),
                    leader: replicas[0],
                    replicas,
                    leader_epoch: 0,
                });
            }
            records.push(Record::ConfigChanged {
                resource_type: RESOURCE_BROKER,
                resource_name: String::new(),
                name: MIN_INSYNC_REPLICAS.into(),
                value: Some(min_isr.to_string()),
            });
            let (image, outcome) = Arc::new(ClusterImage::default()).apply(1, &records);
            assert_eq!(outcome, ApplyOutcome::Applied);
            Model {
                prev: image.clone(),
                image,
                brokers: (1..=brokers).collect(),
                unclean,
                logs: BTreeMap::new(),
                committed: vec![Vec::new(); PARTITIONS],
                next_incarnation: 1,
            }
        }

        fn part(&self, p: usize) -> &PartitionInfo {
            &self.image.topic("t").expect("topic").partitions[p]
        }

        fn log(&self, p: usize, b: i32) -> &[i32] {
            self.logs.get(&(p, b)).map_or(&[], Vec::as_slice)
        }

        fn min_isr(&self) -> usize {
            min_insync_replicas(&self.image, self.image.topic("t").expect("topic"))
        }

        fn unclean_disabled(&self) -> bool {
            !unclean_election_enabled(
                &self.image,
                self.image.topic("t").expect("topic"),
                self.unclean,
            )
        }

        /// Applies `records` and checks every invariant across the change. A rejected batch
        /// must leave the image as it was.
        fn commit(&mut self, records: &[Record]) -> bool {
            let before = self.image.clone();
            let (next, outcome) = before.apply(before.applied_index + 1, records);
            if let ApplyOutcome::Rejected { .. } = outcome {
                assert_eq!(next.topics, before.topics);
                assert_eq!(next.brokers, before.brokers);
                return false;
            }
            self.prev = before.clone();
            self.image = next;
            let old = &before.topic("t").expect("topic").partitions;
            for (p, o) in old.iter().enumerate() {
                let n = self.part(p).clone();
                assert!(
                    n.leader_epoch >= o.leader_epoch,
                    "leader epoch went down: {o:?} -> {n:?}"
                );
                assert!(
                    n.partition_epoch >= o.partition_epoch,
                    "partition epoch went down"
                );
                if n.leader != -1 {
                    assert!(!n.isr.is_empty(), "a leader with an empty ISR: {n:?}");
                    assert!(n.isr.contains(&n.leader), "leader outside the ISR: {n:?}");
                }
                let elected = n.leader != -1 && n.leader_epoch != o.leader_epoch;
                if elected && self.unclean_disabled() {
                    assert!(
                        o.isr.contains(&n.leader) || o.elr.contains(&n.leader),
                        "leader {} elected outside ISR {:?} and ELR {:?}",
                        n.leader,
                        o.isr,
                        o.elr
                    );
                }
            }
            true
        }

        /// The leader's high watermark moves up; the leader holds every committed record.
        fn advance_and_check(&mut self) {
            let min_isr = self.min_isr();
            for p in 0..PARTITIONS {
                let part = self.part(p).clone();
                if part.leader == -1 {
                    continue;
                }
                let leader_log = self.log(p, part.leader).to_vec();
                if self.unclean_disabled() {
                    let held = common_prefix(&self.committed[p], &leader_log);
                    assert_eq!(
                        held,
                        self.committed[p].len(),
                        "partition {p}: leader {} ({leader_log:?}) lacks committed {:?}; {part:?}",
                        part.leader,
                        self.committed[p]
                    );
                }
                if part.isr.len() < min_isr {
                    continue;
                }
                let hw = part
                    .isr
                    .iter()
                    .map(|m| common_prefix(self.log(p, *m), &leader_log))
                    .min()
                    .unwrap_or(0);
                if hw > self.committed[p].len() {
                    self.committed[p] = leader_log[..hw].to_vec();
                }
            }
        }

        fn broker(&self, i: &Index) -> i32 {
            self.brokers[i.index(self.brokers.len())]
        }

        fn run(&mut self, op: &Op) {
            match op {
                Op::Fence(b) => {
                    let records = fence_records(&self.image, self.broker(b), self.unclean);
                    assert!(self.commit(&records));
                }
                Op::Unfence(b) => {
                    let b = self.broker(b);
                    if self.image.brokers[&b].fenced {
                        assert!(self.commit(&unfence_records(&self.image, b, self.unclean)));
                    }
                }
                // The partition changes of a fencing decided on the image before the last
                // change: rejected if any partition they touch changed since. (Broker state is
                // the controller's to keep current: its decisions are serialized, on a
                // linearizable image; only partitions are stale here.)
                Op::StaleFence(b) => {
                    if self.prev.brokers != self.image.brokers {
                        return;
                    }
                    let records: Vec<Record> =
                        fence_records(&self.prev, self.broker(b), self.unclean)
                            .into_iter()
                            .filter(|r| matches!(r, Record::PartitionChanged { .. }))
                            .collect();
                    let changed_since = records.iter().any(|r| match r {
                        Record::PartitionChanged { partition, .. } => {
                            let p = *partition as usize;
                            let old = &self.prev.topic("t").expect("topic").partitions[p];
                            let now = self.part(p);
                            (old.leader_epoch, old.partition_epoch)
                                != (now.leader_epoch, now.partition_epoch)
                        }
                        _ => false,
                    });
                    let applied = self.commit(&records);
                    assert!(
                        !(applied && changed_since),
                        "a stale change applied: {records:?}"
                    );
                }
                Op::Restart {
                    broker,
                    clean,
                    keep,
                } => self.restart(self.broker(broker), *clean, keep),
                Op::Append { partition, count } => {
                    let part = self.part(*partition).clone();
                    if part.leader != -1 {
                        let log = self.logs.entry((*partition, part.leader)).or_default();
                        log.extend(std::iter::repeat_n(part.leader_epoch, *count));
                    }
                }
                Op::Fetch {
                    partition,
                    broker,
                    amount,
                } => {
                    let (p, f) = (*partition, self.broker(broker));
                    let part = self.part(p).clone();
                    if part.leader == -1 || part.leader == f || !part.replicas.contains(&f) {
                        return;
                    }
                    let leader_log = self.log(p, part.leader).to_vec();
                    let common = common_prefix(self.log(p, f), &leader_log);
                    let len = common + amount.index(leader_log.len() - common + 1);
                    self.logs.insert((p, f), leader_log[..len].to_vec());
                }
                Op::Shrink {
                    partition,
                    member,
                    stale,
                } => {
                    let part = self.part(*partition).clone();
                    if part.leader == -1 {
                        return;
                    }
                    let m = part.isr[member.index(part.isr.len())];
                    if m == part.leader {
                        return;
                    }
                    let isr: Vec<i32> = part.isr.iter().copied().filter(|b| *b != m).collect();
                    self.alter(*partition, &isr, *stale, false);
                }
                Op::Expand {
                    partition,
                    broker,
                    stale,
                } => {
                    let (p, f) = (*partition, self.broker(broker));
                    let part = self.part(p).clone();
                    let leader_log = self.log(p, part.leader);
                    let caught_up = common_prefix(self.log(p, f), leader_log) == leader_log.len();
                    let eligible = part.replicas.contains(&f) && !self.image.brokers[&f].fenced;
                    if part.leader == -1 || part.isr.contains(&f) || !caught_up || !eligible {
                        return;
                    }
                    let mut isr = part.isr.clone();
                    isr.push(f);
                    self.alter(p, &isr, false, *stale);
                }
            }
        }

        fn alter(&mut self, p: usize, isr: &[i32], stale_epoch: bool, stale_broker: bool) {
            let part = self.part(p).clone();
            let request = AlterPartitionRequest {
                topic_id: TOPIC,
                partition: p as i32,
                leader_id: part.leader,
                leader_epoch: part.leader_epoch - i32::from(stale_epoch),
                partition_epoch: part.partition_epoch,
                new_isr: isr
                    .iter()
                    .map(|b| IsrMember {
                        broker_id: *b,
                        broker_epoch: self.image.brokers[b].broker_epoch
                            - i64::from(stale_broker && !part.isr.contains(b)),
                    })
                    .collect(),
            };
            match alter_partition(&self.image, &request) {
                Ok(Some(record)) => {
                    assert!(!stale_epoch && !stale_broker);
                    assert!(self.commit(&[record]));
                }
                Ok(None) => unreachable!("the ISR changes"),
                Err(code) if stale_epoch => assert_eq!(code, codes::FENCED_LEADER_EPOCH),
                Err(code) => {
                    assert!(stale_broker, "{code} for {request:?} on {part:?}");
                    assert_eq!(code, codes::INELIGIBLE_REPLICA);
                }
            }
        }

        fn restart(&mut self, b: i32, clean: bool, keep: &Index) {
            let mut previous = -1;
            if clean {
                let epoch = self.image.brokers[&b].broker_epoch;
                let records = controlled_shutdown_records(&self.image, b, epoch, self.unclean)
                    .expect("current epoch");
                assert!(self.commit(&records));
                previous = epoch;
            } else {
                // A crash loses each log's unflushed tail. Where the broker is its partition's
                // last ISR member it stays in the ISR (nobody is known to hold more): the one
                // documented way committed records are lost.
                for p in 0..PARTITIONS {
                    let log = self.logs.entry((p, b)).or_default();
                    log.truncate(keep.index(log.len() + 1));
                    let log = log.clone();
                    let part = self.part(p);
                    if part.isr == [b] && part.elr.is_empty() {
                        let kept = common_prefix(&self.committed[p], &log);
                        self.committed[p].truncate(kept);
                    }
                }
            }
            self.next_incarnation += 1;
            let reg = registration(b, self.next_incarnation, previous);
            let records = registration_records(&self.image, &reg, self.unclean);
            assert!(self.commit(&records));
            // An unclean restart leaves every ISR but the ones it is the last member of, and
            // every ELR.
            if !clean {
                for p in 0..PARTITIONS {
                    let part = self.part(p);
                    assert!(!part.elr.contains(&b));
                    if part.isr.contains(&b) {
                        assert_eq!(part.isr, [b], "{part:?}");
                        assert!(part.elr.is_empty(), "{part:?}");
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn elections_keep_the_isr_invariants_and_every_committed_record(
            brokers in 3..=5i32,
            min_isr in 1..=3usize,
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let mut model = Model::new(brokers, min_isr, Unclean::Disabled);
            for op in &ops {
                model.run(op);
                model.advance_and_check();
            }
        }

        /// Unclean election may lose records, but never breaks the image's invariants.
        #[test]
        fn unclean_elections_keep_the_isr_invariants(
            brokers in 3..=5i32,
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let mut model = Model::new(brokers, 2, Unclean::Enabled);
            for op in &ops {
                model.run(op);
                model.advance_and_check();
            }
        }
    }
}
