//! The harness the replication tests share: a cluster of real `keel` voters (on loopback or
//! in network namespaces), librdkafka producers that record every acknowledgement, readers,
//! and raw requests a follower or a client would send.
//!
//! The checker is keel-bench's offset ledger ([`keel_bench::checker`]) behind a [`Checker`]:
//! tests record every acknowledgement (name, partition, offset, acks level), a [`Background`]
//! consumer records what it reads while the faults happen, and [`final_pass`] reads each
//! partition from its start to its high watermark at the end. Records are named by their key
//! when their value is `value-of-{key}` (librdkafka producers here), else by their value (raw
//! records).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::client::{topic, Client};
use super::netns::Net;
use super::{free_port, Broker};
use kafka_protocol::messages::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

pub use keel_bench::checker::{Acks, LedgerReport};
use keel_bench::checker::{Ledger, MessageId, Pass};

pub type Report = Result<(String, i32, i64), rdkafka::error::KafkaError>;

/// Collects delivery reports: (key, partition, offset) of each acknowledged record.
#[derive(Clone, Default)]
pub struct Reports(pub std::sync::Arc<std::sync::Mutex<Vec<Report>>>);

impl rdkafka::ClientContext for Reports {}

impl rdkafka::producer::ProducerContext for Reports {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        let r = result
            .as_ref()
            .map(|m| {
                (
                    String::from_utf8_lossy(m.key().unwrap_or_default()).to_string(),
                    m.partition(),
                    m.offset(),
                )
            })
            .map_err(|(e, _)| e.clone());
        self.0.lock().unwrap().push(r);
    }
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The settings every replication test cluster runs with: short fencing and lag timeouts.
const SHORT_TIMEOUTS: [&str; 8] = [
    "--set",
    "broker.session.timeout.ms=3000",
    "--set",
    "broker.heartbeat.interval.ms=500",
    "--set",
    "replica.lag.time.max.ms=3000",
    "--set",
    "replica.fetch.backoff.ms=200",
];

/// Starts `n` voters (node ids 1..=n) on loopback with short replication timeouts and waits
/// until all serve.
pub fn cluster(n: usize, extra: &[&str]) -> Vec<Broker> {
    cluster_in_racks(&vec![""; n], extra)
}

/// [`cluster`] with node `i + 1` in rack `racks[i]` (`--rack`; "" = none).
pub fn cluster_in_racks(racks: &[&str], extra: &[&str]) -> Vec<Broker> {
    cluster_with(racks, extra, |_, _| {})
}

/// [`cluster_in_racks`] with `adjust(i, node)` run on each node before it starts (its own
/// flags, say a data dir elsewhere).
pub fn cluster_with(
    racks: &[&str],
    extra: &[&str],
    adjust: impl Fn(usize, &mut Broker),
) -> Vec<Broker> {
    let n = racks.len();
    let controller_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let hosts = vec!["127.0.0.1".to_string(); n];
    start_voters(&hosts, &controller_ports, None, racks, extra, adjust)
}

/// Starts one voter in each of `net`'s namespaces (node `i + 1` at `net.ip(i)`), all on the
/// same ports (each namespace has its own), and waits until all serve.
pub fn cluster_in(net: &Net, extra: &[&str]) -> Vec<Broker> {
    net_cluster_in_racks(net, &vec![""; net.len()], extra)
}

/// [`cluster_in`] with node `i + 1` in rack `racks[i]` (`--rack`; "" = none).
pub fn net_cluster_in_racks(net: &Net, racks: &[&str], extra: &[&str]) -> Vec<Broker> {
    let n = net.len();
    let hosts: Vec<String> = (0..n).map(|i| net.ip(i)).collect();
    start_voters(&hosts, &vec![9093; n], Some(net), racks, extra, |_, b| {
        b.port = 9092;
        b.admin_port = 9644;
    })
}

