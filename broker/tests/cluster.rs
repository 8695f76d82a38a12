//! A three-node cluster on loopback: three `keel` processes, each a voter of the metadata
//! quorum, with their own ports and data dirs. Topics created through any node are visible
//! on all; partitions are led by different brokers and real clients produce to and fetch from
//! the right leaders; the controller fails over; a paused voter neither blocks the quorum nor
//! loses its log; fenced brokers lose and regain leadership; a full restart keeps everything.
//!
//! The tests share the machine's cores, so they run one at a time (a global lock).

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::client::{batch, create_topic, topic, values, Client};
use common::{free_port, Broker};
use kafka_protocol::messages::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

type Report = Result<(i32, i64), rdkafka::error::KafkaError>;

/// Collects delivery reports.
#[derive(Clone, Default)]
struct Reports(std::sync::Arc<std::sync::Mutex<Vec<Report>>>);

impl rdkafka::ClientContext for Reports {}

impl rdkafka::producer::ProducerContext for Reports {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        let r = result
            .as_ref()
            .map(|m| (m.partition(), m.offset()))
            .map_err(|(e, _)| e.clone());
        self.0.lock().unwrap().push(r);
    }
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

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

/// topic -> (id, [(leader, leader_epoch)]) as `b` reports it.
fn topics(b: &Broker) -> BTreeMap<String, (uuid::Uuid, Vec<(i32, i32)>)> {
    metadata(b)
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().unwrap().to_string(),
                (
                    t.topic_id,
                    t.partitions
                        .iter()
                        .map(|p| (p.leader_id.0, p.leader_epoch))
                        .collect(),
                ),
            )
        })
        .collect()
}

fn quorum(b: &Broker) -> serde_json::Value {
    serde_json::from_str(&b.admin_get("/quorum")).expect("quorum JSON")
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

fn create(
    b: &Broker,
    name: &str,
    partitions: i32,
    rf: i16,
) -> create_topics_response::CreatableTopicResult {
    let mut c = Client::connect(&b.bootstrap());
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(partitions)
            .with_replication_factor(rf)]);
    let mut resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
    resp.topics.remove(0)
}

fn leader_index(nodes: &[Broker]) -> usize {
    let mut leader = None;
    wait_until("the quorum has a leader", Duration::from_secs(20), || {
        leader = nodes
            .iter()
            .filter(|b| b.running())
            .find_map(|b| quorum(b)["leader"].as_u64());
        leader.is_some()
    });
    leader.unwrap() as usize - 1
}

