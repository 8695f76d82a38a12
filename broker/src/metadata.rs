//! The cluster metadata image: topics, their ids, partitions, owner shards, leader epochs and
//! config overrides.
//!
//! Every shard holds the current image as an immutable `Arc<MetadataImage>`, swapped whole
//! on change. Shard 0 runs the controller (see `controller.rs`): it alone builds new images,
//! persists them to `<data.dir>/keel-metadata.json` (write temp, fsync, rename) and installs
//! them on every shard. Until the Raft issue lands this file is the metadata log.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One partition of a topic.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartitionMeta {
    pub index: i32,
    /// The shard that owns this partition's log on this broker.
    pub shard: u32,
    /// Bumped on every broker start (a new leadership term), so clients revalidate offsets.
    pub leader_epoch: i32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
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
}

/// An immutable snapshot of the cluster metadata.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MetadataImage {
    /// Incremented on every change.
    pub version: u64,
    pub topics: BTreeMap<String, Arc<TopicMeta>>,
    #[serde(skip)]
    by_id: HashMap<[u8; 16], String>,
}

impl MetadataImage {
    pub fn topic(&self, name: &str) -> Option<&Arc<TopicMeta>> {
        self.topics.get(name)
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

    /// Rebuilds derived indexes; call after changing `topics`.
    pub fn reindex(&mut self) {
        self.by_id = self
            .topics
            .values()
            .map(|t| (t.id, t.name.clone()))
            .collect();
    }

    pub fn load(path: &Path) -> Result<Option<MetadataImage>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let mut image: MetadataImage =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        image.reindex();
        Ok(Some(image))
    }

    /// Durably replaces the file: write a temp file, fsync it, rename, fsync the directory.
    pub fn store(&self, path: &Path) -> Result<()> {
        use std::io::Write;
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(self)?;
        {
            let mut f = std::fs::File::create(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            f.write_all(&text)?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
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
    fn store_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keel-metadata.json");
        let mut image = MetadataImage {
            version: 3,
            ..Default::default()
        };
        image.topics.insert(
            "t".into(),
            Arc::new(TopicMeta {
                name: "t".into(),
                id: [9; 16],
                partitions: vec![PartitionMeta {
                    index: 0,
                    shard: 1,
                    leader_epoch: 4,
                }],
                replication_factor: 1,
                configs: [("retention.ms".to_string(), "1000".to_string())].into(),
            }),
        );
        image.reindex();
        image.store(&path).unwrap();
        let back = MetadataImage::load(&path).unwrap().unwrap();
        assert_eq!(back.version, 3);
        assert_eq!(
            back.topic("t").unwrap().as_ref(),
            image.topic("t").unwrap().as_ref()
        );
        assert_eq!(back.topic_by_id(&[9; 16]).unwrap().name, "t");
    }
}
