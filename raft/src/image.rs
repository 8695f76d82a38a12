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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::records::{Record, TopicId, RESOURCE_BROKER, RESOURCE_TOPIC};
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
                    },
                );
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
                });
            }
            Record::PartitionChanged {
                topic_id,
                partition,
                leader,
                leader_epoch,
                isr,
                replicas,
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
                // Checked before anything changes: the record is applied whole or not at all.
                // Only an image from a hostile snapshot holds an epoch this high.
                let partition_epoch = p.partition_epoch.checked_add(1).ok_or_else(|| {
                    (
                        codes::INVALID_REQUEST,
                        format!("{name}-{partition}: partition epoch exhausted"),
                    )
                })?;
                if let Some(l) = leader {
                    p.leader = *l;
                }
                if let Some(e) = leader_epoch {
                    p.leader_epoch = *e;
                }
                if let Some(i) = isr {
                    p.isr = i.clone();
                }
                if let Some(r) = replicas {
                    p.replicas = r.clone();
                }
                p.partition_epoch = partition_epoch;
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
        }
        Ok(())
    }
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
                },
            ],
        );
        assert_eq!(img.live_brokers().count(), 0);
        let p = &img.topic("c").unwrap().partitions[0];
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (-1, 1, 1));
        assert_eq!(p.isr, vec![1]);
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
        };
        let (img, out) = Arc::new(image).apply(2, &[change]);
        assert!(
            matches!(out, ApplyOutcome::Rejected { code, .. } if code == codes::INVALID_REQUEST)
        );
        let p = &img.topic("e").unwrap().partitions[0];
        assert_eq!((p.leader, p.partition_epoch), (1, i32::MAX));
    }
}
