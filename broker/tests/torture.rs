//! Crash-safety torture test against the real `keel` binary: a librdkafka producer (acks=all)
//! sends to a 3-partition topic with small segments while the broker is killed with SIGKILL
//! at a random moment, round after round; in some rounds the `.index` / `.timeindex` files of
//! closed segments are deleted or damaged while the broker is down.
//!
//! Invariants checked after every restart (default `flush.policy=group`: fdatasync before ack):
//! - every acknowledged record is present at exactly its acknowledged offset, with its key,
//!   value and timestamp;
//! - each partition reads back densely, offsets `0..high_watermark` with no gap, and every
//!   record in it is one this test produced, in the partition it was sent to;
//! - what a previous restart served is still served, unchanged (the recovered log never
//!   shrinks or changes under a SIGKILL, which loses no page cache);
//! - fetches from random offsets (offset index) and ListOffsets by timestamp (time index)
//!   agree with the full read;
//! - index files made invalid are rebuilt to the bytes they had before the damage (a valid
//!   shorter prefix may be kept instead);
//! - the broker log has no panic and no ERROR line.
//!
//! A SIGKILL loses no page cache, so this catches an ack sent before the write reached the
//! kernel, lost or misplaced records in recovery and index rebuilds; it cannot catch an ack
//! sent before the fdatasync finished (that takes a simulated power loss).
//!
//! `TORTURE_SEED` and `TORTURE_ROUNDS` override the seed and the number of rounds. On a
//! violation the data dir and broker log are copied to `$TMPDIR/keel-torture-<pid>` and the
//! test fails listing each missing or moved record (partition, offset, value).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use common::client::{fetch_request, list_offsets_request, topic, Client};
use common::Broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use rdkafka::ClientContext;

const TOPIC: &str = "torture";
const PARTITIONS: i32 = 3;
const SEGMENT_BYTES: u32 = 65_536;
const ROUNDS_DEFAULT: u32 = 12;
/// Every this many rounds, index files of closed segments are damaged before the restart.
const DAMAGE_EVERY_ROUNDS: u32 = 4;
/// Closed segments per partition whose indexes a damaging round damages.
const DAMAGED_SEGMENTS_PER_PARTITION: usize = 4;
const KILL_DELAY_MS_MIN: u64 = 50;
const KILL_DELAY_MS_MAX: u64 = 400;
/// Records handed to librdkafka and not yet reported, at most: bounds the data per round.
const IN_FLIGHT_MAX: u64 = 2_000;
const VALUE_PADDING_BYTES_MAX: u64 = 300;
const OFFSET_ENTRY_BYTES: usize = 8;
const TIME_ENTRY_BYTES: usize = 12;
/// Random-offset fetches and timestamp lookups per partition per round.
const PROBES_PER_PARTITION: usize = 8;
const FETCH_BYTES_MAX: i32 = 1 << 20;
const READ_PARTITION_TIMEOUT: Duration = Duration::from_secs(20);
const PRODUCER_STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// xorshift64*: deterministic for a seed, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The record with global sequence number `seq` (across rounds), sent in `round`: the
/// partition, key, value and timestamp are all derived from `seq`, so any stored record can
/// be checked on its own.
fn partition_for(seq: u64) -> i32 {
    (seq % PARTITIONS as u64) as i32
}

fn key_for(seq: u64) -> Vec<u8> {
    format!("k{seq}").into_bytes()
}

fn value_for(round: u32, seq: u64) -> Vec<u8> {
    let mut v = format!("r{round:03}-p{}-s{seq:010}-", partition_for(seq)).into_bytes();
    let padding = (seq.wrapping_mul(7919)) % VALUE_PADDING_BYTES_MAX;
    v.extend((0..padding).map(|i| b'a' + ((seq + i) % 26) as u8));
    v
}

fn timestamp_for(ts_base_ms: i64, seq: u64) -> i64 {
    ts_base_ms + seq as i64
}

/// (round, seq) from a value made by `value_for`.
fn parse_value(v: &[u8]) -> Option<(u32, u64)> {
    let s = std::str::from_utf8(v).ok()?;
    let mut parts = s.splitn(4, '-');
    let round = parts.next()?.strip_prefix('r')?.parse().ok()?;
    parts.next()?;
    let seq = parts.next()?.strip_prefix('s')?.parse().ok()?;
    Some((round, seq))
}

