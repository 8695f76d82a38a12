//! Fetching from the closest replica (KIP-392) on real clusters: three brokers in racks a, b
//! and c with `replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`.
//! A leader answers a consumer's Fetch naming rack b with `preferred_read_replica` = the
//! rack-b follower and no records; that follower serves it (and long-polls on its own high
//! watermark); a librdkafka consumer with `client.rack=b` reads everything from it (the
//! brokers' per-shard fetch byte counters in /metrics show who served), then keeps reading,
//! every record exactly once, when that follower is killed. A follower cut off from its
//! leader (network namespaces, as replication_netns.rs) leaves the ISR and sends consumers
//! back to the leader. Without the selector the leader serves everyone itself.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::client::{fetch_request, values, Client};
use common::netns::Net;
use common::replicated::*;
use common::Broker;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const RACK_AWARE: [&str; 2] = [
    "--set",
    "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector",
];
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// A consumer's Fetch of partition 0 of `name` at `offset` (v12: topics by name, `rack_id`);
/// the partition's answer.
fn consumer_fetch(
    b: &Broker,
    version: i16,
    name: &str,
    offset: i64,
    rack: &str,
    max_wait_ms: i32,
) -> PartitionData {
    let mut c = Client::connect(&b.bootstrap());
    let mut req = fetch_request(name, &[(0, offset, 1 << 20)], max_wait_ms, 1, 1 << 20);
    if version >= 11 {
        req = req.with_rack_id(StrBytes::from_string(rack.to_string()));
    }
    let resp: FetchResponse = c.send(ApiKey::Fetch, version, &req);
    resp.responses[0].partitions[0].clone()
}

/// Sum over shards of a counter family in `b`'s /metrics.
fn counter(b: &Broker, name: &str) -> u64 {
    b.metric_by_shard(name).iter().sum()
}

/// The size in bytes of `name`'s partition 0 on `b` (its log: what a reader from offset 0
/// fetches, batch for batch).
fn partition_bytes(b: &Broker, name: &str) -> u64 {
    let prefix = "keel_partition_size_bytes{";
    b.metrics()
        .lines()
        .filter(|l| l.starts_with(prefix) && l.contains(&format!("topic=\"{name}\"")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// A librdkafka consumer with `client.rack` reading partition 0 of a topic from its start on
/// a thread: every record goes into the checker and into its own list of (offset, key), to
/// show that this one consumer read each offset once.
struct RackConsumer {
    stop: Arc<AtomicBool>,
    read: Arc<Mutex<Vec<(i64, String)>>>,
    thread: Option<JoinHandle<()>>,
}

impl RackConsumer {
    fn start(checker: &Checker, bootstrap: &str, name: &str, rack: &str) -> RackConsumer {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "follower-fetch")
            .set("enable.auto.commit", "false")
            .set("client.rack", rack)
            .set("fetch.wait.max.ms", "100")
            .set("fetch.error.backoff.ms", "100")
            .set("topic.metadata.refresh.interval.ms", "1000")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(name, 0, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let read = Arc::new(Mutex::new(Vec::new()));
        let (flag, list, checker) = (stop.clone(), read.clone(), checker.clone());
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(120) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                    let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
                    let value = String::from_utf8_lossy(m.payload().unwrap_or_default());
                    checker.read(BACKGROUND_READER, m.topic(), 0, m.offset(), &key, &value);
                    list.lock().unwrap().push((m.offset(), key));
                }
            }
        });
        RackConsumer {
            stop,
            read,
            thread: Some(thread),
        }
    }

    /// Waits (bounded) until it has read `key`.
    fn wait_for(&self, key: &str, timeout: Duration) {
        wait_until(&format!("the consumer read {key}"), timeout, || {
            self.read.lock().unwrap().iter().any(|(_, k)| k == key)
        });
    }

    fn stop(mut self) -> Vec<(i64, String)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.read.lock().unwrap().clone()
    }
}

