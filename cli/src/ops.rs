//! Protocol operations shared by the commands, each turning Kafka messages into plain values:
//! offsets by time (ListOffsets, routed to each partition's leader), topic configs
//! (DescribeConfigs), group descriptions (DescribeGroups, with the consumer protocol's
//! assignments decoded) and committed offsets (OffsetFetch), both from the coordinator.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, Bytes};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Decodable;

use crate::client::{str_bytes, topic_name, Client, ClusterInfo};
use crate::error::{check, CliError, Result};

/// ListOffsets' special timestamps.
pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;

pub use keel_vocab::TopicPartition;

/// Offsets by timestamp (`LATEST`, `EARLIEST` or milliseconds) for each partition, asked of
/// its leader. A timestamp past every record answers -1, as Kafka does.
pub fn list_offsets(
    client: &mut Client,
    meta: &ClusterInfo,
    partitions: &[TopicPartition],
    timestamp: i64,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for tp in partitions {
        let leader = leader_of(meta, &tp.topic, tp.partition)?;
        by_leader
            .entry(leader)
            .or_default()
            .entry(tp.topic.clone())
            .or_default()
            .push(tp.partition);
    }
    let mut out = BTreeMap::new();
    for (leader, topics) in by_leader {
        let conn = client.node(leader)?;
        let (_, resp): (i16, ListOffsetsResponse) =
            conn.call(ApiKey::ListOffsets, (1, 9), |_| {
                let mut r = ListOffsetsRequest::default();
                r.replica_id = BrokerId(-1);
                r.isolation_level = 0;
                r.topics = topics
                    .iter()
                    .map(|(t, ps)| {
                        let mut lt = list_offsets_request::ListOffsetsTopic::default();
                        lt.name = topic_name(t);
                        lt.partitions = ps
                            .iter()
                            .map(|p| {
                                let mut lp = list_offsets_request::ListOffsetsPartition::default();
                                lp.partition_index = *p;
                                lp.current_leader_epoch = -1;
                                lp.timestamp = timestamp;
                                lp
                            })
                            .collect();
                        lt
                    })
                    .collect();
                r
            })?;
        for t in resp.topics {
            let topic = t.name.0.to_string();
            for p in t.partitions {
                check(
                    p.error_code,
                    || format!("list offsets of {topic}-{}", p.partition_index),
                    None,
                )?;
                out.insert(
                    TopicPartition::new(topic.clone(), p.partition_index),
                    p.offset,
                );
            }
        }
    }
    Ok(out)
}

pub fn leader_of(meta: &ClusterInfo, topic: &str, partition: i32) -> Result<i32> {
    let t = meta
        .topic(topic)
        .ok_or_else(|| CliError::kafka(format!("topic {topic}"), 3, None))?;
    check(t.error_code, || format!("topic {topic}"), None)?;
    let p = t
        .partitions
        .iter()
        .find(|p| p.partition == partition)
        .ok_or_else(|| CliError::kafka(format!("partition {topic}-{partition}"), 3, None))?;
    if p.leader < 0 {
        return Err(CliError::kafka(
            format!("partition {topic}-{partition}"),
            5, // LEADER_NOT_AVAILABLE
            None,
        ));
    }
    Ok(p.leader)
}

/// One topic config as DescribeConfigs reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: &'static str,
    pub read_only: bool,
    pub sensitive: bool,
}

impl ConfigEntry {
    /// Set on the topic itself rather than inherited.
    pub fn is_topic_override(&self) -> bool {
        self.source == "DYNAMIC_TOPIC_CONFIG"
    }
}

pub const RESOURCE_TOPIC: i8 = 2;

