//! The broker's view of the cluster metadata: topics, their ids, partitions (replicas,
//! leader, leader epoch, ISR, and the shard that owns each here), config overrides, and the
//! live brokers.
//!
//! The metadata itself is the Raft-replicated [`ClusterImage`] (crate `keel-raft`); this view
//! adds what is local to this broker (shard placement) and is rebuilt on shard 0 from each
//! committed image, then sent to every shard as an immutable `Arc<MetadataImage>`; each shard
//! keeps its own copy (an `Rc`), so requests never touch a refcount shared between cores.
//! Topics that did not change keep their `Arc<TopicMeta>`.
//!
//! `LegacyImage` reads `keel-metadata.json`, the metadata file of the single-node version
//! before Raft, so its topics can be migrated into the Raft log on first start.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use keel_raft::image::TopicInfo;
use keel_raft::ClusterImage;
use keel_shard::shard_for_partition;
use serde::Deserialize;

/// One partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMeta {
    pub index: i32,
    /// The shard that owns this partition's log on this broker.
    pub shard: u32,
    /// Bumped on every leadership change (a broker restart, fencing, unfencing).
    pub leader_epoch: i32,
    /// The leading broker; -1 = none.
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Eligible leader replicas (KIP-966).
    pub elr: Vec<i32>,
    /// Bumped on every change of the partition (leader, ISR, ELR, replicas).
    pub partition_epoch: i32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMeta {
    pub name: String,
    /// Topic id (UUID) as 16 bytes.
    pub id: [u8; 16],
    pub partitions: Vec<PartitionMeta>,
    pub replication_factor: i16,
    /// Topic-level config overrides (only those set on the topic).
    pub configs: BTreeMap<String, String>,
}

impl TopicMeta {
    pub fn uuid(&self) -> uuid::Uuid {
        uuid::Uuid::from_bytes(self.id)
    }

    fn from_info(t: &TopicInfo, shard_count: usize) -> TopicMeta {
        TopicMeta {
            name: t.name.clone(),
            id: t.topic_id,
            partitions: t
                .partitions
                .iter()
                .map(|p| PartitionMeta {
                    index: p.partition,
                    shard: shard_for_partition(t.topic_id, p.partition, shard_count).0,
                    leader_epoch: p.leader_epoch,
                    leader: p.leader,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    elr: p.elr.clone(),
                    partition_epoch: p.partition_epoch,
                })
                .collect(),
            replication_factor: t.replication_factor(),
            configs: t.configs.clone(),
        }
    }
}

/// A live (registered, unfenced) broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerMeta {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Every listener it advertises; empty = only `host`/`port` (an older registration).
    pub listeners: Vec<keel_raft::records::ListenerEndpoint>,
}

impl BrokerMeta {
    /// Where a client connected to `listener` reaches this broker, as Kafka answers it: the
    /// broker's endpoint of the same name; `host`/`port` when it registered no listeners (an
    /// older broker); `None` when it does not serve that listener (Kafka leaves it out).
    pub fn endpoint(&self, listener: &str) -> Option<(&str, i32)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners
            .iter()
            .find(|l| l.name == listener)
            .map(|l| (l.host.as_str(), l.port))
    }
}

/// An immutable snapshot of the cluster metadata as this broker serves it.
#[derive(Clone, Debug, Default)]
pub struct MetadataImage {
    /// The Raft log index this image reflects.
    pub version: u64,
    pub topics: BTreeMap<String, Arc<TopicMeta>>,
    /// Live brokers by id.
    pub brokers: BTreeMap<i32, BrokerMeta>,
    pub cluster: Arc<ClusterImage>,
    by_id: HashMap<[u8; 16], String>,
}

