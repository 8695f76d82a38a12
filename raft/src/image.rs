//! The cluster metadata image: brokers, topics, partitions (replicas, leader, leader epoch,
//! ISR), config overrides and the next producer id. Immutable once built: applying a batch
//! produces a new image (topics are shared `Arc`s, copied only when changed), and every shard of
//! every broker holds the image committed last.
//!
//! `apply` is deterministic and all-or-nothing: a batch whose record contradicts the image (a
//! topic name that exists, a partition out of order, a stale producer-id block) rejects the
//! whole batch with Kafka's error code and leaves the image as it was. That is how two
//! concurrent creations of one name resolve: the first committed wins, the second is rejected
//! when applied.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::records::{
    AclEntry, ListenerEndpoint, QuotaEntityPart, QuotaValue, Record, TopicId, RESOURCE_BROKER,
    RESOURCE_TOPIC,
};
use crate::{ApplyOutcome, LogIndex};

/// Kafka error codes the image answers with.
pub mod codes {
    use keel_vocab::error::ResponseError;
    use keel_vocab::ErrorCode;

    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 =
        ErrorCode::of(ResponseError::UnknownTopicOrPartition).code();
    pub const INVALID_REQUEST: i16 = ErrorCode::of(ResponseError::InvalidRequest).code();
    pub const TOPIC_ALREADY_EXISTS: i16 = ErrorCode::of(ResponseError::TopicAlreadyExists).code();
    pub const INVALID_PARTITIONS: i16 = ErrorCode::of(ResponseError::InvalidPartitions).code();
    pub const BROKER_ID_NOT_REGISTERED: i16 =
        ErrorCode::of(ResponseError::BrokerIdNotRegistered).code();
    pub const UNKNOWN_TOPIC_ID: i16 = ErrorCode::of(ResponseError::UnknownTopicId).code();
    pub const INVALID_CONFIG: i16 = ErrorCode::of(ResponseError::InvalidConfig).code();
    pub const FENCED_LEADER_EPOCH: i16 = ErrorCode::of(ResponseError::FencedLeaderEpoch).code();
    pub const INVALID_UPDATE_VERSION: i16 =
        ErrorCode::of(ResponseError::InvalidUpdateVersion).code();
    pub const NOT_LEADER_OR_FOLLOWER: i16 =
        ErrorCode::of(ResponseError::NotLeaderOrFollower).code();
    pub const INELIGIBLE_REPLICA: i16 = ErrorCode::of(ResponseError::IneligibleReplica).code();
    pub const STALE_BROKER_EPOCH: i16 = ErrorCode::of(ResponseError::StaleBrokerEpoch).code();
    pub const INVALID_REPLICA_ASSIGNMENT: i16 =
        ErrorCode::of(ResponseError::InvalidReplicaAssignment).code();
    pub const NO_REASSIGNMENT_IN_PROGRESS: i16 =
        ErrorCode::of(ResponseError::NoReassignmentInProgress).code();
    pub const RESOURCE_NOT_FOUND: i16 = ErrorCode::of(ResponseError::ResourceNotFound).code();
    pub const UNACCEPTABLE_CREDENTIAL: i16 =
        ErrorCode::of(ResponseError::UnacceptableCredential).code();
}

/// A user's SCRAM credential for one mechanism, as stored (Kafka's
/// UserScramCredentialRecord): never the password or the salted password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentialInfo {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl std::fmt::Debug for ScramCredentialInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys log in (StoredKey) or impersonate the broker (ServerKey): not in logs.
        f.debug_struct("ScramCredentialInfo")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Kafka's bounds on a SCRAM credential's iterations (UNACCEPTABLE_CREDENTIAL outside).
pub const SCRAM_MIN_ITERATIONS: i32 = 4096;
pub const SCRAM_MAX_ITERATIONS: i32 = 16384;

/// The digest length of SCRAM mechanism `mechanism` (1 = SHA-256, 2 = SHA-512).
fn scram_digest_len(mechanism: i8) -> Option<usize> {
    match mechanism {
        1 => Some(32),
        2 => Some(64),
        _ => None,
    }
}

/// An ACL id as the image's map key (hex; JSON map keys are strings).
pub fn acl_key(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The client quota entity types and keys the image keeps (Kafka's user and client-id
/// entities; Keel has no `ip` entity nor `controller_mutation_rate`).
pub const QUOTA_ENTITY_TYPES: [&str; 2] = ["user", "client-id"];
pub const QUOTA_KEYS: [&str; 3] = [
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
];

/// One client quota entity's quotas (Kafka's ClientQuotaImage): its parts sorted by type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientQuotaInfo {
    pub entity: Vec<QuotaEntityPart>,
    pub values: BTreeMap<String, QuotaValue>,
}

/// A quota entity as the image's map key: its parts sorted by type, as JSON (JSON map keys
/// are strings, and any name may appear in one).
pub fn quota_entity_key(entity: &[QuotaEntityPart]) -> String {
    let mut parts = entity.to_vec();
    parts.sort();
    serde_json::to_string(&parts).unwrap_or_default()
}

/// Why a quota entity, key or value cannot be stored (Kafka's INVALID_REQUEST messages).
pub fn check_client_quota(
    entity: &[QuotaEntityPart],
    key: &str,
    value: Option<f64>,
) -> Result<(), String> {
    if entity.is_empty() {
        return Err("Invalid empty client quota entity".into());
    }
    for (i, part) in entity.iter().enumerate() {
        if !QUOTA_ENTITY_TYPES.contains(&part.entity_type.as_str()) {
            return Err(format!(
                "Unhandled client quota entity type: {}",
                part.entity_type
            ));
        }
        if entity[..i]
            .iter()
            .any(|p| p.entity_type == part.entity_type)
        {
            return Err(format!(
                "Invalid client quota entity, duplicate entity entry {}",
                part.entity_type
            ));
        }
        if part.entity_name.as_deref() == Some("") {
            return Err(format!("Empty {} not supported", part.entity_type));
        }
    }
    if !QUOTA_KEYS.contains(&key) {
        return Err(if key == "controller_mutation_rate" {
            "controller_mutation_rate quotas are not supported by Keel".to_string()
        } else {
            format!("Invalid configuration key {key}")
        });
    }
    if let Some(v) = value {
        if !v.is_finite() {
            return Err(format!("Invalid value {v} for configuration {key}"));
        }
        // Byte rates are Kafka LONG configs: whole numbers (within Kafka's epsilon).
        if key != "request_percentage" && ((v + 1e-6).trunc() - v).abs() > 1e-6 {
            return Err(format!("Configuration {key} must be a Long value"));
        }
    }
    Ok(())
}

/// `BrokerInfo::previous_broker_epoch` of a snapshot written before the field existed.
fn no_broker_epoch() -> i64 {
    -1
}

/// A registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub broker_id: i32,
    pub incarnation_id: [u8; 16],
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    pub fenced: bool,
    /// The log index of its latest registration (Kafka's broker epoch).
    pub broker_epoch: i64,
    /// Shard (core) count; 0 = unknown.
    #[serde(default)]
    pub shard_count: i32,
    /// The inter-broker listener; `None` = `host`.
    #[serde(default)]
    pub inter_broker_host: Option<String>,
    /// `None` = `port`.
    #[serde(default)]
    pub inter_broker_port: Option<i32>,
    /// One inter-broker port per shard; empty = none.
    #[serde(default)]
    pub inter_broker_shard_ports: Vec<i32>,
    /// The epoch its previous incarnation shut down cleanly with, as it registered; -1 = not
    /// clean (or not said).
    #[serde(default = "no_broker_epoch")]
    pub previous_broker_epoch: i64,
    /// Every advertised listener; empty = only `host`/`port` (an older registration).
    #[serde(default)]
    pub listeners: Vec<ListenerEndpoint>,
    /// Its replicas whose logs went offline in this incarnation (`ReplicasOffline`): never
    /// elected, never let into an ISR, until the broker registers again.
    #[serde(default)]
    pub offline_replicas: BTreeSet<(TopicId, i32)>,
}

