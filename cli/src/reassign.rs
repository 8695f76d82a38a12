//! `keel topic reassign generate|execute|verify|cancel`: kafka-reassign-partitions.sh's
//! workflow and plan file over AlterPartitionReassignments and ListPartitionReassignments
//! (KIP-455), with Metadata for the current assignment. `generate` only proposes (nothing
//! changes); `execute` starts the plan's reassignments and prints the assignment it replaces,
//! for a rollback; `verify` compares the cluster with the plan; `cancel` stops the plan's
//! reassignments in progress, which restores each partition's replicas as they were before.
//! The plan decisions are `plan`'s pure functions.

use std::collections::BTreeSet;
use std::io::{Read, Write};

use serde_json::{json, Value};

use crate::args::{self, Parsed, Spec};
use crate::client::{Client, ClusterInfo, OngoingByPartition, ReassignResult};
use crate::error::{error_name, CliError, Result};
use crate::plan::{self, Assignment, Node, Plan, Standing};
use crate::table::{ids, Table};
use crate::{connect, emit, emit_json, subcommand, COMMON_OPTIONS};

const USAGE: &str = "\
usage:
  keel topic reassign generate --topics T[,T...] --brokers ID[,ID...] [--replication-factor N]
  keel topic reassign execute --plan FILE [--throttle BYTES_PER_SEC]
  keel topic reassign verify --plan FILE [--preserve-throttles]
  keel topic reassign cancel --plan FILE
Moves partitions between brokers the way kafka-reassign-partitions.sh does, with its plan
file ({\"version\":1,\"partitions\":[{\"topic\":\"t\",\"partition\":0,\"replicas\":[1,2,3]}]};
FILE - reads stdin; --reassignment-json-file is accepted for --plan):
  generate  prints the current assignment of the topics and a proposed plan that spreads
            their partitions over the listed brokers (leaders spread, racks alternated);
            nothing changes. --replication-factor N proposes N replicas per partition (a
            Keel extension; Kafka's tool keeps each topic's own).
  execute   starts the plan's reassignments and prints the assignment they replace (save it
            to roll back); exit 1 when any partition was refused. --throttle sets Kafka's
            replication throttles first: leader and follower.replication.throttled.rate on
            every broker involved, and the topics' throttled replicas (the moving partitions'
            current replicas as leaders, the added ones as followers).
  verify    per partition: complete (replicas are the plan's, nothing in progress), in
            progress (with the replicas being added and removed) or different; exit 0 only
            when every partition is complete; then it removes the throttles (from every
            broker, and the plan's topics) unless --preserve-throttles.
  cancel    cancels the plan's reassignments in progress: each partition goes back to the
            replicas it had before (NO_REASSIGNMENT_IN_PROGRESS is reported, not an error).
";

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let usage = format!("{USAGE}{COMMON_OPTIONS}");
    let Some((sub, rest)) = subcommand(args, &usage, out)? else {
        return Ok(0);
    };
    let spec = match sub {
        "generate" => Spec {
            values: &["--topics", "--topic", "--brokers", "--replication-factor"],
            switches: &[],
        },
        "execute" => Spec {
            values: &["--plan", "--throttle"],
            switches: &[],
        },
        "verify" => Spec {
            values: &["--plan"],
            switches: &["--preserve-throttles"],
        },
        "cancel" => Spec {
            values: &["--plan"],
            switches: &[],
        },
        other => {
            return Err(CliError::Usage(format!(
                "unknown topic reassign subcommand {other:?}"
            )))
        }
    };
    let p = args::parse(rest, &spec)?;
    if p.has("--help") {
        emit(out, &usage)?;
        return Ok(0);
    }
    if !p.positionals.is_empty() {
        return Err(CliError::Usage(format!(
            "unexpected argument {:?}",
            p.positionals[0]
        )));
    }
    if sub == "generate" {
        let asked = Generate::of(&p)?;
        return generate(&mut connect(&p)?, &asked, p.json(), out);
    }
    let plan = read_plan(&p)?;
    let mut client = connect(&p)?;
    match sub {
        "execute" => {
            let throttle = match p.get("--throttle") {
                None => None,
                Some(v) => Some(
                    v.trim()
                        .parse::<i64>()
                        .ok()
                        .filter(|r| *r >= 0)
                        .ok_or_else(|| {
                            CliError::Usage(format!(
                            "--throttle must be a whole number of bytes per second >= 0, not {v:?}"
                        ))
                        })?,
                ),
            };
            execute(&mut client, &plan, throttle, p.json(), out)
        }
        "verify" => {
            let code = verify(&mut client, &plan, p.json(), out)?;
            if code == 0 && !p.has("--preserve-throttles") {
                let brokers: Vec<i32> = client
                    .metadata(Some(&[]))?
                    .brokers
                    .iter()
                    .map(|b| b.id)
                    .collect();
                set_configs(&mut client, &plan::unthrottle_configs(&brokers, &plan))?;
                if !p.json() {
                    emit(out, "Throttles removed.")?;
                }
            }
            Ok(code)
        }
        _ => cancel(&mut client, &plan, p.json(), out),
    }
}

/// Comma-separated values of every occurrence of `flags`, trimmed, empty ones dropped.
fn list_values<'a>(p: &'a Parsed, flags: &[&str]) -> Vec<&'a str> {
    flags
        .iter()
        .flat_map(|f| p.all(f))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect()
}

