//! `keel topic create|list|describe|alter-config|add-partitions|delete`: topics through
//! Metadata, CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs and
//! IncrementalAlterConfigs (AlterConfigs where a broker lacks it); `describe` also shows the
//! replicas a reassignment in progress is adding and removing (ListPartitionReassignments).
//! Flags follow kafka-topics.sh and kafka-configs.sh. `keel topic reassign` is
//! `crate::reassign`.

use keel_vocab::TopicPartition;
use std::collections::BTreeMap;
use std::io::Write;

use kafka_protocol::messages::*;
use serde_json::{json, Value};

use crate::args::{self, key_value, Parsed, Spec};
use crate::client::{str_bytes, topic_name, Client, OngoingByPartition, TopicInfo};
use crate::error::{error_name, CliError, Result};
use crate::ops::{self, ConfigEntry, RESOURCE_TOPIC};
use crate::table::{ids, Table};
use crate::{connect, emit, emit_json, subcommand, COMMON_OPTIONS};

const USAGE: &str = "\
usage:
  keel topic create NAME [--partitions N] [--replication-factor N] [--config K=V]... [--if-not-exists]
  keel topic list [--exclude-internal]
  keel topic describe [NAME...] [--all-configs]
  keel topic alter-config NAME [--add-config K=V]... [--delete-config K]...
  keel topic add-partitions NAME --partitions N      (N: the new total)
  keel topic delete NAME...
  keel topic reassign generate|execute|verify|cancel ...   (see keel topic reassign --help)
NAME may also be given as --topic NAME.
";

const TIMEOUT_MS: i32 = 30_000;

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let usage = format!("{USAGE}{COMMON_OPTIONS}");
    let Some((sub, rest)) = subcommand(args, &usage, out)? else {
        return Ok(0);
    };
    if sub == "reassign" {
        return crate::reassign::run(rest, out);
    }
    let spec = match sub {
        "create" => Spec {
            values: &[
                "--topic",
                "--partitions",
                "--replication-factor",
                "--config",
            ],
            switches: &["--if-not-exists"],
        },
        "list" => Spec {
            values: &[],
            switches: &["--exclude-internal"],
        },
        "describe" => Spec {
            values: &["--topic"],
            switches: &["--all-configs"],
        },
        "alter-config" => Spec {
            values: &["--topic", "--add-config", "--delete-config"],
            switches: &[],
        },
        "add-partitions" => Spec {
            values: &["--topic", "--partitions"],
            switches: &[],
        },
        "delete" => Spec {
            values: &["--topic"],
            switches: &["--if-exists"],
        },
        other => {
            return Err(CliError::Usage(format!(
                "unknown topic subcommand {other:?}"
            )))
        }
    };
    let p = args::parse(rest, &spec)?;
    if p.has("--help") {
        emit(out, &usage)?;
        return Ok(0);
    }
    let mut client = connect(&p)?;
    match sub {
        "create" => create(&mut client, &p, out),
        "list" => list(&mut client, &p, out),
        "describe" => describe(&mut client, &p, out),
        "alter-config" => alter_config(&mut client, &p, out),
        "add-partitions" => add_partitions(&mut client, &p, out),
        _ => delete(&mut client, &p, out),
    }
}

/// Topic names from positionals and `--topic`.
fn names(p: &Parsed) -> Vec<String> {
    let mut names: Vec<String> = p.positionals.clone();
    names.extend(p.all("--topic").into_iter().map(String::from));
    names
}

fn one_name(p: &Parsed) -> Result<String> {
    match names(p).as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CliError::Usage("a topic name is needed".into())),
        _ => Err(CliError::Usage("exactly one topic name is needed".into())),
    }
}

