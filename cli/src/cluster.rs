//! `keel cluster info|health|elect-leaders|decommission`: the cluster as Metadata describes
//! it. `health` counts offline partitions (no leader) and under-replicated ones (ISR smaller
//! than the replica set), and exits 1 when there are any, or when there is no controller, so
//! scripts can gate on it. `elect-leaders` sends ElectLeaders (kafka-leader-election.sh's
//! options): preferred or unclean elections of a topic's partitions or of all, a result per
//! partition, exit 1 when one failed (ELECTION_NOT_NEEDED is no failure, as for Kafka's tool).
//! `decommission` drains a broker (`crate::decommission`).

use std::io::Write;

use serde_json::{json, Value};

use kafka_protocol::messages::{
    elect_leaders_request, ApiKey, ElectLeadersRequest, ElectLeadersResponse,
};

use crate::args::{self, Spec};
use crate::client::{topic_name, Client, ClusterInfo};
use crate::error::{error_name, CliError, Result};
use crate::table::{ids, Table};
use crate::{connect, emit, emit_json, subcommand, COMMON_OPTIONS};

const USAGE: &str = "\
usage:
  keel cluster info      cluster id, controller, brokers, topic and partition counts
  keel cluster health    offline and under-replicated partitions; exit 1 when there are any
  keel cluster elect-leaders (--topic NAME [--partition N]... | --all-topic-partitions)
                         [--election-type preferred|unclean]
                         move leadership to each partition's preferred replica (the first in
                         replica order; default), or give leaderless partitions a leader even
                         outside the ISR (unclean: acknowledged records may be lost); --type and
                         --all are short for --election-type and --all-topic-partitions
";

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let usage = format!("{USAGE}{}{COMMON_OPTIONS}", crate::decommission::USAGE);
    let Some((sub, rest)) = subcommand(args, &usage, out)? else {
        return Ok(0);
    };
    if sub == "decommission" {
        return crate::decommission::run(rest, out);
    }
    let spec = match sub {
        "info" | "health" => Spec {
            values: &[],
            switches: &[],
        },
        "elect-leaders" => Spec {
            values: &["--election-type", "--type", "--topic", "--partition"],
            switches: &["--all-topic-partitions", "--all"],
        },
        _ => {
            return Err(CliError::Usage(format!(
                "unknown cluster subcommand {sub:?}"
            )))
        }
    };
    let p = args::parse(rest, &spec)?;
    if p.has("--help") {
        emit(out, &usage)?;
        return Ok(0);
    }
    if sub == "elect-leaders" {
        let election = Election::of(&p)?;
        let mut client = connect(&p)?;
        return elect_leaders(&mut client, &election, p.json(), out);
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

/// What `elect-leaders` asks for.
#[derive(Debug, PartialEq)]
struct Election {
    /// Kafka's election type: 0 preferred, 1 unclean.
    election_type: i8,
    /// None: every partition (`--all-topic-partitions`).
    topic: Option<String>,
    /// Empty: every partition of `topic`.
    partitions: Vec<i32>,
}

impl Election {
    fn of(p: &args::Parsed) -> Result<Election> {
        let kind = p
            .get("--election-type")
            .or(p.get("--type"))
            .unwrap_or("preferred");
        let election_type = match kind.to_ascii_lowercase().as_str() {
            "preferred" => 0,
            "unclean" => 1,
            _ => {
                return Err(CliError::Usage(format!(
                    "--election-type is preferred or unclean, got {kind:?}"
                )))
            }
        };
        let all = p.has("--all-topic-partitions") || p.has("--all");
        let topic = p.get("--topic").map(str::to_string);
        let partitions = p
            .all("--partition")
            .iter()
            .map(|v| {
                v.parse::<i32>()
                    .map_err(|_| CliError::Usage(format!("--partition needs a number, got {v:?}")))
            })
            .collect::<Result<Vec<i32>>>()?;
        if !p.positionals.is_empty() {
            return Err(CliError::Usage(format!(
                "unexpected argument {:?}",
                p.positionals[0]
            )));
        }
        match (all, &topic) {
            (true, Some(_)) => Err(CliError::Usage(
                "--topic and --all-topic-partitions exclude each other".into(),
            )),
            (false, None) => Err(CliError::Usage(
                "--topic NAME or --all-topic-partitions is needed".into(),
            )),
            (true, None) if !partitions.is_empty() => {
                Err(CliError::Usage("--partition needs --topic".into()))
            }
            _ => Ok(Election {
                election_type,
                topic,
                partitions,
            }),
        }
    }

    fn type_name(&self) -> &'static str {
        if self.election_type == 1 {
            "unclean"
        } else {
            "preferred"
        }
    }
}