fn start_voters(
    hosts: &[String],
    controller_ports: &[u16],
    net: Option<&Net>,
    racks: &[&str],
    extra: &[&str],
    adjust: impl Fn(usize, &mut Broker),
) -> Vec<Broker> {
    let quorum = hosts
        .iter()
        .zip(controller_ports)
        .enumerate()
        .map(|(i, (h, p))| format!("{}@{h}:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let mut nodes: Vec<Broker> = (0..hosts.len())
        .map(|i| {
            let id = (i + 1).to_string();
            let listen = format!("{}:{}", hosts[i], controller_ports[i]);
            let mut args = vec![
                "--node-id",
                &id,
                "--controller-quorum",
                &quorum,
                "--controller-listen",
                &listen,
            ];
            args.extend_from_slice(&SHORT_TIMEOUTS);
            if !racks[i].is_empty() {
                args.extend_from_slice(&["--rack", racks[i]]);
            }
            args.extend_from_slice(extra);
            let mut b = Broker::prepare(&args);
            b.host = hosts[i].clone();
            b.netns = net.map(|net| net.namespace(i).to_string());
            adjust(i, &mut b);
            b
        })
        .collect();
    let starts: Vec<usize> = nodes.iter_mut().map(|b| b.spawn_nowait()).collect();
    for (b, s) in nodes.iter_mut().zip(starts) {
        b.wait_serving(s);
    }
    nodes
}

/// A broker (node `node_id`) that joins `voters`' quorum as a learner, not a voter, so it can
/// be stopped without costing the quorum its majority; the same short timeouts, plus `extra`.
pub fn learner(voters: &[Broker], node_id: i32, extra: &[&str]) -> Broker {
    let given = &voters[0].extra;
    let at = given
        .iter()
        .position(|a| a == "--controller-quorum")
        .expect("a voter's --controller-quorum");
    let quorum = given[at + 1].clone();
    let id = node_id.to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = vec![
        "--node-id",
        &id,
        "--controller-quorum",
        &quorum,
        "--controller-listen",
        &listen,
    ];
    args.extend_from_slice(&SHORT_TIMEOUTS);
    args.extend_from_slice(extra);
    let mut b = Broker::prepare(&args);
    let start = b.spawn_nowait();
    b.wait_serving(start);
    b
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out after {timeout:?} waiting until {what}");
}

pub fn metadata(b: &Broker) -> MetadataResponse {
    let mut c = Client::connect(&b.bootstrap());
    c.send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false),
    )
}

/// Partition `p` of `name` as `b` reports it: (leader, leader epoch, replicas, ISR).
pub fn partition(b: &Broker, name: &str, p: i32) -> Option<(i32, i32, Vec<i32>, Vec<i32>)> {
    let m = metadata(b);
    let t = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == name))?;
    let part = t.partitions.iter().find(|x| x.partition_index == p)?;
    Some((
        part.leader_id.0,
        part.leader_epoch,
        part.replica_nodes.iter().map(|r| r.0).collect(),
        part.isr_nodes.iter().map(|r| r.0).collect(),
    ))
}

pub fn create(b: &Broker, name: &str, partitions: i32, rf: i16, min_isr: i32) {
    let min_isr = min_isr.to_string();
    create_with_configs(
        b,
        name,
        partitions,
        rf,
        &[("min.insync.replicas", min_isr.as_str())],
    );
}

/// Creates `name` with these replica lists (partition i gets `replicas[i]`), min ISR `min_isr`.
pub fn create_assigned(b: &Broker, name: &str, replicas: &[Vec<i32>], min_isr: i32) {
    let mut c = Client::connect(&b.bootstrap());
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(
                replicas
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        create_topics_request::CreatableReplicaAssignment::default()
                            .with_partition_index(i as i32)
                            .with_broker_ids(r.iter().map(|id| BrokerId(*id)).collect())
                    })
                    .collect(),
            )
            .with_configs(vec![
                create_topics_request::CreatableTopicConfig::default()
                    .with_name("min.insync.replicas".to_string().into())
                    .with_value(Some(min_isr.to_string().into())),
            ])]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0]);
}

/// Creates topic `name` with `configs` (CreateTopics v7) and expects no error.
pub fn create_with_configs(
    b: &Broker,
    name: &str,
    partitions: i32,
    rf: i16,
    configs: &[(&str, &str)],
) {
    let mut c = Client::connect(&b.bootstrap());
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(partitions)
            .with_replication_factor(rf)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        create_topics_request::CreatableTopicConfig::default()
                            .with_name(k.to_string().into())
                            .with_value(Some(v.to_string().into()))
                    })
                    .collect(),
            )]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0]);
}

/// Waits (30 s at most) until partition `p` of `name`, as `b` reports it, has a leader and
/// all three replicas in its ISR.
pub fn wait_for_full_isr(b: &Broker, name: &str, p: i32) {
    wait_until(
        "the ISR has all three replicas",
        Duration::from_secs(30),
        || partition(b, name, p).is_some_and(|(l, _, _, isr)| l > 0 && isr.len() == 3),
    );
    wait_for_leader_to_serve(b, name, p);
}