fn create(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let name = one_name(p)?;
    let partitions = p.number::<i32>("--partitions")?;
    let replication = p.number::<i16>("--replication-factor")?;
    let configs = p
        .all("--config")
        .into_iter()
        .map(|c| key_value(c, "--config"))
        .collect::<Result<Vec<_>>>()?;
    let (version, resp): (i16, CreateTopicsResponse) =
        client.any().call(ApiKey::CreateTopics, (2, 7), |v| {
            // v4+ takes -1 for "the broker's default"; older versions need a number.
            let default = if v >= 4 { -1 } else { 1 };
            let mut t = create_topics_request::CreatableTopic::default();
            t.name = topic_name(&name);
            t.num_partitions = partitions.unwrap_or(default);
            t.replication_factor = replication.unwrap_or(default as i16);
            t.configs = configs
                .iter()
                .map(|(k, v)| {
                    let mut c = create_topics_request::CreatableTopicConfig::default();
                    c.name = str_bytes(k);
                    c.value = Some(str_bytes(v));
                    c
                })
                .collect();
            let mut r = CreateTopicsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = TIMEOUT_MS;
            r
        })?;
    let result = resp
        .topics
        .into_iter()
        .next()
        .ok_or_else(|| CliError::Protocol("CreateTopics answered no topic".into()))?;
    let exists = result.error_code == 36; // TOPIC_ALREADY_EXISTS
    if !(exists && p.has("--if-not-exists")) {
        crate::error::check(
            result.error_code,
            || format!("create topic {name}"),
            result.error_message.map(|m| m.to_string()),
        )?;
    }
    // v5+ answers the partition count and replication the broker chose.
    let (partitions, replication) = if version >= 5 && !exists {
        (Some(result.num_partitions), Some(result.replication_factor))
    } else {
        (partitions, replication)
    };
    let status = if exists { "exists" } else { "created" };
    if p.json() {
        emit_json(
            out,
            &json!({
                "topic": name,
                "status": status,
                "partitions": partitions,
                "replication_factor": replication,
            }),
        )?;
    } else {
        let show = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_else(|| "default".into());
        let mut t = Table::new(&["TOPIC", "PARTITIONS", "REPLICATION", "STATUS"]);
        t.row(vec![
            name,
            show(partitions.map(i64::from)),
            show(replication.map(i64::from)),
            status.into(),
        ]);
        emit(out, &t.render())?;
    }
    Ok(0)
}

fn list(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let meta = client.metadata(None)?;
    let topics: Vec<&TopicInfo> = meta
        .topics
        .iter()
        .filter(|t| !(t.internal && p.has("--exclude-internal")))
        .collect();
    if p.json() {
        let list: Vec<Value> = topics
            .iter()
            .map(|t| {
                json!({
                    "topic": t.name,
                    "topic_id": t.topic_id,
                    "partitions": t.partitions.len(),
                    "replication_factor": t.replication_factor(),
                    "internal": t.internal,
                })
            })
            .collect();
        emit_json(out, &Value::Array(list))?;
    } else {
        let mut t = Table::new(&["TOPIC", "PARTITIONS", "REPLICATION"]);
        for topic in topics {
            t.row(vec![
                topic.name.clone(),
                topic.partitions.len().to_string(),
                topic.replication_factor().to_string(),
            ]);
        }
        emit(out, &t.render())?;
    }
    Ok(0)
}

fn config_value(c: &ConfigEntry) -> String {
    if c.sensitive {
        "(sensitive)".into()
    } else {
        c.value.clone().unwrap_or_else(|| "null".into())
    }
}

fn describe(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let asked = names(p);
    let meta = client.metadata((!asked.is_empty()).then_some(asked.as_slice()))?;
    let names: Vec<String> = meta.topics.iter().map(|t| t.name.clone()).collect();
    let elr = client.elr(&names)?;
    let ongoing = client.list_reassignments()?;
    let mut json_topics = Vec::new();
    let mut text = String::new();
    for topic in &meta.topics {
        crate::error::check(
            topic.error_code,
            || format!("describe topic {}", topic.name),
            None,
        )?;
        let configs: Vec<ConfigEntry> = ops::describe_topic_configs(client, &topic.name)?
            .into_iter()
            .filter(|c| p.has("--all-configs") || c.is_topic_override())
            .collect();
        let served: Vec<TopicPartition> = topic
            .partitions
            .iter()
            .filter(|pi| pi.leader >= 0)
            .map(|pi| TopicPartition::new(topic.name.clone(), pi.partition))
            .collect();
        let offsets = LogOffsets {
            starts: ops::list_offsets(client, &meta, &served, ops::EARLIEST)?,
            ends: ops::list_offsets(client, &meta, &served, ops::LATEST)?,
        };
        if p.json() {
            json_topics.push(describe_json(
                topic,
                &configs,
                &offsets,
                elr.as_ref(),
                ongoing.as_ref(),
            ));
        } else {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&describe_text(
                topic,
                &configs,
                &offsets,
                elr.as_ref(),
                ongoing.as_ref(),
            ));
        }
    }
    if p.json() {
        emit_json(out, &Value::Array(json_topics))?;
    } else {
        emit(out, &text)?;
    }
    Ok(0)
}

