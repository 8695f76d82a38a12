//! `keel produce TOPIC`: records from stdin (one per line) or `--value`, with keys
//! (`--key`, or `--key-separator` to split each line), headers (`--header k=v`) and an
//! optional `--partition`. Keyed records go where the Java client would put them (murmur2 of
//! the key), unkeyed ones round-robin. Each partition's records go in uncompressed magic-2
//! batches to the partition leader, one batch per partition per request as brokers require.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use kafka_protocol::messages::*;
use keel_vocab::Clock;
use serde_json::{json, Value};

use crate::args::{self, key_value, Parsed, Spec};
use crate::client::{topic_name, Client, ClusterInfo};
use crate::error::{check, CliError, Result};
use crate::ops::leader_of;
use crate::records::{encode_batch, NewRecord};
use crate::table::Table;
use crate::{connect, emit, emit_json, COMMON_OPTIONS};

const USAGE: &str = "\
usage: keel produce TOPIC [--value V]... [--key K] [--key-separator SEP] [--header K=V]...
                          [--partition P] [--acks all|1|0]
Without --value, each line of stdin is one record; with --key-separator, the text before the
first SEP of a line is its key. Prints, per partition, the records written and their offsets.
";

/// Records per batch (one batch per partition per request).
const BATCH_RECORDS_MAX: usize = 500;
/// Lines of stdin read before they are sent.
const STDIN_CHUNK_RECORDS: usize = 10_000;
const TIMEOUT_MS: i32 = 30_000;

pub fn run(args: &[String], out: &mut dyn Write) -> Result<i32> {
    let spec = Spec {
        values: &[
            "--topic",
            "--value",
            "--key",
            "--key-separator",
            "--header",
            "--partition",
            "--acks",
        ],
        switches: &[],
    };
    let p = args::parse(args, &spec)?;
    if p.has("--help") {
        emit(out, &format!("{USAGE}{COMMON_OPTIONS}"))?;
        return Ok(0);
    }
    let topic = p.one_name("--topic", "one topic is needed: keel produce TOPIC")?;
    let acks: i16 = match p.get("--acks").unwrap_or("all") {
        "all" | "-1" => -1,
        "1" => 1,
        "0" => 0,
        other => {
            return Err(CliError::Usage(format!(
                "--acks is all, 1 or 0, not {other:?}"
            )))
        }
    };
    let mut client = connect(&p)?;
    let mut producer = Producer::new(&mut client, &topic, p.number::<i32>("--partition")?, acks)?;
    if p.has("--value") {
        producer.send(&mut client, records_from_values(&p)?)?;
    } else {
        // Stdin goes out in chunks, so memory stays bounded however much is piped in.
        let format = LineFormat::from(&p)?;
        let mut chunk = Vec::new();
        for (n, line) in std::io::stdin().lock().lines().enumerate() {
            let line = line.map_err(|source| CliError::Io {
                addr: "stdin".into(),
                source,
            })?;
            chunk.push(format.record(n, &line)?);
            if chunk.len() == STDIN_CHUNK_RECORDS {
                producer.send(&mut client, std::mem::take(&mut chunk))?;
            }
        }
        producer.send(&mut client, chunk)?;
    }
    print_result(out, p.json(), &topic, &producer.written)?;
    Ok(0)
}

fn headers(p: &Parsed) -> Result<Vec<(String, Vec<u8>)>> {
    p.all("--header")
        .into_iter()
        .map(|h| key_value(h, "--header").map(|(k, v)| (k, v.into_bytes())))
        .collect()
}

fn records_from_values(p: &Parsed) -> Result<Vec<NewRecord>> {
    let headers = headers(p)?;
    Ok(p.all("--value")
        .into_iter()
        .map(|v| NewRecord {
            key: p.get("--key").map(|k| k.as_bytes().to_vec()),
            value: Some(v.as_bytes().to_vec()),
            headers: headers.clone(),
        })
        .collect())
}

/// How a line of stdin becomes a record: its end (`\n` or `\r\n`) is not part of the
/// value; with a separator, the text before its first occurrence is the key.
struct LineFormat {
    key: Option<Vec<u8>>,
    separator: Option<String>,
    headers: Vec<(String, Vec<u8>)>,
}

impl LineFormat {
    fn from(p: &Parsed) -> Result<LineFormat> {
        let separator = p.get("--key-separator").map(String::from);
        if separator.as_deref() == Some("") {
            return Err(CliError::Usage("--key-separator cannot be empty".into()));
        }
        Ok(LineFormat {
            key: p.get("--key").map(|k| k.as_bytes().to_vec()),
            separator,
            headers: headers(p)?,
        })
    }

