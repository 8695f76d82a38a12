//! Transactions across brokers: on a three-node cluster, a librdkafka transactional producer
//! writes to partitions led by every broker, so the coordinator must have the other brokers
//! write the markers of their partitions (inter-broker WriteTxnMarkers). A committed, an
//! aborted and another committed transaction: a `read_committed` consumer reads exactly the
//! committed records on every partition (the last one is visible only if the abort's markers
//! reached every partition too), a `read_uncommitted` one reads all three, and the coordinator
//! describes each transaction as complete.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::client::{create_topic, Client};
use common::{free_port, Broker};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "spanning";
const PARTITIONS: i32 = 6;
const TXN_ID: &str = "spanning-txn";
const RECORDS_PER_PARTITION: usize = 3;

/// Starts `n` voters (node ids 1..=n) and waits until all serve.
fn cluster(n: usize) -> Vec<Broker> {
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
            Broker::prepare(&[
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
            ])
        })
        .collect();
    let starts: Vec<usize> = nodes.iter_mut().map(|b| b.spawn_nowait()).collect();
    for (b, s) in nodes.iter_mut().zip(starts) {
        b.wait_serving(s);
    }
    nodes
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metadata(b: &Broker) -> MetadataResponse {
    Client::connect(&b.bootstrap()).send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false),
    )
}

/// The leader of each partition of `name` as `b` reports it (empty if unknown).
fn leaders(b: &Broker, name: &str) -> Vec<i32> {
    metadata(b)
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == name))
        .map(|t| {
            let mut ps: Vec<(i32, i32)> = t
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.leader_id.0))
                .collect();
            ps.sort();
            ps.into_iter().map(|(_, l)| l).collect()
        })
        .unwrap_or_default()
}

/// DescribeTransactions of `TXN_ID` asked of every node: (the coordinator's node id, its
/// state), or None while no node answers as its coordinator.
fn describe(nodes: &[Broker]) -> Option<(usize, String)> {
    for (i, b) in nodes.iter().enumerate() {
        let r: DescribeTransactionsResponse = Client::connect(&b.bootstrap()).send(
            ApiKey::DescribeTransactions,
            0,
            &DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(StrBytes::from_static_str(TXN_ID))]),
        );
        let s = &r.transaction_states[0];
        if s.error_code == 0 {
            return Some((i + 1, s.transaction_state.to_string()));
        }
    }
    None
}

