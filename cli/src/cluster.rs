//! `keel cluster info|health|decommission`: the cluster as Metadata describes it. `health`
//! counts offline partitions (no leader) and under-replicated ones (ISR smaller than the
//! replica set), and exits 1 when there are any, or when there is no controller, so scripts
//! can gate on it. `decommission` drains a broker (`crate::decommission`).

use std::io::Write;

use serde_json::{json, Value};

use crate::args::{self, Spec};
use crate::client::ClusterInfo;
use crate::error::{CliError, Result};
use crate::table::{ids, Table};
use crate::{connect, emit, emit_json, subcommand, COMMON_OPTIONS};

const USAGE: &str = "\
usage:
  keel cluster info      cluster id, controller, brokers, topic and partition counts
  keel cluster health    offline and under-replicated partitions; exit 1 when there are any
";

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let usage = format!("{USAGE}{}{COMMON_OPTIONS}", crate::decommission::USAGE);
    let Some((sub, rest)) = subcommand(args, &usage, out)? else {
        return Ok(0);
    };
    if sub == "decommission" {
        return crate::decommission::run(rest, out);
    }
    if sub != "info" && sub != "health" {
        return Err(CliError::Usage(format!(
            "unknown cluster subcommand {sub:?}"
        )));
    }
    let p = args::parse(
        rest,
        &Spec {
            values: &[],
            switches: &[],
        },
    )?;
    if p.has("--help") {
        emit(out, &usage)?;
        return Ok(0);
    }
    let mut client = connect(&p)?;
    let meta = client.metadata(None)?;
    if sub == "info" {
        info(&meta, p.json(), out)?;
        return Ok(0);
    }
    let health = Health::of(&meta);
    health.print(&meta, p.json(), out)?;
    Ok(if health.healthy() { 0 } else { 1 })
}

fn info(meta: &ClusterInfo, json: bool, out: &mut dyn Write) -> Result<()> {
    let partitions: usize = meta.topics.iter().map(|t| t.partitions.len()).sum();
    if json {
        let brokers: Vec<Value> = meta
            .brokers
            .iter()
            .map(|b| json!({ "id": b.id, "host": b.host, "port": b.port, "rack": b.rack }))
            .collect();
        return emit_json(
            out,
            &json!({
                "cluster_id": meta.cluster_id,
                "controller_id": meta.controller_id,
                "brokers": brokers,
                "topics": meta.topics.len(),
                "partitions": partitions,
            }),
        );
    }
    let mut text = format!(
        "Cluster ID: {}\nController: {}\nTopics: {}  Partitions: {}\n",
        meta.cluster_id.as_deref().unwrap_or("-"),
        meta.controller_id,
        meta.topics.len(),
        partitions
    );
    let mut t = Table::new(&["BROKER", "ADDRESS", "RACK", "CONTROLLER"]);
    for b in &meta.brokers {
        t.row(vec![
            b.id.to_string(),
            b.addr(),
            b.rack.clone().unwrap_or_else(|| "-".into()),
            if b.id == meta.controller_id {
                "yes"
            } else {
                ""
            }
            .into(),
        ]);
    }
    text.push_str(&t.render());
    emit(out, &text)
}

/// A partition with a problem.
#[derive(Debug, PartialEq)]
struct Problem {
    topic: String,
    partition: i32,
    leader: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    what: &'static str,
}

#[derive(Debug, PartialEq)]
struct Health {
    brokers: usize,
    controller: bool,
    partitions: usize,
    offline: usize,
    under_replicated: usize,
    problems: Vec<Problem>,
}

impl Health {
    fn of(meta: &ClusterInfo) -> Health {
        let mut h = Health {
            brokers: meta.brokers.len(),
            controller: meta.controller_id >= 0,
            partitions: 0,
            offline: 0,
            under_replicated: 0,
            problems: Vec::new(),
        };
        for t in &meta.topics {
            for p in &t.partitions {
                h.partitions += 1;
                let what = if p.leader < 0 {
                    h.offline += 1;
                    "offline"
                } else if p.isr.len() < p.replicas.len() {
                    h.under_replicated += 1;
                    "under-replicated"
                } else {
                    continue;
                };
                h.problems.push(Problem {
                    topic: t.name.clone(),
                    partition: p.partition,
                    leader: p.leader,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    what,
                });
            }
        }
        h
    }