/// What `generate` was asked for.
struct Generate {
    topics: Vec<String>,
    brokers: Vec<i32>,
    replication_factor: Option<usize>,
}

impl Generate {
    fn of(p: &Parsed) -> Result<Generate> {
        let mut topics: Vec<String> = Vec::new();
        for t in list_values(p, &["--topics", "--topic"]) {
            if !topics.iter().any(|x| x == t) {
                topics.push(t.to_string());
            }
        }
        if topics.is_empty() {
            return Err(CliError::Usage("--topics T[,T...] is needed".into()));
        }
        let mut brokers: Vec<i32> = Vec::new();
        for b in list_values(p, &["--brokers"]) {
            let id = b
                .parse()
                .map_err(|_| CliError::Usage(format!("--brokers takes broker ids, got {b:?}")))?;
            if !brokers.contains(&id) {
                brokers.push(id);
            }
        }
        if brokers.is_empty() {
            return Err(CliError::Usage("--brokers ID[,ID...] is needed".into()));
        }
        let replication_factor = p.number::<usize>("--replication-factor")?;
        if replication_factor == Some(0) {
            return Err(CliError::Usage(
                "--replication-factor must be at least 1".into(),
            ));
        }
        Ok(Generate {
            topics,
            brokers,
            replication_factor,
        })
    }
}

/// The plan named by `--plan` (a file, or `-` for stdin).
fn read_plan(p: &Parsed) -> Result<Plan> {
    let path = p
        .get("--plan")
        .ok_or_else(|| CliError::Usage("--plan FILE is needed".into()))?;
    let mut text = String::new();
    let read = if path == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    read.map_err(|source| CliError::Io {
        addr: path.to_string(),
        source,
    })?;
    Plan::parse(&text).map_err(|why| CliError::Failed(format!("plan {path}: {why}")))
}

/// The topics a plan names, each once, in plan order.
fn plan_topics(plan: &Plan) -> Vec<String> {
    let mut seen = BTreeSet::new();
    plan.partitions
        .iter()
        .filter(|a| seen.insert(a.topic.clone()))
        .map(|a| a.topic.clone())
        .collect()
}

/// Metadata's replicas of `topic`-`partition`, if it exists.
pub(crate) fn replicas_of<'a>(
    meta: &'a ClusterInfo,
    topic: &str,
    partition: i32,
) -> Option<&'a [i32]> {
    meta.topic(topic)
        .filter(|t| t.error_code == 0)
        .and_then(|t| t.partitions.iter().find(|p| p.partition == partition))
        .map(|p| p.replicas.as_slice())
}

/// The current assignment of the partitions `plan` names that exist.
fn current_of(meta: &ClusterInfo, plan: &Plan) -> Plan {
    Plan {
        partitions: plan
            .partitions
            .iter()
            .filter_map(|a| {
                replicas_of(meta, &a.topic, a.partition).map(|r| Assignment {
                    topic: a.topic.clone(),
                    partition: a.partition,
                    replicas: r.to_vec(),
                })
            })
            .collect(),
    }
}