/// Waits until the coordinator describes the transaction in `state`; the coordinator's id.
fn wait_state(nodes: &[Broker], state: &str) -> usize {
    let mut last = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        last = describe(nodes).or(last);
        if let Some((node, s)) = &last {
            if s == state {
                return *node;
            }
        }
        assert!(
            Instant::now() < deadline,
            "transaction not {state}: last described as {last:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn key(txn: &str, partition: i32, i: usize) -> String {
    format!("{txn}-p{partition}-{i}")
}

/// One transaction with `RECORDS_PER_PARTITION` records on every partition, committed or
/// aborted.
fn transaction(p: &BaseProducer, txn: &str, commit: bool) {
    p.begin_transaction().unwrap();
    for partition in 0..PARTITIONS {
        for i in 0..RECORDS_PER_PARTITION {
            let k = key(txn, partition, i);
            p.send(
                BaseRecord::<str, str>::to(TOPIC)
                    .partition(partition)
                    .key(&k)
                    .payload(&k),
            )
            .unwrap_or_else(|(e, _)| panic!("cannot enqueue {k}: {e}"));
        }
    }
    p.flush(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{txn} not delivered: {e}"));
    if commit {
        p.commit_transaction(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("commit of {txn}: {e}"));
    } else {
        p.abort_transaction(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("abort of {txn}: {e}"));
    }
}

/// The keys a consumer at `isolation` reads from the start of every partition up to the end
/// it is told of (the last stable offset for read_committed), by partition.
fn read_to_eof(bootstrap: &str, isolation: &str) -> BTreeMap<i32, Vec<String>> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("reader-{isolation}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out: BTreeMap<i32, Vec<String>> = (0..PARTITIONS).map(|p| (p, Vec::new())).collect();
    let mut at_end = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while at_end.len() < PARTITIONS as usize {
        assert!(
            Instant::now() < deadline,
            "{isolation}: no end reached on {:?}; read so far {out:?}",
            (0..PARTITIONS)
                .filter(|p| !at_end.contains(p))
                .collect::<Vec<_>>()
        );
        match c.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                let k = String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap();
                out.get_mut(&m.partition()).unwrap().push(k);
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("{isolation}: {e}"),
        }
    }
    out
}

/// WriteTxnMarkers requests `b` received, all shards.
fn write_txn_markers_requests(b: &Broker) -> u64 {
    b.metrics()
        .lines()
        .filter(|l| l.starts_with("keel_requests_total{") && l.contains("api=\"WriteTxnMarkers\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The keys of transactions `txns` on `partition`, in the order they were written.
fn keys_of(txns: &[&str], partition: i32) -> Vec<String> {
    txns.iter()
        .flat_map(|t| (0..RECORDS_PER_PARTITION).map(move |i| key(t, partition, i)))
        .collect()
}

#[test]
fn markers_reach_partitions_led_by_every_broker() {
    let nodes = cluster(3);
    for b in &nodes {
        wait_until("all brokers are listed", Duration::from_secs(10), || {
            metadata(b).brokers.len() == 3
        });
    }
    create_topic(
        &mut Client::connect(&nodes[0].bootstrap()),
        TOPIC,
        PARTITIONS,
    );
    for b in &nodes {
        wait_until("the topic is visible", Duration::from_secs(10), || {
            leaders(b, TOPIC).len() == PARTITIONS as usize
        });
    }
    let led = leaders(&nodes[0], TOPIC);
    assert_eq!(
        led.iter().copied().collect::<BTreeSet<i32>>(),
        BTreeSet::from([1, 2, 3]),
        "partitions led by every broker: {led:?}"
    );

    let bootstrap = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("transactional.id", TXN_ID)
        .set("linger.ms", "5")
        .set("retry.backoff.ms", "20")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "200")
        .create()
        .unwrap();
    p.init_transactions(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("init_transactions: {e}"));
    let coordinator = wait_state(&nodes, "Empty");
    let remote: Vec<usize> = (0..PARTITIONS as usize)
        .filter(|&i| led[i] != coordinator as i32)
        .collect();
    assert!(
        remote.len() >= 2,
        "coordinator {coordinator}, leaders {led:?}"
    );
    eprintln!("coordinator: node {coordinator}; partition leaders {led:?}");

    let started = Instant::now();
    transaction(&p, "first", true);
    assert_eq!(wait_state(&nodes, "CompleteCommit"), coordinator);
    eprintln!("first commit complete after {:?}", started.elapsed());
    transaction(&p, "aborted", false);
    assert_eq!(wait_state(&nodes, "CompleteAbort"), coordinator);
    transaction(&p, "second", true);
    assert_eq!(wait_state(&nodes, "CompleteCommit"), coordinator);

    // read_committed ends at the last stable offset: "second" is there only if every marker
    // of the transactions before it, commit and abort, was written on that partition.
    let committed = read_to_eof(&nodes[2].bootstrap(), "read_committed");
    for partition in 0..PARTITIONS {
        assert_eq!(
            committed[&partition],
            keys_of(&["first", "second"], partition),
            "partition {partition} (leader {}), read_committed",
            led[partition as usize]
        );
    }
    let uncommitted = read_to_eof(&nodes[1].bootstrap(), "read_uncommitted");
    for partition in 0..PARTITIONS {
        assert_eq!(
            uncommitted[&partition],
            keys_of(&["first", "aborted", "second"], partition),
            "partition {partition} (leader {}), read_uncommitted",
            led[partition as usize]
        );
    }
    // The other brokers got their markers over the wire: one WriteTxnMarkers request per
    // transaction each (more only if one was retried); the coordinator sent none to itself.
    for (i, b) in nodes.iter().enumerate() {
        let requests = write_txn_markers_requests(b);
        if i + 1 == coordinator {
            assert_eq!(requests, 0, "node {}", i + 1);
        } else if led.contains(&(i as i32 + 1)) {
            assert!(requests >= 3, "node {}: {requests} requests", i + 1);
        }
    }
    // The coordinator was never told that a newer one owns the transaction.
    let log = nodes[coordinator - 1].log_text();
    assert!(
        !log.contains("coordinator fenced while writing markers"),
        "{log}"
    );
}
