//! The metadata controller, on shard 0. It alone changes the metadata image: each change
//! builds a new image, persists it (`keel-metadata.json`), then installs it on every shard
//! and waits for all of them, so when a CreateTopics answers, every shard can serve the
//! topic. Changes are serialised by one semaphore. Handlers on other shards reach it with
//! [`call`]. The Raft issue replaces the file with a replicated log; this interface stays.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::Result;
use glommio::sync::Semaphore;
use kafka_protocol::ResponseError;
use keel_shard::shard_for_partition;
use tracing::info;

use crate::config::{validate_topic_config, BrokerConfig};
use crate::errors::code;
use crate::metadata::{validate_topic_name, MetadataImage, PartitionMeta, TopicMeta};
use crate::notify::join_all;
use crate::server::BrokerShard;

/// Most partitions a topic may have.
const MAX_PARTITIONS: i32 = 100_000;

pub struct Controller {
    lock: Semaphore,
    path: PathBuf,
}

/// A controller failure for one item: Kafka error code and message.
#[derive(Debug, Clone)]
pub struct OpError {
    pub code: i16,
    pub message: String,
}

impl OpError {
    pub fn new(e: ResponseError, message: impl Into<String>) -> Self {
        OpError {
            code: code(e),
            message: message.into(),
        }
    }
}

/// A topic to create.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    /// -1 = broker default.
    pub num_partitions: i32,
    /// -1 = broker default.
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// How a config change applies.
#[derive(Debug, Clone)]
pub enum ConfigChange {
    /// AlterConfigs: the topic's overrides become exactly these.
    Replace(BTreeMap<String, String>),
    /// IncrementalAlterConfigs: (name, op, value) with Kafka's ops 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT.
    Incremental(Vec<(String, i8, Option<String>)>),
}

impl Controller {
    pub fn new(config: &BrokerConfig) -> Self {
        Controller {
            lock: Semaphore::new(1),
            path: config.data_dir.join("keel-metadata.json"),
        }
    }
}

