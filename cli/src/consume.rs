//! `keel consume TOPIC`: reads records with Fetch from each partition's leader, starting at
//! `--from-beginning`, `--offset N|earliest|latest` or `--from-timestamp MS` (ListOffsets),
//! latest by default as kafka-console-consumer does. Stops after `--max-messages` records or
//! when `--timeout-ms` passes without a record; without either it follows the log until
//! interrupted. Each record is printed with a kcat-style `--format` template (default `%v`),
//! or as one JSON object per line with `--json`. No group is joined and nothing is committed.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;
use serde_json::{json, Value};

use crate::args::{self, Parsed, Spec};
use crate::client::{topic_name, Client, ClusterInfo};
use crate::error::{check, CliError, Result};
use crate::ops::{self, leader_of};
use crate::records::{decode_fetched, ConsumedRecord};
use crate::{connect, emit, COMMON_OPTIONS};
use keel_vocab::TopicPartition;

const USAGE: &str = "\
usage: keel consume TOPIC [--partition P]... [--from-beginning | --offset N|earliest|latest |
                          --from-timestamp MS] [--max-messages N] [--timeout-ms MS]
                          [--format FMT | --json]
Starts at the latest offset unless told otherwise; stops after --max-messages records, or
when --timeout-ms passes with no new record. --format is a template (kcat's tokens):
  %t topic  %p partition  %o offset  %T timestamp (ms)  %k key  %v value  %h headers (k=v,...)
  %K key length  %S value length  %% a percent sign; \\n \\t \\\\ escapes. Default: %v
--json prints one object per record: topic, partition, offset, timestamp, key, value, headers.
";

/// Longest a fetch waits at the broker for data.
const FETCH_WAIT_MS_MAX: u64 = 500;
const PARTITION_FETCH_BYTES_MAX: i32 = 1024 * 1024;
const FETCH_BYTES_MAX: i32 = 8 * 1024 * 1024;

/// Where to start reading.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Start {
    Earliest,
    Latest,
    Offset(i64),
    Timestamp(i64),
}

fn start_of(p: &Parsed) -> Result<Start> {
    let chosen = [
        p.has("--from-beginning"),
        p.has("--offset"),
        p.has("--from-timestamp"),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if chosen > 1 {
        return Err(CliError::Usage(
            "give one of --from-beginning, --offset and --from-timestamp".into(),
        ));
    }
    if p.has("--from-beginning") {
        return Ok(Start::Earliest);
    }
    if let Some(ms) = p.number::<i64>("--from-timestamp")? {
        return Ok(Start::Timestamp(ms));
    }
    match p.get("--offset") {
        None | Some("latest") => Ok(Start::Latest),
        Some("earliest") => Ok(Start::Earliest),
        Some(n) => n
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(Start::Offset)
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "--offset is a number, earliest or latest, not {n:?}"
                ))
            }),
    }
}

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let spec = Spec {
        values: &[
            "--topic",
            "--partition",
            "--offset",
            "--from-timestamp",
            "--max-messages",
            "--timeout-ms",
            "--format",
        ],
        switches: &["--from-beginning"],
    };
    let p = args::parse(args, &spec)?;
    if p.has("--help") {
        emit(out, &format!("{USAGE}{COMMON_OPTIONS}"))?;
        return Ok(0);
    }
    let topic = p.one_name("--topic", "one topic is needed: keel consume TOPIC")?;
    if p.json() && p.has("--format") {
        return Err(CliError::Usage("give --format or --json, not both".into()));
    }
    let start = start_of(&p)?;
    let max_messages = p.number::<u64>("--max-messages")?;
    let idle_timeout = p.number::<u64>("--timeout-ms")?.map(Duration::from_millis);
    let format = unescape(p.get("--format").unwrap_or("%v"));
    let wanted: Vec<i32> = p
        .all("--partition")
        .into_iter()
        .map(|v| {
            v.parse()
                .map_err(|_| CliError::Usage(format!("--partition needs a number, got {v:?}")))
        })
        .collect::<Result<_>>()?;

    let mut client = connect(&p)?;
    let meta = client.metadata(Some(std::slice::from_ref(&topic)))?;
    let info = meta
        .topic(&topic)
        .ok_or_else(|| CliError::kafka(format!("topic {topic}"), 3, None))?;
    check(info.error_code, || format!("consume topic {topic}"), None)?;
    let partitions: Vec<i32> = if wanted.is_empty() {
        info.partitions.iter().map(|p| p.partition).collect()
    } else {
        for w in &wanted {
            if !info.partitions.iter().any(|p| p.partition == *w) {
                return Err(CliError::kafka(format!("partition {topic}-{w}"), 3, None));
            }
        }
        wanted
    };
    let mut positions = start_positions(&mut client, &meta, &topic, &partitions, start)?;
    let mut printed = 0u64;
    let mut last_record = Instant::now();
    let done = |printed: u64| max_messages.is_some_and(|m| printed >= m);
    while !done(printed) {
        let wait = match idle_timeout {
            Some(t) => {
                let left = t.saturating_sub(last_record.elapsed());
                if left.is_zero() {
                    break;
                }
                left.min(Duration::from_millis(FETCH_WAIT_MS_MAX))
            }
            None => Duration::from_millis(FETCH_WAIT_MS_MAX),
        };
        let records = fetch_once(&mut client, &meta, &topic, &mut positions, wait)?;
        for r in records {
            if done(printed) {
                break;
            }
            if p.json() {
                let line = serde_json::to_string(&record_json(&topic, &r))
                    .expect("a Value always serializes");
                emit(out, &format!("{line}\n"))?;
            } else {
                let mut bytes = render(&format, &topic, &r);
                if bytes.last() != Some(&b'\n') {
                    bytes.push(b'\n');
                }
                out.write_all(&bytes).map_err(|source| CliError::Io {
                    addr: "stdout".into(),
                    source,
                })?;
            }
            printed += 1;
            last_record = Instant::now();
        }
        out.flush().map_err(|source| CliError::Io {
            addr: "stdout".into(),
            source,
        })?;
    }
    eprintln!("Processed a total of {printed} messages");
    Ok(0)
}