/// Log start and end offsets of a topic's partitions that have a leader.
struct LogOffsets {
    starts: BTreeMap<TopicPartition, i64>,
    ends: BTreeMap<TopicPartition, i64>,
}

impl LogOffsets {
    fn get(&self, topic: &str, partition: i32) -> (Option<i64>, Option<i64>) {
        let tp = TopicPartition::new(topic, partition);
        (self.starts.get(&tp).copied(), self.ends.get(&tp).copied())
    }
}

/// Each partition's eligible leader replicas, when the broker reports them.
type Elr = crate::client::ElrByPartition;

/// The replicas a reassignment in progress is adding and removing in `topic`-`partition`
/// (empty when none is); None when the broker does not list reassignments.
fn moving(
    ongoing: Option<&OngoingByPartition>,
    topic: &str,
    partition: i32,
) -> Option<(Vec<i32>, Vec<i32>)> {
    ongoing.map(|o| {
        o.get(&(topic.to_string(), partition))
            .map(|r| (r.adding.clone(), r.removing.clone()))
            .unwrap_or_default()
    })
}

fn describe_json(
    topic: &TopicInfo,
    configs: &[ConfigEntry],
    offsets: &LogOffsets,
    elr: Option<&Elr>,
    ongoing: Option<&OngoingByPartition>,
) -> Value {
    let partitions: Vec<Value> = topic
        .partitions
        .iter()
        .map(|pi| {
            let (start, end) = offsets.get(&topic.name, pi.partition);
            let moving = moving(ongoing, &topic.name, pi.partition);
            json!({
                "partition": pi.partition,
                "leader": pi.leader,
                "replicas": pi.replicas,
                "isr": pi.isr,
                "elr": elr.map(|e| e.get(&(topic.name.clone(), pi.partition)).cloned().unwrap_or_default()),
                "offline_replicas": pi.offline,
                "adding": moving.as_ref().map(|m| &m.0),
                "removing": moving.as_ref().map(|m| &m.1),
                "log_start_offset": start,
                "log_end_offset": end,
            })
        })
        .collect();
    let configs: serde_json::Map<String, Value> = configs
        .iter()
        .map(|c| (c.name.clone(), Value::String(config_value(c))))
        .collect();
    json!({
        "topic": topic.name,
        "topic_id": topic.topic_id,
        "internal": topic.internal,
        "replication_factor": topic.replication_factor(),
        "partitions": partitions,
        "configs": configs,
    })
}

/// A header line, the configs table and the partitions table, as kafka-topics.sh shows them.
fn describe_text(
    topic: &TopicInfo,
    configs: &[ConfigEntry],
    offsets: &LogOffsets,
    elr: Option<&Elr>,
    ongoing: Option<&OngoingByPartition>,
) -> String {
    let mut text = format!(
        "Topic: {}  TopicId: {}  PartitionCount: {}  ReplicationFactor: {}\n",
        topic.name,
        if topic.topic_id.is_empty() {
            "-"
        } else {
            &topic.topic_id
        },
        topic.partitions.len(),
        topic.replication_factor()
    );
    if configs.is_empty() {
        text.push_str("Configs: (none set on the topic)\n");
    } else {
        let mut t = Table::new(&["CONFIG", "VALUE", "SOURCE"]);
        for c in configs {
            t.row(vec![c.name.clone(), config_value(c), c.source.into()]);
        }
        text.push_str(&t.render());
    }
    let mut header = vec!["PARTITION", "LEADER", "REPLICAS", "ISR"];
    if elr.is_some() {
        header.push("ELR");
    }
    header.extend(["LOG-START", "LOG-END"]);
    // As kafka-topics.sh, the replicas being added and removed only while a reassignment of
    // the topic is in progress.
    let reassigning = topic.partitions.iter().any(|pi| {
        moving(ongoing, &topic.name, pi.partition)
            .is_some_and(|(a, r)| !a.is_empty() || !r.is_empty())
    });
    if reassigning {
        header.extend(["ADDING", "REMOVING"]);
    }
    let mut t = Table::new(&header);
    let show = |o: Option<i64>| o.map(|o| o.to_string()).unwrap_or_else(|| "-".into());
    for pi in &topic.partitions {
        let (start, end) = offsets.get(&topic.name, pi.partition);
        let mut row = vec![
            pi.partition.to_string(),
            pi.leader.to_string(),
            ids(&pi.replicas),
            ids(&pi.isr),
        ];
        if let Some(e) = elr {
            let members = e
                .get(&(topic.name.clone(), pi.partition))
                .cloned()
                .unwrap_or_default();
            row.push(if members.is_empty() {
                "-".into()
            } else {
                ids(&members)
            });
        }
        row.extend([show(start), show(end)]);
        if reassigning {
            let (adding, removing) = moving(ongoing, &topic.name, pi.partition).unwrap_or_default();
            let list = |v: &[i32]| if v.is_empty() { "-".into() } else { ids(v) };
            row.extend([list(&adding), list(&removing)]);
        }
        t.row(row);
    }
    text.push_str(&t.render());
    text
}

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