    /// Line `n` (from 0) as a record.
    fn record(&self, n: usize, line: &str) -> Result<NewRecord> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let (key, value) = match &self.separator {
            Some(sep) => {
                let (k, v) = line.split_once(sep.as_str()).ok_or_else(|| {
                    CliError::Failed(format!(
                        "line {}: no key separator {sep:?} in {line:?}",
                        n + 1
                    ))
                })?;
                (Some(k.as_bytes().to_vec()), v)
            }
            None => (self.key.clone(), line),
        };
        Ok(NewRecord {
            key,
            value: Some(value.as_bytes().to_vec()),
            headers: self.headers.clone(),
        })
    }
}

/// What one partition took: its record count and offsets (unknown with acks=0).
#[derive(Debug, Default)]
struct Written {
    records: usize,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
}

/// Sends records of one topic, partitioned as the Java client would, and counts what each
/// partition took.
struct Producer {
    topic: String,
    meta: ClusterInfo,
    partitions: i32,
    fixed: Option<i32>,
    acks: i16,
    /// Next partition for an unkeyed record (round-robin).
    next_unkeyed: i32,
    written: BTreeMap<i32, Written>,
}

impl Producer {
    fn new(client: &mut Client, topic: &str, fixed: Option<i32>, acks: i16) -> Result<Producer> {
        let meta = client.metadata(Some(&[topic.to_string()]))?;
        let info = meta
            .topic(topic)
            .ok_or_else(|| CliError::kafka(format!("topic {topic}"), 3, None))?;
        check(
            info.error_code,
            || format!("produce to topic {topic}"),
            None,
        )?;
        let partitions = info.partitions.len() as i32;
        if partitions == 0 {
            return Err(CliError::Failed(format!("topic {topic} has no partitions")));
        }
        if let Some(fixed) = fixed {
            if fixed < 0 || fixed >= partitions {
                return Err(CliError::kafka(
                    format!("partition {topic}-{fixed}"),
                    3,
                    None,
                ));
            }
        }
        Ok(Producer {
            topic: topic.to_string(),
            meta,
            partitions,
            fixed,
            acks,
            next_unkeyed: 0,
            written: BTreeMap::new(),
        })
    }

    fn send(&mut self, client: &mut Client, records: Vec<NewRecord>) -> Result<()> {
        let mut by_partition: BTreeMap<i32, Vec<NewRecord>> = BTreeMap::new();
        for r in records {
            let partition = match (self.fixed, &r.key) {
                (Some(p), _) => p,
                (None, Some(key)) => partition_for_key(key, self.partitions),
                (None, None) => {
                    let p = self.next_unkeyed;
                    self.next_unkeyed = (p + 1) % self.partitions;
                    p
                }
            };
            by_partition.entry(partition).or_default().push(r);
        }
        let timestamp_ms = keel_vocab::SystemClock.now_ms();
        // Each round sends at most one batch per partition, grouped by leader.
        let mut queues: BTreeMap<i32, std::vec::IntoIter<NewRecord>> = by_partition
            .into_iter()
            .map(|(p, rs)| (p, rs.into_iter()))
            .collect();
        loop {
            let mut by_leader: BTreeMap<i32, Vec<(i32, usize, bytes::Bytes)>> = BTreeMap::new();
            for (&partition, queue) in queues.iter_mut() {
                let chunk: Vec<NewRecord> = queue.by_ref().take(BATCH_RECORDS_MAX).collect();
                if chunk.is_empty() {
                    continue;
                }
                let leader = leader_of(&self.meta, &self.topic, partition)?;
                let batch = encode_batch(&chunk, timestamp_ms)?;
                by_leader
                    .entry(leader)
                    .or_default()
                    .push((partition, chunk.len(), batch));
            }
            if by_leader.is_empty() {
                return Ok(());
            }
            for (leader, batches) in by_leader {
                send_batches(
                    client,
                    leader,
                    &self.topic,
                    self.acks,
                    batches,
                    &mut self.written,
                )?;
            }
        }
    }
}