impl Drop for RackConsumer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_rack_b_consumer_reads_from_the_rack_b_follower_and_exactly_once_when_it_dies() {
    let _serial = serial();
    let mut nodes = cluster_in_racks(&["a", "b", "c"], &RACK_AWARE);
    let (leader, near) = (&nodes[0], &nodes[1]);
    create_assigned(leader, "near", &[vec![1, 2, 3]], 2);
    wait_for_full_isr(leader, "near", 0);
    let all: String = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let checker = Checker::default();
    let reports = Reports::default();
    let producer = Arc::new(producer(&all, &reports));
    send_all(&producer, "near", 0, &keys("before", 300));
    assert_eq!(checker.acked_reports(&reports, "near", Acks::All), 0);

    // The protocol, raw. The leader names the rack-b follower for a rack-b client, with the
    // partition's offsets and no records (Kafka's answer), and serves every other client.
    let named = consumer_fetch(leader, 12, "near", 0, "b", 0);
    assert_eq!(
        (named.error_code, named.preferred_read_replica.0),
        (0, 2),
        "{named:?}"
    );
    assert_eq!(named.records.as_ref().map_or(0, |r| r.len()), 0);
    assert_eq!((named.high_watermark, named.log_start_offset), (300, 0));
    for (version, rack) in [(12, "a"), (12, ""), (12, "z"), (10, "b")] {
        let served = consumer_fetch(leader, version, "near", 0, rack, 0);
        assert_eq!(
            (served.error_code, served.preferred_read_replica.0),
            (0, -1),
            "v{version} rack {rack:?}"
        );
        assert_eq!(values(&served.records).first().map(|(o, _)| *o), Some(0));
    }
    // The follower serves a consumer's v11+ fetch up to its high watermark (which it learns
    // from its next fetch's answer: within replica.fetch.wait.max.ms, as in Kafka since
    // KAFKA-9952); before v11 a consumer may fetch from the leader only.
    wait_until(
        "the follower's high watermark is 300",
        Duration::from_secs(10),
        || consumer_fetch(near, 12, "near", 0, "b", 0).high_watermark == 300,
    );
    let from_follower = consumer_fetch(near, 12, "near", 0, "b", 0);
    assert_eq!(
        (
            from_follower.error_code,
            from_follower.preferred_read_replica.0,
            from_follower.high_watermark
        ),
        (0, -1, 300)
    );
    assert_eq!(values(&from_follower.records).len(), 300);
    assert_eq!(
        consumer_fetch(near, 10, "near", 0, "", 0).error_code,
        NOT_LEADER_OR_FOLLOWER
    );
    // A follower's long poll wakes when its high watermark moves.
    let poll = {
        let near = near.bootstrap();
        std::thread::spawn(move || {
            let mut c = Client::connect(&near);
            let req = fetch_request("near", &[(0, 300, 1 << 20)], 10_000, 1, 1 << 20)
                .with_rack_id(StrBytes::from_static_str("b"));
            let started = Instant::now();
            let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
            (started.elapsed(), resp.responses[0].partitions[0].clone())
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let offset = raw_produce(leader, "near", 0, -1, &[b"raw-long-poll"]).unwrap();
    checker.acked("raw-long-poll", "near", 0, offset, Acks::All);
    let (waited, woken) = poll.join().unwrap();
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    assert_eq!(
        values(&woken.records),
        vec![(300, b"raw-long-poll".to_vec())]
    );

    // librdkafka with client.rack=b: the leader sends it to broker 2, which serves it all.
    let before: Vec<(u64, u64)> = nodes
        .iter()
        .map(|b| {
            (
                counter(b, "keel_fetch_bytes_total"),
                counter(b, "keel_fetch_follower_bytes_total"),
            )
        })
        .collect();
    let named_before = counter(leader, "keel_fetch_preferred_read_replica_total");
    let consumer = RackConsumer::start(&checker, &all, "near", "b");
    // The raw record at offset 300 (key k0) is the last.
    consumer.wait_for("k0", Duration::from_secs(30));
    let size = partition_bytes(near, "near");
    let grown: Vec<(u64, u64)> = nodes
        .iter()
        .zip(&before)
        .map(|(b, (f, ff))| {
            (
                counter(b, "keel_fetch_bytes_total") - f,
                counter(b, "keel_fetch_follower_bytes_total") - ff,
            )
        })
        .collect();
    eprintln!("partition {size} bytes; consumer fetch bytes grown (all, as follower) by broker: {grown:?}");
    assert!(size > 300 * 20, "{size}");
    // The rack-b follower served the whole log once (librdkafka does not re-fetch what it
    // has), as a follower; the leader and the rack-c broker served no record bytes.
    assert!(
        grown[1].1 >= size && grown[1].1 < 2 * size && grown[1].0 == grown[1].1,
        "{grown:?}"
    );
    assert_eq!((grown[0], grown[2]), ((0, 0), (0, 0)), "{grown:?}");
    assert!(counter(leader, "keel_fetch_preferred_read_replica_total") > named_before);

    // Kill the rack-b follower while a producer writes: the consumer goes back to the leader
    // and reads on, every acknowledged record once.
    let writer = {
        let producer = producer.clone();
        std::thread::spawn(move || {
            for k in keys("during", 300) {
                let value = format!("value-of-{k}");
                while producer
                    .send(BaseRecord::to("near").partition(0).key(&k).payload(&value))
                    .is_err()
                {
                    producer.poll(Duration::from_millis(50));
                }
                producer.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(10));
            }
            producer.flush(Duration::from_secs(60)).unwrap();
        })
    };
    std::thread::sleep(Duration::from_millis(1000));
    nodes[1].kill9();
    writer.join().unwrap();
    let failed = checker.acked_reports(&reports, "near", Acks::All);
    assert_eq!(failed, 0, "every write is acknowledged");
    let leader = &nodes[0];
    consumer.wait_for("during-299", Duration::from_secs(40));
    let read = consumer.stop();
    let offsets: Vec<i64> = read.iter().map(|(o, _)| *o).collect();
    let expected: Vec<i64> = (0..offsets.len() as i64).collect();
    assert_eq!(
        offsets, expected,
        "the consumer read each offset once, in order"
    );
    assert_eq!(offsets.len(), 601, "300 before, the raw record, 300 during");
    assert!(counter(leader, "keel_fetch_bytes_total") > 0);
    final_pass(&checker, &leader.bootstrap(), "near", 0);
    checker.assert_clean("follower_fetch");
}

#[test]
fn without_the_selector_the_leader_serves_a_rack_b_consumer_itself() {
    let _serial = serial();
    let nodes = cluster_in_racks(&["a", "b"], &[]);
    create_assigned(&nodes[0], "plain", &[vec![1, 2]], 2);
    wait_until("both replicas in the ISR", Duration::from_secs(30), || {
        partition(&nodes[0], "plain", 0).is_some_and(|(l, _, _, isr)| l == 1 && isr.len() == 2)
    });
    let offset = raw_produce(&nodes[0], "plain", 0, -1, &[b"one", b"two"]).unwrap();
    assert_eq!(offset, 0);
    let served = consumer_fetch(&nodes[0], 12, "plain", 0, "b", 0);
    assert_eq!(
        (served.error_code, served.preferred_read_replica.0),
        (0, -1)
    );
    assert_eq!(values(&served.records).len(), 2);
    assert_eq!(
        counter(&nodes[0], "keel_fetch_preferred_read_replica_total"),
        0
    );
    // A follower still serves a v11+ consumer that comes to it (Kafka's rule, whatever the
    // selector), once its high watermark covers the records.
    wait_until(
        "the follower's high watermark is 2",
        Duration::from_secs(10),
        || consumer_fetch(&nodes[1], 12, "plain", 0, "", 0).high_watermark == 2,
    );
    let from_follower = consumer_fetch(&nodes[1], 12, "plain", 0, "", 0);
    assert_eq!(
        values(&from_follower.records),
        vec![(0, b"one".to_vec()), (1, b"two".to_vec())]
    );
    // read_committed on the follower: up to its last stable offset, with the (here no)
    // aborted transactions; past its log end, Kafka's OFFSET_OUT_OF_RANGE.
    let mut c = Client::connect(&nodes[1].bootstrap());
    let req = fetch_request("plain", &[(0, 0, 1 << 20)], 0, 1, 1 << 20).with_isolation_level(1);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    let committed = &resp.responses[0].partitions[0];
    assert_eq!(
        (
            committed.error_code,
            committed.last_stable_offset,
            committed.aborted_transactions.as_ref().map(Vec::len)
        ),
        (0, 2, Some(0))
    );
    assert_eq!(values(&committed.records).len(), 2);
    let past = consumer_fetch(&nodes[1], 12, "plain", 3, "", 0);
    assert_eq!(
        (past.error_code, past.high_watermark),
        (1, 2),
        "OFFSET_OUT_OF_RANGE"
    );
}

#[test]
fn a_follower_cut_off_from_its_leader_sends_consumers_back_to_the_leader() {
    let _serial = serial();
    let mut net = Net::create(3);
    let nodes = net_cluster_in_racks(&net, &["a", "b", "c"], &RACK_AWARE);
    // The cut must leave the metadata quorum whole: the partition's leader and the follower
    // cut from it are the two brokers that do not lead the quorum, so each still reaches the
    // quorum leader (the follower learns it left the ISR; neither starts an election).
    let mut controller = -1;
    wait_until("a quorum leader", Duration::from_secs(10), || {
        controller = quorum_leader(&nodes[0]);
        controller > 0
    });
    let others: Vec<i32> = (1..=3).filter(|id| *id != controller).collect();
    let (l, f) = (others[0], others[1]);
    create_assigned(&nodes[0], "cut", &[vec![l, f, controller]], 2);
    wait_for_full_isr(&nodes[0], "cut", 0);
    let (leader, follower) = (&nodes[index_of(l)], &nodes[index_of(f)]);
    let rack = ["a", "b", "c"][index_of(f)];
    let all: String = nodes
        .iter()
        .map(|b| b.bootstrap())
        .collect::<Vec<_>>()
        .join(",");
    let checker = Checker::default();
    let reports = Reports::default();
    let producer = producer(&all, &reports);
    send_all(&producer, "cut", 0, &keys("first", 100));
    // A consumer in the follower's rack reads from the follower.
    let consumer = RackConsumer::start(&checker, &all, "cut", rack);
    consumer.wait_for("first-99", Duration::from_secs(30));
    assert!(counter(follower, "keel_fetch_follower_bytes_total") > 0);

    net.cut(index_of(f), &[index_of(l)]);
    // The leader drops the follower from the ISR (replica.lag.time.max.ms 3 s); the follower
    // learns it from the image the quorum leader sends it.
    wait_until(
        "the follower knows it left the ISR",
        Duration::from_secs(30),
        || partition(follower, "cut", 0).is_some_and(|(_, _, _, isr)| !isr.contains(&f)),
    );
    let redirected = consumer_fetch(follower, 12, "cut", 0, rack, 0);
    assert_eq!(
        (
            redirected.error_code,
            redirected.preferred_read_replica.0,
            redirected.records.as_ref().map_or(0, |r| r.len())
        ),
        (0, l, 0),
        "{redirected:?}"
    );
    // Records written meanwhile reach the consumer through the leader.
    send_all(&producer, "cut", 0, &keys("second", 100));
    assert_eq!(checker.acked_reports(&reports, "cut", Acks::All), 0);
    consumer.wait_for("second-99", Duration::from_secs(30));
    assert!(counter(follower, "keel_fetch_follower_redirects_total") >= 1);
    let read = consumer.stop();
    let offsets: Vec<i64> = read.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (0..200).collect::<Vec<i64>>());

    // Healed, the follower rejoins the ISR and serves again.
    net.heal();
    wait_until(
        "the follower is back in the ISR",
        Duration::from_secs(30),
        || partition(follower, "cut", 0).is_some_and(|(_, _, _, isr)| isr.contains(&f)),
    );
    wait_until("the follower serves again", Duration::from_secs(10), || {
        let d = consumer_fetch(follower, 12, "cut", 0, rack, 0);
        d.preferred_read_replica.0 == -1 && !values(&d.records).is_empty()
    });
    final_pass(&checker, &leader.bootstrap(), "cut", 0);
    checker.assert_clean("follower_fetch_cut");
}