fn generate(client: &mut Client, asked: &Generate, json: bool, out: &mut dyn Write) -> Result<i32> {
    let meta = client.metadata(Some(&asked.topics))?;
    let mut topics = Vec::new();
    let mut current = Plan::default();
    for name in &asked.topics {
        let t = meta.topic(name).ok_or_else(|| {
            CliError::kafka(format!("describe topic {name}"), 3, None) // UNKNOWN_TOPIC_OR_PARTITION
        })?;
        crate::error::check(t.error_code, || format!("describe topic {name}"), None)?;
        topics.push((
            name.clone(),
            t.partitions.len() as i32,
            t.replication_factor(),
        ));
        current
            .partitions
            .extend(t.partitions.iter().map(|p| Assignment {
                topic: name.clone(),
                partition: p.partition,
                replicas: p.replicas.clone(),
            }));
    }
    let mut nodes = Vec::new();
    for id in &asked.brokers {
        let b = meta.brokers.iter().find(|b| b.id == *id).ok_or_else(|| {
            CliError::Failed(format!(
                "broker {id} is not a live broker (Metadata lists {})",
                ids(&meta.brokers.iter().map(|b| b.id).collect::<Vec<_>>())
            ))
        })?;
        nodes.push(Node {
            id: b.id,
            rack: b.rack.clone(),
        });
    }
    let proposed =
        plan::propose(&topics, &nodes, asked.replication_factor).map_err(CliError::Failed)?;
    if json {
        emit_json(
            out,
            &json!({ "current": current.to_json(), "proposed": proposed.to_json() }),
        )?;
    } else {
        emit(
            out,
            &format!(
                "Current partition replica assignment\n{}\n\nProposed partition reassignment configuration\n{}\n",
                current.to_text(),
                proposed.to_text()
            ),
        )?;
    }
    Ok(0)
}

/// Per-partition results of an AlterPartitionReassignments: a table of TOPIC, PARTITION,
/// REPLICAS (what was asked; empty for a cancel) and STATUS (`ok_status`, or the Kafka error
/// name), or JSON objects with the error message too.
fn results_report(
    results: &[ReassignResult],
    plan: &Plan,
    ok_status: &str,
    cancel: bool,
) -> (String, Value) {
    let status = |r: &ReassignResult| {
        if r.error_code == 0 {
            ok_status.to_string()
        } else {
            error_name(r.error_code)
        }
    };
    let mut t = Table::new(&["TOPIC", "PARTITION", "REPLICAS", "STATUS"]);
    let mut list = Vec::new();
    for (r, a) in results.iter().zip(&plan.partitions) {
        t.row(vec![
            r.topic.clone(),
            r.partition.to_string(),
            if cancel { "-".into() } else { ids(&a.replicas) },
            status(r),
        ]);
        list.push(json!({
            "topic": r.topic,
            "partition": r.partition,
            "replicas": if cancel { Value::Null } else { json!(a.replicas) },
            "status": status(r),
            "error_message": r.error_message,
        }));
    }
    (t.render(), Value::Array(list))
}

/// Applies config changes; the first refused one is an error naming it.
fn set_configs(client: &mut Client, changes: &[crate::client::ConfigOps]) -> Result<()> {
    for ((ty, name, _), (code, message)) in changes
        .iter()
        .zip(client.incremental_alter_configs(changes)?)
    {
        if code != 0 {
            let what = if *ty == 4 { "broker" } else { "topic" };
            return Err(CliError::Protocol(format!(
                "setting the throttle on {what} {name:?}: {}{}",
                error_name(code),
                message.map(|m| format!(": {m}")).unwrap_or_default()
            )));
        }
    }
    Ok(())
}