fn start_positions(
    client: &mut Client,
    meta: &ClusterInfo,
    topic: &str,
    partitions: &[i32],
    start: Start,
) -> Result<BTreeMap<i32, i64>> {
    let tps: Vec<TopicPartition> = partitions
        .iter()
        .map(|p| TopicPartition::new(topic, *p))
        .collect();
    let resolved = match start {
        Start::Offset(n) => return Ok(partitions.iter().map(|p| (*p, n)).collect()),
        Start::Earliest => ops::list_offsets(client, meta, &tps, ops::EARLIEST)?,
        Start::Latest => ops::list_offsets(client, meta, &tps, ops::LATEST)?,
        Start::Timestamp(ms) => {
            let found = ops::list_offsets(client, meta, &tps, ms)?;
            let ends = ops::list_offsets(client, meta, &tps, ops::LATEST)?;
            // No record at or after the time: start at the end, as Kafka's consumer does.
            found
                .into_iter()
                .map(|(tp, o)| {
                    let o = if o < 0 {
                        ends.get(&tp).copied().unwrap_or(0)
                    } else {
                        o
                    };
                    (tp, o)
                })
                .collect()
        }
    };
    Ok(resolved
        .into_iter()
        .map(|(tp, o)| (tp.partition, o))
        .collect())
}

/// One Fetch to each leader; advances `positions` past what was read.
fn fetch_once(
    client: &mut Client,
    meta: &ClusterInfo,
    topic: &str,
    positions: &mut BTreeMap<i32, i64>,
    wait: Duration,
) -> Result<Vec<ConsumedRecord>> {
    let mut by_leader: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
    for (&partition, &offset) in positions.iter() {
        by_leader
            .entry(leader_of(meta, topic, partition)?)
            .or_default()
            .push((partition, offset));
    }
    // With several leaders, each waits its share, so one round stays near `wait`.
    let wait_ms = (wait.as_millis() as u64 / by_leader.len().max(1) as u64).max(1) as i32;
    let mut records = Vec::new();
    for (leader, parts) in by_leader {
        let conn = client.node(leader)?;
        // v13+ names topics by id. v12 is the first flexible version, and some brokers
        // (tansu 0.6) answer it with tagged fields of later versions, which the decoder
        // refuses; v11 carries everything consume needs.
        let (_, resp): (i16, FetchResponse) = conn.call(ApiKey::Fetch, (4, 11), |_| {
            let mut t = fetch_request::FetchTopic::default();
            t.topic = topic_name(topic);
            t.partitions = parts
                .iter()
                .map(|(partition, offset)| {
                    let mut fp = fetch_request::FetchPartition::default();
                    fp.partition = *partition;
                    fp.current_leader_epoch = -1;
                    fp.fetch_offset = *offset;
                    fp.log_start_offset = -1;
                    fp.partition_max_bytes = PARTITION_FETCH_BYTES_MAX;
                    fp
                })
                .collect();
            let mut r = FetchRequest::default();
            r.replica_id = BrokerId(-1);
            r.max_wait_ms = wait_ms;
            r.min_bytes = 1;
            r.max_bytes = FETCH_BYTES_MAX;
            r.isolation_level = 0;
            r.session_id = 0;
            r.session_epoch = -1;
            r.topics = vec![t];
            r
        })?;
        check(
            resp.error_code,
            || format!("fetch from broker {leader}"),
            None,
        )?;
        for t in resp.responses {
            for pd in t.partitions {
                let partition = pd.partition_index;
                let Some(offset) = positions.get(&partition).copied() else {
                    continue;
                };
                check(
                    pd.error_code,
                    || format!("fetch {topic}-{partition} at offset {offset}"),
                    None,
                )?;
                let Some(bytes) = pd.records else { continue };
                let fetched = decode_fetched(partition, offset, &bytes)?;
                if let Some(next) = fetched.next_offset {
                    positions.insert(partition, next.max(offset));
                }
                records.extend(fetched.records);
            }
        }
    }
    Ok(records)
}