impl BrokerInfo {
    /// Whether this broker's replica of `partition` of `topic_id` is offline.
    pub fn is_offline(&self, topic_id: &TopicId, partition: i32) -> bool {
        self.offline_replicas.contains(&(*topic_id, partition))
    }
}

/// One partition's assignment and leadership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionInfo {
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// -1 = no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    /// Bumped on every change of this partition.
    pub partition_epoch: i32,
    /// KIP-966 eligible leader replicas: replicas out of the ISR that still hold every
    /// committed record, because they left while the ISR was below `min.insync.replicas` (when
    /// the high watermark cannot advance). Disjoint from `isr`; empty while the ISR is at or
    /// above the minimum.
    #[serde(default)]
    pub elr: Vec<i32>,
    /// KIP-966: replicas that were eligible last but lost it by an unclean shutdown; kept for
    /// an operator's (or a future unclean recovery's) choice, never elected from by Keel.
    #[serde(default)]
    pub last_known_elr: Vec<i32>,
    /// KIP-455: a reassignment in progress adds these replicas (they catch up as followers)
    /// and then removes `removing_replicas`; `replicas` lists the target first, then those
    /// being removed. Both empty when none is in progress.
    #[serde(default)]
    pub adding_replicas: Vec<i32>,
    #[serde(default)]
    pub removing_replicas: Vec<i32>,
    /// The replicas in their order before the reassignment in progress (what a cancel
    /// restores); empty when none is in progress.
    #[serde(default)]
    pub original_replicas: Vec<i32>,
}

impl PartitionInfo {
    /// Whether a reassignment is in progress.
    pub fn reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas, in order, before the reassignment in progress (all of them when none
    /// is).
    pub fn replicas_before_reassignment(&self) -> Vec<i32> {
        if self.original_replicas.is_empty() {
            self.replicas.clone()
        } else {
            self.original_replicas.clone()
        }
    }

    /// The replicas the reassignment in progress moves to (all of them when none is).
    pub fn target_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: TopicId,
    pub partitions: Vec<PartitionInfo>,
    /// Topic-level config overrides.
    pub configs: BTreeMap<String, String>,
}

impl TopicInfo {
    /// Replication factor: the replica count of partition 0.
    pub fn replication_factor(&self) -> i16 {
        self.partitions
            .first()
            .map_or(0, |p| p.replicas.len().min(i16::MAX as usize) as i16)
    }
}

/// The committed metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterImage {
    /// The log index of the last entry applied (0 = none).
    pub applied_index: LogIndex,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: BTreeMap<String, Arc<TopicInfo>>,
    /// Broker-level dynamic config overrides by broker id ("" = cluster default).
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// The next producer id not yet handed out.
    pub next_producer_id: i64,
    /// SCRAM credentials by user, then by mechanism (1 = SHA-256, 2 = SHA-512).
    #[serde(default)]
    pub scram_credentials: BTreeMap<String, BTreeMap<i8, ScramCredentialInfo>>,
    /// ACL bindings by id ([`acl_key`]).
    #[serde(default)]
    pub acls: BTreeMap<String, AclEntry>,
    /// Client quotas by entity ([`quota_entity_key`]); an entity without quotas is dropped.
    #[serde(default)]
    pub client_quotas: BTreeMap<String, ClientQuotaInfo>,
    #[serde(skip)]
    by_id: HashMap<TopicId, String>,
}