impl MetadataImage {
    /// Builds the view of `cluster`, reusing `prev`'s topics whose source did not change.
    pub fn from_cluster(
        cluster: Arc<ClusterImage>,
        prev: &MetadataImage,
        shard_count: usize,
    ) -> MetadataImage {
        let topics: BTreeMap<String, Arc<TopicMeta>> = cluster
            .topics
            .iter()
            .map(|(name, info)| {
                let unchanged = prev
                    .cluster
                    .topics
                    .get(name)
                    .is_some_and(|old| Arc::ptr_eq(old, info));
                let meta = match (unchanged, prev.topics.get(name)) {
                    (true, Some(m)) => m.clone(),
                    _ => Arc::new(TopicMeta::from_info(info, shard_count)),
                };
                (name.clone(), meta)
            })
            .collect();
        let brokers = cluster
            .live_brokers()
            .map(|b| {
                (
                    b.broker_id,
                    BrokerMeta {
                        id: b.broker_id,
                        host: b.host.clone(),
                        port: b.port,
                        rack: b.rack.clone(),
                        listeners: b.listeners.clone(),
                    },
                )
            })
            .collect();
        let by_id = topics.values().map(|t| (t.id, t.name.clone())).collect();
        MetadataImage {
            version: cluster.applied_index,
            topics,
            brokers,
            cluster,
            by_id,
        }
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicMeta>> {
        self.topics.get(name)
    }

    /// The replicas of `p` of `t` that are offline (Kafka's Metadata `offline_replicas`): on
    /// a broker that is not live (not registered, or fenced), or whose log of `p` went offline
    /// (`ReplicasOffline`).
    pub fn offline_replicas(&self, t: &TopicMeta, p: &PartitionMeta) -> Vec<i32> {
        p.replicas
            .iter()
            .copied()
            .filter(|r| {
                !self.brokers.contains_key(r)
                    || self
                        .cluster
                        .brokers
                        .get(r)
                        .is_some_and(|b| b.is_offline(&t.id, p.index))
            })
            .collect()
    }

    pub fn topic_by_id(&self, id: &[u8; 16]) -> Option<&Arc<TopicMeta>> {
        self.by_id.get(id).and_then(|n| self.topics.get(n))
    }

    /// The partition, if the topic and partition exist.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionMeta> {
        let t = self.topics.get(topic)?;
        usize::try_from(partition)
            .ok()
            .and_then(|p| t.partitions.get(p))
    }
}

/// The metadata file of the single-node version before Raft (`keel-metadata.json`).
#[derive(Debug, Deserialize)]
pub struct LegacyImage {
    pub topics: BTreeMap<String, LegacyTopic>,
}

#[derive(Debug, Deserialize)]
pub struct LegacyTopic {
    pub name: String,
    pub id: [u8; 16],
    pub partitions: Vec<LegacyPartition>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
pub struct LegacyPartition {
    pub index: i32,
    pub leader_epoch: i32,
}

impl LegacyImage {
    pub fn load(path: &Path) -> Result<Option<LegacyImage>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("parsing {}", path.display()))
    }
}

/// Kafka's topic name rule: 1..=249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name {name:?} is not allowed"));
    }
    if name.len() > 249 {
        return Err(format!(
            "topic name is {} characters long; the limit is 249",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!("topic name {name:?} contains {c:?}; allowed are ASCII letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

/// The directory of a partition's log: `<data.dir>/<topic>-<partition>`.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> std::path::PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        assert!(validate_topic_name("orders.v1_x-2").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }

    #[test]
    fn legacy_file_parses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keel-metadata.json");
        std::fs::write(
            &path,
            r#"{"version": 7, "topics": {"t": {"name": "t", "id": [9,9,9,9,9,9,9,9,9,9,9,9,9,9,9,9],
               "partitions": [{"index": 0, "shard": 1, "leader_epoch": 4}],
               "replication_factor": 1, "configs": {"retention.ms": "1000"}}}}"#,
        )
        .unwrap();
        let legacy = LegacyImage::load(&path).unwrap().unwrap();
        let t = &legacy.topics["t"];
        assert_eq!((t.id, t.partitions[0].leader_epoch), ([9; 16], 4));
        assert_eq!(t.configs["retention.ms"], "1000");
        assert!(LegacyImage::load(&dir.path().join("none"))
            .unwrap()
            .is_none());
    }
}