fn show(v: &[u8]) -> String {
    let s = String::from_utf8_lossy(v);
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{:?}...({} bytes)", &s[..i], v.len()),
        None => format!("{s:?}"),
    }
}

/// A record librdkafka reported as delivered (the broker acknowledged it with acks=all).
#[derive(Debug, Clone, PartialEq)]
struct Acked {
    partition: i32,
    offset: i64,
    key: Vec<u8>,
    value: Vec<u8>,
    timestamp_ms: Option<i64>,
}

/// Delivery-report context: keeps every success, counts failures (not acknowledged, so
/// nothing is expected of them).
#[derive(Clone, Default)]
struct Acks(Arc<AcksInner>);

#[derive(Default)]
struct AcksInner {
    ok: Mutex<Vec<Acked>>,
    failed: AtomicU64,
    reported: AtomicU64,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => self.0.ok.lock().unwrap().push(Acked {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().unwrap_or_default().to_vec(),
                value: m.payload().unwrap_or_default().to_vec(),
                timestamp_ms: m.timestamp().to_millis(),
            }),
            Err(_) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.0.reported.fetch_add(1, Ordering::Relaxed);
    }
}

struct ProducerOutcome {
    next_seq: u64,
    sent: u64,
    acked: Vec<Acked>,
    failed: u64,
}

/// Sends records `first_seq..` until `stop`, then drops the producer (which purges what
/// is queued or in flight: those are reported as failures).
fn produce_until_stopped(
    bootstrap: String,
    round: u32,
    first_seq: u64,
    ts_base_ms: i64,
    stop: Arc<AtomicBool>,
) -> ProducerOutcome {
    let acks = Acks::default();
    let producer: BaseProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "1")
        .set("compression.codec", "none")
        .set("message.timeout.ms", "20000")
        .create_with_context(acks.clone())
        .expect("create producer");
    let mut seq = first_seq;
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if sent - acks.0.reported.load(Ordering::Relaxed) >= IN_FLIGHT_MAX {
            producer.poll(Duration::from_millis(5));
            continue;
        }
        let key = key_for(seq);
        let value = value_for(round, seq);
        let record = BaseRecord::to(TOPIC)
            .partition(partition_for(seq))
            .key(&key)
            .payload(&value)
            .timestamp(timestamp_for(ts_base_ms, seq));
        match producer.send(record) {
            Ok(()) => {
                seq += 1;
                sent += 1;
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(5));
            }
            Err((e, _)) => panic!("send seq {seq}: {e}"),
        }
        producer.poll(Duration::ZERO);
    }
    drop(producer);
    let acked = std::mem::take(&mut *acks.0.ok.lock().unwrap());
    ProducerOutcome {
        next_seq: seq,
        sent,
        acked,
        failed: acks.0.failed.load(Ordering::Relaxed),
    }
}

/// One record as the broker serves it.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    offset: i64,
    timestamp_ms: i64,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn decode_records(records: &Option<Bytes>) -> Result<Vec<Stored>, String> {
    let mut out = Vec::new();
    let Some(b) = records else { return Ok(out) };
    let mut b = b.clone();
    while b.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut b).map_err(|e| format!("undecodable: {e}"))?;
        for r in set.records {
            out.push(Stored {
                offset: r.offset,
                timestamp_ms: r.timestamp,
                key: r.key.map(|k| k.to_vec()).unwrap_or_default(),
                value: r.value.map(|v| v.to_vec()).unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

fn create_topic(c: &mut Client) {
    let config = |name: &str, value: &str| {
        create_topics_request::CreatableTopicConfig::default()
            .with_name(StrBytes::from_string(name.to_string()))
            .with_value(Some(StrBytes::from_string(value.to_string())))
    };
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic(TOPIC))
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)
            .with_configs(vec![config(
                "segment.bytes",
                &SEGMENT_BYTES.to_string(),
            )])]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
}

