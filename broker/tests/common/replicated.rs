//! The harness the replication tests share: a cluster of real `keel` voters (on loopback or
//! in network namespaces), librdkafka producers that record every acknowledgement, readers,
//! and raw requests a follower or a client would send.

use std::collections::BTreeMap;
use std::sync::Mutex;
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
    let controller_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let hosts = vec!["127.0.0.1".to_string(); n];
    start_voters(&hosts, &controller_ports, None, extra, |_| {})
}

/// Starts one voter in each of `net`'s namespaces (node `i + 1` at `net.ip(i)`), all on the
/// same ports (each namespace has its own), and waits until all serve.
pub fn cluster_in(net: &Net, extra: &[&str]) -> Vec<Broker> {
    let n = net.len();
    let hosts: Vec<String> = (0..n).map(|i| net.ip(i)).collect();
    start_voters(&hosts, &vec![9093; n], Some(net), extra, |b| {
        b.port = 9092;
        b.admin_port = 9644;
    })
}

fn start_voters(
    hosts: &[String],
    controller_ports: &[u16],
    net: Option<&Net>,
    extra: &[&str],
    adjust: impl Fn(&mut Broker),
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
            args.extend_from_slice(extra);
            let mut b = Broker::prepare(&args);
            b.host = hosts[i].clone();
            b.netns = net.map(|net| net.namespace(i).to_string());
            adjust(&mut b);
            b
        })
        .collect();
    let starts: Vec<usize> = nodes.iter_mut().map(|b| b.spawn_nowait()).collect();
    for (b, s) in nodes.iter_mut().zip(starts) {
        b.wait_serving(s);
    }
    nodes
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
    let mut c = Client::connect(&b.bootstrap());
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(partitions)
            .with_replication_factor(rf)
            .with_configs(vec![
                create_topics_request::CreatableTopicConfig::default()
                    .with_name("min.insync.replicas".into())
                    .with_value(Some(min_isr.to_string().into())),
            ])]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0]);
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

/// The checker: every acknowledged record is read back at its offset with its value, no
/// offset holds two records, no key appears twice.
pub fn check_acknowledged(acked: &[(String, i32, i64)], read: &BTreeMap<i64, (String, String)>) {
    let mut keys = std::collections::BTreeSet::new();
    for (k, v) in read.values() {
        assert!(keys.insert(k.clone()), "key {k} read twice");
        assert_eq!(*v, format!("value-of-{k}"));
    }
    for (k, _, o) in acked {
        if *o < 0 {
            // librdkafka acknowledges a retried batch it learns was persisted without its
            // offset (RD_KAFKA_OFFSET_INVALID): it must have been read, once, somewhere.
            assert!(
                keys.contains(k),
                "acknowledged record {k} (offset unknown) was never read"
            );
            continue;
        }
        match read.get(o) {
            Some((rk, _)) => assert_eq!(rk, k, "offset {o} holds {rk}, acknowledged as {k}"),
            None => panic!("acknowledged record {k} at offset {o} was never read"),
        }
    }
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