/// The metadata quorum's leader as `b` reports it (`keel_quorum_leader`; -1 when unknown).
pub fn quorum_leader(b: &Broker) -> i32 {
    b.metrics()
        .lines()
        .find_map(|l| l.strip_prefix("keel_quorum_leader "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1)
}

/// Waits (10 s at most, then goes on) until the leader `b`'s Metadata names for partition `p`
/// of `name` answers for it as leader: `b` may name the partition before its leader has
/// installed the image (it then answers NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION,
/// as Kafka does), and a raw request sent then is not retried as a client's would be.
pub fn wait_for_leader_to_serve(b: &Broker, name: &str, p: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let m = metadata(b);
        let leader = m
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == name))
            .and_then(|t| t.partitions.iter().find(|x| x.partition_index == p))
            .map(|x| x.leader_id.0);
        let address = leader.and_then(|l| {
            m.brokers
                .iter()
                .find(|x| x.node_id.0 == l)
                .map(|x| format!("{}:{}", x.host.as_str(), x.port))
        });
        if let Some(address) = address {
            let mut c = Client::connect(&address);
            let resp: ListOffsetsResponse = c.send(
                ApiKey::ListOffsets,
                7,
                &super::client::list_offsets_request(name, p, -1),
            );
            let code = resp.topics[0].partitions[0].error_code;
            // 6: NOT_LEADER_OR_FOLLOWER, 3: UNKNOWN_TOPIC_OR_PARTITION.
            if code != 6 && code != 3 {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn producer(bootstrap: &str, reports: &Reports) -> BaseProducer<Reports> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "60000")
        .set("request.timeout.ms", "10000")
        .set("retry.backoff.ms", "200")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create_with_context(reports.clone())
        .unwrap()
}