fn text(b: &Option<bytes::Bytes>) -> Value {
    match b {
        Some(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
        None => Value::Null,
    }
}

fn record_json(topic: &str, r: &ConsumedRecord) -> Value {
    let headers: serde_json::Map<String, Value> = r
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), text(v)))
        .collect();
    json!({
        "topic": topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": text(&r.key),
        "value": text(&r.value),
        "headers": headers,
    })
}

/// `\n`, `\t` and `\\` in a template, as a shell passes them literally.
fn unescape(template: &str) -> String {
    let mut out = String::new();
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A record through a kcat-style template. Keys and values are written as their bytes.
fn render(template: &str, topic: &str, r: &ConsumedRecord) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chars = template.chars();
    let len = |b: &Option<bytes::Bytes>| b.as_ref().map(|b| b.len() as i64).unwrap_or(-1);
    while let Some(c) = chars.next() {
        if c != '%' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next() {
            Some('t') => out.extend_from_slice(topic.as_bytes()),
            Some('p') => out.extend_from_slice(r.partition.to_string().as_bytes()),
            Some('o') => out.extend_from_slice(r.offset.to_string().as_bytes()),
            Some('T') => out.extend_from_slice(r.timestamp.to_string().as_bytes()),
            Some('k') => out.extend_from_slice(r.key.as_deref().unwrap_or_default()),
            Some('v') => out.extend_from_slice(r.value.as_deref().unwrap_or_default()),
            Some('K') => out.extend_from_slice(len(&r.key).to_string().as_bytes()),
            Some('S') => out.extend_from_slice(len(&r.value).to_string().as_bytes()),
            Some('h') => {
                for (i, (k, v)) in r.headers.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(k.as_bytes());
                    out.push(b'=');
                    out.extend_from_slice(v.as_deref().unwrap_or_default());
                }
            }
            Some('%') => out.push(b'%'),
            Some(other) => {
                out.push(b'%');
                let mut buf = [0u8; 4];
                out.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
            }
            None => out.push(b'%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record() -> ConsumedRecord {
        ConsumedRecord {
            partition: 2,
            offset: 41,
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from_static(b"user-7")),
            value: Some(Bytes::from_static(b"{\"n\":1}")),
            headers: vec![
                ("trace".into(), Some(Bytes::from_static(b"abc"))),
                ("empty".into(), None),
            ],
        }
    }

    #[test]
    fn templates_render_kcat_tokens() {
        let t = unescape("%t/%p@%o %T %k=%v [%h] %K %S 100%%\\t|");
        assert_eq!(
            String::from_utf8(render(&t, "orders", &record())).unwrap(),
            "orders/2@41 1700000000000 user-7={\"n\":1} [trace=abc,empty=] 6 7 100%\t|"
        );
        let mut r = record();
        r.key = None;
        assert_eq!(render("%K:%k:%x", "t", &r), b"-1::%x");
    }

    #[test]
    fn json_lines_carry_every_field() {
        let v = record_json("orders", &record());
        assert_eq!(v["partition"], 2);
        assert_eq!(v["offset"], 41);
        assert_eq!(v["key"], "user-7");
        assert_eq!(v["value"], "{\"n\":1}");
        assert_eq!(v["headers"]["trace"], "abc");
        assert_eq!(v["headers"]["empty"], Value::Null);
        assert_eq!(v["timestamp"], 1_700_000_000_000i64);
    }

    #[test]
    fn start_positions_from_flags() {
        let parse = |a: &[&str]| {
            let a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
            args::parse(
                &a,
                &Spec {
                    values: &["--offset", "--from-timestamp"],
                    switches: &["--from-beginning"],
                },
            )
            .unwrap()
        };
        assert_eq!(start_of(&parse(&[])).unwrap(), Start::Latest);
        assert_eq!(
            start_of(&parse(&["--from-beginning"])).unwrap(),
            Start::Earliest
        );
        assert_eq!(
            start_of(&parse(&["--offset", "7"])).unwrap(),
            Start::Offset(7)
        );
        assert_eq!(
            start_of(&parse(&["--offset", "earliest"])).unwrap(),
            Start::Earliest
        );
        assert_eq!(
            start_of(&parse(&["--from-timestamp", "99"])).unwrap(),
            Start::Timestamp(99)
        );
        assert!(start_of(&parse(&["--offset", "-3"])).is_err());
        assert!(start_of(&parse(&["--offset", "1", "--from-beginning"])).is_err());
    }
}