/// Runs `f` on shard 0 (the controller), inline when already there.
pub async fn call<R, F, Fut>(shard: &Rc<BrokerShard>, f: F) -> Result<R, OpError>
where
    R: Send + 'static,
    F: FnOnce(Rc<BrokerShard>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = R> + 'static,
{
    if shard.id == 0 {
        return Ok(f(shard.clone()).await);
    }
    shard
        .mesh
        .call(0, f)
        .await
        .map_err(|e| OpError::new(ResponseError::UnknownServerError, e.to_string()))
}

fn controller(shard: &BrokerShard) -> &Controller {
    shard
        .controller
        .as_ref()
        .expect("controller runs on shard 0")
}

/// Loads the image, starts a new leader epoch for every partition, places partitions on
/// shards for this run's shard count, persists and installs it.
pub async fn bootstrap(shard: &Rc<BrokerShard>) -> Result<()> {
    std::fs::create_dir_all(&shard.config.data_dir)?;
    let ctl = controller(shard);
    let mut image = MetadataImage::load(&ctl.path)?.unwrap_or_default();
    for topic in image.topics.values_mut() {
        let t = Arc::make_mut(topic);
        for p in &mut t.partitions {
            p.leader_epoch += 1;
            p.shard = shard_for_partition(t.id, p.index, shard.count).0;
        }
    }
    image.version += 1;
    image.reindex();
    info!(
        topics = image.topics.len(),
        version = image.version,
        "metadata loaded"
    );
    publish(shard, image)
        .await
        .map_err(|e| anyhow::anyhow!(e.message))
}

async fn publish(shard: &Rc<BrokerShard>, image: MetadataImage) -> Result<(), OpError> {
    image.store(&controller(shard).path).map_err(|e| {
        OpError::new(
            ResponseError::KafkaStorageError,
            format!("persisting metadata: {e:#}"),
        )
    })?;
    let image = Arc::new(image);
    let mut installs = Vec::new();
    for target in 0..shard.count {
        let image = image.clone();
        let shard = shard.clone();
        installs.push(async move {
            if target == shard.id {
                shard.install_image(image).await;
                Ok(())
            } else {
                shard
                    .mesh
                    .call(target, move |s| async move { s.install_image(image).await })
                    .await
            }
        });
    }
    for r in join_all(installs).await {
        r.map_err(|e| OpError::new(ResponseError::UnknownServerError, e.to_string()))?;
    }
    Ok(())
}

fn new_topic_id() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

fn check_spec(
    config: &BrokerConfig,
    image: &MetadataImage,
    spec: &TopicSpec,
) -> Result<(i32, i16), OpError> {
    validate_topic_name(&spec.name)
        .map_err(|m| OpError::new(ResponseError::InvalidTopicException, m))?;
    if image.topic(&spec.name).is_some() {
        return Err(OpError::new(
            ResponseError::TopicAlreadyExists,
            format!("Topic '{}' already exists.", spec.name),
        ));
    }
    let partitions = if spec.num_partitions == -1 {
        config.num_partitions
    } else {
        spec.num_partitions
    };
    if !(1..=MAX_PARTITIONS).contains(&partitions) {
        return Err(OpError::new(
            ResponseError::InvalidPartitions,
            "Number of partitions must be between 1 and 100000.",
        ));
    }
    let rf = if spec.replication_factor == -1 {
        config.default_replication_factor
    } else {
        spec.replication_factor
    };
    if rf < 1 {
        return Err(OpError::new(
            ResponseError::InvalidReplicationFactor,
            "Replication factor must be larger than 0.",
        ));
    }
    if rf > 1 {
        return Err(OpError::new(
            ResponseError::InvalidReplicationFactor,
            format!("Replication factor: {rf} larger than available brokers: 1."),
        ));
    }
    for (k, v) in &spec.configs {
        validate_topic_config(k, v)
            .map_err(|e| OpError::new(ResponseError::InvalidConfig, format!("{e:#}")))?;
    }
    Ok((partitions, rf))
}

/// Runs one metadata change over `items` under the controller lock: `apply` edits a copy of
/// the image per item and says whether it changed anything; if any did, the new image is
/// persisted and installed on every shard before the answers go back.
async fn mutate<I, T>(
    shard: &Rc<BrokerShard>,
    items: &[I],
    mut apply: impl FnMut(&mut MetadataImage, &I) -> Result<(T, bool), OpError>,
) -> Vec<Result<T, OpError>> {
    let ctl = controller(shard);
    let Ok(_permit) = ctl.lock.acquire_permit(1).await else {
        return items
            .iter()
            .map(|_| {
                Err(OpError::new(
                    ResponseError::UnknownServerError,
                    "controller closed",
                ))
            })
            .collect();
    };
    let mut image = (*shard.image()).clone();
    let mut changed = false;
    let results: Vec<Result<T, OpError>> = items
        .iter()
        .map(|item| {
            apply(&mut image, item).map(|(t, c)| {
                changed |= c;
                t
            })
        })
        .collect();
    if changed {
        image.version += 1;
        image.reindex();
        if let Err(e) = publish(shard, image).await {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
    }
    results
}

/// Creates topics; each result is the new topic or why not. Nothing changes when
/// `validate_only`.
pub async fn create_topics(
    shard: Rc<BrokerShard>,
    specs: Vec<TopicSpec>,
    validate_only: bool,
) -> Vec<Result<Arc<TopicMeta>, OpError>> {
    let shard_count = shard.count;
    let config = shard.config.clone();
    let results = mutate(&shard, &specs, |image, spec| {
        let (partitions, rf) = check_spec(&config, image, spec)?;
        let id = new_topic_id();
        let topic = Arc::new(TopicMeta {
            name: spec.name.clone(),
            id,
            partitions: (0..partitions)
                .map(|index| PartitionMeta {
                    index,
                    shard: shard_for_partition(id, index, shard_count).0,
                    leader_epoch: 0,
                })
                .collect(),
            replication_factor: rf,
            configs: spec.configs.clone(),
        });
        if !validate_only {
            image.topics.insert(spec.name.clone(), topic.clone());
        }
        Ok((topic, !validate_only))
    })
    .await;
    if !validate_only {
        for t in results.iter().flatten() {
            info!(topic = %t.name, partitions = t.partitions.len(), "topic created");
        }
    }
    results
}

/// Deletes topics by name.
pub async fn delete_topics(
    shard: Rc<BrokerShard>,
    names: Vec<String>,
) -> Vec<Result<Arc<TopicMeta>, OpError>> {
    let results = mutate(&shard, &names, |image, name| {
        let topic = image.topics.remove(name).ok_or_else(|| {
            OpError::new(
                ResponseError::UnknownTopicOrPartition,
                "This server does not host this topic-partition.",
            )
        })?;
        Ok((topic, true))
    })
    .await;
    for t in results.iter().flatten() {
        info!(topic = %t.name, "topic deleted");
    }
    results
}

/// Grows each named topic to the given partition count.
pub async fn create_partitions(
    shard: Rc<BrokerShard>,
    requests: Vec<(String, i32)>,
    validate_only: bool,
) -> Vec<Result<(), OpError>> {
    let shard_count = shard.count;
    mutate(&shard, &requests, |image, (name, count)| {
        let topic = image.topics.get_mut(name).ok_or_else(|| {
            OpError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("The topic '{name}' does not exist."),
            )
        })?;
        let current = topic.partitions.len() as i32;
        if *count <= current {
            let msg = if *count == current {
                format!("Topic already has {current} partitions.")
            } else {
                format!("Topic currently has {current} partitions, which is higher than the requested {count}.")
            };
            return Err(OpError::new(ResponseError::InvalidPartitions, msg));
        }
        if *count > MAX_PARTITIONS {
            return Err(OpError::new(
                ResponseError::InvalidPartitions,
                format!("Number of partitions must be at most {MAX_PARTITIONS}."),
            ));
        }
        if !validate_only {
            let t = Arc::make_mut(topic);
            for index in current..*count {
                t.partitions.push(PartitionMeta {
                    index,
                    shard: shard_for_partition(t.id, index, shard_count).0,
                    leader_epoch: 0,
                });
            }
        }
        Ok(((), !validate_only))
    })
    .await
}

/// Changes topic config overrides.
pub async fn alter_topic_configs(
    shard: Rc<BrokerShard>,
    changes: Vec<(String, ConfigChange)>,
    validate_only: bool,
) -> Vec<Result<(), OpError>> {
    mutate(&shard, &changes, |image, (name, change)| {
        let topic = image.topics.get_mut(name).ok_or_else(|| {
            OpError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("The topic '{name}' does not exist."),
            )
        })?;
        let next = apply_change(&topic.configs, change)?;
        let changed = !validate_only && next != topic.configs;
        if changed {
            Arc::make_mut(topic).configs = next;
        }
        Ok(((), changed))
    })
    .await
}