/// One fetch of `partition` at `offset`: (error code, high watermark, log start, records).
fn fetch_at(
    c: &mut Client,
    partition: i32,
    offset: i64,
    partition_max_bytes: i32,
) -> (i16, i64, i64, Result<Vec<Stored>, String>) {
    let req = fetch_request(
        TOPIC,
        &[(partition, offset, partition_max_bytes)],
        0,
        0,
        FETCH_BYTES_MAX,
    );
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    let p = &resp.responses[0].partitions[0];
    (
        p.error_code,
        p.high_watermark,
        p.log_start_offset,
        decode_records(&p.records),
    )
}

/// Every record of `partition`, offset 0 up to the high watermark. Checks density as it
/// goes: record i must have offset i.
fn read_partition(c: &mut Client, partition: i32) -> Result<Vec<Stored>, String> {
    let deadline = Instant::now() + READ_PARTITION_TIMEOUT;
    let mut out: Vec<Stored> = Vec::new();
    let mut stalls = 0;
    loop {
        if Instant::now() > deadline {
            return Err(format!(
                "partition {partition}: reading timed out at offset {}",
                out.len()
            ));
        }
        let next = out.len() as i64;
        let (error, hw, log_start, records) = fetch_at(c, partition, next, FETCH_BYTES_MAX);
        if error != 0 {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        if log_start != 0 {
            return Err(format!(
                "partition {partition}: log start offset {log_start}, expected 0"
            ));
        }
        if next >= hw {
            if next > hw {
                return Err(format!(
                    "partition {partition}: high watermark fell to {hw} while reading"
                ));
            }
            return Ok(out);
        }
        let records = records.map_err(|e| format!("partition {partition} offset {next}: {e}"))?;
        let before = out.len();
        for r in records.into_iter().filter(|r| r.offset >= next) {
            let want = out.len() as i64;
            if r.offset >= hw {
                break;
            }
            if r.offset != want {
                return Err(format!(
                    "partition {partition}: offsets not dense: expected {want}, got {} ({})",
                    r.offset,
                    show(&r.value)
                ));
            }
            out.push(r);
        }
        if out.len() == before {
            stalls += 1;
            if stalls > 20 {
                return Err(format!(
                    "partition {partition}: no record at offset {next} below high watermark {hw}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        } else {
            stalls = 0;
        }
    }
}

/// ListOffsets by timestamp: (error code, offset, timestamp).
fn offset_for_timestamp(c: &mut Client, partition: i32, timestamp_ms: i64) -> (i16, i64, i64) {
    let req = list_offsets_request(TOPIC, partition, timestamp_ms);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 7, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.offset, p.timestamp)
}

/// Checks one partition's records on their own: each is a record this test made, in the
/// right partition, with its own key and timestamp.
fn check_well_formed(
    partition: i32,
    stored: &[Stored],
    round: u32,
    ts_base_ms: i64,
    violations: &mut Vec<String>,
) {
    for r in stored {
        let ok = match parse_value(&r.value) {
            Some((sent_round, seq)) => {
                sent_round <= round
                    && partition_for(seq) == partition
                    && r.value == value_for(sent_round, seq)
                    && r.key == key_for(seq)
                    && r.timestamp_ms == timestamp_for(ts_base_ms, seq)
            }
            None => false,
        };
        if !ok {
            violations.push(format!(
                "partition {partition} offset {}: not a record this test sent to it: key {} value {} timestamp {}",
                r.offset,
                show(&r.key),
                show(&r.value),
                r.timestamp_ms
            ));
        }
    }
}

/// Every acknowledged record must be stored at its acknowledged offset, unchanged.
fn check_acked(
    partition: i32,
    stored: &[Stored],
    acked: &BTreeMap<i64, Acked>,
    violations: &mut Vec<String>,
) {
    for (&offset, a) in acked {
        match stored.get(offset as usize) {
            None => violations.push(format!(
                "LOST: partition {partition} offset {offset}: acknowledged record {} is missing (high watermark {})",
                show(&a.value),
                stored.len()
            )),
            Some(s) => {
                if s.value != a.value || s.key != a.key || Some(s.timestamp_ms) != a.timestamp_ms {
                    let elsewhere = stored
                        .iter()
                        .find(|s| s.value == a.value)
                        .map(|s| format!("; found at offset {}", s.offset))
                        .unwrap_or_default();
                    violations.push(format!(
                        "MOVED/CHANGED: partition {partition} offset {offset}: acknowledged {} (ts {:?}), stored {} (ts {}){elsewhere}",
                        show(&a.value),
                        a.timestamp_ms,
                        show(&s.value),
                        s.timestamp_ms
                    ));
                }
            }
        }
    }
}

/// What one restart served must still be served, unchanged, by the next.
fn check_prefix_kept(
    partition: i32,
    stored: &[Stored],
    before: &[Stored],
    violations: &mut Vec<String>,
) {
    if stored.len() < before.len() {
        violations.push(format!(
            "partition {partition}: high watermark went back from {} to {} across a restart (first lost: {})",
            before.len(),
            stored.len(),
            show(&before[stored.len()].value)
        ));
    }
    for (old, new) in before.iter().zip(stored) {
        if old != new {
            violations.push(format!(
                "partition {partition} offset {}: served {} before the restart, {} after",
                old.offset,
                show(&old.value),
                show(&new.value)
            ));
        }
    }
}

/// Fetches at random offsets (the offset index picks the starting batch) must return the
/// record at that offset, and agree with the full read on everything they return.
fn probe_fetches(
    c: &mut Client,
    partition: i32,
    stored: &[Stored],
    rng: &mut Rng,
    violations: &mut Vec<String>,
) {
    if stored.is_empty() {
        return;
    }
    for _ in 0..PROBES_PER_PARTITION {
        let offset = rng.below(stored.len()) as i64;
        // One byte: the broker answers with just the batch holding `offset`.
        let (error, _, _, records) = fetch_at(c, partition, offset, 1);
        let records = match (error, records) {
            (0, Ok(r)) => r,
            (e, r) => {
                violations.push(format!(
                    "partition {partition}: fetch at offset {offset}: error {e}, {:?}",
                    r.err()
                ));
                continue;
            }
        };
        if !records.iter().any(|r| r.offset == offset) {
            violations.push(format!(
                "partition {partition}: fetch at offset {offset} did not return it (got offsets {:?})",
                records.iter().map(|r| r.offset).collect::<Vec<_>>()
            ));
        }
        for r in &records {
            if stored.get(r.offset as usize) != Some(r) {
                violations.push(format!(
                    "partition {partition}: fetch at offset {offset} returned {} at offset {}, the full read has {:?}",
                    show(&r.value),
                    r.offset,
                    stored.get(r.offset as usize).map(|s| show(&s.value))
                ));
            }
        }
    }
}

/// ListOffsets by timestamp (the time index picks where to look) must name the first
/// record, by offset, with a timestamp at or after the one asked.
fn probe_timestamps(
    c: &mut Client,
    partition: i32,
    stored: &[Stored],
    rng: &mut Rng,
    violations: &mut Vec<String>,
) {
    let (Some(min), Some(max)) = (
        stored.iter().map(|s| s.timestamp_ms).min(),
        stored.iter().map(|s| s.timestamp_ms).max(),
    ) else {
        return;
    };
    for i in 0..PROBES_PER_PARTITION {
        let asked = match i {
            0 => min,
            1 => max,
            2 => max + 1,
            _ if i % 2 == 0 => stored[rng.below(stored.len())].timestamp_ms,
            _ => min - 3 + rng.range(0, (max - min + 6) as u64) as i64,
        };
        let want = stored
            .iter()
            .find(|s| s.timestamp_ms >= asked)
            .map_or((-1, -1), |s| (s.offset, s.timestamp_ms));
        let (error, offset, timestamp) = offset_for_timestamp(c, partition, asked);
        if (error, offset, timestamp) != (0, want.0, want.1) {
            violations.push(format!(
                "partition {partition}: ListOffsets(timestamp {asked}) = error {error} offset {offset} timestamp {timestamp}, expected offset {} timestamp {}",
                want.0, want.1
            ));
        }
    }
}

/// How an index file was damaged while the broker was down.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    Deleted,
    /// Random bytes, same length, the last entry a copy of the first (only on files of 2+
    /// entries). Random entries alone can be well-formed by chance (a one-entry time index
    /// always is), and a well-formed index is trusted, as Kafka's is; out-of-order ones are not.
    Garbage,
    /// Zeros, same length (only on files of 2+ entries, which zeros make out of order).
    Zeroed,
    /// Cut inside an entry.
    Torn,
    /// Cut after a whole entry (a valid, shorter index: it may be kept).
    Prefix,
}

impl Damage {
    /// Whether the broker must notice it and rebuild the segment's indexes.
    fn invalidates(self) -> bool {
        self != Damage::Prefix
    }
}

struct DamagedSegment {
    log: PathBuf,
    files: Vec<IndexFile>,
}

struct IndexFile {
    path: PathBuf,
    /// Bytes before the damage; `None`: the file did not exist.
    before: Option<Vec<u8>>,
    /// The damage and the bytes it left.
    damage: Option<(Damage, Option<Vec<u8>>)>,
}

fn segment_files(partition_dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(partition_dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    logs
}

fn damage_file(path: &Path, entry_bytes: usize, rng: &mut Rng) -> Damage {
    let original = std::fs::read(path).ok();
    let entries = original.as_ref().map_or(0, |b| b.len() / entry_bytes);
    let mut choices = vec![Damage::Deleted, Damage::Torn];
    if original.is_some() {
        choices.push(Damage::Prefix);
    }
    if entries >= 2 {
        choices.extend([Damage::Zeroed, Damage::Garbage]);
    }
    let damage = choices[rng.below(choices.len())];
    let len = original.as_ref().map_or(0, Vec::len);
    match damage {
        Damage::Deleted => {
            let _ = std::fs::remove_file(path);
        }
        Damage::Garbage => {
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let first = bytes[..entry_bytes].to_vec();
            bytes[(entries - 1) * entry_bytes..entries * entry_bytes].copy_from_slice(&first);
            std::fs::write(path, bytes).unwrap();
        }
        Damage::Zeroed => std::fs::write(path, vec![0u8; len]).unwrap(),
        Damage::Torn => {
            let keep = rng.below(entries + 1) * entry_bytes
                + rng.range(1, entry_bytes as u64 - 1) as usize;
            let mut bytes = original.clone().unwrap_or_default();
            bytes.resize(keep, 0xA5);
            std::fs::write(path, bytes).unwrap();
        }
        Damage::Prefix => {
            let keep = rng.below(entries.max(1)) * entry_bytes;
            let mut bytes = original.clone().unwrap_or_default();
            bytes.truncate(keep);
            std::fs::write(path, bytes).unwrap();
        }
    }
    damage
}

/// Damages the index files of a few closed segments (all but the last of each partition):
/// the newest closed one and some random others, each segment at most once in the test (a
/// valid prefix left by an earlier round would no longer be the segment's true index).
fn damage_indexes(
    data_dir: &Path,
    touched: &mut BTreeSet<PathBuf>,
    rng: &mut Rng,
) -> Vec<DamagedSegment> {
    let mut out = Vec::new();
    for partition in 0..PARTITIONS {
        let logs = segment_files(&data_dir.join(format!("{TOPIC}-{partition}")));
        let mut candidates: Vec<PathBuf> = logs[..logs.len().saturating_sub(1)]
            .iter()
            .filter(|l| !touched.contains(*l))
            .cloned()
            .collect();
        let mut chosen = Vec::new();
        if let Some(newest) = candidates.pop() {
            chosen.push(newest);
        }
        while chosen.len() < DAMAGED_SEGMENTS_PER_PARTITION && !candidates.is_empty() {
            chosen.push(candidates.swap_remove(rng.below(candidates.len())));
        }
        for log in chosen {
            let mut files = Vec::new();
            let which = rng.below(3); // 0: index, 1: timeindex, 2: both
            for (n, (ext, entry_bytes)) in [
                ("index", OFFSET_ENTRY_BYTES),
                ("timeindex", TIME_ENTRY_BYTES),
            ]
            .into_iter()
            .enumerate()
            {
                let path = log.with_extension(ext);
                let before = std::fs::read(&path).ok();
                let damage = (which == n || which == 2).then(|| {
                    let d = damage_file(&path, entry_bytes, rng);
                    (d, std::fs::read(&path).ok())
                });
                files.push(IndexFile {
                    path,
                    before,
                    damage,
                });
            }
            touched.insert(log.clone());
            out.push(DamagedSegment { log, files });
        }
    }
    out
}

/// After the restart: a segment whose indexes were made invalid has them rebuilt, identical
/// to what they were; one left valid (a prefix) is kept as it is or rebuilt.
fn check_rebuilt(damaged: &[DamagedSegment], violations: &mut Vec<String>) {
    for seg in damaged {
        let invalid = seg
            .files
            .iter()
            .any(|f| f.before.is_none() || f.damage.as_ref().is_some_and(|(d, _)| d.invalidates()));
        for f in &seg.files {
            let now = std::fs::read(&f.path).ok();
            let ok = if invalid {
                now.is_some() && (f.before.is_none() || now == f.before)
            } else {
                now == f.before || f.damage.as_ref().is_some_and(|(_, left)| now == *left)
            };
            if !ok {
                let len = |b: &Option<Vec<u8>>| {
                    b.as_ref().map_or("missing".into(), |b| b.len().to_string())
                };
                violations.push(format!(
                    "{} ({:?}, segment {}): after the restart {} bytes, before the damage {} bytes{}",
                    f.path.display(),
                    f.damage.as_ref().map(|(d, _)| d),
                    seg.log.display(),
                    len(&now),
                    len(&f.before),
                    if invalid { " (an invalid index must be rebuilt identically)" } else { " (a valid index is kept or rebuilt)" }
                ));
            }
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            let _ = std::fs::copy(&p, to.join(e.file_name()));
        }
    }
}

fn fail_with_evidence(b: &Broker, seed: u64, round: u32, violations: &[String]) -> ! {
    let keep = std::env::temp_dir().join(format!("keel-torture-{}", std::process::id()));
    copy_dir(b.dir.path(), &keep);
    let shown: Vec<&str> = violations.iter().take(60).map(String::as_str).collect();
    panic!(
        "round {round} (TORTURE_SEED={seed}): {} violation(s); data dir and keel.log kept in {}\n{}",
        violations.len(),
        keep.display(),
        shown.join("\n")
    );
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn acknowledged_records_survive_random_kill9() {
    let started = Instant::now();
    let seed = env_u64("TORTURE_SEED").unwrap_or(0x6b65_656c_2d39);
    let rounds = env_u64("TORTURE_ROUNDS").map_or(ROUNDS_DEFAULT, |n| n as u32);
    // Kill delays from their own stream: for a seed they do not depend on how much was sent.
    let mut kill_rng = Rng::new(seed);
    let mut rng = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
    eprintln!("torture: seed {seed}, {rounds} rounds");

    let mut b = Broker::start(&[]);
    create_topic(&mut Client::connect(&b.bootstrap()));
    // Explicit timestamps (one ms apart, an hour back) make ListOffsets answers checkable.
    let ts_base_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 3_600_000;

    let mut acked: Vec<BTreeMap<i64, Acked>> = vec![BTreeMap::new(); PARTITIONS as usize];
    let mut served: Vec<Vec<Stored>> = vec![Vec::new(); PARTITIONS as usize];
    let mut touched: BTreeSet<PathBuf> = BTreeSet::new();
    let mut next_seq = 0u64;
    let (mut sent_total, mut failed_total, mut damaged_total) = (0u64, 0u64, 0usize);
    for round in 0..rounds {
        let round_started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (bootstrap, stop2, first_seq) = (b.bootstrap(), stop.clone(), next_seq);
        std::thread::spawn(move || {
            let _ = tx.send(produce_until_stopped(
                bootstrap, round, first_seq, ts_base_ms, stop2,
            ));
        });
        let kill_delay_ms = kill_rng.range(KILL_DELAY_MS_MIN, KILL_DELAY_MS_MAX);
        std::thread::sleep(Duration::from_millis(kill_delay_ms));
        b.kill9();
        stop.store(true, Ordering::Relaxed);
        let outcome = rx
            .recv_timeout(PRODUCER_STOP_TIMEOUT)
            .expect("producer thread did not stop");
        next_seq = outcome.next_seq;
        sent_total += outcome.sent;
        failed_total += outcome.failed;

        let mut violations = Vec::new();
        for a in &outcome.acked {
            if a.offset < 0 || !(0..PARTITIONS).contains(&a.partition) {
                violations.push(format!("acknowledged without a valid offset: {a:?}"));
                continue;
            }
            if let Some(prev) = acked[a.partition as usize].insert(a.offset, a.clone()) {
                violations.push(format!(
                    "partition {} offset {}: acknowledged twice, for {} and {}",
                    a.partition,
                    a.offset,
                    show(&prev.value),
                    show(&a.value)
                ));
            }
        }

        let damaged = if round % DAMAGE_EVERY_ROUNDS == DAMAGE_EVERY_ROUNDS - 1 {
            damage_indexes(&b.data_dir(), &mut touched, &mut rng)
        } else {
            Vec::new()
        };
        damaged_total += damaged.len();

        let log_from = b.log_text().len();
        b.restart_after_stop();
        let mut c = Client::connect(&b.bootstrap());
        let mut present = 0usize;
        for partition in 0..PARTITIONS {
            let p = partition as usize;
            let stored = match read_partition(&mut c, partition) {
                Ok(s) => s,
                Err(e) => {
                    violations.push(e);
                    continue;
                }
            };
            check_well_formed(partition, &stored, round, ts_base_ms, &mut violations);
            check_acked(partition, &stored, &acked[p], &mut violations);
            check_prefix_kept(partition, &stored, &served[p], &mut violations);
            probe_fetches(&mut c, partition, &stored, &mut rng, &mut violations);
            probe_timestamps(&mut c, partition, &stored, &mut rng, &mut violations);
            present += stored.len();
            served[p] = stored;
        }
        check_rebuilt(&damaged, &mut violations);
        let log = b.log_text();
        let since_restart = log.get(log_from..).unwrap_or("");
        let (_, alarms) = log_summary(since_restart);
        if !alarms.is_empty() {
            violations.push(format!(
                "the broker log since the restart has alarming lines:\n{}",
                alarms.join("\n")
            ));
        }
        let acked_now: usize = acked.iter().map(BTreeMap::len).sum();
        let segments: usize = (0..PARTITIONS)
            .map(|p| segment_files(&b.data_dir().join(format!("{TOPIC}-{p}"))).len())
            .sum();
        eprintln!(
            "round {round:2}: kill after {kill_delay_ms:3} ms, sent {:5}, acked {:5} (failed {:5}), damaged {} segment(s) {:?}; acked so far {acked_now}, present {present}, segments {segments}, {} ms",
            outcome.sent,
            outcome.acked.len(),
            outcome.failed,
            damaged.len(),
            damaged
                .iter()
                .flat_map(|d| d.files.iter().filter_map(|f| f.damage.as_ref().map(|(d, _)| *d)))
                .collect::<Vec<_>>(),
            round_started.elapsed().as_millis()
        );
        if !violations.is_empty() {
            fail_with_evidence(&b, seed, round, &violations);
        }
    }

    let acked_total: usize = acked.iter().map(BTreeMap::len).sum();
    let present_total: usize = served.iter().map(Vec::len).sum();
    eprintln!(
        "torture: {rounds} rounds, {sent_total} sent, {acked_total} acknowledged, {failed_total} failed, {present_total} present, {damaged_total} segments' indexes damaged, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        acked_total > 0,
        "nothing was acknowledged: the test did not exercise anything"
    );
    assert!(
        damaged_total > 0,
        "no closed segment to damage: segments did not roll"
    );
    assert!(present_total >= acked_total);
    let (warnings, alarms) = log_summary(&b.log_text());
    eprintln!("torture: broker warnings {warnings:?}");
    assert!(
        alarms.is_empty(),
        "alarming broker log lines:\n{}",
        alarms.join("\n")
    );
}

/// (count of each WARN message, every ERROR line or panic) of a broker log.
fn log_summary(log: &str) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut warnings = BTreeMap::new();
    let mut alarms = Vec::new();
    for line in log.lines().map(strip_ansi) {
        if line.contains("panicked") || line.contains(" ERROR ") {
            alarms.push(line);
        } else if let Some((_, rest)) = line.split_once(" WARN ") {
            // "target: message field=value ...": keep the message.
            let message = rest.split_once(": ").map_or(rest, |(_, m)| m);
            let message = message
                .split(' ')
                .take_while(|w| !w.contains('='))
                .collect::<Vec<_>>()
                .join(" ");
            *warnings.entry(message).or_insert(0) += 1;
        }
    }
    (warnings, alarms)
}

/// The log is written with terminal colours; drop the escape sequences.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