impl ClusterImage {
    pub fn topic(&self, name: &str) -> Option<&Arc<TopicInfo>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &TopicId) -> Option<&Arc<TopicInfo>> {
        self.by_id.get(id).and_then(|n| self.topics.get(n))
    }

    /// Brokers that are registered and not fenced.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerInfo> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// Rebuilds the derived index after deserializing.
    pub fn reindex(&mut self) {
        self.by_id = self
            .topics
            .values()
            .map(|t| (t.topic_id, t.name.clone()))
            .collect();
    }

    /// Applies one entry's batch at `index`: all records or none. Returns the new image
    /// (`applied_index` = `index` either way) and the outcome.
    pub fn apply(
        self: &Arc<Self>,
        index: LogIndex,
        records: &[Record],
    ) -> (Arc<Self>, ApplyOutcome) {
        let mut next = (**self).clone();
        next.applied_index = index;
        for record in records {
            if let Err((code, message)) = next.apply_one(index, record) {
                let mut unchanged = (**self).clone();
                unchanged.applied_index = index;
                return (
                    Arc::new(unchanged),
                    ApplyOutcome::Rejected { code, message },
                );
            }
        }
        (Arc::new(next), ApplyOutcome::Applied)
    }

    /// Marks `index` applied without changing anything (membership and blank entries).
    pub fn skip(self: &Arc<Self>, index: LogIndex) -> Arc<Self> {
        let mut next = (**self).clone();
        next.applied_index = index;
        Arc::new(next)
    }

    fn topic_mut_by_id(&mut self, id: &TopicId) -> Result<&mut TopicInfo, (i16, String)> {
        let name = self.by_id.get(id).cloned().ok_or_else(|| {
            (
                codes::UNKNOWN_TOPIC_ID,
                format!("unknown topic id {}", uuid::Uuid::from_bytes(*id)),
            )
        })?;
        let topic = self
            .topics
            .get_mut(&name)
            .ok_or((codes::UNKNOWN_TOPIC_ID, format!("topic {name} vanished")))?;
        Ok(Arc::make_mut(topic))
    }

    fn apply_one(&mut self, index: LogIndex, record: &Record) -> Result<(), (i16, String)> {
        match record {
            Record::BrokerRegistered {
                broker_id,
                incarnation_id,
                host,
                port,
                rack,
                shard_count,
                inter_broker_host,
                inter_broker_port,
                inter_broker_shard_ports,
                previous_broker_epoch,
                listeners,
            } => {
                self.brokers.insert(
                    *broker_id,
                    BrokerInfo {
                        broker_id: *broker_id,
                        incarnation_id: *incarnation_id,
                        host: host.clone(),
                        port: *port,
                        rack: rack.clone(),
                        fenced: true,
                        broker_epoch: index as i64,
                        shard_count: *shard_count,
                        inter_broker_host: inter_broker_host.clone(),
                        inter_broker_port: *inter_broker_port,
                        inter_broker_shard_ports: inter_broker_shard_ports.clone(),
                        previous_broker_epoch: *previous_broker_epoch,
                        listeners: listeners.clone(),
                        offline_replicas: BTreeSet::new(),
                    },
                );
            }
            Record::ReplicasOffline {
                broker_id,
                broker_epoch,
                replicas,
            } => {
                let b = self.brokers.get_mut(broker_id).ok_or_else(|| {
                    (
                        codes::BROKER_ID_NOT_REGISTERED,
                        format!("broker {broker_id} is not registered"),
                    )
                })?;
                if *broker_epoch != b.broker_epoch {
                    return Err((
                        codes::STALE_BROKER_EPOCH,
                        format!(
                            "broker {broker_id} is at epoch {}, not {broker_epoch}",
                            b.broker_epoch
                        ),
                    ));
                }
                b.offline_replicas.extend(replicas.iter().copied());
            }
            Record::BrokerUnregistered {
                broker_id,
                broker_epoch,
            } => {
                let b = self.brokers.get(broker_id).ok_or_else(|| {
                    (
                        codes::BROKER_ID_NOT_REGISTERED,
                        format!("broker {broker_id} is not registered"),
                    )
                })?;
                if *broker_epoch != -1 && *broker_epoch != b.broker_epoch {
                    return Err((
                        codes::STALE_BROKER_EPOCH,
                        format!(
                            "broker {broker_id} is at epoch {}, not {broker_epoch}",
                            b.broker_epoch
                        ),
                    ));
                }
                let leads = self.topics.values().flat_map(|t| &t.partitions).any(|p| {
                    p.leader == *broker_id || p.isr.len() > 1 && p.isr.contains(broker_id)
                });
                if leads {
                    return Err((
                        codes::INVALID_REQUEST,
                        format!("broker {broker_id} still leads or is in an ISR with others; fence it first"),
                    ));
                }
                self.brokers.remove(broker_id);
            }
            Record::BrokerFenced { broker_id } | Record::BrokerUnfenced { broker_id } => {
                let fenced = matches!(record, Record::BrokerFenced { .. });
                let b = self.brokers.get_mut(broker_id).ok_or_else(|| {
                    (
                        codes::BROKER_ID_NOT_REGISTERED,
                        format!("broker {broker_id} is not registered"),
                    )
                })?;
                b.fenced = fenced;
            }
            Record::TopicCreated { name, topic_id } => {
                if self.topics.contains_key(name) {
                    return Err((
                        codes::TOPIC_ALREADY_EXISTS,
                        format!("Topic '{name}' already exists."),
                    ));
                }
                if self.by_id.contains_key(topic_id) {
                    return Err((
                        codes::TOPIC_ALREADY_EXISTS,
                        format!("topic id of '{name}' is taken"),
                    ));
                }
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicInfo {
                        name: name.clone(),
                        topic_id: *topic_id,
                        partitions: Vec::new(),
                        configs: BTreeMap::new(),
                    }),
                );
                self.by_id.insert(*topic_id, name.clone());
            }
            Record::TopicDeleted { name, topic_id } => {
                match self.topics.get(name) {
                    Some(t) if t.topic_id == *topic_id => {}
                    _ => {
                        return Err((
                            codes::UNKNOWN_TOPIC_OR_PARTITION,
                            "This server does not host this topic-partition.".into(),
                        ))
                    }
                }
                self.topics.remove(name);
                self.by_id.remove(topic_id);
            }
            Record::PartitionCreated {
                topic_id,
                partition,
                replicas,
                isr,
                leader,
                leader_epoch,
            } => {
                let t = self.topic_mut_by_id(topic_id)?;
                if *partition != t.partitions.len() as i32 {
                    return Err((
                        codes::INVALID_PARTITIONS,
                        format!(
                            "topic {} has {} partitions; cannot create partition {partition}",
                            t.name,
                            t.partitions.len()
                        ),
                    ));
                }
                t.partitions.push(PartitionInfo {
                    partition: *partition,
                    replicas: replicas.clone(),
                    isr: isr.clone(),
                    leader: *leader,
                    leader_epoch: *leader_epoch,
                    partition_epoch: 0,
                    elr: Vec::new(),
                    last_known_elr: Vec::new(),
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                    original_replicas: Vec::new(),
                });
            }
            Record::PartitionChanged {
                topic_id,
                partition,
                leader,
                leader_epoch,
                isr,
                replicas,
                expected_leader_epoch,
                expected_partition_epoch,
                elr,
                last_known_elr,
                adding_replicas,
                removing_replicas,
                original_replicas,
            } => {
                let t = self.topic_mut_by_id(topic_id)?;
                let name = t.name.clone();
                let p = usize::try_from(*partition)
                    .ok()
                    .and_then(|i| t.partitions.get_mut(i))
                    .ok_or_else(|| {
                        (
                            codes::UNKNOWN_TOPIC_OR_PARTITION,
                            format!("{name}-{partition} does not exist"),
                        )
                    })?;
                if let Some(e) = expected_leader_epoch.filter(|e| *e != p.leader_epoch) {
                    return Err((
                        codes::FENCED_LEADER_EPOCH,
                        format!(
                            "{name}-{partition}: expected leader epoch {e}, is {}",
                            p.leader_epoch
                        ),
                    ));
                }
                if let Some(e) = expected_partition_epoch.filter(|e| *e != p.partition_epoch) {
                    return Err((
                        codes::INVALID_UPDATE_VERSION,
                        format!(
                            "{name}-{partition}: expected partition epoch {e}, is {}",
                            p.partition_epoch
                        ),
                    ));
                }
                // Checked before anything changes: the record is applied whole or not at all.
                // Only an image from a hostile snapshot holds an epoch this high.
                let partition_epoch = p.partition_epoch.checked_add(1).ok_or_else(|| {
                    (
                        codes::INVALID_REQUEST,
                        format!("{name}-{partition}: partition epoch exhausted"),
                    )
                })?;
                let mut next = p.clone();
                if let Some(l) = leader {
                    next.leader = *l;
                }
                if let Some(e) = leader_epoch {
                    next.leader_epoch = *e;
                }
                if let Some(i) = isr {
                    next.isr = i.clone();
                }
                if let Some(r) = replicas {
                    next.replicas = r.clone();
                }
                if let Some(e) = elr {
                    next.elr = e.clone();
                }
                if let Some(e) = last_known_elr {
                    next.last_known_elr = e.clone();
                }
                if let Some(a) = adding_replicas {
                    next.adding_replicas = a.clone();
                }
                if let Some(r) = removing_replicas {
                    next.removing_replicas = r.clone();
                }
                if let Some(r) = original_replicas {
                    next.original_replicas = r.clone();
                }
                next.partition_epoch = partition_epoch;
                check_partition_change(p, &next).map_err(|why| {
                    (codes::INVALID_REQUEST, format!("{name}-{partition}: {why}"))
                })?;
                *p = next;
            }
            Record::ConfigChanged {
                resource_type,
                resource_name,
                name,
                value,
            } => {
                let configs = match *resource_type {
                    RESOURCE_TOPIC => {
                        let t = self.topics.get_mut(resource_name).ok_or_else(|| {
                            (
                                codes::UNKNOWN_TOPIC_OR_PARTITION,
                                format!("The topic '{resource_name}' does not exist."),
                            )
                        })?;
                        &mut Arc::make_mut(t).configs
                    }
                    RESOURCE_BROKER => self
                        .broker_configs
                        .entry(resource_name.clone())
                        .or_default(),
                    other => {
                        return Err((
                            codes::INVALID_REQUEST,
                            format!("config resource type {other} is not supported"),
                        ))
                    }
                };
                match value {
                    Some(v) => {
                        configs.insert(name.clone(), v.clone());
                    }
                    None => {
                        configs.remove(name);
                    }
                }
                if *resource_type == RESOURCE_BROKER {
                    self.broker_configs.retain(|_, c| !c.is_empty());
                }
            }
            Record::ProducerIdsAllocated {
                broker_id: _,
                first_producer_id,
                block_size,
            } => {
                if *first_producer_id != self.next_producer_id || *block_size <= 0 {
                    return Err((
                        codes::INVALID_REQUEST,
                        format!(
                            "producer id block at {first_producer_id} is stale; next is {}",
                            self.next_producer_id
                        ),
                    ));
                }
                // Only an image from a hostile snapshot comes near i64::MAX.
                let next = self.next_producer_id.checked_add(i64::from(*block_size));
                self.next_producer_id = next.ok_or_else(|| {
                    (
                        codes::INVALID_REQUEST,
                        format!("producer ids exhausted at {first_producer_id}"),
                    )
                })?;
            }
            Record::UserScramCredentialChanged {
                name,
                mechanism,
                salt,
                stored_key,
                server_key,
                iterations,
            } => {
                let Some(len) = scram_digest_len(*mechanism) else {
                    return Err((
                        codes::UNACCEPTABLE_CREDENTIAL,
                        format!("unknown SCRAM mechanism {mechanism}"),
                    ));
                };
                if name.is_empty() {
                    return Err((codes::UNACCEPTABLE_CREDENTIAL, "empty user name".into()));
                }
                if !(SCRAM_MIN_ITERATIONS..=SCRAM_MAX_ITERATIONS).contains(iterations) {
                    return Err((
                        codes::UNACCEPTABLE_CREDENTIAL,
                        format!(
                            "iterations {iterations} outside {SCRAM_MIN_ITERATIONS}..={SCRAM_MAX_ITERATIONS}"
                        ),
                    ));
                }
                if salt.is_empty() || stored_key.len() != len || server_key.len() != len {
                    return Err((
                        codes::UNACCEPTABLE_CREDENTIAL,
                        format!("a SCRAM credential needs a salt and {len}-byte keys"),
                    ));
                }
                self.scram_credentials
                    .entry(name.clone())
                    .or_default()
                    .insert(
                        *mechanism,
                        ScramCredentialInfo {
                            salt: salt.clone(),
                            stored_key: stored_key.clone(),
                            server_key: server_key.clone(),
                            iterations: *iterations,
                        },
                    );
            }
            Record::UserScramCredentialRemoved { name, mechanism } => {
                let removed = self
                    .scram_credentials
                    .get_mut(name)
                    .and_then(|m| m.remove(mechanism));
                if removed.is_none() {
                    return Err((
                        codes::RESOURCE_NOT_FOUND,
                        format!("user {name} has no credential for mechanism {mechanism}"),
                    ));
                }
                self.scram_credentials.retain(|_, m| !m.is_empty());
            }
            Record::AclCreated { id, acl } => {
                let key = acl_key(id);
                if self.acls.contains_key(&key) {
                    return Err((codes::INVALID_REQUEST, format!("ACL {key} exists")));
                }
                self.acls.insert(key, acl.clone());
            }
            Record::AclRemoved { id } => {
                let key = acl_key(id);
                if self.acls.remove(&key).is_none() {
                    return Err((codes::RESOURCE_NOT_FOUND, format!("no ACL {key}")));
                }
            }
            Record::ClientQuotaChanged { entity, key, value } => {
                check_client_quota(entity, key, value.map(|v| v.0))
                    .map_err(|why| (codes::INVALID_REQUEST, why))?;
                let entity_key = quota_entity_key(entity);
                match value {
                    Some(v) => {
                        let info = self.client_quotas.entry(entity_key).or_insert_with(|| {
                            let mut parts = entity.clone();
                            parts.sort();
                            ClientQuotaInfo {
                                entity: parts,
                                values: BTreeMap::new(),
                            }
                        });
                        info.values.insert(key.clone(), *v);
                    }
                    None => {
                        // Removing a quota that is not there changes nothing (as Kafka).
                        if let Some(info) = self.client_quotas.get_mut(&entity_key) {
                            info.values.remove(key);
                            if info.values.is_empty() {
                                self.client_quotas.remove(&entity_key);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// What every partition change must keep, checked on the state it would leave: the leader
/// (when there is one) is in the ISR, so the ISR is not empty while a leader exists; ISR and
/// ELR members are replicas, listed once, and no replica is in both; the leader epoch never
/// goes down.
fn check_partition_change(old: &PartitionInfo, new: &PartitionInfo) -> Result<(), String> {
    if new.leader_epoch < old.leader_epoch {
        return Err(format!(
            "leader epoch would go down from {} to {}",
            old.leader_epoch, new.leader_epoch
        ));
    }
    if new.leader != -1 && new.isr.is_empty() {
        return Err(format!("leader {} with an empty ISR", new.leader));
    }
    if new.leader != -1 && !new.isr.contains(&new.leader) {
        return Err(format!(
            "leader {} is not in the ISR {:?}",
            new.leader, new.isr
        ));
    }
    for (what, list) in [("ISR", &new.isr), ("ELR", &new.elr)] {
        for (i, id) in list.iter().enumerate() {
            if !new.replicas.contains(id) {
                return Err(format!(
                    "{what} member {id} is not a replica ({:?})",
                    new.replicas
                ));
            }
            if list[..i].contains(id) {
                return Err(format!("{what} lists {id} twice"));
            }
        }
    }
    if let Some(id) = new.elr.iter().find(|id| new.isr.contains(id)) {
        return Err(format!("{id} is in both the ISR and the ELR"));
    }
    if new.replicas.is_empty() {
        return Err("no replicas".into());
    }
    for (i, id) in new.replicas.iter().enumerate() {
        if new.replicas[..i].contains(id) {
            return Err(format!("replicas list {id} twice"));
        }
    }
    for (what, list) in [
        ("adding", &new.adding_replicas),
        ("removing", &new.removing_replicas),
    ] {
        if let Some(id) = list.iter().find(|id| !new.replicas.contains(id)) {
            return Err(format!(
                "{what} replica {id} is not a replica ({:?})",
                new.replicas
            ));
        }
    }
    if let Some(id) = new
        .adding_replicas
        .iter()
        .find(|id| new.removing_replicas.contains(id))
    {
        return Err(format!("{id} is both added and removed"));
    }
    if new.reassigning() && new.target_replicas().is_empty() {
        return Err("a reassignment to no replica".into());
    }
    if new.reassigning() {
        // The original replicas are the replicas less those being added, in their own order.
        let mut original = new.original_replicas.clone();
        let mut without_adding: Vec<i32> = new
            .replicas
            .iter()
            .copied()
            .filter(|r| !new.adding_replicas.contains(r))
            .collect();
        original.sort_unstable();
        without_adding.sort_unstable();
        if original != without_adding {
            return Err(format!(
                "original replicas {:?} are not the replicas {:?} less those added {:?}",
                new.original_replicas, new.replicas, new.adding_replicas
            ));
        }
    } else if !new.original_replicas.is_empty() {
        return Err("original replicas without a reassignment".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(name: &str, id: u8, partitions: i32) -> Vec<Record> {
        let mut v = vec![Record::TopicCreated {
            name: name.into(),
            topic_id: [id; 16],
        }];
        for p in 0..partitions {
            v.push(Record::PartitionCreated {
                topic_id: [id; 16],
                partition: p,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 0,
            });
        }
        v
    }

    #[test]
    fn second_creation_of_a_name_is_rejected_whole() {
        let img = Arc::new(ClusterImage::default());
        let (img, out) = img.apply(1, &created("a", 1, 2));
        assert_eq!(out, ApplyOutcome::Applied);
        assert_eq!(img.topic("a").unwrap().partitions.len(), 2);
        let (img2, out) = img.apply(2, &created("a", 2, 3));
        assert!(
            matches!(out, ApplyOutcome::Rejected { code, .. } if code == codes::TOPIC_ALREADY_EXISTS)
        );
        assert_eq!(img2.applied_index, 2);
        assert_eq!(img2.topic("a").unwrap().topic_id, [1; 16]);
        assert!(img2.topic_by_id(&[2; 16]).is_none());
    }

    #[test]
    fn partition_out_of_order_rejects_batch() {
        let img = Arc::new(ClusterImage::default());
        let mut recs = created("b", 3, 1);
        recs.push(Record::PartitionCreated {
            topic_id: [3; 16],
            partition: 5,
            replicas: vec![1],
            isr: vec![1],
            leader: 1,
            leader_epoch: 0,
        });
        let (img, out) = img.apply(1, &recs);
        assert!(matches!(out, ApplyOutcome::Rejected { .. }));
        assert!(img.topic("b").is_none());
    }

    #[test]
    fn fencing_and_leader_changes() {
        let img = Arc::new(ClusterImage::default());
        let mut recs = vec![
            Record::BrokerRegistered {
                broker_id: 1,
                incarnation_id: [7; 16],
                host: "h".into(),
                port: 9092,
                rack: None,
                shard_count: 4,
                inter_broker_host: None,
                inter_broker_port: None,
                inter_broker_shard_ports: Vec::new(),
                previous_broker_epoch: -1,
                listeners: Vec::new(),
            },
            Record::BrokerUnfenced { broker_id: 1 },
        ];
        recs.extend(created("c", 4, 1));
        let (img, out) = img.apply(3, &recs);
        assert_eq!(out, ApplyOutcome::Applied);
        assert_eq!(img.live_brokers().count(), 1);
        assert_eq!(img.brokers[&1].broker_epoch, 3);
        let (img, _) = img.apply(
            4,
            &[
                Record::BrokerFenced { broker_id: 1 },
                Record::PartitionChanged {
                    topic_id: [4; 16],
                    partition: 0,
                    leader: Some(-1),
                    leader_epoch: Some(1),
                    isr: None,
                    replicas: None,
                    expected_leader_epoch: None,
                    expected_partition_epoch: None,
                    elr: None,
                    last_known_elr: None,
                    adding_replicas: None,
                    removing_replicas: None,
                    original_replicas: None,
                },
            ],
        );
        assert_eq!(img.live_brokers().count(), 0);
        let p = &img.topic("c").unwrap().partitions[0];
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (-1, 1, 1));
        assert_eq!(p.isr, vec![1]);
    }

    fn scram(name: &str, mechanism: i8, key_len: usize, iterations: i32) -> Record {
        Record::UserScramCredentialChanged {
            name: name.into(),
            mechanism,
            salt: vec![1; 16],
            stored_key: vec![2; key_len],
            server_key: vec![3; key_len],
            iterations,
        }
    }

    fn rejected_with(out: &ApplyOutcome) -> Option<i16> {
        match out {
            ApplyOutcome::Rejected { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// SCRAM credentials: set, replaced, removed per mechanism; a credential Kafka would not
    /// accept (mechanism, iterations, key lengths) or the removal of one that is not there
    /// rejects the batch; they survive a snapshot (JSON) round trip.
    #[test]
    fn scram_credentials_are_set_replaced_and_removed() {
        let img = Arc::new(ClusterImage::default());
        let (img, out) = img.apply(
            1,
            &[scram("alice", 1, 32, 4096), scram("alice", 2, 64, 8192)],
        );
        assert_eq!(out, ApplyOutcome::Applied);
        assert_eq!(img.scram_credentials["alice"].len(), 2);
        let (img, out) = img.apply(2, &[scram("alice", 1, 32, 16384)]);
        assert_eq!(out, ApplyOutcome::Applied);
        assert_eq!(img.scram_credentials["alice"][&1].iterations, 16384);
        for (bad, code) in [
            (scram("bob", 3, 32, 4096), codes::UNACCEPTABLE_CREDENTIAL),
            (scram("bob", 1, 32, 4095), codes::UNACCEPTABLE_CREDENTIAL),
            (scram("bob", 1, 32, 16385), codes::UNACCEPTABLE_CREDENTIAL),
            (scram("bob", 2, 32, 4096), codes::UNACCEPTABLE_CREDENTIAL),
            (scram("", 1, 32, 4096), codes::UNACCEPTABLE_CREDENTIAL),
            (
                Record::UserScramCredentialRemoved {
                    name: "bob".into(),
                    mechanism: 1,
                },
                codes::RESOURCE_NOT_FOUND,
            ),
        ] {
            let (next, out) = img.apply(3, &[scram("carol", 1, 32, 4096), bad.clone()]);
            assert_eq!(rejected_with(&out), Some(code), "{bad:?}");
            assert!(
                !next.scram_credentials.contains_key("carol"),
                "all or nothing"
            );
        }
        let text = serde_json::to_string(&*img).unwrap();
        assert!(!text.contains("password"));
        let back: ClusterImage = serde_json::from_str(&text).unwrap();
        assert_eq!(back.scram_credentials, img.scram_credentials);
        let remove = |m| Record::UserScramCredentialRemoved {
            name: "alice".into(),
            mechanism: m,
        };
        let (img, out) = img.apply(4, &[remove(1)]);
        assert_eq!(out, ApplyOutcome::Applied);
        assert_eq!(
            img.scram_credentials["alice"].keys().collect::<Vec<_>>(),
            vec![&2]
        );
        let (img, out) = img.apply(5, &[remove(2)]);
        assert_eq!(out, ApplyOutcome::Applied);
        assert!(
            img.scram_credentials.is_empty(),
            "a user without credentials is gone"
        );
    }

    #[test]
    fn acls_are_created_and_removed_by_id() {
        let entry = AclEntry {
            resource_type: 2,
            resource_name: "orders".into(),
            pattern_type: 3,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 3,
            permission_type: 3,
        };
        let img = Arc::new(ClusterImage::default());
        let create = |id: u8| Record::AclCreated {
            id: [id; 16],
            acl: entry.clone(),
        };
        let (img, out) = img.apply(1, &[create(1), create(2)]);
        assert_eq!(out, ApplyOutcome::Applied);
        assert_eq!(img.acls.len(), 2);
        assert_eq!(img.acls[&acl_key(&[1; 16])], entry);
        let (_, out) = img.apply(2, &[create(1)]);
        assert_eq!(rejected_with(&out), Some(codes::INVALID_REQUEST));
        let (img, out) = img.apply(3, &[Record::AclRemoved { id: [1; 16] }]);
        assert_eq!(out, ApplyOutcome::Applied);
        let (_, out) = img.apply(4, &[Record::AclRemoved { id: [1; 16] }]);
        assert_eq!(rejected_with(&out), Some(codes::RESOURCE_NOT_FOUND));
        let back: ClusterImage =
            serde_json::from_str(&serde_json::to_string(&*img).unwrap()).unwrap();
        assert_eq!(back.acls, img.acls);
        // A snapshot written before these fields existed still loads.
        let old: ClusterImage = serde_json::from_str(
            r#"{"applied_index":1,"brokers":{},"topics":{},"broker_configs":{},"next_producer_id":0}"#,
        )
        .unwrap();
        assert!(old.acls.is_empty() && old.scram_credentials.is_empty());
    }

    fn quota(entity: &[(&str, Option<&str>)], key: &str, value: Option<f64>) -> Record {
        Record::ClientQuotaChanged {
            entity: entity
                .iter()
                .map(|(t, n)| QuotaEntityPart {
                    entity_type: t.to_string(),
                    entity_name: n.map(str::to_string),
                })
                .collect(),
            key: key.to_string(),
            value: value.map(QuotaValue),
        }
    }

    #[test]
    fn client_quotas_are_set_replaced_and_removed_per_entity() {
        let img = Arc::new(ClusterImage::default());
        let alice_app = [("user", Some("alice")), ("client-id", Some("app"))];
        // The same entity in the other order is the same entity.
        let app_alice = [("client-id", Some("app")), ("user", Some("alice"))];
        let (img, out) = img.apply(
            1,
            &[
                quota(&alice_app, "producer_byte_rate", Some(1024.0)),
                quota(&app_alice, "request_percentage", Some(12.5)),
                quota(&[("user", None)], "consumer_byte_rate", Some(2048.0)),
            ],
        );
        assert_eq!(out, ApplyOutcome::Applied);
        assert_eq!(img.client_quotas.len(), 2);
        let info = &img.client_quotas[&quota_entity_key(&[
            QuotaEntityPart {
                entity_type: "user".into(),
                entity_name: Some("alice".into()),
            },
            QuotaEntityPart {
                entity_type: "client-id".into(),
                entity_name: Some("app".into()),
            },
        ])];
        assert_eq!(info.entity[0].entity_type, "client-id", "parts are sorted");
        assert_eq!(info.values["producer_byte_rate"], QuotaValue(1024.0));
        assert_eq!(info.values["request_percentage"], QuotaValue(12.5));
        for (bad, why) in [
            (quota(&[], "producer_byte_rate", Some(1.0)), "empty entity"),
            (
                quota(&[("ip", None)], "producer_byte_rate", Some(1.0)),
                "ip",
            ),
            (
                quota(
                    &[("user", None), ("user", Some("a"))],
                    "producer_byte_rate",
                    Some(1.0),
                ),
                "duplicate type",
            ),
            (
                quota(&[("user", Some(""))], "producer_byte_rate", Some(1.0)),
                "empty name",
            ),
            (
                quota(&[("user", None)], "controller_mutation_rate", Some(1.0)),
                "key",
            ),
            (
                quota(&[("user", None)], "producer_byte_rate", Some(1.5)),
                "fraction",
            ),
            (
                quota(&[("user", None)], "request_percentage", Some(f64::NAN)),
                "NaN",
            ),
        ] {
            let (next, out) = img.apply(2, &[bad]);
            assert_eq!(rejected_with(&out), Some(codes::INVALID_REQUEST), "{why}");
            assert_eq!(next.client_quotas, img.client_quotas, "{why}");
        }
        let (img, out) = img.apply(
            3,
            &[
                quota(&alice_app, "producer_byte_rate", None),
                quota(&alice_app, "request_percentage", None),
                // Removing what is not there changes nothing.
                quota(&[("client-id", None)], "producer_byte_rate", None),
            ],
        );
        assert_eq!(out, ApplyOutcome::Applied);
        assert_eq!(
            img.client_quotas.len(),
            1,
            "an entity without quotas is dropped"
        );
        let back: ClusterImage =
            serde_json::from_str(&serde_json::to_string(&*img).unwrap()).unwrap();
        assert_eq!(back.client_quotas, img.client_quotas);
    }

    #[test]
    fn producer_id_blocks_are_sequential() {
        let img = Arc::new(ClusterImage::default());
        let block = |first| Record::ProducerIdsAllocated {
            broker_id: 1,
            first_producer_id: first,
            block_size: 1000,
        };
        let (img, out) = img.apply(1, &[block(0)]);
        assert_eq!(out, ApplyOutcome::Applied);
        let (img, out) = img.apply(2, &[block(0)]);
        assert!(matches!(out, ApplyOutcome::Rejected { .. }));
        assert_eq!(img.next_producer_id, 1000);
    }

    /// An image decoded from a hostile snapshot: counters at their limit reject the record
    /// instead of overflowing (a panic in debug builds, a negative id or epoch in release).
    #[test]
    fn counters_at_their_limit_reject_instead_of_overflowing() {
        let mut image = ClusterImage {
            next_producer_id: i64::MAX - 10,
            ..ClusterImage::default()
        };
        let block = Record::ProducerIdsAllocated {
            broker_id: 1,
            first_producer_id: i64::MAX - 10,
            block_size: 1000,
        };
        let (img, out) = Arc::new(image.clone()).apply(1, &[block]);
        assert!(
            matches!(out, ApplyOutcome::Rejected { code, .. } if code == codes::INVALID_REQUEST)
        );
        assert_eq!(img.next_producer_id, i64::MAX - 10);

        let (created_img, _) = Arc::new(image.clone()).apply(1, &created("e", 5, 1));
        image = (*created_img).clone();
        Arc::make_mut(image.topics.get_mut("e").unwrap()).partitions[0].partition_epoch = i32::MAX;
        let change = Record::PartitionChanged {
            topic_id: [5; 16],
            partition: 0,
            leader: Some(2),
            leader_epoch: Some(1),
            isr: None,
            replicas: None,
            expected_leader_epoch: None,
            expected_partition_epoch: None,
            elr: None,
            last_known_elr: None,
            adding_replicas: None,
            removing_replicas: None,
            original_replicas: None,
        };
        let (img, out) = Arc::new(image).apply(2, &[change]);
        assert!(
            matches!(out, ApplyOutcome::Rejected { code, .. } if code == codes::INVALID_REQUEST)
        );
        let p = &img.topic("e").unwrap().partitions[0];
        assert_eq!((p.leader, p.partition_epoch), (1, i32::MAX));
    }

    /// An RF=3 partition: replicas and ISR [1, 2, 3], leader 1 at leader epoch 5, partition
    /// epoch 1 (after one change), ELR empty.
    fn rf3() -> Arc<ClusterImage> {
        let mut records = vec![Record::TopicCreated {
            name: "r".into(),
            topic_id: [8; 16],
        }];
        records.push(Record::PartitionCreated {
            topic_id: [8; 16],
            partition: 0,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            leader: 1,
            leader_epoch: 4,
        });
        let (img, out) = Arc::new(ClusterImage::default()).apply(1, &records);
        assert_eq!(out, ApplyOutcome::Applied);
        let (img, out) = img.apply(2, &[change(|_| {})]);
        assert_eq!(
            out,
            ApplyOutcome::Applied,
            "a leader change on the RF=3 partition"
        );
        img
    }

    /// A PartitionChanged of partition r-0 to leader 1 at epoch 5 with the right
    /// preconditions, edited by `edit`.
    fn change(edit: impl FnOnce(&mut Record)) -> Record {
        let mut r = Record::PartitionChanged {
            topic_id: [8; 16],
            partition: 0,
            leader: Some(1),
            leader_epoch: Some(5),
            isr: None,
            replicas: None,
            expected_leader_epoch: None,
            expected_partition_epoch: None,
            elr: None,
            last_known_elr: None,
            adding_replicas: None,
            removing_replicas: None,
            original_replicas: None,
        };
        edit(&mut r);
        r
    }

    #[test]
    fn partition_changes_that_break_a_rule_reject_the_whole_batch() {
        let img = rf3();
        let p = &img.topic("r").unwrap().partitions[0];
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 5, 1));
        let isr = |v: &[i32]| Some(v.to_vec());
        type Edit = fn(&mut Record);
        let cases: Vec<(&str, i16, Edit)> = vec![
            ("stale leader epoch", codes::FENCED_LEADER_EPOCH, |r| {
                if let Record::PartitionChanged {
                    expected_leader_epoch,
                    ..
                } = r
                {
                    *expected_leader_epoch = Some(4);
                }
            }),
            (
                "stale partition epoch",
                codes::INVALID_UPDATE_VERSION,
                |r| {
                    if let Record::PartitionChanged {
                        expected_partition_epoch,
                        ..
                    } = r
                    {
                        *expected_partition_epoch = Some(0);
                    }
                },
            ),
            ("leader not in the ISR", codes::INVALID_REQUEST, |r| {
                if let Record::PartitionChanged { isr, .. } = r {
                    *isr = Some(vec![2, 3]);
                }
            }),
            ("ISR member not a replica", codes::INVALID_REQUEST, |r| {
                if let Record::PartitionChanged { isr, .. } = r {
                    *isr = Some(vec![1, 4]);
                }
            }),
            ("empty ISR with a leader", codes::INVALID_REQUEST, |r| {
                if let Record::PartitionChanged { isr, .. } = r {
                    *isr = Some(vec![]);
                }
            }),
            ("leader epoch going down", codes::INVALID_REQUEST, |r| {
                if let Record::PartitionChanged { leader_epoch, .. } = r {
                    *leader_epoch = Some(4);
                }
            }),
            ("ELR member not a replica", codes::INVALID_REQUEST, |r| {
                if let Record::PartitionChanged { elr, .. } = r {
                    *elr = Some(vec![7]);
                }
            }),
            ("ELR member in the ISR", codes::INVALID_REQUEST, |r| {
                if let Record::PartitionChanged { elr, .. } = r {
                    *elr = Some(vec![2]);
                }
            }),
            ("ISR member twice", codes::INVALID_REQUEST, |r| {
                if let Record::PartitionChanged { isr, .. } = r {
                    *isr = Some(vec![1, 2, 1]);
                }
            }),
        ];
        for (what, want, edit) in cases {
            // A valid record first: the batch goes whole or not at all.
            let batch = [
                Record::TopicCreated {
                    name: "other".into(),
                    topic_id: [9; 16],
                },
                change(edit),
            ];
            let (after, out) = img.apply(3, &batch);
            match out {
                ApplyOutcome::Rejected { code, .. } => assert_eq!(code, want, "{what}"),
                other => panic!("{what}: {other:?}"),
            }
            let mut unchanged = (*after).clone();
            unchanged.applied_index = img.applied_index;
            assert_eq!(&unchanged, &*img, "{what}");
        }
        // With matching preconditions and a valid state, the change applies.
        let ok = change(|r| {
            if let Record::PartitionChanged {
                expected_leader_epoch,
                expected_partition_epoch,
                isr: i,
                elr,
                ..
            } = r
            {
                *expected_leader_epoch = Some(5);
                *expected_partition_epoch = Some(1);
                *i = isr(&[1]);
                *elr = Some(vec![2, 3]);
            }
        });
        let (after, out) = img.apply(3, &[ok]);
        assert_eq!(out, ApplyOutcome::Applied);
        let p = &after.topic("r").unwrap().partitions[0];
        assert_eq!(
            (p.isr.clone(), p.elr.clone(), p.partition_epoch),
            (vec![1], vec![2, 3], 2)
        );
    }

    /// A snapshot written before the ELR and listener fields existed still loads.
    #[test]
    fn old_snapshot_json_without_the_new_fields_loads() {
        let broker = r#"{"broker_id":1,"incarnation_id":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],
            "host":"h","port":9092,"rack":null,"fenced":false,"broker_epoch":3}"#;
        let b: BrokerInfo = serde_json::from_str(broker).unwrap();
        assert_eq!((b.shard_count, b.previous_broker_epoch), (0, -1));
        assert_eq!((b.inter_broker_host, b.inter_broker_port), (None, None));
        let partition = r#"{"partition":0,"replicas":[1],"isr":[1],"leader":1,
            "leader_epoch":2,"partition_epoch":3}"#;
        let p: PartitionInfo = serde_json::from_str(partition).unwrap();
        assert!(p.elr.is_empty() && p.last_known_elr.is_empty());
    }
}