/// One partition's answer, with its leader after the election.
#[derive(Debug, PartialEq)]
struct ElectionOutcome {
    topic: String,
    partition: i32,
    error_code: i16,
    message: Option<String>,
    leader: Option<i32>,
}

impl ElectionOutcome {
    /// ELECTION_NOT_NEEDED is a success for the operator: the partition has what was asked.
    fn failed(&self) -> bool {
        self.error_code != 0 && self.error_code != ELECTION_NOT_NEEDED
    }
}

/// Kafka's ELECTION_NOT_NEEDED.
const ELECTION_NOT_NEEDED: i16 = 84;

fn elect_leaders(
    client: &mut Client,
    election: &Election,
    json: bool,
    out: &mut dyn Write,
) -> Result<i32> {
    let partitions: Option<Vec<i32>> = match &election.topic {
        None => None,
        Some(_) if !election.partitions.is_empty() => Some(election.partitions.clone()),
        Some(name) => {
            let meta = client.metadata(Some(std::slice::from_ref(name)))?;
            let t = meta
                .topic(name)
                .filter(|t| t.error_code == 0)
                .ok_or_else(|| CliError::kafka(format!("topic {name}"), 3, None))?;
            Some(t.partitions.iter().map(|p| p.partition).collect())
        }
    };
    if election.election_type != 0 && client.any().version(ApiKey::ElectLeaders, 1, 2).is_err() {
        return Err(CliError::Failed(
            "the broker's ElectLeaders is v0 only: preferred elections only".into(),
        ));
    }
    let (_, resp): (i16, ElectLeadersResponse) =
        client.any().call(ApiKey::ElectLeaders, (0, 2), |_| {
            let mut r = ElectLeadersRequest::default();
            r.election_type = election.election_type;
            r.timeout_ms = ELECTION_TIMEOUT_MS;
            r.topic_partitions = election.topic.as_ref().map(|name| {
                let mut t = elect_leaders_request::TopicPartitions::default();
                t.topic = topic_name(name);
                t.partitions = partitions.clone().unwrap_or_default();
                vec![t]
            });
            r
        })?;
    crate::error::check(resp.error_code, || "elect leaders".to_string(), None)?;
    // The answering broker installed the new leaders before answering: its Metadata has them.
    let after = client.metadata(election.topic.as_ref().map(std::slice::from_ref))?;
    let mut outcomes = Vec::new();
    for t in &resp.replica_election_results {
        let name = t.topic.0.to_string();
        for p in &t.partition_result {
            let leader = after
                .topic(&name)
                .and_then(|ti| ti.partitions.iter().find(|x| x.partition == p.partition_id))
                .map(|x| x.leader);
            outcomes.push(ElectionOutcome {
                topic: name.clone(),
                partition: p.partition_id,
                error_code: p.error_code,
                message: p.error_message.as_ref().map(|m| m.to_string()),
                leader,
            });
        }
    }
    outcomes.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    print_outcomes(election, &outcomes, json, out)?;
    Ok(if outcomes.iter().any(ElectionOutcome::failed) {
        1
    } else {
        0
    })
}

/// How long the broker may take to commit the elections.
const ELECTION_TIMEOUT_MS: i32 = 30_000;

