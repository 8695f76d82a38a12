//! `keel group list|describe|lag|reset-offsets|delete`: consumer groups through ListGroups
//! (every broker), and DescribeGroups, OffsetFetch, OffsetCommit and DeleteGroups at the
//! group's coordinator; log end offsets with ListOffsets at each partition's leader. Flags
//! follow kafka-consumer-groups.sh: reset-offsets is a dry run unless `--execute`, and, as
//! there, offsets are reset only while the group has no members.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use kafka_protocol::messages::*;
use serde_json::{json, Value};

use crate::args::{self, Parsed, Spec};
use crate::client::{str_bytes, topic_name, Client, ClusterInfo};
use crate::error::{check, CliError, Result};
use crate::ops::{self, GroupInfo, TopicPartition};
use crate::table::Table;
use crate::topic::report;
use crate::{connect, emit, emit_json, subcommand, COMMON_OPTIONS};

const USAGE: &str = "\
usage:
  keel group list
  keel group describe GROUP
  keel group lag GROUP [--topic T]...
  keel group reset-offsets GROUP (--topic T[:P,P...]... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N |
         --to-datetime YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM] | --to-datetime EPOCH_MS)
        [--dry-run (default) | --execute]
  keel group delete GROUP...
GROUP may also be given as --group GROUP. A datetime without a zone is UTC.
";

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let usage = format!("{USAGE}{COMMON_OPTIONS}");
    let Some((sub, rest)) = subcommand(args, &usage, out)? else {
        return Ok(0);
    };
    let spec = match sub {
        "list" => Spec {
            values: &[],
            switches: &[],
        },
        "describe" | "delete" => Spec {
            values: &["--group"],
            switches: &[],
        },
        "lag" => Spec {
            values: &["--group", "--topic"],
            switches: &[],
        },
        "reset-offsets" => Spec {
            values: &[
                "--group",
                "--topic",
                "--to-offset",
                "--shift-by",
                "--to-datetime",
            ],
            switches: &[
                "--all-topics",
                "--to-earliest",
                "--to-latest",
                "--to-current",
                "--dry-run",
                "--execute",
            ],
        },
        other => {
            return Err(CliError::Usage(format!(
                "unknown group subcommand {other:?}"
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
        "list" => list(&mut client, &p, out),
        "describe" => describe(&mut client, &p, out),
        "lag" => lag(&mut client, &p, out),
        "reset-offsets" => reset_offsets(&mut client, &p, out),
        _ => delete(&mut client, &p, out),
    }
}

fn groups(p: &Parsed) -> Vec<String> {
    let mut g = p.positionals.clone();
    g.extend(p.all("--group").into_iter().map(String::from));
    g
}

fn one_group(p: &Parsed) -> Result<String> {
    match groups(p).as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CliError::Usage("a group id is needed".into())),
        _ => Err(CliError::Usage("exactly one group id is needed".into())),
    }
}

fn list(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let groups = ops::list_groups(client)?;
    if p.json() {
        let list: Vec<Value> = groups
            .iter()
            .map(|(g, state, kind)| json!({ "group": g, "state": state, "protocol_type": kind }))
            .collect();
        emit_json(out, &Value::Array(list))?;
    } else {
        let mut t = Table::new(&["GROUP", "STATE", "PROTOCOL-TYPE"]);
        for (g, state, kind) in groups {
            let show = |s: String| if s.is_empty() { "-".to_string() } else { s };
            t.row(vec![g, show(state), show(kind)]);
        }
        emit(out, &t.render())?;
    }
    Ok(0)
}

/// The group and its committed offsets; a group with neither members nor offsets does not
/// exist (brokers describe unknown groups as "Dead").
fn load(client: &mut Client, group: &str) -> Result<(GroupInfo, BTreeMap<TopicPartition, i64>)> {
    let info = ops::describe_group(client, group)?;
    let committed = ops::committed_offsets(client, group, info.coordinator)?;
    if info.state == "Dead" && info.members.is_empty() && committed.is_empty() {
        return Err(CliError::kafka(format!("group {group}"), 69, None)); // GROUP_ID_NOT_FOUND
    }
    Ok((info, committed))
}

fn assignment_text(tps: &[TopicPartition]) -> String {
    let mut by_topic: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for tp in tps {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push(tp.partition.to_string());
    }
    by_topic
        .into_iter()
        .map(|(t, ps)| format!("{t}:{}", ps.join(",")))
        .collect::<Vec<_>>()
        .join(";")
}

fn describe(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let group = one_group(p)?;
    let (info, _) = load(client, &group)?;
    if p.json() {
        let members: Vec<Value> = info
            .members
            .iter()
            .map(|m| {
                let assignment: Vec<Value> = m
                    .assignment
                    .iter()
                    .map(|tp| json!({ "topic": tp.topic, "partition": tp.partition }))
                    .collect();
                json!({
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "assignment": assignment,
                })
            })
            .collect();
        emit_json(
            out,
            &json!({
                "group": info.group,
                "state": info.state,
                "protocol_type": info.protocol_type,
                "protocol": info.protocol,
                "coordinator": info.coordinator,
                "members": members,
            }),
        )?;
        return Ok(0);
    }
    let mut text = format!(
        "Group: {}  State: {}  ProtocolType: {}  Protocol: {}  Coordinator: {}  Members: {}\n",
        info.group,
        info.state,
        or_dash(&info.protocol_type),
        or_dash(&info.protocol),
        info.coordinator,
        info.members.len()
    );
    if !info.members.is_empty() {
        let mut t = Table::new(&["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"]);
        for m in &info.members {
            t.row(vec![
                m.member_id.clone(),
                m.client_id.clone(),
                m.client_host.clone(),
                or_dash(&assignment_text(&m.assignment)),
            ]);
        }
        text.push_str(&t.render());
    }
    emit(out, &text)?;
    Ok(0)
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// One partition's lag line.
struct Lag {
    tp: TopicPartition,
    committed: Option<i64>,
    log_end: Option<i64>,
    member: Option<(String, String, String)>,
}

impl Lag {
    fn lag(&self) -> Option<i64> {
        Some((self.log_end? - self.committed?).max(0))
    }
}

fn lag(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let group = one_group(p)?;
    let (info, committed) = load(client, &group)?;
    let only: BTreeSet<&str> = p.all("--topic").into_iter().collect();
    let owners = info.owners();
    let partitions: BTreeSet<TopicPartition> = committed
        .keys()
        .chain(owners.keys())
        .filter(|tp| only.is_empty() || only.contains(tp.topic.as_str()))
        .cloned()
        .collect();
    let topics: Vec<String> = partitions
        .iter()
        .map(|tp| tp.topic.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let ends = if topics.is_empty() {
        BTreeMap::new()
    } else {
        let meta = client.metadata(Some(&topics))?;
        let served: Vec<TopicPartition> = partitions
            .iter()
            .filter(|tp| ops::leader_of(&meta, &tp.topic, tp.partition).is_ok())
            .cloned()
            .collect();
        ops::list_offsets(client, &meta, &served, ops::LATEST)?
    };
    let lags: Vec<Lag> = partitions
        .into_iter()
        .map(|tp| Lag {
            committed: committed.get(&tp).copied(),
            log_end: ends.get(&tp).copied(),
            member: owners.get(&tp).map(|m| {
                (
                    m.member_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                )
            }),
            tp,
        })
        .collect();
    let total: i64 = lags.iter().filter_map(Lag::lag).sum();
    if p.json() {
        let parts: Vec<Value> = lags
            .iter()
            .map(|l| {
                json!({
                    "topic": l.tp.topic,
                    "partition": l.tp.partition,
                    "committed_offset": l.committed,
                    "log_end_offset": l.log_end,
                    "lag": l.lag(),
                    "member_id": l.member.as_ref().map(|m| &m.0),
                    "client_id": l.member.as_ref().map(|m| &m.1),
                    "client_host": l.member.as_ref().map(|m| &m.2),
                })
            })
            .collect();
        emit_json(
            out,
            &json!({
                "group": group,
                "state": info.state,
                "total_lag": total,
                "partitions": parts,
            }),
        )?;
        return Ok(0);
    }
    let mut t = Table::new(&[
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "LOG-END",
        "LAG",
        "MEMBER-ID",
        "CLIENT-ID",
        "HOST",
    ]);
    let show = |o: Option<i64>| o.map(|o| o.to_string()).unwrap_or_else(|| "-".into());
    for l in &lags {
        let (member, client_id, host) = l
            .member
            .clone()
            .unwrap_or_else(|| ("-".into(), "-".into(), "-".into()));
        t.row(vec![
            l.tp.topic.clone(),
            l.tp.partition.to_string(),
            show(l.committed),
            show(l.log_end),
            show(l.lag()),
            member,
            client_id,
            host,
        ]);
    }
    emit(
        out,
        &format!(
            "Group: {group}  State: {}  Members: {}  TotalLag: {total}\n{}",
            info.state,
            info.members.len(),
            t.render()
        ),
    )?;
    Ok(0)
}

/// How reset-offsets picks each partition's new offset.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ResetTo {
    Earliest,
    Latest,
    Current,
    Offset(i64),
    ShiftBy(i64),
    Timestamp(i64),
}

fn reset_spec(p: &Parsed) -> Result<ResetTo> {
    let mut chosen = Vec::new();
    if p.has("--to-earliest") {
        chosen.push(ResetTo::Earliest);
    }
    if p.has("--to-latest") {
        chosen.push(ResetTo::Latest);
    }
    if p.has("--to-current") {
        chosen.push(ResetTo::Current);
    }
    if let Some(n) = p.number::<i64>("--to-offset")? {
        chosen.push(ResetTo::Offset(n));
    }
    if let Some(n) = p.number::<i64>("--shift-by")? {
        chosen.push(ResetTo::ShiftBy(n));
    }
    if let Some(dt) = p.get("--to-datetime") {
        chosen.push(ResetTo::Timestamp(parse_datetime_ms(dt)?));
    }
    match chosen.as_slice() {
        [one] => Ok(*one),
        _ => Err(CliError::Usage(
            "give one of --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, --to-datetime"
                .into(),
        )),
    }
}

/// Which partitions a reset touches: topic -> every partition (None) or the listed ones.
type Scope = BTreeMap<String, Option<Vec<i32>>>;

/// One partition's reset: its committed offset now and the offset to commit.
type PlanRow = (TopicPartition, Option<i64>, i64);

fn reset_offsets(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let group = one_group(p)?;
    let to = reset_spec(p)?;
    if p.has("--execute") && p.has("--dry-run") {
        return Err(CliError::Usage(
            "give --dry-run or --execute, not both".into(),
        ));
    }
    let execute = p.has("--execute");
    let info = ops::describe_group(client, &group)?;
    if !info.is_inactive() {
        return Err(CliError::Failed(format!(
            "offsets of group {group} can only be reset while it is inactive, but its state is {} with {} members; stop its consumers first",
            info.state,
            info.members.len()
        )));
    }
    let committed = ops::committed_offsets(client, &group, info.coordinator)?;
    let scope = reset_scope(p, &committed)?;
    let topics: Vec<String> = scope.keys().cloned().collect();
    let meta = client.metadata(Some(&topics))?;
    let tps = scope_partitions(&meta, &scope)?;
    let starts = ops::list_offsets(client, &meta, &tps, ops::EARLIEST)?;
    let ends = ops::list_offsets(client, &meta, &tps, ops::LATEST)?;
    let by_time = match to {
        ResetTo::Timestamp(ms) => ops::list_offsets(client, &meta, &tps, ms)?,
        _ => BTreeMap::new(),
    };
    let plan = plan_offsets(to, tps, &committed, &starts, &ends, &by_time)?;
    if execute {
        commit(client, &group, info.coordinator, &plan)?;
    } else {
        eprintln!("dry run: nothing changed; add --execute to commit these offsets");
    }
    print_plan(out, p.json(), &group, execute, &plan)?;
    Ok(0)
}

/// `--topic T` (every partition) or `T:P,P` (repeatable), or `--all-topics`: as Kafka's tool,
/// the partitions the group has offsets for.
fn reset_scope(p: &Parsed, committed: &BTreeMap<TopicPartition, i64>) -> Result<Scope> {
    let mut scope = Scope::new();
    for t in p.all("--topic") {
        match t.split_once(':') {
            None => {
                scope.insert(t.to_string(), None);
            }
            Some((name, parts)) => {
                let parts = parts
                    .split(',')
                    .map(|x| {
                        x.trim().parse::<i32>().map_err(|_| {
                            CliError::Usage(format!("--topic {t}: partitions are numbers"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                scope.insert(name.to_string(), Some(parts));
            }
        }
    }
    if p.has("--all-topics") {
        for tp in committed.keys() {
            if let Some(parts) = scope.entry(tp.topic.clone()).or_insert(Some(Vec::new())) {
                parts.push(tp.partition);
            }
        }
    } else if scope.is_empty() {
        return Err(CliError::Usage(
            "give --topic T[:P,...] or --all-topics".into(),
        ));
    }
    Ok(scope)
}

/// The scope's partitions, each checked against the topic's metadata.
fn scope_partitions(meta: &ClusterInfo, scope: &Scope) -> Result<Vec<TopicPartition>> {
    let mut tps = Vec::new();
    for (topic, parts) in scope {
        let info = meta
            .topic(topic)
            .ok_or_else(|| CliError::kafka(format!("topic {topic}"), 3, None))?;
        check(info.error_code, || format!("topic {topic}"), None)?;
        match parts {
            None => tps.extend(
                info.partitions
                    .iter()
                    .map(|pi| TopicPartition::new(topic.clone(), pi.partition)),
            ),
            Some(ps) => {
                for p in ps {
                    if !info.partitions.iter().any(|pi| pi.partition == *p) {
                        return Err(CliError::kafka(format!("partition {topic}-{p}"), 3, None));
                    }
                    tps.push(TopicPartition::new(topic.clone(), *p));
                }
            }
        }
    }
    Ok(tps)
}

/// Each partition's new offset, as Kafka's tool computes it: a time with no record at or
/// after it means the log end, and every target is clamped into [log start, log end].
fn plan_offsets(
    to: ResetTo,
    tps: Vec<TopicPartition>,
    committed: &BTreeMap<TopicPartition, i64>,
    starts: &BTreeMap<TopicPartition, i64>,
    ends: &BTreeMap<TopicPartition, i64>,
    by_time: &BTreeMap<TopicPartition, i64>,
) -> Result<Vec<PlanRow>> {
    let mut plan = Vec::new();
    for tp in tps {
        let start = starts.get(&tp).copied().unwrap_or(0);
        let end = ends.get(&tp).copied().unwrap_or(start).max(start);
        let current = committed.get(&tp).copied();
        let wanted = match to {
            ResetTo::Earliest => start,
            ResetTo::Latest => end,
            ResetTo::Current => current.unwrap_or(end),
            ResetTo::Offset(n) => n,
            ResetTo::ShiftBy(n) => {
                current.ok_or_else(|| {
                    CliError::Failed(format!(
                        "cannot shift {}-{}: the group has no committed offset there",
                        tp.topic, tp.partition
                    ))
                })? + n
            }
            ResetTo::Timestamp(_) => match by_time.get(&tp) {
                Some(o) if *o >= 0 => *o,
                _ => end,
            },
        };
        plan.push((tp, current, wanted.clamp(start, end)));
    }
    Ok(plan)
}

fn print_plan(
    out: &mut dyn Write,
    json: bool,
    group: &str,
    executed: bool,
    plan: &[PlanRow],
) -> Result<()> {
    if json {
        let parts: Vec<Value> = plan
            .iter()
            .map(|(tp, current, new)| {
                json!({ "topic": tp.topic, "partition": tp.partition, "current_offset": current, "new_offset": new })
            })
            .collect();
        return emit_json(
            out,
            &json!({ "group": group, "executed": executed, "partitions": parts }),
        );
    }
    let mut t = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "NEW-OFFSET",
    ]);
    for (tp, current, new) in plan {
        t.row(vec![
            group.to_string(),
            tp.topic.clone(),
            tp.partition.to_string(),
            current.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            new.to_string(),
        ]);
    }
    emit(out, &t.render())
}

/// Commits offsets as a client outside the group (generation -1, no member id), which
/// coordinators accept only while the group has no members.
fn commit(client: &mut Client, group: &str, coordinator: i32, plan: &[PlanRow]) -> Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    for (tp, _, new) in plan {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push((tp.partition, *new));
    }
    let conn = client.node(coordinator)?;
    let (_, resp): (i16, OffsetCommitResponse) = conn.call(ApiKey::OffsetCommit, (2, 8), |_| {
        let mut r = OffsetCommitRequest::default();
        r.group_id = GroupId(str_bytes(group));
        r.generation_id_or_member_epoch = -1;
        r.member_id = str_bytes("");
        r.retention_time_ms = -1;
        r.topics = by_topic
            .iter()
            .map(|(t, ps)| {
                let mut ct = offset_commit_request::OffsetCommitRequestTopic::default();
                ct.name = topic_name(t);
                ct.partitions = ps
                    .iter()
                    .map(|(p, o)| {
                        let mut cp = offset_commit_request::OffsetCommitRequestPartition::default();
                        cp.partition_index = *p;
                        cp.committed_offset = *o;
                        cp.committed_leader_epoch = -1;
                        cp
                    })
                    .collect();
                ct
            })
            .collect();
        r
    })?;
    for t in resp.topics {
        for p in t.partitions {
            check(
                p.error_code,
                || {
                    format!(
                        "commit offset of {}-{} for group {group}",
                        t.name.0, p.partition_index
                    )
                },
                None,
            )?;
        }
    }
    Ok(())
}

fn delete(client: &mut Client, p: &Parsed, out: &mut dyn Write) -> Result<i32> {
    let groups = groups(p);
    if groups.is_empty() {
        return Err(CliError::Usage("a group id is needed".into()));
    }
    let mut results = Vec::new();
    for group in &groups {
        let coordinator = client.group_coordinator(group)?;
        let conn = client.node(coordinator)?;
        let (_, resp): (i16, DeleteGroupsResponse) =
            conn.call(ApiKey::DeleteGroups, (0, 2), |_| {
                let mut r = DeleteGroupsRequest::default();
                r.groups_names = vec![GroupId(str_bytes(group))];
                r
            })?;
        for r in resp.results {
            results.push((r.group_id.0.to_string(), r.error_code, None));
        }
    }
    report(out, p.json(), "group", "deleted", &results)?;
    match results.iter().find(|(_, code, _)| *code != 0) {
        Some((name, code, _)) => Err(CliError::kafka(format!("delete group {name}"), *code, None)),
        None => Ok(0),
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM|-HH:MM]` (UTC when no zone) or epoch milliseconds.
fn parse_datetime_ms(text: &str) -> Result<i64> {
    let bad = || {
        CliError::Usage(format!(
            "--to-datetime needs YYYY-MM-DDTHH:MM:SS[.sss][Z|+HH:MM] or epoch ms, got {text:?}"
        ))
    };
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let (date, time) = text.split_once('T').ok_or_else(bad)?;
    let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let [y, mo, da] = d.as_slice() else {
        return Err(bad());
    };
    let (y, mo, da) = (num(y)?, num(mo)?, num(da)?);
    // Split off the zone.
    let (clock, offset_min) = if let Some(c) = time.strip_suffix('Z') {
        (c, 0)
    } else if let Some(i) = time.rfind(['+', '-']) {
        let (c, zone) = time.split_at(i);
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let (zh, zm) = zone[1..].split_once(':').unwrap_or((&zone[1..], "0"));
        (c, sign * (num(zh)? * 60 + num(zm)?))
    } else {
        (time, 0)
    };
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, "0"));
    let t: Vec<&str> = hms.split(':').collect();
    let (h, mi, s) = match t.as_slice() {
        [h, m] => (num(h)?, num(m)?, 0),
        [h, m, s] => (num(h)?, num(m)?, num(s)?),
        _ => return Err(bad()),
    };
    let ms_frac = num(&format!("{:0<3}", &frac[..frac.len().min(3)]))?;
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || s > 60 {
        return Err(bad());
    }
    let days = days_from_civil(y, mo, da);
    Ok(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + s * 1000 + ms_frac)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes() {
        assert_eq!(parse_datetime_ms("1970-01-01T00:00:00").unwrap(), 0);
        assert_eq!(
            parse_datetime_ms("1700000000000").unwrap(),
            1_700_000_000_000
        );
        // date -u -d 2023-11-14T22:13:20 +%s -> 1700000000
        assert_eq!(
            parse_datetime_ms("2023-11-14T22:13:20.5Z").unwrap(),
            1_700_000_000_500
        );
        assert_eq!(
            parse_datetime_ms("2023-11-15T00:13:20.000+02:00").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime_ms("2023-11-14T21:13:20-01:00").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime_ms("2024-02-29T00:00").unwrap(),
            1_709_164_800_000
        );
        assert!(parse_datetime_ms("yesterday").is_err());
        assert!(parse_datetime_ms("2024-13-01T00:00:00").is_err());
    }

    #[test]
    fn assignments_print_by_topic() {
        let tps = vec![
            TopicPartition::new("a", 0),
            TopicPartition::new("a", 2),
            TopicPartition::new("b", 1),
        ];
        assert_eq!(assignment_text(&tps), "a:0,2;b:1");
        assert_eq!(assignment_text(&[]), "");
    }

    #[test]
    fn reset_needs_exactly_one_target() {
        let parse = |a: &[&str]| {
            let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
            args::parse(
                &a,
                &Spec {
                    values: &["--to-offset", "--shift-by", "--to-datetime"],
                    switches: &["--to-earliest", "--to-latest", "--to-current"],
                },
            )
            .unwrap()
        };
        assert_eq!(
            reset_spec(&parse(&["--to-earliest"])).unwrap(),
            ResetTo::Earliest
        );
        assert_eq!(
            reset_spec(&parse(&["--shift-by", "-2"])).unwrap(),
            ResetTo::ShiftBy(-2)
        );
        assert_eq!(
            reset_spec(&parse(&["--to-datetime", "1970-01-01T00:00:01Z"])).unwrap(),
            ResetTo::Timestamp(1000)
        );
        assert!(reset_spec(&parse(&[])).is_err());
        assert!(reset_spec(&parse(&["--to-earliest", "--to-latest"])).is_err());
    }

    #[test]
    fn plans_clamp_into_the_log_and_shift_from_the_commit() {
        let tp = |p: i32| TopicPartition::new("t", p);
        let tps = vec![tp(0), tp(1)];
        // Partition 0: log 10..50, committed 20. Partition 1: log 0..5, nothing committed.
        let committed = [(tp(0), 20)].into();
        let starts = [(tp(0), 10), (tp(1), 0)].into();
        let ends = [(tp(0), 50), (tp(1), 5)].into();
        let by_time = [(tp(0), 30), (tp(1), -1)].into();
        let plan = |to| plan_offsets(to, tps.clone(), &committed, &starts, &ends, &by_time);
        let news = |to| -> Vec<i64> { plan(to).unwrap().iter().map(|r| r.2).collect() };
        assert_eq!(news(ResetTo::Earliest), [10, 0]);
        assert_eq!(news(ResetTo::Latest), [50, 5]);
        assert_eq!(news(ResetTo::Current), [20, 5]);
        assert_eq!(news(ResetTo::Offset(3)), [10, 3]);
        assert_eq!(news(ResetTo::Offset(99)), [50, 5]);
        assert_eq!(
            news(ResetTo::Timestamp(7)),
            [30, 5],
            "no record after the time: the end"
        );
        assert_eq!(plan(ResetTo::Earliest).unwrap()[0].1, Some(20));
        assert_eq!(plan(ResetTo::Earliest).unwrap()[1].1, None);
        let err = plan(ResetTo::ShiftBy(-5)).unwrap_err();
        assert!(err.to_string().contains("cannot shift t-1"), "{err}");
        let only_0 = plan_offsets(
            ResetTo::ShiftBy(-15),
            vec![tp(0)],
            &committed,
            &starts,
            &ends,
            &by_time,
        );
        assert_eq!(
            only_0.unwrap()[0].2,
            10,
            "shifted below the log start: clamped"
        );
    }
}
