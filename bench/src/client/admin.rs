//! Cluster metadata and topic administration: where each partition's leader is, creating
//! and deleting the benchmark's topics, and ListOffsets.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use keel_client::Security;

use super::conn::Conn;

pub fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// Brokers and partition leaders, from one Metadata answer.
#[derive(Clone, Debug, Default)]
pub struct ClusterMap {
    /// node id -> "host:port"
    pub brokers: HashMap<i32, String>,
    /// topic -> leader node id per partition (index = partition)
    pub leaders: BTreeMap<String, Vec<i32>>,
}

impl ClusterMap {
    pub fn leader_addr(&self, topic: &str, partition: i32) -> Option<&str> {
        let node = *self.leaders.get(topic)?.get(partition as usize)?;
        self.brokers.get(&node).map(String::as_str)
    }
}

pub async fn metadata(conn: &Conn, topics: Option<&[String]>) -> Result<ClusterMap> {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    metadata_request::MetadataRequestTopic::default().with_name(Some(topic_name(t)))
                })
                .collect()
        }));
    let resp: MetadataResponse = conn.request(ApiKey::Metadata, &req).await?;
    let mut map = ClusterMap::default();
    for b in resp.brokers {
        map.brokers
            .insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
    }
    for t in resp.topics {
        let Some(name) = t.name else { continue };
        if t.error_code != 0 {
            continue;
        }
        let mut leaders = vec![-1; t.partitions.len()];
        for p in t.partitions {
            if let Some(slot) = leaders.get_mut(p.partition_index as usize) {
                *slot = p.leader_id.0;
            }
        }
        map.leaders.insert(name.0.to_string(), leaders);
    }
    Ok(map)
}

/// Creates the topics (deleting leftovers of an earlier run first) and waits until every
/// partition has a leader.
pub async fn create_topics(
    conn: &Conn,
    names: &[String],
    partitions: i32,
    replication_factor: i16,
    configs: &BTreeMap<String, String>,
) -> Result<ClusterMap> {
    let existing = metadata(conn, Some(names)).await?;
    let stale: Vec<String> = names
        .iter()
        .filter(|n| existing.leaders.contains_key(*n))
        .cloned()
        .collect();
    if !stale.is_empty() {
        delete_topics(conn, &stale).await?;
    }
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(
            names
                .iter()
                .map(|n| {
                    create_topics_request::CreatableTopic::default()
                        .with_name(topic_name(n))
                        .with_num_partitions(partitions)
                        .with_replication_factor(replication_factor)
                        .with_configs(
                            configs
                                .iter()
                                .map(|(k, v)| {
                                    create_topics_request::CreatableTopicConfig::default()
                                        .with_name(StrBytes::from_string(k.clone()))
                                        .with_value(Some(StrBytes::from_string(v.clone())))
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    let mut version = conn.version(ApiKey::CreateTopics)?;
    if version < 4 {
        // replication factor -1 (broker default) needs v4.
        version = version.max(2);
    }
    let req = if version < 4 {
        let mut r = req;
        for t in &mut r.topics {
            t.replication_factor = 1;
        }
        r
    } else {
        req
    };
    let resp: CreateTopicsResponse = conn.request_at(ApiKey::CreateTopics, version, &req).await?;
    for t in &resp.topics {
        // 36 = TOPIC_ALREADY_EXISTS: a deletion still in progress; the wait below covers it.
        if t.error_code != 0 && t.error_code != 36 {
            bail!(
                "creating topic {}: error {} {}",
                t.name.0.as_str(),
                t.error_code,
                t.error_message.as_ref().map(|m| m.as_str()).unwrap_or("")
            );
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let map = metadata(conn, Some(names)).await?;
        let ready = names.iter().all(|n| {
            map.leaders
                .get(n)
                .is_some_and(|l| l.len() == partitions as usize && l.iter().all(|&x| x >= 0))
        });
        if ready {
            return Ok(map);
        }
        if Instant::now() > deadline {
            bail!("topics {names:?} have no leaders after 30 s");
        }
        glommio::timer::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks that the topics exist with `partitions` partitions each, all led by some broker.
pub async fn existing_topics(conn: &Conn, names: &[String], partitions: i32) -> Result<ClusterMap> {
    let map = metadata(conn, Some(names)).await?;
    for n in names {
        match map.leaders.get(n) {
            None => bail!(
                "topic {n:?} does not exist on {} (create_topics = false)",
                conn.addr
            ),
            Some(l) if l.len() != partitions as usize => {
                bail!(
                    "topic {n:?} has {} partitions on {}, the workload says {partitions}",
                    l.len(),
                    conn.addr
                )
            }
            Some(l) if l.iter().any(|&x| x < 0) => {
                bail!("topic {n:?} has partitions without a leader")
            }
            Some(_) => {}
        }
    }
    Ok(map)
}

pub async fn delete_topics(conn: &Conn, names: &[String]) -> Result<()> {
    let req = DeleteTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topic_names(names.iter().map(|n| topic_name(n)).collect());
    let resp: DeleteTopicsResponse = conn.request(ApiKey::DeleteTopics, &req).await?;
    for r in resp.responses {
        if r.error_code != 0 && r.error_code != 3 {
            bail!(
                "deleting topic {:?}: error {}",
                r.name.map(|n| n.0.to_string()),
                r.error_code
            );
        }
    }
    Ok(())
}

/// Latest (-1) or earliest (-2) offset of each partition, on the leader `conn`.
pub async fn list_offsets(
    conn: &Conn,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> Result<Vec<i64>> {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(
                partitions
                    .iter()
                    .map(|&p| {
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp)
                    })
                    .collect(),
            )]);
    let resp: ListOffsetsResponse = conn.request(ApiKey::ListOffsets, &req).await?;
    let mut out = Vec::with_capacity(partitions.len());
    for &p in partitions {
        let r = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|r| r.partition_index == p)
            .with_context(|| format!("ListOffsets answered no partition {p}"))?;
        if r.error_code != 0 {
            bail!("ListOffsets {topic}/{p}: error {}", r.error_code);
        }
        out.push(r.offset);
    }
    Ok(out)
}

/// Connections to brokers by address, opened on demand (secured as `security` says), one per
/// executor.
pub struct Connections {
    security: Security,
    conns: std::cell::RefCell<HashMap<String, Rc<Conn>>>,
}

impl Connections {
    pub fn new(security: Security) -> Connections {
        Connections {
            security,
            conns: Default::default(),
        }
    }

    pub async fn get(&self, addr: &str) -> Result<Rc<Conn>> {
        if let Some(c) = self.conns.borrow().get(addr).filter(|c| !c.is_broken()) {
            return Ok(c.clone());
        }
        let c = super::conn::connect(addr, &self.security).await?;
        self.conns.borrow_mut().insert(addr.to_string(), c.clone());
        Ok(c)
    }
}