    fn healthy(&self) -> bool {
        self.controller && self.brokers > 0 && self.problems.is_empty()
    }

    fn print(&self, meta: &ClusterInfo, json: bool, out: &mut dyn Write) -> Result<()> {
        if json {
            let problems: Vec<Value> = self
                .problems
                .iter()
                .map(|p| {
                    json!({
                        "topic": p.topic,
                        "partition": p.partition,
                        "leader": p.leader,
                        "replicas": p.replicas,
                        "isr": p.isr,
                        "problem": p.what,
                    })
                })
                .collect();
            return emit_json(
                out,
                &json!({
                    "healthy": self.healthy(),
                    "cluster_id": meta.cluster_id,
                    "controller_id": meta.controller_id,
                    "brokers": self.brokers,
                    "partitions": self.partitions,
                    "offline_partitions": self.offline,
                    "under_replicated_partitions": self.under_replicated,
                    "problems": problems,
                }),
            );
        }
        let mut text = format!(
            "Healthy: {}\nBrokers: {}  Controller: {}\nPartitions: {}  Offline: {}  UnderReplicated: {}\n",
            if self.healthy() { "yes" } else { "no" },
            self.brokers,
            if self.controller { meta.controller_id.to_string() } else { "none".into() },
            self.partitions,
            self.offline,
            self.under_replicated
        );
        if !self.problems.is_empty() {
            let mut t = Table::new(&["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "PROBLEM"]);
            for p in &self.problems {
                t.row(vec![
                    p.topic.clone(),
                    p.partition.to_string(),
                    p.leader.to_string(),
                    ids(&p.replicas),
                    ids(&p.isr),
                    p.what.into(),
                ]);
            }
            text.push_str(&t.render());
        }
        emit(out, &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{BrokerInfo, PartitionInfo, TopicInfo};

    fn partition(partition: i32, leader: i32, replicas: &[i32], isr: &[i32]) -> PartitionInfo {
        PartitionInfo {
            partition,
            error_code: 0,
            leader,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            offline: Vec::new(),
        }
    }

    fn cluster(partitions: Vec<PartitionInfo>) -> ClusterInfo {
        ClusterInfo {
            cluster_id: Some("c1".into()),
            controller_id: 1,
            brokers: (1..=3)
                .map(|id| BrokerInfo {
                    id,
                    host: "h".into(),
                    port: 9092,
                    rack: None,
                })
                .collect(),
            topics: vec![TopicInfo {
                name: "orders".into(),
                topic_id: String::new(),
                error_code: 0,
                internal: false,
                partitions,
            }],
        }
    }

    #[test]
    fn offline_and_under_replicated_partitions_are_unhealthy() {
        let meta = cluster(vec![
            partition(0, 1, &[1, 2, 3], &[1, 2, 3]),
            partition(1, 2, &[2, 3, 1], &[2]),
            partition(2, -1, &[3, 1, 2], &[]),
        ]);
        let h = Health::of(&meta);
        assert!(!h.healthy());
        assert_eq!((h.partitions, h.offline, h.under_replicated), (3, 1, 1));
        let mut out = Vec::new();
        h.print(&meta, false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("Healthy: no\n"), "{text}");
        assert!(text.contains("Offline: 1  UnderReplicated: 1"), "{text}");
        assert!(
            text.contains("orders  1          2       2,3,1     2    under-replicated"),
            "{text}"
        );
        assert!(
            text.contains("orders  2          -1      3,1,2          offline"),
            "{text}"
        );
    }

    #[test]
    fn a_fully_replicated_cluster_is_healthy_and_no_controller_is_not() {
        let mut meta = cluster(vec![partition(0, 1, &[1, 2], &[2, 1])]);
        assert!(Health::of(&meta).healthy());
        meta.controller_id = -1;
        assert!(!Health::of(&meta).healthy());
    }
}