#[test]
fn three_nodes_share_metadata_and_clients_use_the_right_leaders() {
    let _serial = serial();
    let nodes = cluster(3);
    // Every node lists every broker.
    for b in &nodes {
        wait_until("all brokers are listed", Duration::from_secs(10), || {
            metadata(b).brokers.len() == 3
        });
        let ports: Vec<i32> = metadata(b).brokers.iter().map(|x| x.port).collect();
        for n in &nodes {
            assert!(ports.contains(&i32::from(n.port)), "{ports:?}");
        }
    }
    // Created through node 2, visible on all, leaders spread evenly.
    create_topic(&mut Client::connect(&nodes[1].bootstrap()), "spread", 6);
    for b in &nodes {
        wait_until("the topic is visible", Duration::from_secs(10), || {
            topics(b).contains_key("spread")
        });
        let (_, parts) = &topics(b)["spread"];
        let mut led = BTreeMap::new();
        for (leader, epoch) in parts {
            *led.entry(*leader).or_insert(0) += 1;
            assert_eq!(*epoch, 0);
        }
        assert_eq!(led, BTreeMap::from([(1, 2), (2, 2), (3, 2)]), "{parts:?}");
    }
    // Replication factor 3: three replicas, all in the ISR once the followers fetch; 4 is
    // more than there are brokers.
    let r = create(&nodes[0], "replicated", 1, 3);
    assert_eq!(r.error_code, 0, "{r:?}");
    wait_until(
        "the ISR holds all three replicas",
        Duration::from_secs(20),
        || {
            let m = metadata(&nodes[2]);
            m.topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "replicated"))
                .is_some_and(|t| {
                    t.partitions[0].replica_nodes.len() == 3 && t.partitions[0].isr_nodes.len() == 3
                })
        },
    );
    let r = create(&nodes[0], "too-replicated", 1, 4);
    assert_eq!(r.error_code, 38, "{r:?}");
    // A librdkafka producer (bootstrapped on node 1) and consumer (on node 3).
    let reports = Reports::default();
    let producer: BaseProducer<Reports> = ClientConfig::new()
        .set("bootstrap.servers", nodes[0].bootstrap())
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("max.in.flight.requests.per.connection", "1")
        .create_with_context(reports.clone())
        .unwrap();
    for i in 0..60 {
        let key = format!("k{i}");
        let value = format!("v{i}");
        producer
            .send(
                BaseRecord::to("spread")
                    .partition(i % 6)
                    .key(&key)
                    .payload(&value),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let mut rt: Vec<(i32, i64)> = reports
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.clone().expect("delivered"))
        .collect();
    assert_eq!(rt.len(), 60);
    rt.sort_by_key(|(p, o)| (*o, *p));
    for (i, (p, o)) in rt.iter().enumerate() {
        assert_eq!((*p, *o), (i as i32 % 6, i as i64 / 6));
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", nodes[2].bootstrap())
        .set("group.id", "unused-manual-assign")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..6 {
        tpl.add_partition_offset("spread", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut got = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 60 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
            let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
            got.insert(key, (value, m.partition(), m.offset()));
        }
    }
    assert_eq!(got.len(), 60);
    for i in 0..60i32 {
        assert_eq!(
            got[&format!("k{i}")],
            (format!("v{i}"), i % 6, i64::from(i / 6))
        );
    }
    // A produce to a broker that does not lead the partition: NOT_LEADER_OR_FOLLOWER.
    let (_, parts) = &topics(&nodes[0])["spread"];
    let p = parts.iter().position(|(l, _)| *l == 1).unwrap() as i32;
    let mut c = Client::connect(&nodes[1].bootstrap());
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic("spread"))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(p)
                    .with_records(Some(batch(&[b"x"]))),
            ])]);
    let resp: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 6);
    // Two creations of one name at once, on two brokers: one wins.
    let (a, b) = (nodes[0].bootstrap(), nodes[2].bootstrap());
    let ta = std::thread::spawn(move || {
        let mut c = Client::connect(&a);
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![create_topics_request::CreatableTopic::default()
                .with_name(topic("race"))
                .with_num_partitions(3)
                .with_replication_factor(1)]);
        let r: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
        r.topics[0].error_code
    });
    let tb = std::thread::spawn(move || {
        let mut c = Client::connect(&b);
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![create_topics_request::CreatableTopic::default()
                .with_name(topic("race"))
                .with_num_partitions(2)
                .with_replication_factor(1)]);
        let r: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
        r.topics[0].error_code
    });
    let mut codes = [ta.join().unwrap(), tb.join().unwrap()];
    codes.sort();
    assert_eq!(
        codes,
        [0, 36],
        "one creation wins, the other gets TOPIC_ALREADY_EXISTS"
    );
    for b in &nodes {
        wait_until("race is visible", Duration::from_secs(10), || {
            topics(b).contains_key("race")
        });
    }
    let count = topics(&nodes[0])["race"].1.len();
    assert!(count == 3 || count == 2);
    for b in &nodes {
        assert_eq!(topics(b)["race"].1.len(), count);
    }
}

#[test]
fn controller_failover_and_rejoin() {
    let _serial = serial();
    let mut nodes = cluster(3);
    create_topic(&mut Client::connect(&nodes[0].bootstrap()), "before", 3);
    let before = topics(&nodes[0])["before"].0;
    let leader = leader_index(&nodes);
    nodes[leader].kill9();
    let other = (leader + 1) % 3;
    let started = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let r = create(&nodes[other], "after", 2, 1);
        if r.error_code == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no topic creation within 20 s of the controller's death: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let failover = started.elapsed();
    eprintln!("topic creation works again {failover:?} after kill -9 of the controller ({attempts} attempts)");
    let new_leader = leader_index(&nodes);
    assert_ne!(new_leader, leader);
    for b in nodes.iter().filter(|b| b.running()) {
        wait_until("survivors see both topics", Duration::from_secs(10), || {
            let t = topics(b);
            t.get("before").map(|x| x.0) == Some(before) && t.contains_key("after")
        });
    }
    // The killed node rejoins and catches up.
    nodes[leader].restart_after_stop();
    wait_until(
        "the rejoined node has everything",
        Duration::from_secs(20),
        || {
            let t = topics(&nodes[leader]);
            t.get("before").map(|x| x.0) == Some(before) && t.contains_key("after")
        },
    );
    let q = quorum(&nodes[leader]);
    assert_eq!(q["leader"].as_u64(), Some(new_leader as u64 + 1), "{q}");
    assert_eq!(q["voters"].as_array().unwrap().len(), 3, "{q}");
}