fn apply_change(
    current: &BTreeMap<String, String>,
    change: &ConfigChange,
) -> Result<BTreeMap<String, String>, OpError> {
    let invalid = |m: String| OpError::new(ResponseError::InvalidConfig, m);
    let next = match change {
        ConfigChange::Replace(all) => all.clone(),
        ConfigChange::Incremental(ops) => {
            let mut next = current.clone();
            for (name, op, value) in ops {
                match op {
                    0 => {
                        let v = value
                            .clone()
                            .ok_or_else(|| invalid(format!("no value to SET for {name}")))?;
                        next.insert(name.clone(), v);
                    }
                    1 => {
                        next.remove(name);
                    }
                    2 | 3 => {
                        if name != "cleanup.policy" {
                            return Err(invalid(format!(
                                "{name} is not a list config; APPEND/SUBTRACT apply to lists"
                            )));
                        }
                        let v = value.clone().unwrap_or_default();
                        let mut items: Vec<String> = next
                            .get(name)
                            .map(|s| {
                                s.split(',')
                                    .map(|x| x.trim().to_string())
                                    .filter(|x| !x.is_empty())
                                    .collect()
                            })
                            .unwrap_or_default();
                        for item in v.split(',').map(str::trim).filter(|x| !x.is_empty()) {
                            if *op == 2 && !items.iter().any(|x| x == item) {
                                items.push(item.to_string());
                            } else if *op == 3 {
                                items.retain(|x| x != item);
                            }
                        }
                        if items.is_empty() {
                            next.remove(name);
                        } else {
                            next.insert(name.clone(), items.join(","));
                        }
                    }
                    other => {
                        return Err(OpError::new(
                            ResponseError::InvalidRequest,
                            format!("unknown config operation {other}"),
                        ))
                    }
                }
            }
            next
        }
    };
    for (k, v) in &next {
        validate_topic_config(k, v).map_err(|e| invalid(format!("{e:#}")))?;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_ops() {
        let cur: BTreeMap<String, String> = [("retention.ms".to_string(), "5".to_string())].into();
        let next = apply_change(
            &cur,
            &ConfigChange::Incremental(vec![
                ("segment.bytes".into(), 0, Some("1048576".into())),
                ("retention.ms".into(), 1, None),
                ("cleanup.policy".into(), 2, Some("compact".into())),
                ("cleanup.policy".into(), 2, Some("delete".into())),
                ("cleanup.policy".into(), 3, Some("compact".into())),
            ]),
        )
        .unwrap();
        assert_eq!(
            next.get("segment.bytes").map(String::as_str),
            Some("1048576")
        );
        assert_eq!(
            next.get("cleanup.policy").map(String::as_str),
            Some("delete")
        );
        assert!(!next.contains_key("retention.ms"));
        let err = apply_change(
            &cur,
            &ConfigChange::Incremental(vec![("retention.ms".into(), 2, Some("1".into()))]),
        )
        .unwrap_err();
        assert_eq!(err.code, ResponseError::InvalidConfig.code());
        let err = apply_change(
            &cur,
            &ConfigChange::Replace([("bogus".to_string(), "1".to_string())].into()),
        )
        .unwrap_err();
        assert_eq!(err.code, ResponseError::InvalidConfig.code());
    }
}