fn send_batches(
    client: &mut Client,
    leader: i32,
    topic: &str,
    acks: i16,
    batches: Vec<(i32, usize, bytes::Bytes)>,
    written: &mut BTreeMap<i32, Written>,
) -> Result<()> {
    let conn = client.node(leader)?;
    let build = |_: i16| {
        let mut t = produce_request::TopicProduceData::default();
        t.name = topic_name(topic);
        t.partition_data = batches
            .iter()
            .map(|(partition, _, batch)| {
                let mut pd = produce_request::PartitionProduceData::default();
                pd.index = *partition;
                pd.records = Some(batch.clone());
                pd
            })
            .collect();
        let mut r = ProduceRequest::default();
        r.acks = acks;
        r.timeout_ms = TIMEOUT_MS;
        r.topic_data = vec![t];
        r
    };
    // v13 names topics by id; up to v12 by name.
    let counts: BTreeMap<i32, usize> = batches.iter().map(|(p, n, _)| (*p, *n)).collect();
    if acks == 0 {
        let version = conn.version(ApiKey::Produce, 3, 12)?;
        conn.send_oneway(ApiKey::Produce, version, &build(version))?;
        for (partition, n) in counts {
            written.entry(partition).or_default().records += n;
        }
        return Ok(());
    }
    let (_, resp): (i16, ProduceResponse) = conn.call(ApiKey::Produce, (3, 12), build)?;
    for t in resp.responses {
        for pr in t.partition_responses {
            check(
                pr.error_code,
                || format!("produce to {topic}-{}", pr.index),
                pr.error_message.map(|m| m.to_string()),
            )?;
            let n = counts.get(&pr.index).copied().unwrap_or(0);
            let w = written.entry(pr.index).or_default();
            w.records += n;
            w.first_offset.get_or_insert(pr.base_offset);
            w.last_offset = Some(pr.base_offset + n as i64 - 1);
        }
    }
    Ok(())
}

fn print_result(
    out: &mut dyn Write,
    json: bool,
    topic: &str,
    written: &BTreeMap<i32, Written>,
) -> Result<()> {
    let total: usize = written.values().map(|w| w.records).sum();
    if json {
        let partitions: Vec<Value> = written
            .iter()
            .map(|(p, w)| {
                json!({
                    "partition": p,
                    "records": w.records,
                    "first_offset": w.first_offset,
                    "last_offset": w.last_offset,
                })
            })
            .collect();
        return emit_json(
            out,
            &json!({ "topic": topic, "records": total, "partitions": partitions }),
        );
    }
    let mut t = Table::new(&[
        "TOPIC",
        "PARTITION",
        "RECORDS",
        "FIRST-OFFSET",
        "LAST-OFFSET",
    ]);
    let show = |o: Option<i64>| o.map(|o| o.to_string()).unwrap_or_else(|| "-".into());
    for (p, w) in written {
        t.row(vec![
            topic.to_string(),
            p.to_string(),
            w.records.to_string(),
            show(w.first_offset),
            show(w.last_offset),
        ]);
    }
    emit(out, &t.render())
}

/// The Java client's default partitioner for keyed records:
/// `toPositive(murmur2(key)) % partitions`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// Kafka's `Utils.murmur2` (seed 0x9747b28c).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: i32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as i32;
    let mut h: i32 = 0x9747_b28c_u32 as i32 ^ length;
    let mut chunks = data.chunks_exact(4);
    for c in chunks.by_ref() {
        let mut k = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= ((k as u32) >> R) as i32;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() == 3 {
        h ^= (rest[2] as i32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as i32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as i32;
        h = h.wrapping_mul(M);
    }
    h ^= ((h as u32) >> 13) as i32;
    h = h.wrapping_mul(M);
    h ^= ((h as u32) >> 15) as i32;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka() {
        // Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
        for p in [1, 3, 7] {
            assert!((0..p).contains(&partition_for_key(b"foobar", p)));
        }
    }

    fn parsed(args: &[&str]) -> Parsed {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        crate::args::parse(
            &args,
            &Spec {
                values: &["--key", "--key-separator", "--header", "--value"],
                switches: &[],
            },
        )
        .unwrap()
    }

    #[test]
    fn lines_split_into_keys_values_and_headers() {
        let p = parsed(&[
            "--key-separator",
            ":",
            "--header",
            "src=cli",
            "--header",
            "n=1",
        ]);
        let f = LineFormat::from(&p).unwrap();
        let r0 = f.record(0, "k1:v1\r").unwrap();
        let r1 = f.record(1, "k2:v:2").unwrap();
        assert_eq!(r0.key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(r0.value.as_deref(), Some(&b"v1"[..]));
        assert_eq!(r1.value.as_deref(), Some(&b"v:2"[..]));
        assert_eq!(
            r1.headers,
            vec![("src".into(), b"cli".to_vec()), ("n".into(), b"1".to_vec())]
        );
        let err = f.record(6, "nokey").unwrap_err();
        assert!(
            err.to_string().contains("line 7: no key separator"),
            "{err}"
        );
        assert!(LineFormat::from(&parsed(&["--key-separator", ""])).is_err());

        let f = LineFormat::from(&parsed(&["--key", "K"])).unwrap();
        assert_eq!(f.record(0, "b").unwrap().key.as_deref(), Some(&b"K"[..]));
        let rs = records_from_values(&parsed(&["--value", "x", "--value", "y"])).unwrap();
        assert_eq!(rs.len(), 2);
        assert_eq!(rs[0].key, None);
    }
}