#[test]
fn paused_voter_neither_blocks_the_quorum_nor_loses_its_log() {
    let _serial = serial();
    let nodes = cluster(3);
    create_topic(&mut Client::connect(&nodes[0].bootstrap()), "first", 1);
    let leader = leader_index(&nodes);
    let paused = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    wait_until(
        "the follower has the first topic",
        Duration::from_secs(10),
        || topics(&nodes[paused]).contains_key("first"),
    );
    nodes[paused].signal("STOP");
    let started = Instant::now();
    let r = create(&nodes[other], "while-paused", 2, 1);
    assert_eq!(r.error_code, 0, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    nodes[paused].signal("CONT");
    wait_until(
        "the resumed voter catches up",
        Duration::from_secs(20),
        || {
            let t = topics(&nodes[paused]);
            t.contains_key("first") && t.contains_key("while-paused")
        },
    );
    // Paused past its session timeout (3 s), it is fenced; resumed, its next heartbeat
    // unfences it (same registration, no restart) and it leads its partitions again.
    create_topic(
        &mut Client::connect(&nodes[other].bootstrap()),
        "fence-me",
        3,
    );
    let paused_id = paused as i32 + 1;
    let led: Vec<usize> = topics(&nodes[other])["fence-me"]
        .1
        .iter()
        .enumerate()
        .filter(|(_, (l, _))| *l == paused_id)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(led.len(), 1);
    nodes[paused].signal("STOP");
    wait_until(
        "the paused broker is fenced",
        Duration::from_secs(15),
        || {
            metadata(&nodes[other]).brokers.len() == 2
                && topics(&nodes[other])["fence-me"].1[led[0]] == (-1, 1)
        },
    );
    nodes[paused].signal("CONT");
    wait_until(
        "the resumed broker is unfenced and leads again",
        Duration::from_secs(15),
        || {
            metadata(&nodes[other]).brokers.len() == 3
                && topics(&nodes[other])["fence-me"].1[led[0]] == (paused_id, 2)
        },
    );
    assert!(
        !nodes[paused].log_text().contains("registering again"),
        "unfenced by heartbeat, not by a new registration"
    );
    // The resumed voter may have started an election on waking (a new term); whoever leads
    // now reports every voter's replication lag.
    wait_until(
        "the leader reports all three voters' lag",
        Duration::from_secs(15),
        || {
            let q = quorum(&nodes[leader_index(&nodes)]);
            q["replication"]
                .as_array()
                .is_some_and(|r| r.len() == 3 && r.iter().all(|x| x["lag"].as_u64().is_some()))
        },
    );
}

#[test]
fn fencing_and_full_restart_keep_metadata() {
    let _serial = serial();
    let mut nodes = cluster(3);
    create_topic(&mut Client::connect(&nodes[0].bootstrap()), "kept", 6);
    let leader = leader_index(&nodes);
    let victim = (leader + 1) % 3;
    let victim_id = victim as i32 + 1;
    let watcher = (leader + 2) % 3;
    let led: Vec<usize> = topics(&nodes[watcher])["kept"]
        .1
        .iter()
        .enumerate()
        .filter(|(_, (l, _))| *l == victim_id)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(led.len(), 2);
    // A broker that stops heartbeating is fenced: its partitions have no leader.
    nodes[victim].kill9();
    let fenced_after = wait_until("the victim is fenced", Duration::from_secs(15), || {
        let t = topics(&nodes[watcher]);
        led.iter().all(|i| t["kept"].1[*i] == (-1, 1))
            && metadata(&nodes[watcher]).brokers.len() == 2
    });
    eprintln!("fenced {fenced_after:?} after kill -9 (session timeout 3 s)");
    // It comes back: it leads them again, with a new epoch.
    nodes[victim].restart_after_stop();
    wait_until("the victim leads again", Duration::from_secs(15), || {
        let t = topics(&nodes[watcher]);
        led.iter().all(|i| t["kept"].1[*i] == (victim_id, 2))
    });
    // Produce to a partition it leads, through it.
    let p = led[0] as i32;
    let mut c = Client::connect(&nodes[victim].bootstrap());
    let offset = common::client::produce(&mut c, "kept", p, batch(&[b"after-fence"]));
    assert_eq!(offset, 0);
    // Stop all three, start all three: the same metadata comes back.
    let expected = topics(&nodes[watcher]);
    for b in nodes.iter_mut() {
        b.stop();
    }
    let starts: Vec<usize> = nodes.iter_mut().map(|b| b.spawn_nowait()).collect();
    for (b, s) in nodes.iter_mut().zip(starts) {
        b.wait_serving(s);
    }
    for b in &nodes {
        wait_until(
            "metadata is back on every node",
            Duration::from_secs(20),
            || {
                let t = topics(b);
                t.len() == expected.len()
                    && t.iter().all(|(name, (id, parts))| {
                        expected[name].0 == *id
                            && parts.len() == expected[name].1.len()
                            && parts.iter().all(|(l, _)| *l > 0)
                    })
            },
        );
    }
    let fetched = {
        let mut c = Client::connect(&nodes[victim].bootstrap());
        let req = common::client::fetch_request("kept", &[(p, 0, 1 << 20)], 0, 0, 1 << 20);
        let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
        values(&resp.responses[0].partitions[0].records)
    };
    assert_eq!(fetched, vec![(0, b"after-fence".to_vec())]);
}

#[test]
fn a_broker_outside_the_quorum_follows_as_a_learner() {
    let _serial = serial();
    let (c1, c2) = (free_port(), free_port());
    let quorum = format!("1@127.0.0.1:{c1}");
    let mut voter = Broker::prepare(&[
        "--node-id",
        "1",
        "--controller-quorum",
        &quorum,
        "--controller-listen",
        &format!("127.0.0.1:{c1}"),
        "--rack",
        "r1",
    ]);
    let mut learner = Broker::prepare(&[
        "--node-id",
        "2",
        "--controller-quorum",
        &quorum,
        "--controller-listen",
        &format!("127.0.0.1:{c2}"),
        "--rack",
        "r2",
    ]);
    let (s1, s2) = (voter.spawn_nowait(), learner.spawn_nowait());
    voter.wait_serving(s1);
    learner.wait_serving(s2);
    let q = quorum_of(&voter);
    assert_eq!(q["voters"], serde_json::json!([1]), "{q}");
    assert_eq!(q["learners"], serde_json::json!([2]), "{q}");
    assert_eq!(quorum_of(&learner)["state"], "learner");
    let racks: Vec<(i32, String)> = metadata(&learner)
        .brokers
        .iter()
        .map(|b| (b.node_id.0, b.rack.as_ref().unwrap().to_string()))
        .collect();
    assert_eq!(racks, vec![(1, "r1".to_string()), (2, "r2".to_string())]);
    // Hostile bytes on the controller listener close that connection only.
    for junk in [
        &b"\x00\x00\x00\x05hello"[..],
        b"\xff\xff\xff\xff",
        b"\x00\x00\x00\x02{}",
    ] {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", c1)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(junk).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            s.read(&mut buf).unwrap_or(0),
            0,
            "connection closed without an answer"
        );
    }
    // Created through the learner (forwarded to the leader), led by both brokers.
    create_topic(&mut Client::connect(&learner.bootstrap()), "shared", 4);
    for b in [&voter, &learner] {
        wait_until("the topic is visible", Duration::from_secs(10), || {
            topics(b).contains_key("shared")
        });
        let leaders: Vec<i32> = topics(b)["shared"].1.iter().map(|(l, _)| *l).collect();
        assert_eq!(
            leaders.iter().filter(|l| **l == 1).count(),
            2,
            "{leaders:?}"
        );
        assert_eq!(
            leaders.iter().filter(|l| **l == 2).count(),
            2,
            "{leaders:?}"
        );
    }
    let p = topics(&learner)["shared"]
        .1
        .iter()
        .position(|(l, _)| *l == 2)
        .unwrap() as i32;
    let mut c = Client::connect(&learner.bootstrap());
    assert_eq!(
        common::client::produce(&mut c, "shared", p, batch(&[b"on-the-learner"])),
        0
    );
}

fn quorum_of(b: &Broker) -> serde_json::Value {
    quorum(b)
}
