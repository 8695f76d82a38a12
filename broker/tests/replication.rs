//! Partition replication across real `keel` processes on loopback: three brokers (each a
//! voter of the metadata quorum), topics with replication factor 3 and min.insync.replicas 2,
//! librdkafka producers (idempotent acks=all) and consumers. Faults are kill -9 and SIGSTOP;
//! every acknowledged record is checked against what a consumer reads afterwards (content,
//! partition and offset).
//!
//! The tests share the machine's cores, so they run one at a time (a global lock); every
//! wait is bounded.

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::client::{topic, Client};
use common::{free_port, Broker};
use kafka_protocol::messages::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

type Report = Result<(String, i32, i64), rdkafka::error::KafkaError>;

/// Collects delivery reports: (key, partition, offset) of each acknowledged record.
#[derive(Clone, Default)]
struct Reports(std::sync::Arc<std::sync::Mutex<Vec<Report>>>);

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

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts `n` voters (node ids 1..=n) with short replication timeouts and waits until all
/// serve.
fn cluster(n: usize, extra: &[&str]) -> Vec<Broker> {
    let controller_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let quorum = controller_ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let mut nodes: Vec<Broker> = (0..n)
        .map(|i| {
            let id = (i + 1).to_string();
            let listen = format!("127.0.0.1:{}", controller_ports[i]);
            let mut args = vec![
                "--node-id",
                &id,
                "--controller-quorum",
                &quorum,
                "--controller-listen",
                &listen,
                "--set",
                "broker.session.timeout.ms=3000",
                "--set",
                "broker.heartbeat.interval.ms=500",
                "--set",
                "replica.lag.time.max.ms=3000",
                "--set",
                "replica.fetch.backoff.ms=200",
            ];
            args.extend_from_slice(extra);
            Broker::prepare(&args)
        })
        .collect();
    let starts: Vec<usize> = nodes.iter_mut().map(|b| b.spawn_nowait()).collect();
    for (b, s) in nodes.iter_mut().zip(starts) {
        b.wait_serving(s);
    }
    nodes
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out after {timeout:?} waiting until {what}");
}

fn metadata(b: &Broker) -> MetadataResponse {
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
fn partition(b: &Broker, name: &str, p: i32) -> Option<(i32, i32, Vec<i32>, Vec<i32>)> {
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

fn create(b: &Broker, name: &str, partitions: i32, rf: i16, min_isr: i32) {
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

fn producer(bootstrap: &str, reports: &Reports) -> BaseProducer<Reports> {
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
fn send_all(producer: &BaseProducer<Reports>, name: &str, p: i32, keys: &[String]) {
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

/// Reads partition `p` of `name` from the beginning through `bootstrap` until `count`
/// records came back or 30 s passed: offset -> (key, value).
fn read_all(bootstrap: &str, name: &str, p: i32, count: usize) -> BTreeMap<i64, (String, String)> {
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
    while got.len() < count && Instant::now() < deadline {
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
fn check_acknowledged(acked: &[(String, i32, i64)], read: &BTreeMap<i64, (String, String)>) {
    let mut keys = std::collections::BTreeSet::new();
    for (k, v) in read.values() {
        assert!(keys.insert(k.clone()), "key {k} read twice");
        assert_eq!(*v, format!("value-of-{k}"));
    }
    for (k, _, o) in acked {
        match read.get(o) {
            Some((rk, _)) => assert_eq!(rk, k, "offset {o} holds {rk}, acknowledged as {k}"),
            None => panic!("acknowledged record {k} at offset {o} was never read"),
        }
    }
}

fn acked(reports: &Reports) -> Vec<(String, i32, i64)> {
    reports
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.clone().expect("every record is acknowledged"))
        .collect()
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// The index in `cluster()`'s vector of broker `id` (ids are 1-based).
fn index_of(id: i32) -> usize {
    (id - 1) as usize
}

#[test]
fn acks_all_records_survive_the_leader_being_killed() {
    let _serial = serial();
    let mut nodes = cluster(3, &[]);
    create(&nodes[0], "replicated", 1, 3, 2);
    wait_until(
        "the ISR has all three replicas",
        Duration::from_secs(20),
        || {
            partition(&nodes[0], "replicated", 0)
                .is_some_and(|(l, _, r, isr)| l > 0 && r.len() == 3 && isr.len() == 3)
        },
    );
    let reports = Reports::default();
    let all: String = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let p = producer(&all, &reports);
    send_all(&p, "replicated", 0, &keys("before", 300));
    let (leader, epoch, _, _) = partition(&nodes[0], "replicated", 0).unwrap();
    // Every acknowledged record is on the followers before the leader dies: kill it.
    nodes[index_of(leader)].kill9();
    let survivor = (index_of(leader) + 1) % 3;
    let elected = wait_until("a new leader is elected", Duration::from_secs(20), || {
        partition(&nodes[survivor], "replicated", 0)
            .is_some_and(|(l, e, _, _)| l > 0 && l != leader && e > epoch)
    });
    eprintln!("new leader elected {elected:?} after kill -9 (session timeout 3 s)");
    send_all(&p, "replicated", 0, &keys("after", 100));
    let acked = acked(&reports);
    assert_eq!(acked.len(), 400);
    let read = read_all(&nodes[survivor].bootstrap(), "replicated", 0, 400);
    check_acknowledged(&acked, &read);
    assert_eq!(read.len(), 400, "records read: {}", read.len());
    // The old leader comes back as a follower, catches up and rejoins the ISR.
    nodes[index_of(leader)].restart_after_stop();
    wait_until(
        "the old leader rejoins the ISR",
        Duration::from_secs(30),
        || {
            partition(&nodes[survivor], "replicated", 0)
                .is_some_and(|(l, _, _, isr)| l != leader && isr.len() == 3)
        },
    );
}

#[test]
fn a_stopped_follower_leaves_the_isr_and_rejoins() {
    let _serial = serial();
    let nodes = cluster(3, &[]);
    create(&nodes[0], "isr", 1, 3, 2);
    wait_until(
        "the ISR has all three replicas",
        Duration::from_secs(20),
        || partition(&nodes[0], "isr", 0).is_some_and(|(l, _, _, isr)| l > 0 && isr.len() == 3),
    );
    let (leader, _, replicas, _) = partition(&nodes[0], "isr", 0).unwrap();
    // Pause a follower that is not the metadata quorum's leader's only peer... any follower.
    let follower = *replicas.iter().find(|r| **r != leader).unwrap();
    let watcher = index_of(leader);
    nodes[index_of(follower)].signal("STOP");
    let reports = Reports::default();
    let p = producer(&nodes[watcher].bootstrap(), &reports);
    // acks=all goes on with two of three once the stopped follower is out of the ISR.
    send_all(&p, "isr", 0, &keys("paused", 200));
    wait_until(
        "the stopped follower leaves the ISR",
        Duration::from_secs(30),
        || {
            partition(&nodes[watcher], "isr", 0)
                .is_some_and(|(_, _, _, isr)| !isr.contains(&follower) && isr.len() == 2)
        },
    );
    nodes[index_of(follower)].signal("CONT");
    wait_until(
        "the follower rejoins the ISR",
        Duration::from_secs(30),
        || {
            partition(&nodes[watcher], "isr", 0)
                .is_some_and(|(_, _, _, isr)| isr.contains(&follower))
        },
    );
    let acked = acked(&reports);
    assert_eq!(acked.len(), 200);
    let read = read_all(&nodes[watcher].bootstrap(), "isr", 0, 200);
    check_acknowledged(&acked, &read);
}