/// Sends `keys` to partition `p` and waits for every delivery report.
pub fn send_all(producer: &BaseProducer<Reports>, name: &str, p: i32, keys: &[String]) {
    for k in keys {
        let value = format!("value-of-{k}");
        loop {
            match producer.send(BaseRecord::to(name).partition(p).key(k).payload(&value)) {
                Ok(()) => break,
                Err((e, _)) => {
                    assert!(
                        matches!(
                            e.rdkafka_error_code(),
                            Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ),
                        "{e}"
                    );
                    producer.poll(Duration::from_millis(50));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(90)).unwrap();
}

/// Reads partition `p` of `name` from the beginning through `bootstrap` until the record at
/// offset `last` came back or 30 s passed: offset -> (key, value).
pub fn read_all(bootstrap: &str, name: &str, p: i32, last: i64) -> BTreeMap<i64, (String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "replication-checker")
        .set("enable.auto.commit", "false")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(name, p, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !got.contains_key(&last) && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap();
            let value = String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap();
            assert!(
                got.insert(m.offset(), (key, value)).is_none(),
                "offset {} read twice",
                m.offset()
            );
        }
    }
    got
}

/// The checker for one partition's reading: every acknowledged record is read back at its
/// offset with its value, no offset holds two records, no key appears twice (the offset
/// ledger's rules; an acknowledgement without an offset must be read once, anywhere).
pub fn check_acknowledged(acked: &[(String, i32, i64)], read: &BTreeMap<i64, (String, String)>) {
    let checker = Checker::default();
    let p = acked.first().map_or(0, |(_, p, _)| *p);
    for (k, part, o) in acked {
        checker.acked(k, "t", *part, *o, Acks::All);
    }
    for (o, (k, v)) in read {
        checker.read(0, "t", p, *o, k, v);
    }
    checker.assert_clean("check_acknowledged");
}

/// Readers' numbers in the ledger: the background consumer, then final passes.
pub const BACKGROUND_READER: u32 = 0;
/// The longest a [`Background`] consumer runs.
const BACKGROUND_MAX: Duration = Duration::from_secs(300);
/// The longest [`final_pass`] waits for the high watermark and reads.
const PASS_MAX: Duration = Duration::from_secs(30);

#[derive(Default)]
struct CheckerState {
    ledger: Ledger,
    /// Record name -> identity (producer 0, sequence = order of first sight), and back.
    ids: HashMap<String, MessageId>,
    names: Vec<String>,
    topics: Vec<String>,
    acked: BTreeSet<String>,
    read: BTreeSet<String>,
    /// Highest offset acknowledged per (topic, partition).
    max_acked: BTreeMap<(String, i32), i64>,
    /// Keyed records read with a value other than `value-of-{key}`.
    bad_values: Vec<String>,
    passes: u32,
}

impl CheckerState {
    fn id(&mut self, name: &str) -> MessageId {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = MessageId::new(0, self.names.len() as u64);
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    fn tp(&mut self, topic: &str, p: i32) -> (u32, i32) {
        let i = match self.topics.iter().position(|t| t == topic) {
            Some(i) => i,
            None => {
                self.topics.push(topic.to_string());
                self.topics.len() - 1
            }
        };
        (i as u32, p)
    }

    /// `text` with each identity `0#N` followed by its record name.
    fn named(&self, text: &str) -> String {
        text.split(' ')
            .map(|w| {
                let n = w
                    .strip_prefix("0#")
                    .and_then(|n| n.trim_end_matches(',').parse().ok());
                match n.and_then(|n: usize| self.names.get(n)) {
                    Some(name) => format!("{w}({name})"),
                    None => w.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The offset ledger of one test, shared by its producers' reports and its readers.
#[derive(Clone, Default)]
pub struct Checker(Arc<Mutex<CheckerState>>);

impl Checker {
    fn state(&self) -> std::sync::MutexGuard<'_, CheckerState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record `name` was acknowledged at `offset` of `topic`/`p` (negative: unknown).
    pub fn acked(&self, name: &str, topic: &str, p: i32, offset: i64, acks: Acks) {
        let mut s = self.state();
        let (id, tp) = (s.id(name), s.tp(topic, p));
        s.ledger.acknowledged(id, tp, offset, acks);
        s.acked.insert(name.to_string());
        let max = s.max_acked.entry((topic.to_string(), p)).or_insert(-1);
        *max = (*max).max(offset);
    }

    /// Every successful delivery report of `reports` (to `topic`), acknowledged under `acks`;
    /// returns how many failed.
    pub fn acked_reports(&self, reports: &Reports, topic: &str, acks: Acks) -> usize {
        let reports = reports.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut failed = 0;
        for r in reports {
            match r {
                Ok((key, p, offset)) => self.acked(&key, topic, p, offset, acks),
                Err(_) => failed += 1,
            }
        }
        failed
    }

    /// `reader` read a record with `key` and `value` at `offset`: the harness's producers
    /// write `value-of-{key}` and name it by its key; raw records ([`raw_produce`]) are named
    /// by their value.
    pub fn read(&self, reader: u32, topic: &str, p: i32, offset: i64, key: &str, value: &str) {
        let mut s = self.state();
        let name = match value.strip_prefix("value-of-") {
            Some(of) => {
                if of != key && s.bad_values.len() < 10 {
                    s.bad_values
                        .push(format!("{topic}/{p}@{offset}: {key} holds {value:?}"));
                }
                key
            }
            None => value,
        };
        let (id, tp) = (s.id(name), s.tp(topic, p));
        s.ledger.read(reader, id, tp, offset);
        s.read.insert(name.to_string());
    }

    fn read_message(&self, reader: u32, m: &rdkafka::message::BorrowedMessage<'_>) {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        self.read(reader, m.topic(), m.partition(), m.offset(), &key, &value);
    }

    /// Records read but never acknowledged (acks=0, failed sends whose write landed).
    pub fn unacknowledged_reads(&self) -> Vec<String> {
        let s = self.state();
        s.read.difference(&s.acked).cloned().collect()
    }

    /// Whether record `name` was read anywhere.
    pub fn was_read(&self, name: &str) -> bool {
        self.state().read.contains(name)
    }

    pub fn report(&self) -> LedgerReport {
        self.state().ledger.report()
    }

    /// Prints the test's counts (one line) and panics on any error, with examples.
    pub fn assert_clean(&self, test: &str) -> LedgerReport {
        let r = self.report();
        eprintln!(
            "checker {test}: acked all {} / acks=1 {}, read {}, lost acks=1 {}, errors {} | {}",
            r.acked_all,
            r.acked_one,
            r.read,
            r.lost_acks_one,
            r.errors(),
            r.counts_line()
        );
        let s = self.state();
        let examples: Vec<String> = r.examples.iter().map(|e| s.named(e)).collect();
        assert!(
            r.errors() == 0 && s.bad_values.is_empty(),
            "{test}: the checker found errors: {}\n{}\nbad values: {:?}",
            r.counts_line(),
            examples.join("\n"),
            s.bad_values
        );
        r
    }
}

/// A consumer that reads from the start of each partition with librdkafka.
fn checker_consumer(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "replication-checker")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .unwrap()
}

/// A consumer reading `topic`'s `partitions` from their start on a thread while the faults
/// happen, recording every read into the checker; bounded by a stop flag and
/// [`BACKGROUND_MAX`].
/// An idempotent acks=all producer in a thread: records keyed `{prefix}{n}` with value
/// `value-of-{key}`, round-robin over `partitions` partitions of a topic, one every `pace`,
/// until stopped or `limit` are sent. Its delivery reports are in `reports`.
pub struct Writer {
    pub reports: Reports,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
}

impl Writer {
    pub fn start(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        prefix: &str,
        limit: u64,
        pace: Duration,
    ) -> Writer {
        let reports = Reports::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (bootstrap, reports, stop) = (bootstrap.to_string(), reports.clone(), stop.clone());
            let (topic, prefix) = (topic.to_string(), prefix.to_string());
            std::thread::spawn(move || {
                let p = producer(&bootstrap, &reports);
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) && sent < limit {
                    let key = format!("{prefix}{sent}");
                    let value = format!("value-of-{key}");
                    let record = BaseRecord::to(&topic)
                        .partition((sent % partitions as u64) as i32)
                        .key(&key)
                        .payload(&value);
                    if p.send(record).is_ok() {
                        sent += 1;
                    }
                    p.poll(pace);
                }
                p.flush(Duration::from_secs(90)).unwrap();
                sent
            })
        };
        Writer {
            reports,
            stop,
            thread,
        }
    }

    /// Stops, waits for every delivery report; returns how many records were sent.
    pub fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }

    /// The errors delivery reports carried (none when every error was retriable).
    pub fn errors(&self) -> Vec<String> {
        self.reports
            .0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
            .collect()
    }
}

pub struct Background {
    stop: Arc<AtomicBool>,
    reads: Arc<std::sync::atomic::AtomicU64>,
    thread: Option<JoinHandle<u64>>,
}

impl Background {
    pub fn start(checker: &Checker, bootstrap: &str, topic: &str, partitions: i32) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (checker, bootstrap, topic, flag, counter) = (
            checker.clone(),
            bootstrap.to_string(),
            topic.to_string(),
            stop.clone(),
            reads.clone(),
        );
        let thread = std::thread::spawn(move || {
            let consumer = checker_consumer(&bootstrap);
            let mut tpl = TopicPartitionList::new();
            for p in 0..partitions {
                tpl.add_partition_offset(&topic, p, Offset::Beginning)
                    .unwrap();
            }
            consumer.assign(&tpl).unwrap();
            let started = Instant::now();
            let mut reads = 0;
            while !flag.load(Ordering::Relaxed) && started.elapsed() < BACKGROUND_MAX {
                // Errors while brokers die are the point of the test: librdkafka retries.
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                    checker.read_message(BACKGROUND_READER, &m);
                    reads += 1;
                    counter.store(reads, Ordering::Relaxed);
                }
            }
            reads
        });
        Background {
            stop,
            reads,
            thread: Some(thread),
        }
    }

    /// Stops the consumer once it has read something (it may still be finding a new leader
    /// after the last fault: up to 30 s more); the number of records it read.
    pub fn stop(mut self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.reads.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map_or(0, |t| t.join().expect("the background consumer"))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A full pass over `topic`/`p` through `bootstrap`: waits (at most [`PASS_MAX`]) until the
/// high watermark covers every offset acknowledged so far, then reads from the log start to
/// the high watermark and records the pass (what it covered and found empty); the number of
/// records read and the offset the pass reached (exclusive).
pub fn final_pass(checker: &Checker, bootstrap: &str, topic: &str, p: i32) -> (u64, i64) {
    let consumer = checker_consumer(bootstrap);
    let needed = checker
        .state()
        .max_acked
        .get(&(topic.to_string(), p))
        .map_or(0, |o| o + 1);
    let deadline = Instant::now() + PASS_MAX;
    let mut watermarks = None;
    while Instant::now() < deadline {
        if let Ok(w) = consumer.fetch_watermarks(topic, p, Duration::from_secs(5)) {
            watermarks = Some(w);
            if w.1 >= needed {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (low, high) = watermarks.expect("the partition's watermarks");
    let reader = {
        let mut s = checker.state();
        s.passes += 1;
        s.passes
    };
    let tp = checker.state().tp(topic, p);
    let mut pass = Pass::new(reader, tp, low);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut reads = 0;
    while pass.position() < high && Instant::now() < deadline + PASS_MAX {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            if m.offset() >= pass.position() {
                pass.saw(m.offset());
            }
            checker.read_message(reader, &m);
            reads += 1;
        }
    }
    let end = pass.position();
    checker.state().ledger.add_pass(pass, end);
    (reads, end)
}

/// A plain acks=1 producer without retries (a retried non-idempotent write may land twice,
/// which Kafka allows; without retries each acknowledged record was written once).
pub fn producer_acks1(bootstrap: &str, reports: &Reports) -> BaseProducer<Reports> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "1")
        .set("enable.idempotence", "false")
        .set("message.send.max.retries", "0")
        .set("message.timeout.ms", "20000")
        .set("request.timeout.ms", "5000")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create_with_context(reports.clone())
        .unwrap()
}

/// Sends `keys` to partition `p` and waits (bounded) for their delivery reports, which may be
/// failures (for producers that are allowed to fail).
pub fn send_some(producer: &BaseProducer<Reports>, name: &str, p: i32, keys: &[String]) {
    for k in keys {
        let value = format!("value-of-{k}");
        if producer
            .send(BaseRecord::to(name).partition(p).key(k).payload(&value))
            .is_err()
        {
            producer.poll(Duration::from_millis(50));
        }
        producer.poll(Duration::ZERO);
    }
    let _ = producer.flush(Duration::from_secs(60));
}

pub fn acked(reports: &Reports) -> Vec<(String, i32, i64)> {
    reports
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.clone().expect("every record is acknowledged"))
        .collect()
}

pub fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// The index in `cluster()`'s vector of broker `id` (ids are 1-based).
pub fn index_of(id: i32) -> usize {
    (id - 1) as usize
}

/// Produces `values` to partition `p` with `acks` through a raw connection; the base offset,
/// or the error code.
pub fn raw_produce(
    b: &Broker,
    name: &str,
    p: i32,
    acks: i16,
    values: &[&[u8]],
) -> Result<i64, i16> {
    raw_produce_within(b, name, p, acks, values, 5000)
}

/// [`raw_produce`] with the request's `timeout_ms`.
pub fn raw_produce_within(
    b: &Broker,
    name: &str,
    p: i32,
    acks: i16,
    values: &[&[u8]],
    timeout_ms: i32,
) -> Result<i64, i16> {
    let mut c = Client::connect(&b.bootstrap());
    let req = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic(name))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(p)
                    .with_records(Some(super::client::batch(values))),
            ])]);
    let resp: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    let r = &resp.responses[0].partition_responses[0];
    if r.error_code == 0 {
        Ok(r.base_offset)
    } else {
        Err(r.error_code)
    }
}

/// A follower's fetch as broker `replica_id` with `broker_epoch` sends it (v15): the partition's
/// error code.
pub fn replica_fetch(b: &Broker, topic_id: uuid::Uuid, replica_id: i32, broker_epoch: i64) -> i16 {
    let mut c = Client::connect(&b.bootstrap());
    let req = FetchRequest::default()
        .with_replica_state(
            fetch_request::ReplicaState::default()
                .with_replica_id(BrokerId(replica_id))
                .with_replica_epoch(broker_epoch),
        )
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_last_fetched_epoch(-1)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 15, &req);
    resp.responses[0].partitions[0].error_code
}

pub fn topic_id(b: &Broker, name: &str) -> uuid::Uuid {
    metadata(b)
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == name))
        .map(|t| t.topic_id)
        .expect("topic exists")
}

/// `keel topic describe TOPIC --json` through `b`: partition 0's entry (leader, replicas,
/// ISR, ELR, ...).
pub fn describe(b: &Broker, topic: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["topic", "describe", topic, "--json", "-b", &b.bootstrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["partitions"][0].clone()
}

/// A JSON list of broker ids, sorted.
pub fn ids(v: &Value) -> Vec<i64> {
    let mut out: Vec<i64> = v
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    out.sort();
    out
}