fn alter_config(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let name = one_name(p)?;
    let sets = p
        .all("--add-config")
        .into_iter()
        .map(|c| key_value(c, "--add-config"))
        .collect::<Result<Vec<_>>>()?;
    let deletes: Vec<String> = p
        .all("--delete-config")
        .into_iter()
        .map(|k| k.trim().to_string())
        .collect();
    if sets.is_empty() && deletes.is_empty() {
        return Err(CliError::Usage(
            "nothing to change: give --add-config K=V or --delete-config K".into(),
        ));
    }
    let context = || format!("alter configs of topic {name}");
    if client.any().supports(ApiKey::IncrementalAlterConfigs, 0, 1) {
        let (_, resp): (i16, IncrementalAlterConfigsResponse) =
            client
                .any()
                .call(ApiKey::IncrementalAlterConfigs, (0, 1), |_| {
                    let mut res =
                        incremental_alter_configs_request::AlterConfigsResource::default();
                    res.resource_type = RESOURCE_TOPIC;
                    res.resource_name = str_bytes(&name);
                    let op = |k: &str, op: i8, v: Option<&str>| {
                        let mut c = incremental_alter_configs_request::AlterableConfig::default();
                        c.name = str_bytes(k);
                        c.config_operation = op;
                        c.value = v.map(str_bytes);
                        c
                    };
                    res.configs = sets
                        .iter()
                        .map(|(k, v)| op(k, OP_SET, Some(v)))
                        .chain(deletes.iter().map(|k| op(k, OP_DELETE, None)))
                        .collect();
                    let mut r = IncrementalAlterConfigsRequest::default();
                    r.resources = vec![res];
                    r
                })?;
        for r in resp.responses {
            crate::error::check(
                r.error_code,
                context,
                r.error_message.map(|m| m.to_string()),
            )?;
        }
    } else {
        // AlterConfigs replaces the topic's whole set: start from what is set now.
        let mut wanted: BTreeMap<String, String> = ops::describe_topic_configs(client, &name)?
            .into_iter()
            .filter(ConfigEntry::is_topic_override)
            .filter_map(|c| c.value.map(|v| (c.name, v)))
            .collect();
        for k in &deletes {
            wanted.remove(k);
        }
        wanted.extend(sets.iter().cloned());
        let (_, resp): (i16, AlterConfigsResponse) =
            client.any().call(ApiKey::AlterConfigs, (0, 2), |_| {
                let mut res = alter_configs_request::AlterConfigsResource::default();
                res.resource_type = RESOURCE_TOPIC;
                res.resource_name = str_bytes(&name);
                res.configs = wanted
                    .iter()
                    .map(|(k, v)| {
                        let mut c = alter_configs_request::AlterableConfig::default();
                        c.name = str_bytes(k);
                        c.value = Some(str_bytes(v));
                        c
                    })
                    .collect();
                let mut r = AlterConfigsRequest::default();
                r.resources = vec![res];
                r
            })?;
        for r in resp.responses {
            crate::error::check(
                r.error_code,
                context,
                r.error_message.map(|m| m.to_string()),
            )?;
        }
    }
    let overrides: Vec<ConfigEntry> = ops::describe_topic_configs(client, &name)?
        .into_iter()
        .filter(ConfigEntry::is_topic_override)
        .collect();
    if p.json() {
        let configs: serde_json::Map<String, Value> = overrides
            .iter()
            .map(|c| (c.name.clone(), Value::String(config_value(c))))
            .collect();
        emit_json(out, &json!({ "topic": name, "configs": configs }))?;
    } else {
        let mut t = Table::new(&["TOPIC", "CONFIG", "VALUE"]);
        for c in &overrides {
            t.row(vec![name.clone(), c.name.clone(), config_value(c)]);
        }
        emit(out, &t.render())?;
    }
    Ok(0)
}