fn print_outcomes(
    election: &Election,
    outcomes: &[ElectionOutcome],
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if json {
        let results: Vec<Value> = outcomes
            .iter()
            .map(|o| {
                json!({
                    "topic": o.topic,
                    "partition": o.partition,
                    "error": (o.error_code != 0).then(|| error_name(o.error_code)),
                    "message": o.message,
                    "leader": o.leader,
                })
            })
            .collect();
        return emit_json(
            out,
            &json!({ "election_type": election.type_name(), "results": results }),
        );
    }
    if outcomes.is_empty() {
        return emit(out, "No partition needed an election.\n");
    }
    let mut t = Table::new(&["TOPIC", "PARTITION", "LEADER", "RESULT"]);
    for o in outcomes {
        let result = match o.error_code {
            0 => "elected".to_string(),
            code => match &o.message {
                Some(m) if !m.is_empty() => format!("{} ({m})", error_name(code)),
                _ => error_name(code),
            },
        };
        t.row(vec![
            o.topic.clone(),
            o.partition.to_string(),
            o.leader.map_or_else(|| "-".into(), |l| l.to_string()),
            result,
        ]);
    }
    emit(out, &t.render())
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

    fn parsed(args: &[&str]) -> Result<Election> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let p = args::parse(
            &args,
            &Spec {
                values: &["--election-type", "--type", "--topic", "--partition"],
                switches: &["--all-topic-partitions", "--all"],
            },
        )?;
        Election::of(&p)
    }

    #[test]
    fn elect_leaders_options() {
        assert_eq!(
            parsed(&["--topic", "t", "--partition", "1", "-p", "2"]).unwrap(),
            Election {
                election_type: 0,
                topic: Some("t".into()),
                partitions: vec![1, 2],
            }
        );
        assert_eq!(
            parsed(&["--all", "--type", "UNCLEAN"]).unwrap(),
            Election {
                election_type: 1,
                topic: None,
                partitions: vec![],
            }
        );
        assert_eq!(
            parsed(&["--all-topic-partitions", "--election-type", "preferred"])
                .unwrap()
                .election_type,
            0
        );
        for bad in [
            &["--topic", "t", "--all"][..],
            &[][..],
            &["--all", "--partition", "1"][..],
            &["--topic", "t", "--type", "dirty"][..],
            &["--topic", "t", "--partition", "x"][..],
            &["t"][..],
        ] {
            let e = parsed(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
        }
    }

    #[test]
    fn election_results_print_by_partition_and_not_needed_is_no_failure() {
        let outcome = |partition, error_code: i16, message: Option<&str>, leader| ElectionOutcome {
            topic: "orders".into(),
            partition,
            error_code,
            message: message.map(str::to_string),
            leader,
        };
        let outcomes = vec![
            outcome(0, 0, None, Some(1)),
            outcome(1, 84, None, Some(2)),
            outcome(2, 80, Some("fenced"), Some(1)),
        ];
        assert!(!outcomes[0].failed() && !outcomes[1].failed() && outcomes[2].failed());
        let election = Election {
            election_type: 0,
            topic: Some("orders".into()),
            partitions: vec![],
        };
        let mut out = Vec::new();
        print_outcomes(&election, &outcomes, false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "TOPIC   PARTITION  LEADER  RESULT\n\
             orders  0          1       elected\n\
             orders  1          2       ELECTION_NOT_NEEDED\n\
             orders  2          1       PREFERRED_LEADER_NOT_AVAILABLE (fenced)\n"
        );
        let mut out = Vec::new();
        print_outcomes(&election, &outcomes, true, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["election_type"], "preferred");
        assert_eq!(v["results"][0]["error"], Value::Null);
        assert_eq!(v["results"][2]["error"], "PREFERRED_LEADER_NOT_AVAILABLE");
        assert_eq!(v["results"][2]["leader"], 1);
    }

    #[test]
    fn a_fully_replicated_cluster_is_healthy_and_no_controller_is_not() {
        let mut meta = cluster(vec![partition(0, 1, &[1, 2], &[2, 1])]);
        assert!(Health::of(&meta).healthy());
        meta.controller_id = -1;
        assert!(!Health::of(&meta).healthy());
    }
}