fn execute(
    client: &mut Client,
    plan: &Plan,
    throttle: Option<i64>,
    json: bool,
    out: &mut dyn Write,
) -> Result<i32> {
    let meta = client.metadata(Some(&plan_topics(plan)))?;
    let current = current_of(&meta, plan);
    if let Some(rate) = throttle {
        set_configs(client, &plan::throttle_configs(&current, plan, rate))?;
        if !json {
            emit(
                out,
                &format!("Throttle set to {rate} B/s on the brokers and replicas involved."),
            )?;
        }
    }
    let moves: Vec<(String, i32, Option<Vec<i32>>)> = plan
        .partitions
        .iter()
        .map(|a| (a.topic.clone(), a.partition, Some(a.replicas.clone())))
        .collect();
    let results = client.alter_reassignments(&moves)?;
    let (table, list) = results_report(&results, plan, "started", false);
    if json {
        emit_json(
            out,
            &json!({ "current": current.to_json(), "results": list }),
        )?;
    } else {
        emit(
            out,
            &format!(
                "Current partition replica assignment (save it: executing it rolls this back)\n{}\n\n{table}",
                current.to_text()
            ),
        )?;
    }
    Ok(if results.iter().all(|r| r.error_code == 0) {
        0
    } else {
        1
    })
}

const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

fn cancel(client: &mut Client, plan: &Plan, json: bool, out: &mut dyn Write) -> Result<i32> {
    let moves: Vec<(String, i32, Option<Vec<i32>>)> = plan
        .partitions
        .iter()
        .map(|a| (a.topic.clone(), a.partition, None))
        .collect();
    let results = client.alter_reassignments(&moves)?;
    let (table, list) = results_report(&results, plan, "cancelled", true);
    if json {
        emit_json(out, &list)?;
    } else {
        emit(out, &table)?;
    }
    let fatal = results
        .iter()
        .any(|r| r.error_code != 0 && r.error_code != NO_REASSIGNMENT_IN_PROGRESS);
    Ok(if fatal { 1 } else { 0 })
}

/// Every reassignment in progress, or an error naming the broker that cannot list them.
pub(crate) fn ongoing(client: &mut Client) -> Result<OngoingByPartition> {
    client.list_reassignments()?.ok_or_else(|| {
        CliError::Failed(
            "the broker does not serve ListPartitionReassignments (Kafka 2.4+ and Keel do)".into(),
        )
    })
}

/// A partition's standing against its plan, as its status word.
pub(crate) fn progress_word(p: &Standing) -> String {
    match p {
        Standing::Complete => "complete".into(),
        Standing::InProgress { .. } => "in progress".into(),
        Standing::Different => "different".into(),
        Standing::Unknown => error_name(3), // UNKNOWN_TOPIC_OR_PARTITION
    }
}

fn verify(client: &mut Client, plan: &Plan, json: bool, out: &mut dyn Write) -> Result<i32> {
    let meta = client.metadata(Some(&plan_topics(plan)))?;
    let ongoing = ongoing(client)?;
    let mut t = Table::new(&[
        "TOPIC",
        "PARTITION",
        "PLANNED",
        "REPLICAS",
        "ADDING",
        "REMOVING",
        "STATUS",
    ]);
    let mut list = Vec::new();
    let mut complete = 0;
    for a in &plan.partitions {
        let replicas = replicas_of(&meta, &a.topic, a.partition);
        let o = ongoing.get(&(a.topic.clone(), a.partition));
        let progress = plan::standing(
            &a.replicas,
            replicas,
            o.map(|o| (o.adding.as_slice(), o.removing.as_slice())),
        );
        if progress == Standing::Complete {
            complete += 1;
        }
        let (adding, removing) = match &progress {
            Standing::InProgress { adding, removing } => (adding.clone(), removing.clone()),
            _ => (Vec::new(), Vec::new()),
        };
        let show = |v: &[i32]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                ids(v)
            }
        };
        t.row(vec![
            a.topic.clone(),
            a.partition.to_string(),
            ids(&a.replicas),
            replicas.map(show).unwrap_or_else(|| "-".into()),
            show(&adding),
            show(&removing),
            progress_word(&progress),
        ]);
        list.push(json!({
            "topic": a.topic,
            "partition": a.partition,
            "planned": a.replicas,
            "replicas": replicas,
            "adding": adding,
            "removing": removing,
            "status": progress_word(&progress),
        }));
    }
    if json {
        emit_json(out, &Value::Array(list))?;
    } else {
        emit(out, &t.render())?;
    }
    Ok(if complete == plan.partitions.len() {
        0
    } else {
        1
    })
}