fn config_source(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

/// Every config of `topic`, sorted by name. DescribeConfigs v0 is older than every version
/// this client speaks (v1+ reports the source of each value).
pub fn describe_topic_configs(client: &mut Client, topic: &str) -> Result<Vec<ConfigEntry>> {
    let (_, resp): (i16, DescribeConfigsResponse) =
        client.any().call(ApiKey::DescribeConfigs, (1, 4), |_| {
            let mut res = describe_configs_request::DescribeConfigsResource::default();
            res.resource_type = RESOURCE_TOPIC;
            res.resource_name = str_bytes(topic);
            res.configuration_keys = None;
            let mut r = DescribeConfigsRequest::default();
            r.resources = vec![res];
            r
        })?;
    let result = resp
        .results
        .into_iter()
        .next()
        .ok_or_else(|| CliError::Protocol("DescribeConfigs answered no resource".into()))?;
    check(
        result.error_code,
        || format!("describe configs of topic {topic}"),
        result.error_message.map(|m| m.to_string()),
    )?;
    let mut configs: Vec<ConfigEntry> = result
        .configs
        .into_iter()
        .map(|c| ConfigEntry {
            name: c.name.to_string(),
            value: c.value.map(|v| v.to_string()),
            source: config_source(c.config_source),
            read_only: c.read_only,
            sensitive: c.is_sensitive,
        })
        .collect();
    configs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(configs)
}

/// A group member as DescribeGroups reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Decoded from the consumer protocol's assignment; empty when it is not one.
    pub assignment: Vec<TopicPartition>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GroupInfo {
    pub group: String,
    pub coordinator: i32,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<Member>,
}

impl GroupInfo {
    /// Partition -> owning member, from the members' assignments.
    pub fn owners(&self) -> BTreeMap<TopicPartition, &Member> {
        let mut out = BTreeMap::new();
        for m in &self.members {
            for tp in &m.assignment {
                out.insert(tp.clone(), m);
            }
        }
        out
    }

    /// Kafka's tools change offsets only of groups with no members.
    pub fn is_inactive(&self) -> bool {
        matches!(self.state.as_str(), "Empty" | "Dead" | "") && self.members.is_empty()
    }
}

pub fn describe_group(client: &mut Client, group: &str) -> Result<GroupInfo> {
    let coordinator = client.group_coordinator(group)?;
    let conn = client.node(coordinator)?;
    let (_, resp): (i16, DescribeGroupsResponse) =
        conn.call(ApiKey::DescribeGroups, (0, 5), |_| {
            let mut r = DescribeGroupsRequest::default();
            r.groups = vec![GroupId(str_bytes(group))];
            r
        })?;
    let g = resp
        .groups
        .into_iter()
        .next()
        .ok_or_else(|| CliError::Protocol("DescribeGroups answered no group".into()))?;
    check(
        g.error_code,
        || format!("describe group {group}"),
        g.error_message.map(|m| m.to_string()),
    )?;
    let consumer = g.protocol_type.as_str() == "consumer";
    let mut members: Vec<Member> = g
        .members
        .into_iter()
        .map(|m| Member {
            member_id: m.member_id.to_string(),
            instance_id: m.group_instance_id.map(|i| i.to_string()),
            client_id: m.client_id.to_string(),
            client_host: m.client_host.to_string(),
            assignment: if consumer {
                decode_assignment(m.member_assignment).unwrap_or_default()
            } else {
                Vec::new()
            },
        })
        .collect();
    members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    Ok(GroupInfo {
        group: group.to_string(),
        coordinator,
        state: g.group_state.to_string(),
        protocol_type: g.protocol_type.to_string(),
        protocol: g.protocol_data.to_string(),
        members,
    })
}

/// The consumer protocol's assignment: a version, then topics and partitions. Best effort:
/// `None` when the bytes are not one.
pub fn decode_assignment(mut bytes: Bytes) -> Option<Vec<TopicPartition>> {
    if bytes.remaining() < 2 {
        return None;
    }
    let version = bytes.get_i16();
    if version < 0 {
        return None;
    }
    // Newer versions only add fields at the end; read them as the newest known.
    let a = ConsumerProtocolAssignment::decode(&mut bytes, version.min(3)).ok()?;
    let mut out: Vec<TopicPartition> = a
        .assigned_partitions
        .into_iter()
        .flat_map(|t| {
            let topic = t.topic.0.to_string();
            t.partitions
                .into_iter()
                .map(move |p| TopicPartition::new(topic.clone(), p))
        })
        .collect();
    out.sort();
    Some(out)
}

/// The group's committed offsets (all topics), from its coordinator.
pub fn committed_offsets(
    client: &mut Client,
    group: &str,
    coordinator: i32,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let conn = client.node(coordinator)?;
    // v2+ may ask for every topic (null topics); v8+ batches groups (not needed here).
    let (_, resp): (i16, OffsetFetchResponse) = conn.call(ApiKey::OffsetFetch, (2, 7), |_| {
        let mut r = OffsetFetchRequest::default();
        r.group_id = GroupId(str_bytes(group));
        r.topics = None;
        r
    })?;
    check(
        resp.error_code,
        || format!("fetch committed offsets of group {group}"),
        None,
    )?;
    let mut out = BTreeMap::new();
    for t in resp.topics {
        let topic = t.name.0.to_string();
        for p in t.partitions {
            check(
                p.error_code,
                || {
                    format!(
                        "committed offset of {topic}-{} in group {group}",
                        p.partition_index
                    )
                },
                None,
            )?;
            if p.committed_offset >= 0 {
                out.insert(
                    TopicPartition::new(topic.clone(), p.partition_index),
                    p.committed_offset,
                );
            }
        }
    }
    Ok(out)
}

/// Every group on every broker (ListGroups goes to each broker: each lists the groups it
/// coordinates). Sorted by id.
pub fn list_groups(client: &mut Client) -> Result<Vec<(String, String, String)>> {
    client.metadata(Some(&[]))?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for node in client.broker_ids() {
        let conn = client.node(node)?;
        let (_, resp): (i16, ListGroupsResponse) =
            conn.call(ApiKey::ListGroups, (0, 4), |_| ListGroupsRequest::default())?;
        check(
            resp.error_code,
            || format!("list groups on broker {node}"),
            None,
        )?;
        for g in resp.groups {
            let id = g.group_id.0.to_string();
            if seen.insert(id.clone()) {
                out.push((id, g.group_state.to_string(), g.protocol_type.to_string()));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn consumer_assignment_decodes_topics_and_partitions() {
        let mut a = ConsumerProtocolAssignment::default();
        let mut tp = consumer_protocol_assignment::TopicPartition::default();
        tp.topic = topic_name("orders");
        tp.partitions = vec![2, 0];
        a.assigned_partitions = vec![tp];
        for version in [0i16, 1, 3] {
            let mut buf = bytes::BytesMut::new();
            buf.put_i16(version);
            a.encode(&mut buf, version).unwrap();
            assert_eq!(
                decode_assignment(buf.freeze()),
                Some(vec![
                    TopicPartition::new("orders", 0),
                    TopicPartition::new("orders", 2)
                ])
            );
        }
        assert_eq!(decode_assignment(Bytes::from_static(b"\x00")), None);
        assert_eq!(decode_assignment(Bytes::from_static(b"\x00\x00\xff")), None);
    }
}