fn add_partitions(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let name = one_name(p)?;
    let count = p
        .number::<i32>("--partitions")?
        .ok_or_else(|| CliError::Usage("--partitions N (the new total) is needed".into()))?;
    let (_, resp): (i16, CreatePartitionsResponse) =
        client.any().call(ApiKey::CreatePartitions, (0, 3), |_| {
            let mut t = create_partitions_request::CreatePartitionsTopic::default();
            t.name = topic_name(&name);
            t.count = count;
            t.assignments = None;
            let mut r = CreatePartitionsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = TIMEOUT_MS;
            r
        })?;
    for r in resp.results {
        crate::error::check(
            r.error_code,
            || format!("add partitions to topic {name}"),
            r.error_message.map(|m| m.to_string()),
        )?;
    }
    if p.json() {
        emit_json(out, &json!({ "topic": name, "partitions": count }))?;
    } else {
        let mut t = Table::new(&["TOPIC", "PARTITIONS"]);
        t.row(vec![name, count.to_string()]);
        emit(out, &t.render())?;
    }
    Ok(0)
}

fn delete(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let names = names(p);
    if names.is_empty() {
        return Err(CliError::Usage("a topic name is needed".into()));
    }
    let (_, resp): (i16, DeleteTopicsResponse) =
        client.any().call(ApiKey::DeleteTopics, (1, 6), |v| {
            let mut r = DeleteTopicsRequest::default();
            if v >= 6 {
                r.topics = names
                    .iter()
                    .map(|n| {
                        let mut s = delete_topics_request::DeleteTopicState::default();
                        s.name = Some(topic_name(n));
                        s
                    })
                    .collect();
            } else {
                r.topic_names = names.iter().map(|n| topic_name(n)).collect();
            }
            r.timeout_ms = TIMEOUT_MS;
            r
        })?;
    let results: Vec<(String, i16, Option<String>)> = resp
        .responses
        .into_iter()
        .map(|r| {
            let code = if r.error_code == 3 && p.has("--if-exists") {
                0
            } else {
                r.error_code
            };
            (
                r.name.map(|n| n.0.to_string()).unwrap_or_default(),
                code,
                r.error_message.map(|m| m.to_string()),
            )
        })
        .collect();
    report(out, p.json(), "topic", "deleted", &results)?;
    match results.iter().find(|(_, code, _)| *code != 0) {
        Some((name, code, msg)) => Err(CliError::kafka(
            format!("delete topic {name}"),
            *code,
            msg.clone(),
        )),
        None => Ok(0),
    }
}

/// Per-item results of a batch request: a table of NAME and STATUS (the Kafka error name on
/// failure), or JSON.
pub(crate) fn report(
    out: &mut dyn Write,
    json: bool,
    what: &str,
    ok_status: &str,
    results: &[(String, i16, Option<String>)],
) -> Result<()> {
    let status = |code: i16| {
        if code == 0 {
            ok_status.to_string()
        } else {
            error_name(code)
        }
    };
    if json {
        let list: Vec<Value> = results
            .iter()
            .map(|(name, code, msg)| {
                json!({ what: name, "status": status(*code), "error_message": msg })
            })
            .collect();
        emit_json(out, &Value::Array(list))
    } else {
        let header = what.to_uppercase();
        let mut t = Table::new(&[header.as_str(), "STATUS"]);
        for (name, code, _) in results {
            t.row(vec![name.clone(), status(*code)]);
        }
        emit(out, &t.render())
    }
}
